// The Slurm flags of optimize and validate (cli/slurm_options.hpp).
#include "cli/slurm_options.hpp"

#include "cli/output.hpp"
#include "common/error.hpp"
#include "common/units.hpp"

namespace spansim::cli {

experiments::SlurmOptions SlurmFlags::options() const
{
  experiments::SlurmOptions o = sbatch;
  o.submit                    = !dry_run;
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

std::pair<long, long> parse_role_pair(const std::string& flag, const std::string& text, const std::string& form)
{
  const auto slash = text.find('/');
  const auto whole = [](const std::string& t) {
    return !t.empty() && t.size() <= 9 && t.find_first_not_of("0123456789") == std::string::npos;
  };
  if (slash == std::string::npos || !whole(text.substr(0, slash)) || !whole(text.substr(slash + 1)))
    throw UsageError(flag + " \"" + text + "\": allowed " + form + ", two whole numbers of at most 9 digits");
  return {std::stol(text.substr(0, slash)), std::stol(text.substr(slash + 1))};
}

std::pair<int, int> SlurmFlags::share() const
{
  const auto [k, n] = parse_role_pair("--task", task, "K/N");
  if (n < 1 || k >= n)
    throw UsageError("--task \"" + task + "\": allowed K/N with 0 <= K < N");
  return {static_cast<int>(k), static_cast<int>(n)};
}

void SlurmFlags::check_used() const
{
  if (any())
    return;
  for (const auto* option : slurm_only)
    if (option->count() > 0)
      throw UsageError(option->get_name() + " shapes the Slurm job arrays: it needs --slurm or --slurm-dry-run");
}

void add_sbatch_flags(CLI::App* c, experiments::SlurmOptions& to, const std::string& when)
{
  c->add_option("--cpus-per-task", to.cpus_per_task, when + "Worker processes per array task")
      ->check(integer_in(1, 1024));
  c->add_option("--partition", to.partition, when + "Slurm partition (default: the cluster's)");
  c->add_option("--time", to.time_limit, when + "Slurm's time limit per task (Slurm syntax)");
  c->add_option("--sbatch-arg", to.sbatch_args, when + "Extra sbatch argument (repeatable)");
}

void add_slurm_flags(CLI::App* c, SlurmFlags& f, const std::string& what)
{
  c->add_flag("--slurm", f.slurm,
              what + " as Slurm job arrays (on a file system the nodes share; run it again to resume)");
  c->add_flag("--slurm-dry-run", f.dry_run, "Write the first job array's batch scripts without submitting them");
  f.slurm_only = {
      c->add_option("--task-time", f.task_time, "With --slurm: the time each array task should take (default 10min)"),
      c->add_option("--max-tasks", f.max_tasks, "With --slurm: most array tasks per phase")
          ->check(integer_in(1, 100000))};
  add_sbatch_flags(c, f.sbatch, "With --slurm: ");
  for (const char* name : {"--cpus-per-task", "--partition", "--time", "--sbatch-arg"})
    f.slurm_only.push_back(c->get_option(name));
  c->add_option("--task", f.task)->group(""); // a batch script's role, not for people
}

} // namespace spansim::cli
