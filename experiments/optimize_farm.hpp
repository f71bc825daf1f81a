#pragma once
/// @file
/// @brief `spansim optimize --slurm`: tiers 2 and 3 of a search as Slurm job arrays. The search itself runs here
/// (tier 1 and the bounds are cheap); each tier's points go to a job array whose tasks write one durable record per
/// point, and a merge job after the array gathers them. The records are the state: a search killed at any moment and
/// run again loses no finished point, and a record is reused wherever the same point is asked for again. The
/// ranking is the local run's, bit for bit: the same code evaluates each point, and doubles travel as their bytes.
///
/// Layout under the search's output directory: `slurm/records/WORK-KEY.rec` (the point's line, then its record),
/// `slurm/phase-N-WORK/` (work list, batch scripts, task logs, the merge's summary).

#include "experiments/slurm_phase.hpp"
#include "optimizer/optimizer.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace spansim::experiments {

/// @brief How tiers 2 and 3 go to Slurm.
struct FarmOptions {
  std::string directory;     ///< the search's output directory (slurm/ is made in it)
  std::string spec_file;     ///< the optimize spec the tasks read (made absolute)
  SlurmOptions slurm;        ///< partition, time, extra arguments, binary, sbatch; `submit` false: a dry run
  double task_seconds = 600; ///< stated time per task: points per task = this / the time of one point measured here
  int max_tasks       = 256; ///< most array tasks per phase
  /// @brief Called while a phase's array runs: what, points recorded, points asked for.
  std::function<void(const std::string&, std::size_t, std::size_t)> progress;
};

/// @brief One phase (a farm call) as it went.
struct FarmPhase : PhaseReport {
  std::string name; ///< "phase-N-WORK"
  optimizer::Work work = optimizer::Work::score;
  nlohmann::json to_json() const;
};

/// @brief Thrown by a dry run after its first phase's scripts are written: later phases need its results.
struct FarmDryRun {
  FarmPhase phase;
  SlurmSubmission scripts;
};

/// @brief A farm (optimizer::Farm) on Slurm. One per search; not copyable (the search holds it by reference).
class SlurmFarm {
public:
  SlurmFarm(const optimizer::OptimizeSpec& spec, FarmOptions options);
  SlurmFarm(const SlurmFarm&)            = delete;
  SlurmFarm& operator=(const SlurmFarm&) = delete;
  /// @brief The farm call: every point's record, in order. @throws SimulationError naming the phase's logs when
  /// points have no record after the merge job; FarmDryRun in a dry run.
  std::vector<std::string> operator()(optimizer::Work work, const std::vector<optimizer::Point>& points);
  const std::vector<FarmPhase>& phases() const { return phases_; }

private:
  const optimizer::OptimizeSpec& spec_;
  FarmOptions options_;
  std::string records_;
  std::string fingerprint_; ///< of the spec, topology and build: every record carries it
  std::vector<FarmPhase> phases_;
};

/// @brief An array task: evaluates its share (task of tasks, contiguous) of the work list's points that have no
/// record, in `jobs` worker processes, recording each as it finishes. @return points evaluated.
std::size_t run_farm_task(const optimizer::OptimizeSpec& spec, const std::string& work_list, int task, int tasks,
                          int jobs);

/// @brief The merge job: counts the work list's points with a record and writes `merged.json` next to it.
/// @return {"points", "recorded", "missing"}.
nlohmann::json merge_farm_phase(const std::string& work_list);

} // namespace spansim::experiments
