// The analytical engine's incremental max-min re-solve against the full one: an event re-solves only the flows
// at or above the lowest level it disturbs, and must give every op the times the whole component's re-solve
// gives, to rounding.
#include "netsim/collectives.hpp"
#include "netsim/netsim.hpp"
#include "topology/topology.hpp"

#include "tests/support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>

using namespace spansim;
using namespace spansim::netsim;

namespace {

// The largest difference between two runs' op times, relative to the makespan.
double largest_difference(const RunResult& a, const RunResult& b)
{
  double worst = std::fabs(a.makespan - b.makespan);
  for (std::size_t i = 0; i < a.ops.size(); ++i)
    worst = std::max({worst, std::fabs(a.ops[i].start - b.ops[i].start), std::fabs(a.ops[i].end - b.ops[i].end)});
  return worst / a.makespan;
}

void compare(const std::string& what, const topology::Topology& t, const FlowGraph& g)
{
  const auto full        = run_analytical(t, g, AnalyticalSettings{false});
  const auto incremental = run_analytical(t, g, AnalyticalSettings{true});
  const double diff      = largest_difference(full, incremental);
  std::cout << what << ": makespan full " << full.makespan << " s, incremental " << incremental.makespan
            << " s; largest op time difference " << diff << " of the makespan (tolerance 1e-9)\n";
  INFO(what << ": largest op time difference " << diff << " of the makespan");
  CHECK(diff <= 1e-9);
  CHECK(full.link_bytes == incremental.link_bytes);
}

} // namespace

TEST_CASE("incremental max-min equals the full re-solve on random flow graphs", "[analytical]")
{
  auto t         = test::tiny_topology();
  const int gpus = t.gpu_count();
  for (unsigned seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> gpu(0, gpus - 1);
    std::uniform_real_distribution<double> log_bytes(3, 9.5);
    std::uniform_real_distribution<double> unit(0, 1);
    FlowGraph g;
    std::vector<int> ops;
    // Bursts of flows released together (ties), chained on earlier ops, with delays between: flows start and end
    // while others of every rate are in flight, over NVLink, the pod fabric and both long links.
    for (int burst = 0; burst < 120; ++burst) {
      std::vector<int> deps;
      if (!ops.empty() && unit(rng) < 0.8)
        deps.push_back(ops[static_cast<std::size_t>(unit(rng) * static_cast<double>(ops.size()))]);
      if (unit(rng) < 0.3)
        deps = {g.add_delay(unit(rng) * 1e-3, deps)};
      const int size     = 1 + static_cast<int>(unit(rng) * 24);
      const double bytes = std::pow(10.0, log_bytes(rng));
      for (int k = 0; k < size; ++k) {
        int src = gpu(rng), dst = gpu(rng);
        if (src == dst)
          dst = (dst + 1) % gpus;
        ops.push_back(g.add_transfer(src, dst, unit(rng) < 0.5 ? bytes : std::pow(10.0, log_bytes(rng)), deps));
      }
    }
    compare("random graph, seed " + std::to_string(seed), t, g);
  }
}

TEST_CASE("incremental max-min equals the full re-solve on overlapping collectives", "[analytical]")
{
  auto t = test::tiny_topology();
  FlowGraph g;
  // Rings across both regions (slow, on the 20 GB/s link) overlapping rings inside nodes and pods (fast), one
  // started later: the fast flows start and end while the slow ones hold the long link.
  std::vector<int> across, pod;
  for (int r = 0; r < 8; ++r)
    across.push_back(r * 16 + 1);
  for (int r = 0; r < 8; ++r)
    pod.push_back(r * 4);
  const int later = g.add_delay(2e-4);
  for (auto algorithm : {Algorithm::ring, Algorithm::halving_doubling}) {
    Collective a;
    a.op        = CollectiveOp::all_reduce;
    a.algorithm = algorithm;
    a.gpus      = across;
    a.bytes     = 64e6;
    add_collective(g, t, a, {});
    Collective b = a;
    b.gpus       = pod;
    b.bytes      = 256e6;
    add_collective(g, t, b, {later});
    Collective c = a;
    c.gpus       = {2, 3, 6, 7};
    c.op         = CollectiveOp::all_gather;
    add_collective(g, t, c, {later});
  }
  compare("rings and halving-doubling across regions, in pods and in nodes", t, g);
}
