#pragma once
/// @file
/// @brief The Slurm options that `optimize --slurm` and `validate --slurm` share, and the roles their batch scripts
/// run (a task of a phase, the phase's merge job).

#include "experiments/slurm.hpp"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace spansim::cli {

/// @brief What the user asks of Slurm.
struct SlurmFlags {
  bool slurm            = false;
  bool dry_run          = false;
  std::string task_time = "10min";
  int max_tasks         = 256;
  experiments::SlurmOptions sbatch; ///< --cpus-per-task, --partition, --time, --sbatch-arg
  std::string task;                 ///< a script's role: "K/N", this array task's share
  bool any() const { return slurm || dry_run; }
  /// @brief The sbatch side (submit unless a dry run).
  experiments::SlurmOptions options() const;
  /// @brief --task-time in seconds. @throws UsageError naming the flag.
  double task_seconds() const;
  /// @brief --task as {K, N}. @throws UsageError unless 0 <= K < N.
  std::pair<int, int> share() const;
  /// @brief Refuses the options that only shape Slurm's jobs when neither --slurm nor --slurm-dry-run is given:
  /// unused, they would be ignored without a word. @throws UsageError naming the first such option.
  void check_used() const;
  /// @brief The options check_used() looks at (add_slurm_flags fills it).
  std::vector<const CLI::Option*> slurm_only;
};

/// @brief A script role of two whole numbers written `form` ("K/N", "P/N"), as a pair.
/// @throws UsageError naming `flag`, the text and the allowed form.
std::pair<long, long> parse_role_pair(const std::string& flag, const std::string& text, const std::string& form);

/// @brief Adds what goes to sbatch for every job: --cpus-per-task (worker processes per array task), --partition,
/// --time and --sbatch-arg (repeatable), into `to`; `when` opens their help ("With --slurm: ").
void add_sbatch_flags(CLI::App* command, experiments::SlurmOptions& to, const std::string& when = "");

/// @brief Adds --slurm, --slurm-dry-run, --task-time, --max-tasks, --cpus-per-task, --partition, --time, --sbatch-arg
/// and the hidden --task to `command`; `what` says what goes to the job arrays.
void add_slurm_flags(CLI::App* command, SlurmFlags& flags, const std::string& what);

} // namespace spansim::cli
