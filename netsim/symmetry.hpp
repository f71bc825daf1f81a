#pragma once
/// @file
/// @brief Internal to netsim: a flow graph folded onto one of several identical buildings or regions.
///
/// When a symmetry of the site (topology/symmetry.hpp) maps the graph onto itself, every transfer has one image
/// starting in the base buildings, and the max-min shares of the whole run are the same for all images. The
/// folded run keeps those images and the delays the symmetry fixes; its routes go down the base buildings' own
/// links where the whole run's go down another building's (the images of those flows), and each link shared by
/// several images has its bandwidth divided by their count. Times are exact; bytes are multiplied back.

#include "netsim/netsim.hpp"
#include "topology/symmetry.hpp"

#include <optional>
#include <string>
#include <vector>

namespace spansim::netsim::detail {

/// @brief A flow graph folded by a building symmetry.
struct FoldedGraph {
  topology::Topology topology; ///< routes folded, links shared by images divided
  FlowGraph graph;             ///< the ops of the base buildings and the ops the symmetry fixes
  std::vector<int> op_of;      ///< per op of the whole graph: the folded op whose timing it has
  std::vector<int> canonical;  ///< per hop: its representative (topology::BuildingSymmetry::canonical_hops)
  std::vector<int> stabilizer; ///< per link
  int images = 1;              ///< elements of the symmetry (each folded transfer stands for this many)
  /// @brief Bytes per hop of the fixed transfers (node-local representatives), on the whole site's links and on the
  /// folded ones (empty: none): they stand for themselves, not for images.
  std::vector<double> fixed_full, fixed_folded;
  std::string description; ///< for results
};

/// @brief Folds `graph` by the largest building symmetry of `topology` that maps it onto itself (regions and
/// buildings, then regions, then buildings; where regions differ in size, the regions of one size moving and the
/// others fixed, which the graph must not touch); nullopt when none does.
std::optional<FoldedGraph> fold_graph(const topology::Topology& topology, const FlowGraph& graph);

/// @brief The whole graph's run from the folded graph's: every op timed as its image, bytes on every link.
RunResult unfold_run(const FoldedGraph& folded, RunResult run);

} // namespace spansim::netsim::detail
