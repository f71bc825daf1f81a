#pragma once
/// @file
/// @brief Tier 1 of the search (internal to the optimizer): the space as mixed-radix indices, and a closed-form
/// step estimate per point that costs microseconds.
///
/// The estimate: compute and memory from the cost model without op programs (workload::job_costs, cached per
/// structure), the pipeline bubble from the schedule formula, gathers and all-reduces at NCCL's tuner's time for the
/// group as NCCL lays it out on the site (netsim/nccl_layout.hpp: rings and trees per NIC, NVLS, the release's
/// latencies; across buildings or regions no faster than the long link's share or NCCL's slots per round trip),
/// all-to-alls and pipeline messages from alpha-beta terms on the tier their groups cross (bandwidth and latency of
/// the placement's own routes; a pipeline or all-to-all send over a long hop at NCCL's p2p window per round trip),
/// data parallelism hidden under compute but for its first unit, and every byte a step sends across a long link
/// charged to that link (a lower bound on a saturated long haul, which the collapsed analytical score misses).
/// It only has to order points well: the analytical engine and the refine fidelity decide among the survivors.

#include "optimizer/indexed_space.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace spansim::optimizer {

/// @brief The closed-form estimate. Caches per structure, placement and network variant; one per process.
class Screen {
public:
  Screen(const IndexedSpace& space, const topology::Topology& topo);
  ~Screen();
  Screen(const Screen&)            = delete;
  Screen& operator=(const Screen&) = delete;
  /// @brief The estimated step in seconds; infinity when the point cannot run, with `reason` the check's code.
  double estimate(const Indices& at, std::string& reason);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// @brief Where the screen ranks a point among the feasible points of a space, by estimate (0: first), for measuring
/// how well tier 1 orders points; rank == feasible when the point is not among them.
struct ScreenRank {
  std::size_t rank     = 0;
  std::size_t feasible = 0;
};
ScreenRank screen_rank(const IndexedSpace& space, const topology::Topology& topo, const std::string& label);

} // namespace spansim::optimizer
