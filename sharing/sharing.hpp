#pragma once
/// @file
/// @brief The sharing stage: several jobs on one network. A shared-network file lists jobs (each a scenario's
/// job, placement and collectives, on GPUs of its own); every job is first run alone, then all together for a
/// window of a few steps of the slowest, each repeating its step so that phases drift; per job, the step time in
/// the window, the slowdown against running alone and the exposed communication per dimension, and per boundary
/// the bytes each job moves.

#include "netsim/together.hpp"
#include "scenario/scenario.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace spansim::sharing {

/// @brief One job of a shared network: `scenario` holds its job, placement and collective options.
struct SharedJob {
  scenario::Scenario scenario;
};

/// @brief A shared-network file, read.
struct SharedSpec {
  std::string name;
  std::string file;
  topology::TopologySpec topology;
  std::vector<SharedJob> jobs;
  netsim::Fidelity fidelity = netsim::Fidelity::analytical;
  int window_steps          = 3;          ///< the window: this many steps of the slowest job alone
  double window_seconds     = 0;          ///< or this much simulated time, when > 0
  std::int64_t max_flow_ops = 20'000'000; ///< the joined graph's limit (memory), refused beyond
};

/// @brief Reads a shared-network file. @throws SpecError naming the file, JSON path and allowed values.
SharedSpec load_shared(const std::string& path);
/// @brief The same from JSON; `file` names it in errors and anchors relative paths.
SharedSpec parse_shared(const nlohmann::json& document, const std::string& file);

/// @brief One job's outcome.
struct JobOutcome {
  std::string name;
  std::int64_t gpus = 0;
  std::vector<std::string> buildings;     ///< the buildings its GPUs are in
  int first_gpu = 0, last_gpu = 0;        ///< its lowest and highest GPU
  double alone_step = 0;                  ///< its step alone on the network (the same engine and lowering)
  std::vector<double> step_ends;          ///< simulated seconds at which its steps ended, together
  int measured_from = 0, measured_to = 0; ///< steps [from, to) averaged: after the first, while every job runs
  /// @brief False when no step of it ended while every job still ran (its first step is then reported, partly
  /// alone): a longer window measures it under load.
  bool measured_under_load = true;
  bool all_to_all_isolated = false; ///< its all-to-alls were delays, sharing no link with the other jobs
  double shared_step       = 0;     ///< their mean
  double slowdown          = 0;     ///< shared_step / alone_step
  netsim::StepResult alone;         ///< its step alone
  netsim::StepResult shared;        ///< the last step measured
  /// @brief Per part of the breakdown (netsim::kParts), seconds: mean over stages, alone and over the measured
  /// steps together.
  std::vector<double> alone_parts, shared_parts;
};

/// @brief Bytes per step a job moves over one boundary link (both directions).
struct BoundaryBytes {
  std::string link;
  std::string tier;
  std::vector<double> bytes; ///< per job
};

/// @brief The outcome of a shared network.
struct SharedRun {
  SharedSpec spec;
  std::vector<JobOutcome> jobs;
  std::vector<BoundaryBytes> boundaries;
  double window         = 0; ///< simulated seconds the window asked for
  double makespan       = 0; ///< when the last step of the run together ended
  double measured_until = 0; ///< the end of the shortest job's last step: steps after it are not averaged
  std::size_t flow_ops  = 0;
  int rails             = 1;
  nlohmann::json engine;
};

using scenario::PhaseCallback;

/// @brief Places the jobs (in order; a job without a GPU range or buildings takes the next free GPUs), runs each
/// alone and then all together. @throws SpecError or InfeasibleError for placements that cannot be (overlap
/// named), UsageError for a window over the flow-op limit.
SharedRun run_shared(const SharedSpec& spec, const PhaseCallback& phase = {});

/// @brief The outcome as JSON: configuration (with version and git hash), per job and per boundary.
nlohmann::json to_json(const SharedRun& run);

/// @brief One placement tried for the job being placed around the others.
struct PlacementOption {
  std::vector<std::string> buildings; ///< an equal share of the job's GPUs in each, the first free ones
  std::string refused;                ///< why it could not be placed (empty: it was)
  double step     = 0;                ///< the placed job's step together
  double slowdown = 0;                ///< the placed job's slowdown
  std::vector<double> slowdowns;      ///< every job's, in file order
  double alone_step = 0;              ///< the placed job's step alone with this set of buildings
  /// @brief GPU-weighted mean slowdown of all jobs, the placed job's against its best alone step over the sets
  /// tried (so that a set slow on its own does not look good): what the objective ranks.
  double weighted_slowdown = 0;
};

/// @brief Placements of one job around the others, best first (placed ones before refused ones).
struct PlacementSearch {
  std::string job;
  std::vector<std::string> fixed; ///< the other jobs, placed as the file says
  std::vector<PlacementOption> options;
};

/// @brief Places job `job` of `spec` around the others (placed as the file says): every set of buildings that
/// splits its GPUs evenly, in its share of each building's free GPUs; each run alone and together as
/// run_shared does, ranked by the GPU-weighted mean slowdown of all jobs (least interference), then by the job's
/// own step. At most 256 sets. @throws UsageError for an unknown job name or too many sets.
PlacementSearch place_around(const SharedSpec& spec, const std::string& job,
                             const std::function<void(std::size_t done, std::size_t total)>& progress = {});

/// @brief The search as JSON.
nlohmann::json to_json(const PlacementSearch& search);

} // namespace spansim::sharing
