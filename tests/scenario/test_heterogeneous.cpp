// Heterogeneous sites: each pipeline stage costed on its building's GPU type, and a two-stage pipeline whose
// step is set by the slower stage.
#include "common/error.hpp"
#include "scenario/scenario.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>

using nlohmann::json;
namespace sc = spansim::scenario;
namespace wl = spansim::workload;

namespace {

json topology(bool b200_building)
{
  json t = {{"name", "two-generations"},
            {"node", {{"gpus", 4}, {"nvlink_bandwidth", "450GBps"}, {"nvlink_latency", "1us"}}},
            {"pod",
             {{"nodes", 2},
              {"rail_optimized", true},
              {"nic_bandwidth", "400Gbps"},
              {"leaf_radix", 8},
              {"spine_radix", 8},
              {"oversubscription", 1},
              {"link_latency", "1us"}}},
            {"building", {{"pods", 1}, {"aggregation_oversubscription", 1}, {"aggregation_latency", "1us"}}},
            {"regions", json::array({{{"name", "campus"}, {"buildings", {"old", "new"}}}})},
            {"inter_building", {{"bandwidth", "10Tbps"}, {"distance", "1km"}, {"equipment_latency", "1us"}}}};
  if (b200_building)
    t["building_overrides"] = json::array({{{"building", "new"},
                                            {"gpu", "b200"},
                                            {"node", {{"nvlink_bandwidth", "900GBps"}}},
                                            {"pod", {{"nic_bandwidth", "800Gbps"}}}}});
  return t;
}

json scenario(bool b200_building, const std::vector<std::string>& order = {"tp", "cp", "dp", "pp"}, int dp = 1)
{
  return {{"name", "hetero"},
          {"topology", topology(b200_building)},
          {"job",
           {{"name", "hetero-job"},
            {"model",
             {{"name", "small"},
              {"layers", 8},
              {"hidden", 2048},
              {"ffn", 8192},
              {"heads", 16},
              {"kv_heads", 16},
              {"vocab", 32000}}},
            {"gpu", "h100"},
            {"gpus", 2 * dp},
            {"parallelism", {{"tp", 1}, {"pp", 2}, {"dp", dp}, {"data_parallel", "ddp"}}},
            {"batch", {{"global_sequences", 8 * dp}, {"sequence_length", 2048}, {"micro_batch", 1}}},
            {"schedule", {{"kind", "gpipe"}}},
            {"calibration", "none"},
            {"effects",
             {{"sustained_clock", false},
              {"kernel_gaps", false},
              {"attention_by_length", false},
              {"grad_clipping", false},
              {"sm_contention", false},
              {"dp_overlap_by_unit", false}}}}},
          {"placement", {{"order", order}, {"buildings", {"old", "new"}}}},
          {"fidelity", "analytical"}};
}

double compute_of(const wl::StageProgram& st, wl::OpKind kind)
{
  for (const auto& op : st.ops)
    if (op.kind == kind)
      return op.seconds;
  return 0;
}

} // namespace

TEST_CASE("a two-stage pipeline over two GPU generations: each stage on its GPU, the slower sets the pace",
          "[scenario][heterogeneous]")
{
  const auto het  = sc::run_scenario(sc::parse_scenario(scenario(true), "test"));
  const auto same = sc::run_scenario(sc::parse_scenario(scenario(false), "test"));
  const auto& hs  = het.placed->graph().stages;
  const auto& ss  = same.placed->graph().stages;
  // Stage 0 (building "old") keeps the H100 times; stage 1 (building "new") runs on B200, faster.
  CHECK(compute_of(hs[0], wl::OpKind::forward) == compute_of(ss[0], wl::OpKind::forward));
  CHECK(compute_of(hs[1], wl::OpKind::forward) < compute_of(ss[1], wl::OpKind::forward));
  // GPipe, m micro-batches, stage 0 the slower: its forwards and backwards back to back, plus the fast stage's
  // one forward and one backward and two transfers in the pipeline's fill and drain, plus stage 0's optimizer.
  const double m  = het.placed->graph().micro_batches;
  const double f0 = compute_of(hs[0], wl::OpKind::forward), b0 = compute_of(hs[0], wl::OpKind::backward);
  const double f1 = compute_of(hs[1], wl::OpKind::forward), b1 = compute_of(hs[1], wl::OpKind::backward);
  const double o0 = compute_of(hs[0], wl::OpKind::optimizer);
  double c        = 0; // one activation transfer between the buildings, as simulated
  for (std::size_t i = 0; i < hs[0].ops.size(); ++i)
    if (hs[0].ops[i].kind == wl::OpKind::send) {
      c = het.result.ops[0][i].end - het.result.ops[0][i].active;
      break;
    }
  REQUIRE(f0 + b0 > f1 + b1);
  const double expected = m * (f0 + b0) + f1 + b1 + 2 * c + o0;
  std::cout << "m " << m << ", f0 " << f0 << ", b0 " << b0 << ", f1 " << f1 << ", b1 " << b1 << ", transfer " << c
            << ", optimizer " << o0 << "\nstep: expected " << expected << " s, simulated " << het.result.step_time
            << " s (all-H100 " << same.result.step_time << " s)\n";
  CHECK(het.result.step_time == Approx(expected).epsilon(1e-6));
  CHECK(het.result.step_time < same.result.step_time);
}

TEST_CASE("a stage over two GPU types is refused", "[scenario][heterogeneous]")
{
  // dp outermost: each stage has a rank in both buildings.
  CHECK_THROWS_WITH(sc::run_scenario(sc::parse_scenario(scenario(true, {"tp", "cp", "pp", "dp"}, 2), "test")),
                    Catch::Contains("$.placement") && Catch::Contains("pipeline stage 0 runs on h100 and b200"));
}

TEST_CASE("a job placed only in buildings of another GPU is refused at its gpu", "[scenario][heterogeneous]")
{
  // Both buildings B200: the h100 job would be costed on B200 and reported against H100.
  auto j = scenario(true);
  j["topology"]["building_overrides"].push_back({{"building", "old"}, {"gpu", "b200"}});
  CHECK_THROWS_WITH(sc::run_scenario(sc::parse_scenario(j, "test")), Catch::Contains("$.job.gpu") &&
                                                                         Catch::Contains("the job's GPU is h100") &&
                                                                         Catch::Contains("have b200 GPUs"));
  // Named as what it runs on, it runs; and the mixed job (one stage on its own GPU) still does.
  j["job"]["gpu"] = "b200";
  CHECK(sc::run_scenario(sc::parse_scenario(j, "test")).result.step_time > 0);
  CHECK(sc::run_scenario(sc::parse_scenario(scenario(true), "test")).result.step_time > 0);
}

TEST_CASE("a MoE job's dispatch SMs are checked against every building's GPU", "[scenario][heterogeneous]")
{
  // 120 SMs for the dispatch fit H100's 132 but not A100's 108: refused at the job's key, naming the A100.
  auto j                                        = scenario(true);
  j["topology"]["building_overrides"][0]["gpu"] = "a100";
  j["job"]["model"]["moe"] = {{"experts", 4}, {"experts_per_token", 2}, {"expert_ffn", 8192}, {"every", 1}};
  j["job"]["moe"]          = {{"dispatch_sms", 120}};
  CHECK_THROWS_WITH(sc::run_scenario(sc::parse_scenario(j, "test")), Catch::Contains("$.job.moe.dispatch_sms") &&
                                                                         Catch::Contains("GPU a100") &&
                                                                         Catch::Contains("allowed: 1 to 107"));
  j["job"]["moe"]["dispatch_sms"] = 100;
  CHECK(sc::run_scenario(sc::parse_scenario(j, "test")).result.step_time > 0);
}

TEST_CASE("balanced stage layers: the faster GPU's stage takes more layers, and the slowest stage is as fast as it "
          "can be",
          "[scenario][heterogeneous]")
{
  auto even_doc                                      = scenario(true);
  auto balanced_doc                                  = scenario(true);
  balanced_doc["job"]["parallelism"]["stage_layers"] = "balanced";
  const auto even                                    = sc::run_scenario(sc::parse_scenario(even_doc, "test"));
  const auto balanced                                = sc::run_scenario(sc::parse_scenario(balanced_doc, "test"));
  const auto& es                                     = even.placed->graph().stages;
  const auto& bs                                     = balanced.placed->graph().stages;
  REQUIRE(es[0].chunk_layers == std::vector<int>{4});
  REQUIRE(es[1].chunk_layers == std::vector<int>{4});
  // Per-layer forward + backward seconds of each GPU, from the even split; then the split that minimizes the
  // slower stage, by trying all of them.
  auto per_layer = [](const wl::StageProgram& st) {
    return (compute_of(st, wl::OpKind::forward) + compute_of(st, wl::OpKind::backward)) / st.chunk_layers[0];
  };
  const double r0 = per_layer(es[0]), r1 = per_layer(es[1]);
  int best = 1;
  for (int n0 = 1; n0 < 8; ++n0)
    if (std::max(n0 * r0, (8 - n0) * r1) < std::max(best * r0, (8 - best) * r1))
      best = n0;
  std::cout << "per layer: h100 " << r0 << " s, b200 " << r1 << " s; best split " << best << " + " << 8 - best
            << ", chosen " << bs[0].chunk_layers[0] << " + " << bs[1].chunk_layers[0] << "; step even "
            << even.result.step_time << " s, balanced " << balanced.result.step_time << " s\n";
  CHECK(bs[0].chunk_layers[0] == best);
  CHECK(bs[1].chunk_layers[0] == 8 - best);
  CHECK(bs[1].chunk_layers[0] > bs[0].chunk_layers[0]);
  CHECK(balanced.result.step_time < even.result.step_time);

  // Given by hand, and checked against the model.
  auto wrong                                  = scenario(true);
  wrong["job"]["parallelism"]["stage_layers"] = json::array({3, 4});
  CHECK_THROWS_WITH(sc::parse_scenario(wrong, "test"),
                    Catch::Contains("stage_layers") && Catch::Contains("hold 7 layers; the model has 8"));
}
