#pragma once
/// @file
/// @brief A process::Mapper on Slurm, for a deterministic command whose parallel phases are maps over indices
/// (`spansim validate --slurm`). The command runs here; each map with unrecorded items becomes a job array whose
/// tasks run the same command again in task mode: it replays the earlier maps from their records and, at its own
/// map, evaluates its share of the indices, records them and stops (SlurmMapTaskDone). Records are
/// `DIR/records/map-P-I.rec`, tagged with the map's size; a fingerprint of the inputs guards the folder against
/// reuse by another command. Run the command again after a kill and every recorded item is found.

#include "common/process.hpp"
#include "experiments/slurm_phase.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace spansim::experiments {

/// @brief The command and where its maps go.
struct SlurmMapOptions {
  std::string directory;     ///< records, scripts and logs (DIR/slurm-map)
  std::string command;       ///< the shell words of the command itself, which tasks run with --slurm-task added
  std::string fingerprint;   ///< the inputs' identity (files' bytes, options); a folder made for others is refused
  SlurmOptions slurm;        ///< partition, time, extra arguments, binary; `submit` false: a dry run
  double task_seconds = 600; ///< stated time per task
  int max_tasks       = 256; ///< most array tasks per map
  int task_map        = 0;   ///< task mode: the map (1-based) this task evaluates; 0: the command itself
  int task = 0, tasks = 1;   ///< task mode: which share
  std::function<void(const std::string&, std::size_t, std::size_t)> progress;
};

/// @brief Thrown in task mode once the task's share of its map is recorded: the command has nothing more to do.
struct SlurmMapTaskDone {};
/// @brief Thrown in a dry run once the first map's scripts are written.
struct SlurmMapDryRun {
  SlurmSubmission scripts;
  int tasks = 0, per_task = 0;
};

/// @brief One map as it went (the command's --json reports them).
struct SlurmMapPhase : PhaseReport {
  int map = 0;
  nlohmann::json to_json() const;
};

/// @brief The mapper. Not copyable: pass it by reference (std::ref) as the Mapper.
class SlurmMap {
public:
  explicit SlurmMap(SlurmMapOptions options);
  SlurmMap(const SlurmMap&)            = delete;
  SlurmMap& operator=(const SlurmMap&) = delete;
  std::vector<std::string> operator()(std::size_t n, const std::function<std::string(std::size_t)>& fn);
  const std::vector<SlurmMapPhase>& phases() const { return phases_; }

private:
  std::string record(int map, std::size_t i) const;
  std::string tag(std::size_t n) const;

  SlurmMapOptions options_;
  std::string root_;
  std::vector<SlurmMapPhase> phases_;
};

/// @brief The merge job of map `map` of `items` items: counts its records under `directory` (as SlurmMapOptions)
/// and writes merged-P.json there. @return {"map", "items", "recorded", "missing"}.
nlohmann::json merge_slurm_map(const std::string& directory, int map, std::size_t items);

} // namespace spansim::experiments
