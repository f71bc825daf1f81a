// Qwen3-235B-A22B's published layout (Megatron-Bridge 25.11 on 256 H100: TP 2, PP 8, VP 4, EP 32 over TP x DP with
// expert TP 1) is accepted and runs at analytical and flow fidelity (packet and hybrid: test_moe_packet.cpp).
#include "scenario/scenario.hpp"
#include "tests/scenario/qwen3_layout.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>
#include <set>

namespace sc = spansim::scenario;

TEST_CASE("Qwen3-235B-A22B's layout (TP 2, PP 8, VP 4, EP 32 over TP x DP) runs at analytical and flow fidelity")
{
  const auto doc = spansim::test::qwen3_layout();
  const auto s   = sc::parse_scenario(doc, "qwen3-235b-a22b-256-h100.json");
  CHECK(s.job.parallelism.etp == 1);
  CHECK(s.job.parallelism.edp() == 1);
  const auto run = sc::run_scenario(s);
  // EP 32 folds over 32 consecutive GPUs: four whole nodes per group, crossing no pod.
  bool found = false;
  for (const auto& g : run.placement.groups)
    if (g.group == "ep") {
      found = true;
      CHECK(g.size == 32);
      CHECK(g.groups == 8);
      CHECK(g.across_nodes == 8);
      CHECK(g.across_pods == 0);
    }
  CHECK(found);
  const double flow = run.result.step_time, analytical = spansim::test::qwen3_step(doc, "analytical");
  std::cout << "Qwen3-235B 256 H100: flow " << flow << " s, analytical " << analytical << " s\n";
  CHECK(flow > 0);
  // SimGrid shares bandwidth to its maxmin precision (1e-5, pinned in netsim::EngineOptions).
  CHECK(std::fabs(analytical - flow) <= 1e-5 * flow);
}
