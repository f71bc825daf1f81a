#pragma once
/// @file
/// @brief A campaign as a Slurm job array: each array task runs one shard of the points (on a shared file
/// system), and a last job, dependent on the whole array, merges the recorded points into the HDF5 file.

#include "experiments/campaign.hpp"

#include <string>
#include <vector>

namespace spansim::experiments {

/// @brief How to submit a campaign to Slurm.
struct SlurmOptions {
  std::string output;                   ///< HDF5 path; empty: the campaign's own
  int tasks         = 0;                ///< array tasks (shards); 0: one per 8 points, at most 64
  int cpus_per_task = 1;                ///< worker processes per task
  std::string partition;                ///< empty: the cluster's default
  std::string time_limit;               ///< per task, Slurm syntax ("30:00"); empty: the partition's default
  std::vector<std::string> sbatch_args; ///< extra sbatch arguments for both jobs
  std::string spansim;                  ///< the spansim binary the jobs run (absolute); empty: this one
  std::string sbatch = "sbatch";
  bool submit        = true;  ///< false: write the scripts only
  bool wait          = false; ///< block until the merge job has ended
};

/// @brief What was written and submitted.
struct SlurmSubmission {
  std::string array_script;
  std::string merge_script;
  int tasks = 0;
  std::string array_job; ///< job ids (empty when not submitted)
  std::string merge_job;
  int merge_exit = -1; ///< with `wait`: sbatch --wait's exit status (the merge job's)
  std::string hdf5;
};

/// @brief A job array and the merge job that depends on all of it, as commands for two batch scripts.
struct ArrayJob {
  std::string directory;     ///< where the scripts and the tasks' logs go (created)
  std::string name;          ///< the job name (the merge job's adds "-merge")
  std::string generator;     ///< the command that wrote the scripts, for their comment lines
  int tasks = 1;             ///< array tasks, 0 .. tasks - 1
  std::string task_command;  ///< shell words of one task; "${SLURM_ARRAY_TASK_ID}" is its index
  std::string merge_command; ///< shell words of the merge job
};

/// @brief Writes `job`'s two batch scripts (array.sh, merge.sh) and submits them as options say (their `output`
/// and `tasks` are not read: the job names its own). @throws UsageError if sbatch fails (its message included).
SlurmSubmission submit_array(const ArrayJob& job, const SlurmOptions& options);

/// @brief Single-quoted for the shell.
std::string shell_quote(const std::string& s);
/// @brief The binary the batch scripts run: options.spansim, else this process's own.
std::string spansim_binary(const SlurmOptions& options);

/// @brief Writes the array and merge batch scripts next to the results (R.h5.d/slurm/) and submits them.
/// @throws UsageError if sbatch fails (its message included).
SlurmSubmission submit_slurm(const Campaign& campaign, const SlurmOptions& options);

} // namespace spansim::experiments
