#pragma once
/// @file
/// @brief Several jobs on one network at once: each job's step lowered on its own, the flow graphs joined (a
/// job's step repeated, each after its previous one), and one run of the whole, so that the jobs share links.

#include "netsim/step.hpp"

#include <vector>

namespace spansim::netsim {

/// @brief One job of several on one network.
struct JobOnNetwork {
  const workload::StepGraph* graph      = nullptr;
  const placement::Placement* placement = nullptr;
  StepOptions options; ///< its collectives and compression; the fidelity and engine are the run's
  int steps = 1;       ///< steps it runs, each after its previous one
};

/// @brief How several jobs are run together.
struct TogetherOptions {
  Fidelity fidelity = Fidelity::analytical; ///< analytical, flow or packet
  EngineOptions engine;
  bool rail_symmetry = true; ///< one rail stands for all when every job's rails are alike
};

/// @brief One job's part of a run together.
struct JobTogether {
  std::vector<double> step_ends; ///< simulated seconds at which each of its steps ended
  /// @brief Its all-to-alls were timed in isolation (asked, or `auto` beyond netsim::kAllToAllFlowBudget flows):
  /// delays that share no link with the other jobs.
  bool all_to_all_isolated = false;
  /// @brief Each step read back as a step of its own (op times from the step's start); the transfer lists are
  /// left out (they would repeat the graph once per step).
  std::vector<StepResult> steps;
};

/// @brief A run of several jobs together.
struct TogetherResult {
  std::vector<JobTogether> jobs;
  double makespan      = 0;
  std::size_t flow_ops = 0;
  int rails            = 1; ///< identical rails one simulated rail stood for
  nlohmann::json engine;    ///< effective engine settings
};

/// @brief Whether one rail can stand for all in a run of these jobs: every job's rails are alike.
bool rails_alike(const topology::Topology& topology, const std::vector<JobOnNetwork>& jobs);

/// @brief Runs the jobs' steps together on `topology`, all starting at 0 and sharing its links. Compute is not
/// lengthened by SM contention here (simulate_step's second run), so a job alone must be run by this function
/// too to compare. @throws UsageError for GPUs two jobs share, hybrid fidelity or no jobs; SimulationError.
TogetherResult simulate_together(const topology::Topology& topology, const std::vector<JobOnNetwork>& jobs,
                                 const TogetherOptions& options);

} // namespace spansim::netsim
