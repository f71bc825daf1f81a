// The optimizer against an exhaustive search at flow fidelity, its pruning, and its baselines.
#include "common/error.hpp"
#include "optimizer/evaluate.hpp"
#include "optimizer/optimizer.hpp"
#include "scenario/scenario.hpp"

#include "tests/optimizer/support_optimizer.hpp"
#include "tests/support_process.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <unistd.h>

using namespace spansim;
using nlohmann::json;

using spansim::test::ep_space;
using spansim::test::small_space;
using spansim::test::spec_from;

TEST_CASE("the optimizer's pick is within 2% of the exhaustive flow-fidelity optimum", "[optimizer]")
{
  auto spec       = spec_from(small_space());
  auto picked     = optimizer::optimize(spec);
  spec.top_k      = 1000; // every feasible point re-simulated at flow fidelity: the exhaustive answer
  auto exhaustive = optimizer::optimize(spec);
  REQUIRE(exhaustive.ranked.size() == exhaustive.scored);
  const double best = *exhaustive.ranked.front().refined;
  const double pick = *picked.ranked.front().refined;
  std::cout << "exhaustive optimum " << best << " s (" << exhaustive.ranked.front().point.label() << "), pick " << pick
            << " s (" << picked.ranked.front().point.label() << "), over " << exhaustive.ranked.size()
            << " feasible points\n";
  CHECK(pick <= best * 1.02);
  CHECK(picked.ranked.size() == 3);
  // Orders that only differ in a degree-1 dimension are one placement, counted once.
  for (std::size_t i = 0; i < exhaustive.ranked.size(); ++i)
    for (std::size_t j = i + 1; j < exhaustive.ranked.size(); ++j)
      CHECK(exhaustive.ranked[i].point.label() != exhaustive.ranked[j].point.label());
}

TEST_CASE("the baseline is the production default and every ranked point beats or ties the bound", "[optimizer]")
{
  auto spec     = spec_from(small_space());
  auto r        = optimizer::optimize(spec);
  const auto& b = r.baseline.point;
  CHECK(b.schedule == workload::ScheduleKind::one_f_one_b);
  CHECK(b.dp_algorithm == netsim::Algorithm::automatic);
  // The production order [tp, cp, pp, dp]: DP outermost, so it is DP that crosses the regions.
  CHECK((b.order == std::vector<workload::Dim>(workload::kProductionOrder.begin(), workload::kProductionOrder.end()) ||
         b.pp == 1 || b.dp == 1));
  for (const auto& e : r.ranked) {
    INFO(e.point.label() << ": bound " << e.lower_bound << ", analytical " << e.score << ", flow " << *e.refined);
    CHECK(e.lower_bound <= e.score * (1 + 1e-9));
    CHECK(e.lower_bound <= *e.refined * (1 + 1e-9));
  }
  CHECK(*r.ranked.front().refined <= *r.baseline.refined);
  // The first ranked is the fastest point re-simulated at all: no baseline or best change beats it, and no point
  // is ranked twice.
  std::vector<const optimizer::Evaluation*> known{&r.baseline};
  if (!r.single_change.empty())
    known.push_back(&r.best_single_change);
  for (const auto& d : r.by_dimension)
    known.push_back(&d.evaluation);
  for (const auto* e : known) {
    INFO(e->point.label() << ": " << *e->refined << " s against the first ranked " << *r.ranked.front().refined);
    CHECK(*r.ranked.front().refined <= *e->refined);
  }
  for (std::size_t i = 0; i < r.ranked.size(); ++i)
    for (std::size_t j = i + 1; j < r.ranked.size(); ++j)
      CHECK(r.ranked[i].point.label() != r.ranked[j].point.label());
}

TEST_CASE("infeasible points are counted by reason", "[optimizer]")
{
  auto j            = small_space();
  j["model"]        = "llama3-405b"; // 405B on 32 GPUs does not fit in memory
  j["search"]["tp"] = {8};
  j["search"]["pp"] = {1, 2, 3};
  auto spec         = spec_from(j);
  CHECK_THROWS_WITH(optimizer::optimize(spec), Catch::Contains("no feasible configuration") &&
                                                   Catch::Contains("memory") &&
                                                   Catch::Contains("gpus not divisible by tp x cp x pp"));
}

TEST_CASE("points that run out of their worker's memory fail alone and are counted as failed", "[optimizer]")
{
  // A limit at what the search's process holds before it forks its workers leaves them no room to build any
  // point: every point fails (std::bad_alloc, or a worker ended by it), is counted, and nothing crashes.
  auto spec          = spec_from(small_space());
  spec.worker_memory = test::data_segment_bytes();
  try {
    optimizer::optimize(spec);
    FAIL("nothing thrown");
  } catch (const SpecError& e) {
    std::cout << "expected: no feasible configuration (pruned: failed N)\nactual:   " << e.what() << "\n";
    CHECK_THAT(e.what(), Catch::Contains("no feasible configuration in the search space (pruned: failed "));
  }
  auto j             = small_space();
  j["worker_memory"] = "1MiB";
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("$.worker_memory") && Catch::Contains("64MiB"));
  j["worker_memory"] = "lots";
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("$.worker_memory"));
}

TEST_CASE("bad optimize specs name the JSON path and the allowed values", "[optimizer]")
{
  auto j                  = small_space();
  j["search"]["schedule"] = {"zero-bubble"};
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("$.search.schedule") && Catch::Contains("allowed: \"gpipe\""));
  j                     = small_space();
  j["search"]["tensor"] = {8};
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("unknown key \"tensor\""));
  j                         = small_space();
  j["batch"]["micro_batch"] = 2;
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("$.batch") && Catch::Contains("searched"));
  j              = small_space();
  j["buildings"] = {"east-b0", "north-b9"};
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("$.buildings") && Catch::Contains("unknown building \"north-b9\""));
  j          = small_space();
  j["model"] = "llama9-1t";
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("$.model") && Catch::Contains("unknown model"));
  j                     = small_space();
  j["search"]["window"] = {"none", "fast"};
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("$.search.window") && Catch::Contains("\"none\""));
  j["search"]["window"] = {"0MiB"};
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("$.search.window") && Catch::Contains("positive"));
  j                  = small_space();
  j["search"]["qps"] = {1, 4};
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("$.search.qps") && Catch::Contains("\"ecmp\""));
  j                           = small_space();
  j["search"]["inter_region"] = {"lots"};
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("$.search.inter_region") && Catch::Contains("\"lots\""));
  j                          = small_space();
  j["search"]["compression"] = json::array({"none", json::array({{{"dim", "dp"}, {"ratio", 0.5}}})});
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("$.search.compression[1][0].ratio") && Catch::Contains("range"));
  j                     = small_space();
  j["search"]["diloco"] = json::array({{{"every", 2}, {"overlap_steps", 3}}});
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("$.search.diloco[0].overlap_steps"));
  j                 = small_space();
  j["search"]["pp"] = {{"from", 4}, {"to", 2}};
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("$.search.pp.to") && Catch::Contains("range"));
  j                    = small_space();
  j["search"]["order"] = "some";
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("$.search.order") && Catch::Contains("\"all\""));
  j                  = small_space();
  j["capacity_cost"] = {{"per_tbps", 3}};
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("$.capacity_cost") && Catch::Contains("unknown key"));
}

TEST_CASE("large spaces: degree ranges and every rank order", "[optimizer]")
{
  auto j               = small_space();
  j["search"]["tp"]    = {{"from", 1}, {"to", 8}, {"powers_of_two", true}};
  j["search"]["pp"]    = {{"from", 1}, {"to", 3}};
  j["search"]["order"] = "all";
  const auto spec      = spec_from(j);
  CHECK(spec.space.tp == std::vector<int>{1, 2, 4, 8});
  CHECK(spec.space.pp == std::vector<int>{1, 2, 3});
  REQUIRE(spec.space.order.size() == 24);
  std::set<std::vector<workload::Dim>> distinct(spec.space.order.begin(), spec.space.order.end());
  CHECK(distinct.size() == 24);
}

TEST_CASE("the optimize spec format doc's example loads", "[optimizer][docs]")
{
  std::ifstream in(std::string(SPANSIM_SOURCE_DIR) + "/optimizer/README.md");
  std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto begin = doc.find("```json\n");
  REQUIRE(begin != std::string::npos);
  begin += 8;
  auto spec = spec_from(json::parse(doc.substr(begin, doc.find("```", begin) - begin)));
  CHECK(spec.base.gpus == 64);
  CHECK(spec.space.pp == std::vector<int>{1, 2, 4});
  CHECK(spec.space.order.size() == 2);
  CHECK(spec.refine == netsim::Fidelity::flow);
}

TEST_CASE("time to train: points ranked by step / ETTR, replica recovery only where there are replicas",
          "[optimizer][reliability]")
{
  auto j               = small_space();
  j["refine_fidelity"] = "analytical";
  j["top_k"]           = 6;
  j["objective"]       = "time_to_train";
  // A failure every few minutes at 32 GPUs, so that recovery decides the ranking.
  j["reliability"] = {{"seed", 3},
                      {"failures",
                       {{"components",
                         {{{"name", "gpu"}, {"per", "gpu"}, {"mttf", "2h"}, {"scope", "replica"}, {"source", "test"}},
                          {{"name", "job"}, {"per", "job"}, {"mttf", "100h"}, {"scope", "job"}, {"source", "test"}}}}}},
                      {"recovery", "replica"},
                      {"horizon", "5d"}};
  auto spec        = spec_from(j);
  auto result      = optimizer::optimize(spec);
  REQUIRE(result.ranked.size() >= 2);
  for (std::size_t i = 0; i < result.ranked.size(); ++i) {
    const auto& e = result.ranked[i];
    REQUIRE(e.ettr);
    std::cout << e.point.label() << ": step " << *e.refined << " s, ETTR " << *e.ettr << " (" << e.recovery
              << "), effective " << e.effective_step() << " s\n";
    CHECK(e.recovery == (e.point.data_parallel == workload::DataParallelMode::fsdp ? "synchronous" : "replica"));
    CHECK(e.effective_step() == Approx(*e.refined / *e.ettr).epsilon(1e-12));
    if (i > 0)
      CHECK(result.ranked[i - 1].effective_step() <= e.effective_step());
  }
  CHECK(result.baseline.ettr);
  auto bad         = small_space();
  bad["objective"] = "time_to_train";
  CHECK_THROWS_WITH(spec_from(bad), Catch::Contains("$.objective") && Catch::Contains("needs a \"reliability\" block"));
}

TEST_CASE("a site of two GPU generations: stages may not span them, and the baseline keeps the pipeline cut",
          "[optimizer][heterogeneous]")
{
  auto j                       = small_space();
  j["topology"]                = "h100-b200-campus";
  j["buildings"]               = {"bldg-a", "bldg-b"};
  j["search"]["pp"]            = {2};
  j["search"]["data_parallel"] = {"fsdp"};
  j["refine_fidelity"]         = "analytical";
  auto spec                    = spec_from(j);
  auto result                  = optimizer::optimize(spec);
  const std::vector<workload::Dim> cut{workload::Dim::tp, workload::Dim::cp, workload::Dim::dp, workload::Dim::pp};
  CHECK(result.pruned["placement"] > 0);
  REQUIRE(!result.ranked.empty());
  for (const auto& e : result.ranked)
    CHECK(e.point.order == cut);
  CHECK(result.baseline.point.order == cut);
  CHECK(result.baseline.point.schedule == workload::ScheduleKind::one_f_one_b);
}

TEST_CASE("a window is a knob: the pick against the exhaustive optimum, and its scenario re-runs to its time",
          "[optimizer][window]")
{
  // Two regions 1,000 km apart: a 16 MiB window caps a cross-region flow at about 1.7 GB/s, so the search should
  // keep DP's traffic off the long haul or pick no window; the scenario written for a windowed point carries it.
  json j                       = small_space();
  j["search"]["window"]        = {"none", "16MiB"};
  j["search"]["data_parallel"] = {"fsdp"};
  auto spec                    = spec_from(j);
  const auto searched          = spansim::test::pick_and_exhaustive(spec);
  const auto& exhaustive       = searched.exhaustive;
  const double best = searched.best, pick = searched.pick;
  std::cout << "with windows: exhaustive optimum " << best << " s (" << exhaustive.ranked.front().point.label()
            << "), pick " << pick << " s, over " << exhaustive.ranked.size() << " feasible points\n";
  CHECK(pick <= best * 1.02);
  // Every windowed point is at least as slow as the same point without a window (a cap never helps).
  std::map<std::string, double> open;
  for (const auto& e : exhaustive.ranked)
    if (e.point.window == 0)
      open[e.point.label()] = *e.refined;
  int windowed = 0;
  for (const auto& e : exhaustive.ranked) {
    if (e.point.window == 0)
      continue;
    auto p   = e.point;
    p.window = 0;
    REQUIRE(open.count(p.label()) == 1);
    CHECK(*e.refined >= open[p.label()] * (1 - 1e-9));
    ++windowed;
    if (windowed == 1) {
      const auto scenario = optimizer::scenario_json(spec, e.point);
      CHECK(scenario["transport"]["window"] == "16777216B");
      const auto rerun = scenario::run_scenario(scenario::parse_scenario(scenario, "windowed.json"));
      std::cout << e.point.label() << ": " << *e.refined << " s in the search, " << rerun.result.step_time
                << " s re-run from its scenario\n";
      CHECK(rerun.result.step_time == Approx(*e.refined).epsilon(1e-9));
    }
  }
  CHECK(windowed > 0);
}

TEST_CASE("refine_multipath: the best points re-simulated under ECMP, the screen and tier 2 on ideal routing",
          "[optimizer][multipath]")
{
  json j                = small_space();
  j["topology"]         = std::string(SPANSIM_SOURCE_DIR) + "/tests/data/tiny.json";
  j["buildings"]        = {"r0-b0", "r1-b0"};
  j["search"]["tp"]     = {4};
  j["search"]["pp"]     = {1, 2};
  const auto ideal      = optimizer::optimize(spec_from(j));
  j["refine_multipath"] = {{"routing", "ecmp"}, {"seed", 3}, {"long_links", 4}, {"spines", "explicit"}};
  const auto spec       = spec_from(j);
  const auto ecmp       = optimizer::optimize(spec);

  // Tier 2 scored the same points the same way; only the refined times see the hashing.
  REQUIRE(ecmp.scored == ideal.scored);
  std::map<std::string, double> tier2;
  for (const auto& e : ideal.ranked)
    tier2[e.point.label()] = e.score;
  int differ = 0;
  for (const auto& e : ecmp.ranked) {
    const auto scenario = optimizer::scenario_json(spec, e.point);
    CHECK(scenario["multipath"]["routing"] == "ecmp");
    CHECK(scenario["multipath"]["long_links"] == 4);
    const auto rerun = scenario::run_scenario(scenario::parse_scenario(scenario, "refined.json"));
    std::cout << e.point.label() << ": tier 2 " << e.score << " s, refined under ECMP " << *e.refined
              << " s, re-run from its scenario " << rerun.result.step_time << " s\n";
    CHECK(rerun.result.step_time == Approx(*e.refined).epsilon(1e-9));
    if (tier2.count(e.point.label())) {
      CHECK(e.score == Approx(tier2[e.point.label()]).epsilon(1e-12));
      for (const auto& i : ideal.ranked)
        if (i.point.label() == e.point.label() && std::abs(*i.refined - *e.refined) > 1e-9 * *i.refined)
          ++differ;
    }
  }
  CHECK(differ > 0); // hashing moved at least one refined time away from ideal routing's

  json bad                = j;
  bad["refine_multipath"] = {{"routing", "ideal"}};
  CHECK_THROWS_WITH(spec_from(bad), Catch::Contains("$.refine_multipath") && Catch::Contains("\"ecmp\""));
}

TEST_CASE("a DeepEP node limit at or above the nodes an EP group spans is one point with no limit", "[optimizer]")
{
  // Qwen3-30B-A3B on 128 H100s (8-GPU nodes) with tp = cp = pp = 1: an EP group is ep consecutive ranks, so it spans
  // ep / 8 nodes (by hand: 1, 2 and 4 for ep 8, 16 and 32), and a limit of as many or more does nothing.
  json j         = ep_space(json::array({"alltoall", "deepep"}));
  auto limits_of = [](const optimizer::OptimizeSpec& spec) {
    const optimizer::IndexedSpace space(spec);
    std::map<int, std::multiset<int>> deepep; // ep -> the node limits of its canonical DeepEP points
    std::set<std::string> labels;
    for (const auto& p : spansim::test::canonical_points(space)) {
      CHECK(labels.insert(p.label()).second); // no two canonical points are one configuration
      if (p.dispatcher == workload::Dispatcher::deepep)
        deepep[p.ep].insert(p.node_limit);
      else
        CHECK(p.node_limit == 0);
    }
    // Every combination runs as one of the canonical points: a no-op limit as none.
    for (std::uint64_t i = 0; i < space.size(); ++i)
      if (space.divisible(space.decode(i)))
        CHECK(labels.count(space.point(space.decode(i)).label()) == 1);
    return deepep;
  };
  auto deepep = limits_of(spec_from(j));
  CHECK(deepep[8] == std::multiset<int>{0});
  CHECK(deepep[16] == std::multiset<int>{0, 1});
  CHECK(deepep[32] == std::multiset<int>{0, 1, 2});

  // Without 0 in the list, the first limit that does nothing stands for them, and runs as none.
  j["search"]["node_limit"] = {2, 4};
  deepep                    = limits_of(spec_from(j));
  CHECK(deepep[8] == std::multiset<int>{0});
  CHECK(deepep[16] == std::multiset<int>{0});
  CHECK(deepep[32] == std::multiset<int>{0, 2});

  // A point built by hand (the explanation's single changes) runs its limit the same way: EP 32 spans 4 nodes.
  const auto spec = spec_from(j);
  const optimizer::IndexedSpace space(spec);
  optimizer::Point p;
  p.dp         = 128;
  p.ep         = 32;
  p.dispatcher = workload::Dispatcher::deepep;
  for (auto [limit, runs] : std::vector<std::pair<int, int>>{{1, 1}, {2, 2}, {3, 3}, {4, 0}, {8, 0}, {0, 0}}) {
    p.node_limit = limit;
    INFO("node limit " << limit);
    CHECK(space.node_limit(p) == runs);
  }
  p.dispatcher = workload::Dispatcher::alltoall;
  p.node_limit = 2;
  CHECK(space.node_limit(p) == 0);
}

TEST_CASE("gpus_per_node: the search places 4 of each node's 8 GPUs, EP groups span twice the nodes, scenarios say so",
          "[optimizer]")
{
  // Qwen3-30B-A3B on 128 H100s with tp = cp = pp = 1 and 4 GPUs of each 8-GPU node in the job: an EP group of ep
  // consecutive ranks spans ep / 4 nodes (by hand: 2, 4 and 8 for ep 8, 16 and 32), so a DeepEP limit below that acts.
  json j             = ep_space(json::array({"deepep"}));
  j["gpus_per_node"] = 4;
  const auto spec    = spec_from(j);
  CHECK(spec.gpus_per_node == 4);
  const optimizer::IndexedSpace space(spec);
  std::map<int, std::multiset<int>> deepep;
  for (const auto& p : spansim::test::canonical_points(space))
    deepep[p.ep].insert(p.node_limit);
  CHECK(deepep[8] == std::multiset<int>{0, 1});
  CHECK(deepep[16] == std::multiset<int>{0, 1, 2});
  CHECK(deepep[32] == std::multiset<int>{0, 1, 2, 4});

  // A point's scenario runs on the same 4 GPUs of each node.
  optimizer::Point p;
  p.dp                = 128;
  p.ep                = 8;
  p.dispatcher        = workload::Dispatcher::deepep;
  const auto scenario = optimizer::scenario_json(spec, p);
  CHECK(scenario.at("placement").at("gpus_per_node") == 4);

  // More than a node's GPUs is refused where it is read.
  j["gpus_per_node"] = 9;
  try {
    spec_from(j);
    FAIL("gpus_per_node 9 on 8-GPU nodes was accepted");
  } catch (const spansim::SpecError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("gpus_per_node") != std::string::npos);
  }
}

TEST_CASE("nccl: the spec's NCCL settings run every point and its scenarios carry them", "[optimizer]")
{
  // Llama 3 8B, TP 4, FSDP over 8 nodes of two regions: the DP all-gathers and reduce-scatters leave each node by
  // as many NICs as NCCL has channels, so pinning 1 channel (NCCL_MIN/MAX_NCHANNELS = 1) slows the step.
  json j            = small_space();
  j["nccl"]         = {{"channels", 1}};
  const auto pinned = spec_from(j);
  const auto free   = spec_from(small_space());
  const auto topo   = topology::Topology(pinned.topology);
  optimizer::Point p;
  p.tp            = 4;
  p.dp            = 8;
  p.data_parallel = workload::DataParallelMode::fsdp;
  const auto one  = optimizer::refine_point(pinned, topo, p);
  const auto own  = optimizer::refine_point(free, topo, p);
  std::cout << "TP 4 FSDP 8: 1 channel " << one.score << " s, NCCL's own channels " << own.score << " s\n";
  CHECK(one.score > own.score * 1.01);
  CHECK(optimizer::score_point(pinned, topo, p).score > optimizer::score_point(free, topo, p).score);
  // The scenario written for the point pins the same channels and re-runs to the search's time.
  const auto scenario = optimizer::scenario_json(pinned, p);
  CHECK(scenario.at("collectives").at("nccl") == json{{"channels", 1}});
  CHECK(!optimizer::scenario_json(free, p).at("collectives").contains("nccl"));
  const auto rerun = scenario::run_scenario(scenario::parse_scenario(scenario, "pinned.json"));
  std::cout << "re-run from its scenario: " << rerun.result.step_time << " s\n";
  CHECK(rerun.result.step_time == Approx(one.score).epsilon(1e-9));
  // The block is read as a scenario's: a bad value is named with its path.
  j["nccl"] = {{"channels", "many"}};
  try {
    spec_from(j);
    FAIL("nccl.channels \"many\" was accepted");
  } catch (const spansim::SpecError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("$.nccl.channels") != std::string::npos);
  }
}

TEST_CASE("an optimize spec whose GPU lacks its precision or SMs is refused while it is read", "[optimizer]")
{
  auto j         = small_space();
  j["precision"] = {{"compute", "nvfp4"}};
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("at $.precision.compute") &&
                                      Catch::Contains("GPU h100 has no nvfp4 tensor cores") &&
                                      Catch::Contains("it has: bf16, fp8"));
  j          = small_space();
  j["model"] = "qwen3-30b-a3b";
  j["moe"]   = {{"dispatch_sms", 132}};
  CHECK_THROWS_WITH(spec_from(j), Catch::Contains("at $.moe.dispatch_sms") && Catch::Contains("GPU h100 has 132 SMs") &&
                                      Catch::Contains("allowed: 1 to 131"));
}

TEST_CASE(
    "recompute_modules: the spec's modules run the points that recompute selectively and their scenarios carry them",
    "[optimizer]")
{
  json j                   = small_space();
  j["search"]["recompute"] = {"selective", "full"};
  j["recompute_modules"]   = {"layernorm", "mlp"};
  const auto spec          = spec_from(j);
  optimizer::Point p;
  p.tp            = 4;
  p.dp            = 8;
  p.data_parallel = workload::DataParallelMode::fsdp;
  p.recompute     = workload::Recompute::selective;
  const auto job  = optimizer::job_of(spec, p, 2);
  CHECK(job.recomputes(workload::RecomputeModule::layernorm));
  CHECK(job.recomputes(workload::RecomputeModule::mlp));
  CHECK(!job.recomputes(workload::RecomputeModule::core_attn));
  // The scenario written for the point names them, and its job reads back as the search's.
  const auto scenario = optimizer::scenario_json(spec, p);
  CHECK(scenario.at("job").at("recompute_modules") == json{"layernorm", "mlp"});
  CHECK(workload::parse_job(scenario.at("job"), "point.json").recompute_modules == job.recompute_modules);
  // A point that recomputes whole layers has none.
  p.recompute = workload::Recompute::full;
  CHECK(optimizer::job_of(spec, p, 2).recompute_modules.empty());
  CHECK(!optimizer::scenario_json(spec, p).at("job").contains("recompute_modules"));
  // Modules without a selective point to run them are refused where they are read.
  j["search"]["recompute"] = {"full"};
  try {
    spec_from(j);
    FAIL("recompute_modules without selective recompute was accepted");
  } catch (const spansim::SpecError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("recompute_modules") != std::string::npos);
  }
}
