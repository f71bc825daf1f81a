#pragma once
/// @file
/// @brief Symmetries of a site that move whole buildings: identical regions shifted onto one another, and the
/// identical buildings of every region shifted alike. Where regions differ (3 + 3 + 2 buildings), the regions of one
/// building count move and the others stay as they are. netsim/symmetry.hpp folds a step onto one building with them.

#include "topology/topology.hpp"

#include <optional>
#include <string>
#include <vector>

namespace spansim::topology {

/// @brief Which shifts a BuildingSymmetry is made of.
struct SymmetryAxes {
  bool regions   = true; ///< region r to region r + k (mod regions), for every k
  bool buildings = true; ///< building i of every region to building i + k (mod buildings per region)
  /// 0: every region moves (all must have one building count); n: only the regions of n buildings move, the others
  /// are fixed (partial symmetry of a site whose regions differ)
  int region_buildings = 0;
};

/// @brief A group of automorphisms of a template site: cyclic shifts of the moving regions times cyclic shifts of the
/// buildings inside each of them (an abelian group; element e = region shift * building_factor + building shift).
/// Regions that do not move (SymmetryAxes::region_buildings) are fixed by every element. Each element maps GPUs to
/// GPUs and links to links of the same tier, bandwidth and latency.
class BuildingSymmetry {
public:
  /// @brief The group on `axes`, or nullopt when the site does not have it: an imported graph, buildings that
  /// differ (overrides, faults, degraded links, per-pair long links), regions of different building counts (unless
  /// `axes.region_buildings` names the ones that move), ECMP, or an axis with a single element.
  static std::optional<BuildingSymmetry> find(const Topology& topology, SymmetryAxes axes);

  /// @brief Elements of the group (0 is the identity).
  int order() const { return region_factor_ * building_factor_; }
  /// @brief The element that moves a GPU's base image (in the base buildings) to the GPU (0 for a fixed GPU).
  int element_of(int gpu) const;
  /// @brief Whether `gpu` is in a region that no element moves.
  bool fixed(int gpu) const { return region_class_[building_region_[building_of(gpu)]] < 0; }
  /// @brief `gpu` moved by element `e`.
  int move(int gpu, int e) const;
  /// @brief The inverse of an element, and the product (first `b`, then `a`: the group is abelian).
  int inverse(int e) const;
  int compose(int a, int b) const;
  /// @brief Whether `gpu` is in a base building (moved by the group, element_of(gpu) == 0).
  bool in_base(int gpu) const { return !fixed(gpu) && element_of(gpu) == 0; }
  /// @brief Per hop index 2 * link + (forward ? 0 : 1): the smallest hop index of its orbit.
  const std::vector<int>& canonical_hops() const { return canonical_; }
  /// @brief Per link: how many elements fix it (each of its images is that many links of the whole site).
  const std::vector<int>& stabilizer() const { return stabilizer_; }
  /// @brief "2 regions x 2 buildings alike" (", 1 region fixed" where some do not move), for results.
  std::string describe() const;

private:
  BuildingSymmetry() = default;
  int building_of(int gpu) const { return static_cast<int>(gpu / gpus_per_building_); }
  /// @brief Where element (dr, db) takes building `b`.
  int building_to(int b, int dr, int db) const;
  int region_factor_ = 1, building_factor_ = 1; ///< group sizes of the two axes (1: not folded along it)
  int moving_ = 1, buildings_per_region_ = 1;   ///< moving regions, and their building count
  std::int64_t gpus_per_building_ = 0;
  std::vector<int> building_region_, building_local_; ///< per building
  std::vector<int> region_class_;                     ///< per region: its index among the moving ones, or -1
  std::vector<int> moving_regions_;                   ///< the moving regions in order
  std::vector<std::vector<int>> buildings_of_;        ///< per region: its buildings in order
  std::vector<int> canonical_;
  std::vector<int> stabilizer_;
};

} // namespace spansim::topology
