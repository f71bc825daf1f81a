#pragma once
/// @file
/// @brief Symmetries of a site that move whole buildings: identical regions shifted onto one another, and the
/// identical buildings of every region shifted alike. netsim/symmetry.hpp folds a step onto one building with them.

#include "topology/topology.hpp"

#include <optional>
#include <string>
#include <vector>

namespace spansim::topology {

/// @brief Which shifts a BuildingSymmetry is made of.
struct SymmetryAxes {
  bool regions   = true; ///< region r to region r + k (mod regions), for every k
  bool buildings = true; ///< building i of every region to building i + k (mod buildings per region)
};

/// @brief A group of automorphisms of a template site: cyclic shifts of the regions times cyclic shifts of the
/// buildings inside every region (an abelian group; element e = region shift * building_factor + building shift).
/// Each element maps GPUs to GPUs and links to links of the same tier, bandwidth and latency.
class BuildingSymmetry {
public:
  /// @brief The group on `axes`, or nullopt when the site does not have it: an imported graph, buildings that
  /// differ (overrides, faults, degraded links, per-pair long links), regions of different building counts, ECMP,
  /// or an axis with a single element.
  static std::optional<BuildingSymmetry> find(const Topology& topology, SymmetryAxes axes);

  /// @brief Elements of the group (0 is the identity).
  int order() const { return region_factor_ * building_factor_; }
  /// @brief The element that moves a GPU's base image (in the base buildings) to the GPU.
  int element_of(int gpu) const;
  /// @brief `gpu` moved by element `e`.
  int move(int gpu, int e) const;
  /// @brief The inverse of an element, and the product (first `b`, then `a`: the group is abelian).
  int inverse(int e) const;
  int compose(int a, int b) const;
  /// @brief Whether `gpu` is in a base building (element_of(gpu) == 0).
  bool in_base(int gpu) const { return element_of(gpu) == 0; }
  /// @brief Per hop index 2 * link + (forward ? 0 : 1): the smallest hop index of its orbit.
  const std::vector<int>& canonical_hops() const { return canonical_; }
  /// @brief Per link: how many elements fix it (each of its images is that many links of the whole site).
  const std::vector<int>& stabilizer() const { return stabilizer_; }
  /// @brief "2 regions x 2 buildings alike", for results.
  std::string describe() const;

private:
  BuildingSymmetry() = default;
  int region_factor_ = 1, building_factor_ = 1; ///< group sizes of the two axes (1: not folded along it)
  int regions_ = 1, buildings_per_region_ = 1;
  std::int64_t gpus_per_building_ = 0;
  std::vector<int> building_region_, building_local_; ///< per building
  std::vector<int> building_at_;                      ///< region * buildings_per_region + local -> building
  std::vector<int> canonical_;
  std::vector<int> stabilizer_;
};

} // namespace spansim::topology
