// A training step at packet fidelity (ns-3) and at hybrid fidelity (flow level with each distinct collective
// corrected by its packet-level run), against flow fidelity on the same lowered graph.
#include "netsim/hybrid.hpp"
#include "netsim/step.hpp"
#include "scenario/scenario.hpp"

#include "tests/support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>

using namespace spansim;
using nlohmann::json;
using spansim::test::expect_within;

namespace {

/// A small dense model, TP 1, DDP.
json small_job(int pp, int dp, int hidden = 2048)
{
  return {{"name", "small"},
          {"model",
           {{"name", "small"},
            {"layers", 4},
            {"hidden", hidden},
            {"ffn", 4 * hidden},
            {"heads", 16},
            {"kv_heads", 16},
            {"vocab", 32000},
            {"mlp", "swiglu"}}},
          {"gpu", "h100"},
          {"gpus", pp * dp},
          {"parallelism", {{"tp", 1}, {"pp", pp}, {"dp", dp}, {"data_parallel", "ddp"}}},
          {"batch", {{"global_sequences", 8}, {"sequence_length", 2048}, {"micro_batch", 1}}},
          {"schedule", {{"kind", "1f1b"}}}};
}

struct SmallStep {
  topology::Topology topo{topology::load_topology_spec("two-buildings")};
  workload::JobSpec job;
  workload::StepGraph graph;
  std::optional<placement::Placement> place;

  SmallStep(int pp, int dp) : SmallStep(small_job(pp, dp)) {}
  explicit SmallStep(const json& job_json)
  {
    job   = workload::parse_job(job_json, "small.json");
    graph = workload::build_step_graph(job);
    place.emplace(topo, job,
                  placement::PlacementSpec{{workload::Dim::tp, workload::Dim::cp, workload::Dim::dp, workload::Dim::pp},
                                           {"bldg-a", "bldg-b"}});
  }

  netsim::StepResult run(netsim::Fidelity fidelity, const std::string& transport = "roce") const
  {
    netsim::StepOptions o;
    o.fidelity                = fidelity;
    o.engine.packet.transport = transport;
    return netsim::simulate_step(topo, graph, *place, o);
  }
};

/// The small model with FSDP over `dp` GPUs, one sequence each: its DP rings leave each node by all 8 NICs.
json fsdp_job(int dp)
{
  auto j                            = small_job(1, dp, 1024);
  j["parallelism"]["data_parallel"] = "fsdp";
  j["batch"]["global_sequences"]    = dp;
  return j;
}

/// The step at hybrid fidelity, then again with `change` made to its options.
std::pair<netsim::StepResult, netsim::StepResult> hybrid_before_after(const SmallStep& step,
                                                                      void (*change)(netsim::StepOptions&))
{
  netsim::StepOptions o;
  o.fidelity  = netsim::Fidelity::hybrid;
  auto before = netsim::simulate_step(step.topo, step.graph, *step.place, o);
  change(o);
  return {std::move(before), netsim::simulate_step(step.topo, step.graph, *step.place, o)};
}

/// Seconds of the step's DP collectives, from when each could begin to its end.
double dp_collective_seconds(const workload::StepGraph& graph, const netsim::StepResult& r)
{
  double total = 0;
  for (std::size_t s = 0; s < graph.stages.size(); ++s)
    for (std::size_t i = 0; i < graph.stages[s].ops.size(); ++i) {
      const auto& op = graph.stages[s].ops[i];
      if (op.kind == workload::OpKind::collective && op.dim == workload::Dim::dp)
        total += r.ops[s][i].end - r.ops[s][i].active;
    }
  return total;
}

} // namespace

TEST_CASE("a two-stage, two-replica step across two buildings runs at packet fidelity close to flow", "[step][packet]")
{
  SmallStep step(2, 2);
  auto flow   = step.run(netsim::Fidelity::flow);
  auto packet = step.run(netsim::Fidelity::packet);
  expect_within("step at packet (RoCE) vs flow fidelity", flow.step_time, packet.step_time, 0.02);
  // Headers and store-and-forward: packet level is never faster than the fluid model here.
  CHECK(packet.step_time >= flow.step_time * (1 - 1e-6));
  CHECK(packet.engine["engine"] == "ns-3");
  // Over DCTCP, handshakes and slow start cost more (a model half as wide measured 17%).
  auto tcp = step.run(netsim::Fidelity::packet, "dctcp");
  expect_within("step at packet (DCTCP) vs flow fidelity", flow.step_time, tcp.step_time, 0.15);
}

TEST_CASE("hybrid fidelity: flow when every correction is 1, moved by each measured factor otherwise",
          "[step][packet][hybrid]")
{
  // DP 2 across the two buildings, its gradients reduced in one all-reduce: one pattern. Hidden 1,024 keeps them
  // small, so the four packet runs (RoCE and DCTCP, each at packet and hybrid fidelity) stay short.
  auto job_json       = small_job(1, 2, 1024);
  job_json["effects"] = {{"dp_overlap_by_unit", false}};
  SmallStep step(job_json);
  auto flow = step.run(netsim::Fidelity::flow);

  // Corrections of 1 leave the flow-level step as it is.
  {
    netsim::StepOptions o;
    o.fidelity  = netsim::Fidelity::hybrid;
    auto low    = netsim::detail::lower_step(step.topo, step.graph, *step.place, o, netsim::detail::kAllRails);
    auto before = low.graph.ops();
    REQUIRE(!low.spans.empty());
    std::vector<double> ones(low.spans.size(), 1.0);
    CHECK(netsim::detail::apply_corrections(low.graph, low, ones).empty());
    std::size_t changed = 0, stretched = 0, restored = 0;
    for (std::size_t k = 0; k < before.size(); ++k)
      changed += low.graph.ops()[k].bytes != before[k].bytes;
    CHECK(changed == 0);
    std::vector<double> twos(low.spans.size(), 2.0);
    const auto saved = netsim::detail::apply_corrections(low.graph, low, twos);
    for (std::size_t k = 0; k < before.size(); ++k)
      stretched += low.graph.ops()[k].bytes == 2 * before[k].bytes && before[k].bytes > 0;
    netsim::detail::restore_bytes(low.graph, saved);
    for (std::size_t k = 0; k < before.size(); ++k)
      restored += low.graph.ops()[k].bytes == before[k].bytes;
    std::cout << stretched << " transfers stretched by 2 of " << before.size() << " ops, " << restored << " restored\n";
    CHECK(stretched > 0);
    CHECK(restored == before.size());
  }

  double furthest = 0; // the largest |factor - 1| measured
  for (const char* transport : {"roce", "dctcp"}) {
    auto packet        = step.run(netsim::Fidelity::packet, transport);
    auto hybrid        = step.run(netsim::Fidelity::hybrid, transport);
    const auto& report = hybrid.engine["hybrid"];
    std::cout << transport << ": flow " << flow.step_time << " s, hybrid " << hybrid.step_time << " s, packet "
              << packet.step_time << " s; " << report["corrections"].dump() << "\n";
    REQUIRE(report["patterns"].get<int>() >= 1);
    CHECK(report["packet_runs"] == report["patterns"]);
    CHECK(report["collectives"].get<int>() >= report["patterns"].get<int>());
    // One pattern here: the DP all-reduce of the two buildings. Its packet/flow ratio stretches it by as much.
    REQUIRE(report["patterns"] == 1);
    const double factor = report["corrections"][0]["factor"].get<double>();
    furthest            = std::max(furthest, std::fabs(factor - 1));
    expect_within(std::string(transport) + ": the DP all-reduce at hybrid vs flow x its measured factor",
                  factor * dp_collective_seconds(step.graph, flow), dp_collective_seconds(step.graph, hybrid), 0.02);
    // Hybrid lands nearer packet than flow does (or on it, when they already agree).
    CHECK(std::fabs(hybrid.step_time - packet.step_time) <=
          std::fabs(flow.step_time - packet.step_time) + 1e-3 * flow.step_time);
    // The bytes on the links are the step's, not the stretched ones.
    REQUIRE(hybrid.link_bytes.size() == flow.link_bytes.size());
    std::size_t differ = 0;
    for (std::size_t k = 0; k < flow.link_bytes.size(); ++k)
      differ += hybrid.link_bytes[k] != flow.link_bytes[k];
    CHECK(differ == 0);
  }
  // RoCE runs near the fluid model (a factor of about 1.006); DCTCP's slow start stretches the all-reduce (about
  // 1.8), so the corrections above move the step by more than rounding.
  INFO("largest |factor - 1|: " << furthest);
  CHECK(furthest > 0.1);
}

TEST_CASE("hybrid fidelity folds the rails as flow does and measures each pattern on every rail",
          "[step][packet][hybrid][rails]")
{
  // DP 16 with FSDP over one whole 8-GPU node in each building: its rings leave each node by all 8 NICs, so the
  // flow-level step runs rail 0 alone. The packet runs still see the whole collective (every rail and channel), so
  // the corrections, and the step, are those of the unfolded hybrid run.
  const auto [folded, every] =
      hybrid_before_after(SmallStep(fsdp_job(16)), [](netsim::StepOptions& o) { o.rail_symmetry = false; });
  std::cout << "hybrid, rails folded: " << folded.step_time << " s, " << folded.flow_ops << " flow ops, "
            << folded.engine["hybrid"]["corrections"].dump() << "\nhybrid, every rail: " << every.step_time << " s, "
            << every.flow_ops << " flow ops, " << every.engine["hybrid"]["corrections"].dump() << "\n";
  REQUIRE(folded.rails == 8);
  CHECK(folded.engine["rail_symmetry"] != false);
  CHECK(folded.flow_ops < every.flow_ops);
  REQUIRE(folded.engine["hybrid"]["packet_runs"].get<int>() >= 1);
  // Each collective is measured at the same size, on the same whole collective, with the same factor (the folded
  // step keys its spans by their own sizes, so a size the unfolded one shares with another is a pattern of its own).
  auto key_of = [](const json& row) {
    return row["collective"].get<std::string>() + " measured at " +
           std::to_string(std::llround(row["measured_bytes"].get<double>())) + " B";
  };
  std::map<std::string, double> factors;
  for (const auto& row : every.engine["hybrid"]["corrections"])
    factors[key_of(row)] = row["factor"].get<double>();
  for (const auto& row : folded.engine["hybrid"]["corrections"]) {
    const auto key = key_of(row);
    REQUIRE(factors.count(key) == 1);
    expect_within("correction of " + key + ", folded against every rail", factors[key], row["factor"].get<double>(),
                  1e-9);
  }
  expect_within("hybrid step, rails folded against every rail", every.step_time, folded.step_time, 1e-6);
}

TEST_CASE("hybrid fidelity measures a pattern too large for packet level on one rail and on fewer of its nodes",
          "[step][packet][hybrid][rails]")
{
  // DP 32 with FSDP over two 8-GPU nodes in each building: four nodes, rails folded at flow level. With packet
  // level held to 16 GPUs, neither the whole collective nor its one rail (32 GPUs each) is taken, so each pattern is
  // measured on two of its four nodes, spread over the group (one in each building: the cut keeps the hops across
  // the buildings), on one rail. Bound stated: corrections within 4% of the whole ones, the step within 1% (measured
  // when written: 1.0045 against 1.0185, -1.4%; step -0.74%; bench/README.md: DP 64 over 8 nodes, -3.4..+0.4%).
  const auto [whole, cut] =
      hybrid_before_after(SmallStep(fsdp_job(32)), [](netsim::StepOptions& o) { o.engine.packet.max_gpus = 16; });
  const auto& w = whole.engine["hybrid"]["corrections"];
  const auto& c = cut.engine["hybrid"]["corrections"];
  std::cout << "hybrid, whole patterns: " << whole.step_time << " s, " << w.dump()
            << "\nhybrid, cut to 16 GPUs: " << cut.step_time << " s, " << c.dump() << "\n";
  REQUIRE(cut.rails == 8);
  REQUIRE(w.size() == c.size());
  REQUIRE(cut.engine["hybrid"]["skipped"] == 0);
  int measured_cut = 0;
  for (std::size_t k = 0; k < w.size(); ++k) {
    REQUIRE(c[k]["collective"] == w[k]["collective"]);
    CHECK(w[k]["measured_on"]["nodes"] == w[k]["measured_on"]["of_nodes"]);
    CHECK(w[k]["measured_on"]["rails"] == 0);
    if (c[k]["group"].get<int>() <= 16)
      continue;
    ++measured_cut;
    CHECK(c[k]["measured_on"]["nodes"] == 2);
    CHECK(c[k]["measured_on"]["of_nodes"] == 4);
    CHECK(c[k]["measured_on"]["rails"] == 8);
    expect_within("correction of " + c[k]["collective"].get<std::string>() + " (pattern " + std::to_string(k) +
                      ") on 2 of 4 nodes and one rail, against the whole collective",
                  w[k]["factor"].get<double>(), c[k]["factor"].get<double>(), 0.04);
  }
  CHECK(measured_cut >= 1);
  expect_within("hybrid step, patterns cut against whole", whole.step_time, cut.step_time, 0.01);
}

TEST_CASE("hybrid fidelity: a step whose DP flows ECMP forces together moves to sprayed packets' time",
          "[step][packet][hybrid][multipath]")
{
  // DP 4 over two buildings of two one-GPU nodes, joined by two parallel links; each transfer as 2 queue pairs.
  // Under a seed that hashes both queue pairs of the ring's cross-building transfer onto one link, flow level
  // runs it at one link's rate; sprayed packets use both. Hybrid takes the DP all-reduce's measured factor.
  std::uint64_t seed = 1;
  for (; seed < 1000; ++seed) {
    topology::Topology t(test::two_sites({.seed = seed, .qps = 2}));
    if (t.route(1, 2, 0)[1].link == t.route(1, 2, 1)[1].link && t.route(3, 0, 0)[1].link == t.route(3, 0, 1)[1].link)
      break;
  }
  REQUIRE(seed < 1000);
  topology::Topology topo(test::two_sites({.seed = seed, .routing = "spray", .qps = 2}));
  auto job   = workload::parse_job(small_job(1, 4), "dp4.json");
  auto graph = workload::build_step_graph(job);
  placement::Placement place(topo, job, {});
  netsim::StepOptions o;
  o.algorithms[workload::Dim::dp] = netsim::Algorithm::ring;
  o.fidelity                      = netsim::Fidelity::flow;
  auto flow                       = netsim::simulate_step(topo, graph, place, o);
  o.fidelity                      = netsim::Fidelity::packet;
  auto packet                     = netsim::simulate_step(topo, graph, place, o);
  o.fidelity                      = netsim::Fidelity::hybrid;
  auto hybrid                     = netsim::simulate_step(topo, graph, place, o);
  const auto& report              = hybrid.engine["hybrid"];
  std::cout << "forced collisions: flow " << flow.step_time << " s, hybrid " << hybrid.step_time << " s, packet "
            << packet.step_time << " s; " << report["corrections"].dump() << "\n";
  REQUIRE(report["patterns"] == 1);
  const double factor = report["corrections"][0]["factor"].get<double>();
  CHECK(factor < 0.9); // spraying undoes the collision
  expect_within("DP all-reduce at hybrid vs flow x its measured factor", factor * dp_collective_seconds(graph, flow),
                dp_collective_seconds(graph, hybrid), 0.02);
  CHECK(packet.step_time < flow.step_time);
  CHECK(std::fabs(hybrid.step_time - packet.step_time) < 0.5 * std::fabs(flow.step_time - packet.step_time));
}

TEST_CASE("the three-continent DiLoCo layout runs at every fidelity: 14 node workers (6, 5, 3 nodes), FSDP inside",
          "[packet][diloco]")
{
  // examples/scenarios/three-continents-diloco.json with its model cut to 2 layers of short sequences, so that the
  // packet run of the inner step stays small; the layout, workers, uplinks, fragments and quantization are the
  // example's.
  auto sc =
      scenario::load_scenario(std::string(SPANSIM_SOURCE_DIR) + "/examples/scenarios/three-continents-diloco.json");
  sc.job.model.layers           = 2;
  sc.job.batch.sequence_length  = 512;
  sc.job.batch.global_sequences = 112;
  sc.job.batch.micro_batch      = 1;
  std::map<std::string, scenario::ScenarioRun> runs;
  for (auto f :
       {netsim::Fidelity::analytical, netsim::Fidelity::flow, netsim::Fidelity::packet, netsim::Fidelity::hybrid}) {
    sc.options.fidelity = f;
    const auto run      = scenario::run_scenario(sc);
    REQUIRE(run.diloco.has_value());
    const auto& d = *run.diloco;
    std::cout << name_of(f) << ": inner " << d.inner_step << " s, outer exchange " << d.outer.seconds << " s, mean "
              << d.mean_step << " s, compute utilization " << d.compute_utilization << "\n";
    CHECK(d.outer.workers == 14);
    CHECK(d.outer.regions == 3);
    CHECK(d.outer.members_per_worker == 8);
    CHECK(d.outer.traffic.size() == 14);
    CHECK(d.mean_step >= d.inner_step);
    runs.emplace(std::string(name_of(f)), run);
  }
  const auto& flow = *runs.at("flow").diloco;
  for (const char* f : {"analytical", "packet", "hybrid"}) {
    const auto& d = *runs.at(f).diloco;
    expect_within(std::string("outer exchange, ") + f + " against flow", flow.outer.seconds, d.outer.seconds, 0.05);
    expect_within(std::string("inner step, ") + f + " against flow", flow.inner_step, d.inner_step, 0.10);
  }
}
