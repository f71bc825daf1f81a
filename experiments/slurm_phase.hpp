#pragma once
/// @file
/// @brief One phase of work items as a Slurm job array, shared by `optimize --slurm` and `validate --slurm`: tagged
/// durable records (one per item, whole or absent), chunks sized to a stated time per task from one item timed
/// here, the array and its merge job submitted, and the wait for the merge job polled (with progress) so that a run
/// killed meanwhile has its job ids written down to wait for when started again.

#include "experiments/slurm.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>

namespace spansim::experiments {

/// @brief A record's bytes if `path` holds one written for `tag` (its first line); empty otherwise.
std::optional<std::string> read_tagged(const std::string& path, const std::string& tag);
/// @brief Writes `tag`, a newline and `bytes` to `path`, whole or not at all. @throws SimulationError on failure.
void write_tagged(const std::string& path, const std::string& tag, const std::string& bytes);

/// @brief What one phase sends to Slurm.
struct PhaseJob {
  std::string directory;     ///< scripts, logs and the job ids ("jobs") go here
  std::string name;          ///< the job name
  std::string generator;     ///< for the scripts' comment lines
  std::size_t items   = 0;   ///< items the array evaluates
  double item_seconds = 0;   ///< one item's wall time, measured here
  double task_seconds = 600; ///< stated time per task
  int max_tasks       = 256;
  /// @brief The task's command given its tasks count (the task index is "${SLURM_ARRAY_TASK_ID}").
  std::function<std::string(int tasks)> task_command;
  std::string merge_command;
  std::function<std::size_t()> recorded; ///< items recorded so far, for progress
  std::function<void(const std::string&, std::size_t, std::size_t)> progress;
};

/// @brief How a phase went on Slurm.
struct PhaseRun {
  int tasks = 0, per_task = 0;
  std::string array_job, merge_job;
  double wall_seconds = 0;
  SlurmSubmission scripts;
};

/// @brief How a phase went, as `--json` reports it.
struct PhaseReport {
  std::size_t items    = 0; ///< asked for (distinct)
  std::size_t found    = 0; ///< recorded before this run reached the phase
  std::size_t measured = 0; ///< evaluated here to size the chunks (0 or 1)
  double item_seconds  = 0; ///< an item's wall time: the measured item's, or the rate of `sized_by`
  /// @brief Where item_seconds comes from: "here" (an item timed before the array), "beside" (an item timed here
  /// while the array ran, which took one item per task), an earlier phase's name (its rate), "unmeasured" (a dry
  /// run's re-simulation: one item per task) or "" (no array).
  std::string sized_by;
  int tasks = 0, per_task = 0;
  std::string array_job, merge_job;
  double wall_seconds = 0; ///< from submission (or the wait for an earlier array) to the merge job's end
  /// @brief Takes a phase run's tasks (where it sized any), job ids and wall time.
  void add(const PhaseRun& run);
  nlohmann::json to_json() const;
};

/// @brief A run killed while its array ran left the ids in `directory`/jobs: waits for that merge job while Slurm
/// still lists it (the old tasks still record). @return the jobs waited for (empty when none).
PhaseRun wait_for_earlier(const std::string& directory, const SlurmOptions& options,
                          const std::function<std::size_t()>& recorded, std::size_t items,
                          const std::function<void(const std::string&, std::size_t, std::size_t)>& progress);

/// @brief Sizes the chunks, writes the scripts and (unless options.submit is false) submits them and waits for the
/// merge job. @throws UsageError if sbatch refuses.
PhaseRun run_phase(const PhaseJob& job, const SlurmOptions& options);

} // namespace spansim::experiments
