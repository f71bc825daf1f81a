#pragma once
/// @file
/// @brief The search space as mixed-radix indices (internal to the optimizer): point i of a space decoded without
/// enumerating the others, and the knob groups (network, expert layer) the tiers share.

#include "optimizer/optimizer.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <tuple>
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
  knob_tp_overlap,
  knob_cp_comm,
  knob_dp_algorithm,
  knob_expert,
  knob_flows_per_pair,
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
/// @brief Copies the network-layer knobs (window, queue pairs, compression, DiLoCo, long-link capacity).
void copy_network(const Point& from, Point& to);
/// @brief a2a+p2p's all-to-all group for cp ranks at tensor parallelism tp on nodes of `node_gpus`, with `heads`
/// attention heads per TP rank: the largest divisor of cp below cp whose ranks fit in one node (tp x group <=
/// node_gpus) and split the heads, so that the all-to-alls stay on NVLink and the ring crosses nodes, as Megatron's
/// hierarchical CP is laid out; 0 when none of 2 or more does.
int node_cp_a2a(int cp, int tp, int node_gpus, int heads);
/// @brief Settles a point's TP overlap and CP variant on its degrees: no overlap at tp 1, all-gather at cp 1 (the
/// knobs do not apply), and a2a+p2p's group by node_cp_a2a on the spec's nodes.
void settle_model_comm(const OptimizeSpec& spec, Point& p);
/// @brief The rank order without the dimensions of degree 1, which do not change where ranks go: orders equal
/// here are one placement.
std::vector<workload::Dim> effective_order(const std::vector<workload::Dim>& order, int tp, int cp, int pp, int dp);
/// @brief The same for a point's own order and degrees.
std::vector<workload::Dim> effective_order(const Point& p);

/// @brief A search space as mixed-radix numbers: point i of [0, size()) is decoded without enumerating the others.
class IndexedSpace {
public:
  explicit IndexedSpace(const OptimizeSpec& spec);
  /// @brief Combinations, before duplicates and divisibility are removed.
  std::uint64_t size() const { return size_; }
  Indices decode(std::uint64_t i) const;
  /// @brief False when `at` is another combination's duplicate: a knob that does not apply (virtual stages without
  /// interleaving, resharding under DDP, TP overlap at tp 1, a CP variant at cp 1, a node limit without DeepEP) is
  /// not at its first value, a DeepEP node limit that does nothing (node_limit()) is not the first of the space's
  /// limits that do the same, or the rank order equals an earlier one once dimensions of degree 1 are dropped.
  bool canonical(const Indices& at) const;
  /// @brief The node limit `limit` as the point at `at` runs it: 0 (none) without DeepEP, or at or above the most
  /// nodes an EP group of the point spans (node-limited routing then picks among all of them).
  int node_limit(const Indices& at, int limit) const;
  /// @brief The same for a point built by hand (the explanation's single changes): its own node limit as it runs.
  int node_limit(const Point& p) const;
  /// @brief Whether the GPU budget divides by tp x cp x pp.
  bool divisible(const Indices& at) const;
  Point point(const Indices& at) const;
  const OptimizeSpec& spec() const { return spec_; }
  const std::vector<Point>& networks() const { return networks_; }
  const std::vector<Point>& experts() const { return experts_; }
  /// @brief Values of knob `k`.
  std::uint32_t radix(int k) const { return radix_[k]; }

private:
  /// @brief The most nodes an EP group of the point at `at` spans, placed as placement::Placement places it; 0 when
  /// not known (expert layers that do not fold over a stage, a job the site cannot hold).
  int ep_nodes(const Indices& at) const;
  /// @brief The same for degrees and a rank order given directly.
  int ep_nodes(int tp, int cp, int pp, int ep, int etp, const std::vector<workload::Dim>& order) const;
  /// @brief The node of each of the job's ranks, in rank order; empty when the site cannot hold the job.
  const std::vector<int>& rank_nodes() const;

  const OptimizeSpec& spec_;
  std::vector<Point> networks_;
  std::vector<Point> experts_;
  std::array<std::uint32_t, kKnobCount> radix_{};
  std::uint64_t size_ = 1;
  // Caches filled on first use, in the process that asks (workers are processes, not threads).
  mutable std::vector<int> node_of_rank_;
  mutable bool nodes_known_ = false;
  mutable std::map<std::tuple<int, int, int, int, int, std::vector<workload::Dim>>, int> ep_nodes_; // by degrees, order
};

} // namespace spansim::optimizer
