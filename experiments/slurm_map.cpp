// A process::Mapper on Slurm by replay (experiments/slurm_map.hpp).
#include "experiments/slurm_map.hpp"

#include "common/error.hpp"
#include "experiments/runner.hpp"
#include "experiments/slurm_phase.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace spansim::experiments {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string map_root(const std::string& directory)
{
  return fs::absolute(directory).string() + "/slurm-map";
}

std::string record_path(const std::string& root, int map, std::size_t i)
{
  return root + "/records/map-" + std::to_string(map) + "-" + std::to_string(i) + ".rec";
}

std::string size_tag(std::size_t n)
{
  return "spansim map item of " + std::to_string(n);
}

} // namespace

json SlurmMapPhase::to_json() const
{
  auto j   = PhaseReport::to_json();
  j["map"] = map;
  return j;
}

SlurmMap::SlurmMap(SlurmMapOptions options) : options_(std::move(options)), root_(map_root(options_.directory))
{
  std::error_code ec;
  fs::create_directories(root_ + "/records", ec);
  if (ec)
    throw UsageError("cannot create \"" + root_ + "/records\": " + ec.message());
  // The records are only the command's own if the inputs are the same.
  const std::string path = root_ + "/fingerprint";
  if (auto old = read_tagged(path, "spansim map fingerprint")) {
    if (*old != options_.fingerprint)
      throw UsageError("\"" + root_ +
                       "\" holds the records of another command or other inputs (its fingerprint "
                       "differs); give another --out or remove the folder");
  } else if (options_.task_map == 0) {
    write_tagged(path, "spansim map fingerprint", options_.fingerprint);
  }
}

std::string SlurmMap::record(int map, std::size_t i) const
{
  return record_path(root_, map, i);
}

std::string SlurmMap::tag(std::size_t n) const
{
  return size_tag(n);
}

std::vector<std::string> SlurmMap::operator()(std::size_t n, const std::function<std::string(std::size_t)>& fn)
{
  SlurmMapPhase phase;
  phase.map   = static_cast<int>(phases_.size()) + 1;
  phase.items = n;
  std::vector<std::optional<std::string>> out(n);
  auto load = [&] {
    std::vector<std::size_t> missing;
    for (std::size_t i = 0; i < n; ++i)
      if (!out[i] && !(out[i] = read_tagged(record(phase.map, i), tag(n))))
        missing.push_back(i);
    return missing;
  };
  auto missing = load();
  phase.found  = n - missing.size();

  if (options_.task_map > 0 && phase.map == options_.task_map) {
    // This task's share: contiguous indices, the unrecorded ones evaluated and recorded as each finishes.
    const std::size_t per = (n + options_.tasks - 1) / options_.tasks;
    std::vector<std::size_t> mine;
    for (std::size_t i : missing)
      if (i >= per * options_.task && i < per * (options_.task + 1))
        mine.push_back(i);
    process::parallel_map(
        mine.size(), options_.slurm.cpus_per_task,
        [&](std::size_t k) { return std::to_string(mine[k]) + "\n" + fn(mine[k]); },
        [&](std::size_t, const std::string& r) {
          const auto eol = r.find('\n');
          write_tagged(record(phase.map, std::stoul(r.substr(0, eol))), tag(n), r.substr(eol + 1));
        });
    throw SlurmMapTaskDone{};
  }
  if (options_.task_map > 0 && !missing.empty())
    throw SimulationError("map " + std::to_string(phase.map) + " has " + std::to_string(missing.size()) +
                          " items without a record, but this task evaluates map " + std::to_string(options_.task_map) +
                          ": the command's maps ran in another order");

  const std::string dir = root_ + "/map-" + std::to_string(phase.map);
  auto count            = [&] {
    std::size_t k = 0;
    for (std::size_t i = 0; i < n; ++i)
      k += fs::exists(record(phase.map, i));
    return k;
  };
  if (!missing.empty()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    phase.add(wait_for_earlier(dir, options_.slurm, count, n, options_.progress));
    missing = load();
  }
  if (!missing.empty()) {
    // One item here, timed, sizes the chunks.
    const auto t0 = std::chrono::steady_clock::now();
    const auto i  = missing.front();
    out[i]        = process::run_in_child([&] { return fn(i); });
    write_tagged(record(phase.map, i), tag(n), *out[i]);
    phase.measured     = 1;
    phase.sized_by     = "here";
    phase.item_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    missing.erase(missing.begin());
  }
  if (!missing.empty()) {
    PhaseJob job;
    job.directory    = dir;
    job.name         = "spansim-map-" + std::to_string(phase.map);
    job.generator    = "spansim --slurm: map " + std::to_string(phase.map) + "'s unrecorded items";
    job.items        = n; // tasks split all n indices; each skips what is recorded
    job.item_seconds = phase.item_seconds * static_cast<double>(missing.size()) / static_cast<double>(n);
    job.task_seconds = options_.task_seconds;
    job.max_tasks    = options_.max_tasks;
    job.task_command = [&](int tasks) {
      return options_.command + " --slurm-task " + std::to_string(phase.map) + " --task \"${SLURM_ARRAY_TASK_ID}/" +
             std::to_string(tasks) + "\"";
    };
    job.merge_command = options_.command + " --slurm-merge " + std::to_string(phase.map) + "/" + std::to_string(n);
    job.recorded      = count;
    job.progress      = options_.progress;
    const auto run    = run_phase(job, options_.slurm);
    phase.add(run);
    if (!options_.slurm.submit)
      throw SlurmMapDryRun{run.scripts, run.tasks, run.per_task};
    missing = load();
    if (!missing.empty())
      throw SimulationError(std::to_string(missing.size()) + " of " + std::to_string(n) + " items of map " +
                            std::to_string(phase.map) + " have no record after array job " + phase.array_job +
                            " (see " + dir + "/task-*.log and merge.log); run the command again to resume it");
  }
  phases_.push_back(phase);
  std::vector<std::string> results;
  for (auto& r : out)
    results.push_back(std::move(*r));
  return results;
}

json merge_slurm_map(const std::string& directory, int map, std::size_t items)
{
  const std::string root = map_root(directory);
  std::size_t recorded   = 0;
  for (std::size_t i = 0; i < items; ++i)
    recorded += read_tagged(record_path(root, map, i), size_tag(items)).has_value();
  json j                 = {{"map", map}, {"items", items}, {"recorded", recorded}, {"missing", items - recorded}};
  const std::string path = root + "/map-" + std::to_string(map) + "/merged.json";
  if (!write_record(path, j.dump(2) + "\n"))
    throw UsageError("cannot write \"" + path + "\"");
  return j;
}

} // namespace spansim::experiments
