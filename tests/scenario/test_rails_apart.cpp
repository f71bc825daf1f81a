// ECMP with the rails apart (netsim/rails_apart.cpp) against every rail together: the step within the stated 5%,
// every link's bytes equal, the breakdown adding up to the slowest rail's step, and clear refusals where the rails
// do not separate.
#include "common/error.hpp"
#include "netsim/step_lowering.hpp"
#include "scenario/scenario.hpp"

#include "tests/support_job.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>

using nlohmann::json;
namespace sc = spansim::scenario;
namespace tp = spansim::topology;

namespace {

// tiny.json: 2 regions x 2 buildings x 2 pods x 4 nodes of 4 GPUs, rail-optimized; the job on all 128 GPUs, so that
// data parallelism crosses buildings and regions.
sc::Scenario ecmp_scenario(std::uint64_t seed, int qps, tp::EcmpMode mode, int tp_degree = 4,
                           const char* fidelity = "analytical")
{
  json doc = {
      {"name", "rails-apart"},
      {"topology", std::string(SPANSIM_SOURCE_DIR) + "/tests/data/tiny.json"},
      {"job", spansim::test::small_job_json(
                  128, {{"tp", tp_degree}, {"pp", 2}, {"dp", 64 / tp_degree}, {"data_parallel", "fsdp"}})},
      {"fidelity", fidelity},
      {"multipath", {{"routing", "ecmp"}, {"seed", seed}, {"long_links", 4}, {"spines", "explicit"}, {"qps", qps}}}};
  doc["job"]["batch"]["global_sequences"] = 64;
  auto s                                  = sc::parse_scenario(doc, "rails-apart.json");
  s.topology.multipath.ecmp_mode          = mode;
  return s;
}

/// @brief Qwen3-30B-A3B on the tiny site, EP 8 over data parallelism: its all-to-alls cross nodes, buildings and
/// regions.
sc::Scenario moe_scenario(std::uint64_t seed, tp::EcmpMode mode)
{
  json doc                                = {{"name", "moe"},
                                             {"topology", std::string(SPANSIM_SOURCE_DIR) + "/tests/data/tiny.json"},
                                             {"job", spansim::test::small_job_json(128, {{"tp", 4}, {"pp", 2}, {"dp", 16}, {"ep", 8}})},
                                             {"fidelity", "analytical"},
                                             {"multipath", {{"routing", "ecmp"}, {"seed", seed}, {"long_links", 4}, {"spines", "explicit"}}}};
  doc["job"]["model"]                     = "qwen3-30b-a3b";
  doc["job"]["batch"]["global_sequences"] = 64;
  auto s                                  = sc::parse_scenario(doc, "moe.json");
  s.topology.multipath.ecmp_mode          = mode;
  return s;
}

} // namespace

TEST_CASE("ecmp rails apart: the step within 5% of every rail together, and every link's bytes the same",
          "[scenario][multipath]")
{
  for (std::uint64_t seed : {1, 2, 3})
    for (int qps : {1, 2}) {
      const auto exact   = sc::run_scenario(ecmp_scenario(seed, qps, tp::EcmpMode::exact)).result;
      const auto apart   = sc::run_scenario(ecmp_scenario(seed, qps, tp::EcmpMode::rails_apart)).result;
      const double error = (apart.step_time - exact.step_time) / exact.step_time;
      std::cout << "seed " << seed << ", " << qps << " QPs: exact " << exact.step_time << " s, rails apart "
                << apart.step_time << " s (" << 100 * error << "%), rail steps " << apart.engine["ecmp"]["rail_steps_s"]
                << "\n";
      CHECK(exact.engine["ecmp"]["mode"] == "exact");
      CHECK(apart.engine["ecmp"]["mode"] == "rails apart");
      CHECK(std::abs(error) <= 0.05);

      // The step is the slowest rail's, and its breakdown adds up to it.
      const auto& steps = apart.engine["ecmp"]["rail_steps_s"];
      REQUIRE(steps.size() == 4);
      double slowest = 0;
      for (const auto& s : steps)
        slowest = std::max(slowest, s.get<double>());
      CHECK(apart.step_time == Approx(slowest).epsilon(1e-12));
      for (const auto& st : apart.stages) {
        double sum = st.compute + st.bubble + st.idle;
        for (double e : st.exposed)
          sum += e;
        CHECK(sum == Approx(apart.step_time).epsilon(1e-9));
      }

      // Bytes do not depend on timing: every rail's on every link, NVLink once.
      REQUIRE(apart.link_bytes.size() == exact.link_bytes.size());
      double worst = 0;
      for (std::size_t k = 0; k < exact.link_bytes.size(); ++k)
        worst = std::max(worst, std::abs(apart.link_bytes[k] - exact.link_bytes[k]) /
                                    std::max(1.0, std::abs(exact.link_bytes[k])));
      std::cout << "  worst link bytes difference " << worst << " (relative)\n";
      CHECK(worst <= 1e-9);
    }
}

TEST_CASE("ecmp rails apart: the flow engine's slowest rail is the analytical engine's", "[scenario][multipath]")
{
  const auto analytical = sc::run_scenario(ecmp_scenario(2, 1, tp::EcmpMode::rails_apart)).result;
  const auto flow       = sc::run_scenario(ecmp_scenario(2, 1, tp::EcmpMode::rails_apart, 4, "flow")).result;
  std::cout << "analytical " << analytical.step_time << " s, flow " << flow.step_time << " s\n";
  CHECK(flow.engine["ecmp"]["mode"] == "rails apart");
  CHECK(flow.step_time == Approx(analytical.step_time).epsilon(1e-6));
  CHECK(flow.engine["ecmp"]["slowest_rail"] == analytical.engine["ecmp"]["slowest_rail"]);

  // Ranked by the analytical engine, SimGrid runs the rails near the slowest only: the same step as SimGrid running
  // every rail, and every rail's step within the engines' agreement (1e-6).
  auto every                    = ecmp_scenario(2, 1, tp::EcmpMode::rails_apart, 4, "flow");
  every.options.flow_every_rail = true;
  const auto all                = sc::run_scenario(every).result;
  const auto& ranked            = flow.engine["ecmp"]["rail_steps_s"];
  const auto& every_sg          = all.engine["ecmp"]["rail_steps_s"];
  std::cout << "rails through SimGrid " << flow.engine["ecmp"]["flow_rails"] << ": rail steps " << ranked
            << "; every rail through SimGrid: " << every_sg << "\n";
  CHECK(!all.engine["ecmp"].contains("flow_rails"));
  REQUIRE(flow.engine["ecmp"].contains("flow_rails"));
  CHECK(flow.engine["ecmp"]["flow_rails"].size() < 4);
  CHECK(flow.step_time == all.step_time);
  CHECK(flow.engine["ecmp"]["slowest_rail"] == all.engine["ecmp"]["slowest_rail"]);
  REQUIRE(ranked.size() == every_sg.size());
  for (std::size_t r = 0; r < ranked.size(); ++r)
    CHECK(ranked[r].get<double>() == Approx(every_sg[r].get<double>()).epsilon(1e-6));
}

TEST_CASE("ecmp rails apart at flow: rails past own_solver_above run on spansim's max-min engine, within 1e-6 of "
          "SimGrid, and say so",
          "[scenario][multipath]")
{
  auto simgrid                     = ecmp_scenario(2, 1, tp::EcmpMode::rails_apart, 4, "flow");
  simgrid.options.flow_every_rail  = true;
  simgrid.options.own_solver_above = 0;
  auto own                         = simgrid;
  own.options.own_solver_above     = 1; // every rail is past it
  const auto a                     = sc::run_scenario(simgrid).result;
  const auto b                     = sc::run_scenario(own).result;
  const auto& engines_a            = a.engine["ecmp"]["rail_engines"];
  const auto& engines_b            = b.engine["ecmp"]["rail_engines"];
  std::cout << "SimGrid every rail: " << a.engine["ecmp"]["rail_steps_s"]
            << "\nown solver every rail: " << b.engine["ecmp"]["rail_steps_s"] << "\n"
            << engines_b << "\n";
  REQUIRE(engines_a.size() == 4);
  REQUIRE(engines_b.size() == 4);
  for (std::size_t r = 0; r < 4; ++r) {
    CHECK(engines_a[r] == "simgrid");
    CHECK(engines_b[r].get<std::string>().rfind("spansim max-min (", 0) == 0);
    CHECK(b.engine["ecmp"]["rail_steps_s"][r].get<double>() ==
          Approx(a.engine["ecmp"]["rail_steps_s"][r].get<double>()).epsilon(1e-6));
  }
  CHECK(b.engine["ecmp"]["own_solver_above"] == 1);
  CHECK(b.step_time == Approx(a.step_time).epsilon(1e-6));

  // Ranked by the analytical engine, a rail past own_solver_above keeps its ranking run as its flow-fidelity run:
  // every rail at fidelity, on the own solver, the same rail steps.
  auto ranked                    = own;
  ranked.options.flow_every_rail = false;
  const auto c                   = sc::run_scenario(ranked).result;
  REQUIRE(c.engine["ecmp"]["flow_rails"].size() == 4);
  for (std::size_t r = 0; r < 4; ++r) {
    CHECK(c.engine["ecmp"]["rail_engines"][r] == engines_b[r]);
    CHECK(c.engine["ecmp"]["rail_steps_s"][r] == b.engine["ecmp"]["rail_steps_s"][r]);
  }
}

TEST_CASE("ecmp with every rail together at flow: a step past own_solver_above runs on spansim's max-min engine "
          "within 1e-6 of SimGrid and says so",
          "[scenario][multipath]")
{
  auto simgrid                     = ecmp_scenario(2, 1, tp::EcmpMode::exact, 4, "flow");
  simgrid.options.own_solver_above = 0;
  auto own                         = simgrid;
  own.options.own_solver_above     = 1; // the step's graph is past it
  const auto a                     = sc::run_scenario(simgrid).result;
  const auto b                     = sc::run_scenario(own).result;
  std::cout << "every rail together at flow: SimGrid " << a.step_time << " s (" << a.engine["max_min_engine"]
            << "), own solver " << b.step_time << " s (" << b.engine["max_min_engine"] << ")\n";
  CHECK(a.engine["ecmp"]["mode"] == "exact");
  CHECK(b.engine["ecmp"]["mode"] == "exact");
  CHECK(a.engine["max_min_engine"] == "simgrid");
  CHECK(b.engine["max_min_engine"].get<std::string>().rfind("spansim max-min (", 0) == 0);
  CHECK(b.step_time == Approx(a.step_time).epsilon(1e-6));
}

TEST_CASE("ecmp rails apart: refused where the rails do not separate, exact below the size auto starts at",
          "[scenario][multipath]")
{
  // TP 2 leaves two TP groups in each 4-GPU node: a data-parallel ring joins rails 0 and 2.
  CHECK_THROWS_WITH(sc::run_scenario(ecmp_scenario(1, 1, tp::EcmpMode::rails_apart, 2)),
                    Catch::Contains("does not fill a node") && Catch::Contains("rails-apart"));
  try {
    sc::run_scenario(ecmp_scenario(1, 1, tp::EcmpMode::rails_apart, 2));
    FAIL("rails apart ran on rails that do not separate");
  } catch (const spansim::SpecError& e) {
    CHECK(e.json_path() == "$.multipath.ecmp_mode");
    CHECK(e.file() == "rails-apart.json");
  }
  CHECK_THROWS_WITH(sc::run_scenario(ecmp_scenario(1, 1, tp::EcmpMode::rails_apart, 4, "packet")),
                    Catch::Contains("analytical and flow fidelity only"));
  const auto automatic = sc::run_scenario(ecmp_scenario(1, 1, tp::EcmpMode::automatic)).result;
  CHECK(automatic.engine["ecmp"]["mode"] == "exact");
  CHECK_THAT(automatic.engine["ecmp"]["why"].get<std::string>(), Catch::Contains("up to 4096 run exactly"));
}

TEST_CASE("ecmp auto: rails apart above 4096 GPUs for dense steps and above 16384 for all-to-alls between nodes",
          "[scenario][multipath]")
{
  // The decision alone, on the tiny site's steps with the job's GPU count read as 8,192 (or `gpus`).
  auto decide = [](sc::Scenario s, std::int64_t gpus = 8192) {
    const sc::PlacedStep placed(s);
    auto graph     = placed.graph();
    graph.job.gpus = gpus;
    return spansim::netsim::detail::rails_apart_decision(placed.topology(), graph, placed.placement(), s.options);
  };
  CHECK(decide(ecmp_scenario(1, 1, tp::EcmpMode::automatic)).empty());
  CHECK(decide(moe_scenario(1, tp::EcmpMode::automatic), 32768).empty());
  const auto why = decide(moe_scenario(1, tp::EcmpMode::automatic));
  std::cout << "MoE, auto: " << why << "\n";
  CHECK_THAT(why, Catch::Contains("all-to-alls between nodes"));
}

TEST_CASE("ecmp rails apart with all-to-alls between nodes: time-resolved shares nearer every rail together than "
          "byte shares and within 25% and the result says which",
          "[scenario][multipath]")
{
  // The tiny site is the hard case: four rails meet on four long links and wait for each other at every layer's TP
  // collectives, so the exact step pays each op's slowest rail (measured: -8.8% and -19.1%; byte shares +39%).
  // bench/README.md measures the larger sites (-4.7% to +4.6%).
  for (std::uint64_t seed : {1, 2}) {
    const auto exact                         = sc::run_scenario(moe_scenario(seed, tp::EcmpMode::exact)).result;
    const auto in_time                       = sc::run_scenario(moe_scenario(seed, tp::EcmpMode::rails_apart)).result;
    auto by_bytes_sc                         = moe_scenario(seed, tp::EcmpMode::rails_apart);
    by_bytes_sc.options.time_resolved_shares = false;
    const auto by_bytes                      = sc::run_scenario(by_bytes_sc).result;
    const double error                       = in_time.step_time / exact.step_time - 1;
    std::cout << "MoE seed " << seed << ": exact " << exact.step_time << " s; rails apart, time-resolved shares "
              << in_time.step_time << " s (" << 100 * error << "%), byte shares " << by_bytes.step_time << " s ("
              << 100 * (by_bytes.step_time / exact.step_time - 1) << "%)\n";
    CHECK(in_time.engine["ecmp"]["shares"] == "time-resolved");
    CHECK(by_bytes.engine["ecmp"]["shares"] == "bytes");
    CHECK(std::abs(error) < std::abs(by_bytes.step_time / exact.step_time - 1));
    CHECK(std::abs(error) <= 0.25);
  }
}
