#pragma once
/// @file
/// @brief Why the winner won (internal to the optimizer): the production default, the best one-knob change from it
/// per dimension of the search, and the capacity front, each chosen among points re-simulated at the refine
/// fidelity.

#include "optimizer/evaluate.hpp"

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace spansim::optimizer {

/// @brief Evaluates points as tier 2 or 3 does, one worker's record per point in order (locally or on a farm).
using RunWork = std::function<std::vector<std::string>(Work, const std::vector<Point>&)>;

/// @brief The points that explain the ranking, scored and waiting to be re-simulated.
struct Explanation {
  Evaluation baseline; ///< production default: order [tp, cp, pp, dp], DP across, 1F1B, the network as built
  /// @brief Per dimension, the (at most two) best one-knob changes from the baseline by score.
  std::map<SearchDimension, std::vector<std::pair<std::string, Evaluation>>> per_dimension;
  /// @brief Every capacity choice with each candidate structure, in the order of the choices.
  std::vector<Evaluation> capacity_runs;
  std::size_t capacity_choices = 0;

  /// @brief The baseline, the changes and the capacity runs, in the order `explain` reads them back.
  std::vector<Evaluation> to_refine() const;
};

/// @brief Finds the baseline among the scored points (or scores it), scores the single changes from it and lists the
/// capacity runs. `scored` is sorted by score.
Explanation plan_explanation(const OptimizeSpec& spec, const topology::Topology& topo,
                             const std::vector<Evaluation>& scored, const RunWork& run);

/// @brief Fills the result's baseline, single changes and capacity front from the re-simulated points: the best K
/// first (`ranked` of them), then Explanation::to_refine()'s.
void explain(const OptimizeSpec& spec, const Explanation& plan, const std::vector<Evaluation>& refined,
             std::size_t ranked, OptimizeResult& result);

} // namespace spansim::optimizer
