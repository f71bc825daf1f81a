// One phase of work items as a Slurm job array (experiments/slurm_phase.hpp).
#include "experiments/slurm_phase.hpp"

#include "common/error.hpp"
#include "common/process.hpp"
#include "experiments/runner.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace spansim::experiments {

namespace fs = std::filesystem;

namespace {

// Asks squeue whether a job is still known to Slurm (pending, running or completing).
bool job_queued(const std::string& job)
{
  if (job.empty())
    return false;
  auto r = process::run_program({"squeue", "-h", "-j", job, "-o", "%i"}, process::Capture::output_and_errors);
  return r.exit_code == 0 && r.captured.find_first_not_of(" \n") != std::string::npos;
}

// Polled (every 2 s) rather than sbatch --wait: the records' progress shows while the array runs.
void wait_for(const PhaseRun& run, std::size_t items, const std::function<std::size_t()>& recorded,
              const std::function<void(const std::string&, std::size_t, std::size_t)>& progress)
{
  while (job_queued(run.merge_job)) {
    if (progress && recorded)
      progress("array " + run.array_job + " on Slurm", std::min(items, recorded()), items);
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
}

double seconds_since(std::chrono::steady_clock::time_point t)
{
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

} // namespace

void PhaseReport::add(const PhaseRun& run)
{
  if (run.tasks > 0) {
    tasks    = run.tasks;
    per_task = run.per_task;
  }
  if (!run.array_job.empty()) {
    array_job = run.array_job;
    merge_job = run.merge_job;
  }
  wall_seconds += run.wall_seconds;
}

nlohmann::json PhaseReport::to_json() const
{
  return {{"items", items},         {"found", found},
          {"measured", measured},   {"item_seconds", item_seconds},
          {"sized_by", sized_by},   {"tasks", tasks},
          {"per_task", per_task},   {"array_job", array_job},
          {"merge_job", merge_job}, {"wall_seconds", wall_seconds}};
}

std::optional<std::string> read_tagged(const std::string& path, const std::string& tag)
{
  std::ifstream f(path, std::ios::binary);
  if (!f)
    return std::nullopt;
  std::stringstream s;
  s << f.rdbuf();
  const std::string text = s.str();
  if (text.size() <= tag.size() || text.compare(0, tag.size(), tag) != 0 || text[tag.size()] != '\n')
    return std::nullopt;
  return text.substr(tag.size() + 1);
}

void write_tagged(const std::string& path, const std::string& tag, const std::string& bytes)
{
  if (!write_record(path, tag + "\n" + bytes))
    throw SimulationError("cannot write the record \"" + path + "\"");
}

PhaseRun wait_for_earlier(const std::string& directory, const SlurmOptions& options,
                          const std::function<std::size_t()>& recorded, std::size_t items,
                          const std::function<void(const std::string&, std::size_t, std::size_t)>& progress)
{
  PhaseRun run;
  if (std::ifstream f(directory + "/jobs"); f)
    f >> run.array_job >> run.merge_job;
  if (!options.submit || !job_queued(run.merge_job))
    return {};
  const auto t = std::chrono::steady_clock::now();
  wait_for(run, items, recorded, progress);
  run.wall_seconds = seconds_since(t);
  return run;
}

PhaseRun run_phase(const PhaseJob& job, const SlurmOptions& options)
{
  PhaseRun run;
  const auto n = static_cast<int>(job.items);
  run.per_task = std::max(1, static_cast<int>(job.task_seconds / std::max(1e-6, job.item_seconds)));
  run.tasks    = std::min((n + run.per_task - 1) / run.per_task, job.max_tasks);
  run.per_task = (n + run.tasks - 1) / run.tasks; // the tasks' even share
  ArrayJob array;
  array.directory     = job.directory;
  array.name          = job.name;
  array.generator     = job.generator + ", " + std::to_string(run.per_task) + " per task";
  array.tasks         = run.tasks;
  array.task_command  = job.task_command(run.tasks);
  array.merge_command = job.merge_command;
  const auto t        = std::chrono::steady_clock::now();
  run.scripts         = submit_array(array, options);
  if (!options.submit)
    return run;
  run.array_job = run.scripts.array_job;
  run.merge_job = run.scripts.merge_job;
  if (!write_record(job.directory + "/jobs", run.array_job + " " + run.merge_job + "\n"))
    throw UsageError("cannot write \"" + job.directory + "/jobs\"");
  wait_for(run, job.items, job.recorded, job.progress);
  run.wall_seconds = seconds_since(t);
  return run;
}

} // namespace spansim::experiments
