// Slurm submission: two batch scripts and two sbatch calls (the merge job depends on the whole array).
#include "experiments/slurm.hpp"

#include "common/error.hpp"
#include "common/paths.hpp"
#include "common/process.hpp"
#include "experiments/runner.hpp"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace spansim::experiments {

namespace fs = std::filesystem;

namespace {

// sbatch reads a #SBATCH value as one argument: double quotes group white space, a backslash escapes the next
// character and an unescaped '#' starts a comment (src/sbatch/opt.c, _get_argument).
std::string sbatch_value(const std::string& s)
{
  std::string q = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\' || c == '#')
      q += '\\';
    q += c;
  }
  return q + "\"";
}

// Slurm expands %-patterns in --output file names ("%a": the array task); "%%" is a literal '%'.
std::string literal_file_name(const std::string& s)
{
  std::string out;
  for (char c : s)
    out += c == '%' ? std::string("%%") : std::string(1, c);
  return out;
}

std::string trim(std::string s)
{
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' '))
    s.pop_back();
  return s;
}

// Under a temporary name, executable, renamed into place: a symlink planted at the script's name is replaced, never
// written through or made executable.
void write_script(const std::string& path, const std::string& text)
{
  write_file_replacing(path, text, 0755);
}

} // namespace

std::string shell_quote(const std::string& s)
{
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string spansim_binary(const SlurmOptions& options)
{
  if (!options.spansim.empty())
    return options.spansim;
  std::error_code ec;
  std::string p = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec)
    return "spansim";
  // A binary rebuilt while it runs reads as "PATH (deleted)": the scripts run the new one at PATH.
  const std::string deleted = " (deleted)";
  if (p.size() > deleted.size() && p.compare(p.size() - deleted.size(), deleted.size(), deleted) == 0)
    p.resize(p.size() - deleted.size());
  return p;
}

SlurmSubmission submit_slurm(const Campaign& campaign, const SlurmOptions& options)
{
  const auto points = expand(campaign); // refuses an invalid campaign before anything is submitted
  const auto paths  = output_paths(fs::absolute(options.output.empty() ? campaign.output : options.output).string());
  ArrayJob job;
  job.directory             = paths.directory + "/slurm";
  job.name                  = "spansim-" + campaign.name;
  job.generator             = "spansim campaign slurm: one shard of the campaign's points per array task";
  job.tasks                 = options.tasks > 0 ? options.tasks
                                                : std::min<int>(64, std::max<int>(1, (static_cast<int>(points.size()) + 7) / 8));
  job.tasks                 = std::min<int>(job.tasks, std::max<int>(1, static_cast<int>(points.size())));
  const std::string spansim = shell_quote(spansim_binary(options));
  job.task_command = spansim + " campaign run " + shell_quote(campaign.file) + " --out " + shell_quote(paths.hdf5) +
                     " --shard \"${SLURM_ARRAY_TASK_ID}/" + std::to_string(job.tasks) + "\" --jobs " +
                     std::to_string(options.cpus_per_task);
  job.merge_command = spansim + " campaign merge " + shell_quote(campaign.file) + " --out " + shell_quote(paths.hdf5);
  auto s            = submit_array(job, options);
  s.hdf5            = paths.hdf5;
  return s;
}

SlurmSubmission submit_array(const ArrayJob& job, const SlurmOptions& options)
{
  const std::string& dir = job.directory;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw UsageError("cannot create \"" + dir + "\": " + ec.message());

  SlurmSubmission s;
  s.tasks = job.tasks;
  if (options.cpus_per_task < 1)
    throw UsageError("--cpus-per-task must be at least 1");
  // #SBATCH lines end at a newline: a value with one could add directives or commands of its own.
  auto directive = [](const std::string& what, const std::string& value) {
    for (char c : value)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
        throw UsageError(what + " must not contain control characters (it goes into a #SBATCH line)");
    return value;
  };
  // In an --output file name a backslash turns off every %-pattern, and the task's log would lose its %a.
  if (dir.find('\\') != std::string::npos)
    throw UsageError("the results folder \"" + dir +
                     "\" holds a backslash, which turns off Slurm's file-name patterns in #SBATCH --output");
  auto header = [&](const std::string& name, const std::string& log_name) {
    const std::string log = literal_file_name(dir) + "/" + log_name;
    std::string h         = "#!/bin/bash\n#SBATCH --job-name=" + sbatch_value(directive("the job name", name)) +
                    "\n#SBATCH --output=" + sbatch_value(directive("the output path", log)) + "\n";
    if (!options.partition.empty())
      h += "#SBATCH --partition=" + sbatch_value(directive("--partition", options.partition)) + "\n";
    if (!options.time_limit.empty())
      h += "#SBATCH --time=" + sbatch_value(directive("--time", options.time_limit)) + "\n";
    return h;
  };
  s.array_script = dir + "/array.sh";
  s.merge_script = dir + "/merge.sh";
  write_script(s.array_script, header(job.name, "task-%a.log") + "#SBATCH --array=0-" + std::to_string(s.tasks - 1) +
                                   "\n#SBATCH --cpus-per-task=" + std::to_string(options.cpus_per_task) +
                                   "\n# Generated by " + job.generator + ".\nset -euo pipefail\nexec " +
                                   job.task_command + "\n");
  write_script(s.merge_script, header(job.name + "-merge", "merge.log") + "# Generated by " + job.generator +
                                   ": the merge job, after every task.\nset -euo pipefail\nexec " + job.merge_command +
                                   "\n");
  if (!options.submit)
    return s;

  std::vector<std::string> array_cmd{options.sbatch, "--parsable"};
  array_cmd.insert(array_cmd.end(), options.sbatch_args.begin(), options.sbatch_args.end());
  array_cmd.push_back(s.array_script);
  auto a = process::run_program(array_cmd, process::Capture::output_and_errors);
  if (a.exit_code != 0)
    throw UsageError("sbatch refused the array job (exit " + std::to_string(a.exit_code) + "): " + trim(a.captured));
  // --parsable prints "JOBID" or "JOBID;CLUSTER".
  s.array_job = trim(a.captured);
  s.array_job = s.array_job.substr(0, s.array_job.find(';'));
  if (s.array_job.empty() || s.array_job.find_first_not_of("0123456789") != std::string::npos)
    throw UsageError("sbatch did not print a job id: \"" + trim(a.captured) + "\"");

  // afterany: the merge runs even if a task failed, and then names the missing points.
  std::vector<std::string> merge_cmd{options.sbatch, "--parsable", "--dependency=afterany:" + s.array_job};
  if (options.wait)
    merge_cmd.push_back("--wait");
  merge_cmd.insert(merge_cmd.end(), options.sbatch_args.begin(), options.sbatch_args.end());
  merge_cmd.push_back(s.merge_script);
  auto m                 = process::run_program(merge_cmd, process::Capture::output_and_errors);
  std::string first_line = m.captured.substr(0, m.captured.find('\n'));
  s.merge_job            = trim(first_line.substr(0, first_line.find(';')));
  if (s.merge_job.empty() || s.merge_job.find_first_not_of("0123456789") != std::string::npos)
    throw UsageError("sbatch refused the merge job (exit " + std::to_string(m.exit_code) + "): " + trim(m.captured) +
                     " (array job " + s.array_job + " was submitted)");
  if (options.wait)
    s.merge_exit = m.exit_code;
  return s;
}

} // namespace spansim::experiments
