// The Slurm flags of optimize and validate (cli/slurm_options.hpp).
#include "cli/slurm_options.hpp"

#include "cli/output.hpp"
#include "common/error.hpp"
#include "common/units.hpp"

namespace spansim::cli {

experiments::SlurmOptions SlurmFlags::options() const
{
  experiments::SlurmOptions o;
  o.cpus_per_task = cpus_per_task;
  o.partition     = partition;
  o.time_limit    = time_limit;
  o.sbatch_args   = sbatch_args;
  o.submit        = !dry_run;
  return o;
}

double SlurmFlags::task_seconds() const
{
  try {
    return units::parse_time(task_time);
  } catch (const Error& e) {
    throw UsageError(std::string("--task-time: ") + e.what());
  }
}

std::pair<int, int> SlurmFlags::share() const
{
  const auto slash = task.find('/');
  int k = -1, n = 0;
  try {
    if (slash != std::string::npos) {
      k = std::stoi(task.substr(0, slash));
      n = std::stoi(task.substr(slash + 1));
    }
  } catch (const std::exception&) {
    n = 0; // not numbers: refused below
  }
  if (n < 1 || k < 0 || k >= n)
    throw UsageError("--task \"" + task + "\": allowed K/N with 0 <= K < N");
  return {k, n};
}

void add_slurm_flags(CLI::App* c, SlurmFlags& f, const std::string& what)
{
  c->add_flag("--slurm", f.slurm,
              what + " as Slurm job arrays (on a file system the nodes share; run it again to resume)");
  c->add_flag("--slurm-dry-run", f.dry_run, "Write the first job array's batch scripts without submitting them");
  c->add_option("--task-time", f.task_time, "With --slurm: the time each array task should take (default 10min)");
  c->add_option("--max-tasks", f.max_tasks, "With --slurm: most array tasks per phase")->check(integer_in(1, 100000));
  c->add_option("--cpus-per-task", f.cpus_per_task, "With --slurm: worker processes per array task")
      ->check(integer_in(1, 1024));
  c->add_option("--partition", f.partition, "With --slurm: the Slurm partition");
  c->add_option("--time", f.time_limit, "With --slurm: Slurm's time limit per task (Slurm syntax)");
  c->add_option("--sbatch-arg", f.sbatch_args, "With --slurm: an extra sbatch argument (repeatable)");
  c->add_option("--task", f.task)->group(""); // a batch script's role, not for people
}

} // namespace spansim::cli
