#pragma once
/// @file
/// @brief The optimizer's search for DLRM jobs: the sharding plan and the towers (count and level) of a scenario
/// whose job is a recommendation model, each simulated, ranked by step time.

#include "scenario/scenario.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace spansim::optimizer {

/// @brief One DLRM configuration tried.
struct DlrmCandidate {
  workload::Sharding sharding = workload::Sharding::row_wise;
  int towers                  = 0; ///< 0: none
  workload::TowerLevel level  = workload::TowerLevel::node;
  std::string refused{}; ///< why it does not apply (empty: simulated)
  double step_time          = 0;
  double samples_per_second = 0;
  double exposed_ep         = 0; ///< embedding exchange the compute stream waited for (mean over stages)
  double boundary_bytes     = 0; ///< per step over boundary links (buildings, uplinks, regions), both directions
};

/// @brief The search over a DLRM scenario: candidates simulated fastest first, then the refused.
struct DlrmSearch {
  std::string scenario;
  std::vector<DlrmCandidate> candidates;
};

/// @brief Tries every sharding plan (table-, column-, row-wise) without towers and with every tower count that
/// divides the GPUs and the tables (at least 2), at the lowest level (node, pod, building) whose units hold each
/// tower under the scenario's placement; each simulated at the scenario's fidelity. The towers' compression is
/// the job's (a model choice, not searched). @throws UsageError when the scenario's job is not a DLRM.
DlrmSearch search_dlrm(const scenario::Scenario& scenario,
                       const std::function<void(std::size_t done, std::size_t total)>& progress = {});

/// @brief The search as JSON (with provenance).
nlohmann::json to_json(const DlrmSearch& search);

} // namespace spansim::optimizer
