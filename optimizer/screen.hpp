#pragma once
/// @file
/// @brief Tier 1 of the search (internal to the optimizer): the space as mixed-radix indices, and a closed-form
/// step estimate per point that costs microseconds.
///
/// The estimate: compute and memory from the cost model without op programs (workload::job_costs, cached per
/// structure), the pipeline bubble from the schedule formula, exposed per-layer collectives and pipeline messages
/// from alpha-beta terms on the tier their groups cross (bandwidth and latency of the placement's own routes),
/// data parallelism hidden under compute but for its first unit, and every byte a step sends across a long link
/// charged to that link (a lower bound on a saturated long haul, which the collapsed analytical score misses).
/// It only has to order points well: the analytical engine and the refine fidelity decide among the survivors.

#include "optimizer/optimizer.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace spansim::optimizer {

/// @brief The knobs of a space in enumeration order, outermost first; `expert` indexes expert_variants(),
/// `network` network_variants().
enum Knob {
  knob_tp,
  knob_cp,
  knob_pp,
  knob_ep,
  knob_data_parallel,
  knob_reshard,
  knob_micro_batch,
  knob_schedule,
  knob_virtual_stages,
  knob_order,
  knob_recompute,
  knob_dp_algorithm,
  knob_expert,
  knob_channels,
  knob_network,
  kKnobCount
};
using Indices = std::array<std::uint32_t, kKnobCount>;

/// @brief Every combination of the network-layer knobs, as points whose other knobs are the defaults.
std::vector<Point> network_variants(const SearchSpace& s);
/// @brief Every combination of a MoE job's expert-layer knobs (etp, dispatcher, node limit, all-to-all overlap), as
/// points whose other knobs are the defaults.
std::vector<Point> expert_variants(const SearchSpace& s);
/// @brief Copies the expert-layer knobs of `from` into `to`.
void copy_expert(const Point& from, Point& to);

/// @brief A search space as mixed-radix numbers: point i of [0, size()) is decoded without enumerating the others.
class IndexedSpace {
public:
  explicit IndexedSpace(const OptimizeSpec& spec);
  /// @brief Combinations, before duplicates and divisibility are removed.
  std::uint64_t size() const { return size_; }
  Indices decode(std::uint64_t i) const;
  /// @brief False when `at` is another combination's duplicate: a knob that does not apply (virtual stages without
  /// interleaving, resharding under DDP) is not at its first value, or the rank order equals an earlier one once
  /// dimensions of degree 1 are dropped.
  bool canonical(const Indices& at) const;
  /// @brief Whether the GPU budget divides by tp x cp x pp.
  bool divisible(const Indices& at) const;
  Point point(const Indices& at) const;
  const OptimizeSpec& spec() const { return spec_; }
  const std::vector<Point>& networks() const { return networks_; }
  const std::vector<Point>& experts() const { return experts_; }
  /// @brief Values of knob `k`.
  std::uint32_t radix(int k) const { return radix_[k]; }

private:
  const OptimizeSpec& spec_;
  std::vector<Point> networks_;
  std::vector<Point> experts_;
  std::array<std::uint32_t, kKnobCount> radix_{};
  std::uint64_t size_ = 1;
};

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
