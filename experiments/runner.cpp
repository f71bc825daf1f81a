// Running campaigns: a pool of forked workers, one point each, durable per-point records, atomic result files.
#include "experiments/runner.hpp"

#include "common/error.hpp"
#include "common/paths.hpp"
#include "common/process.hpp"
#include "common/version.hpp"
#include "report/report.hpp"
#include "scenario/scenario.hpp"

#include <array>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sched.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace spansim::experiments {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0)
{
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

json link_record(const topology::Topology& topo, const std::vector<double>& link_bytes)
{
  json names = json::array(), tiers = json::array(), capacity = json::array();
  for (const auto& l : topo.links()) {
    names.push_back(topo.vertex_name(l.a) + " -- " + topo.vertex_name(l.b));
    tiers.push_back(name_of(l.tier));
    capacity.push_back(l.bandwidth);
  }
  return {{"name", names}, {"tier", tiers}, {"capacity_Bps", capacity}, {"bytes", link_bytes}};
}

// Every rank with its GPU, coordinates and the breakdown of its pipeline stage (all ranks of a stage run the
// same program, so they share it).
json rank_record(const scenario::ScenarioRun& run)
{
  const auto& place = run.placed->placement();
  json gpu = json::array(), coordinates = json::object();
  for (workload::Dim d : workload::kRankDims)
    coordinates[std::string(name_of(d))] = json::array();
  std::vector<json> parts(netsim::kParts.size(), json::array());
  for (int k = 0; k < place.ranks(); ++k) {
    const auto c = place.coordinates(k);
    gpu.push_back(place.gpu(k));
    for (workload::Dim d : workload::kRankDims)
      coordinates[std::string(name_of(d))].push_back(c[d]);
    const auto& b = run.result.stages.at(static_cast<std::size_t>(c.pp));
    for (std::size_t p = 0; p < netsim::kParts.size(); ++p)
      parts[p].push_back(b.part(netsim::kParts[p]));
  }
  json out   = coordinates;
  out["gpu"] = gpu;
  for (std::size_t p = 0; p < netsim::kParts.size(); ++p)
    out[stage_columns()[p]] = parts[p];
  return out;
}

// The breakdown of every pipeline stage.
json stage_record(const netsim::StepResult& r)
{
  json stages = json::array();
  for (const auto& b : r.stages) {
    json e = {{"stage", b.stage}};
    for (std::size_t p = 0; p < netsim::kParts.size(); ++p)
      e[stage_columns()[p]] = b.part(netsim::kParts[p]);
    stages.push_back(e);
  }
  return stages;
}

// Sampled steps and the run's goodput, for scenarios with those blocks; repetitions move the seeds on.
void add_reliability_metrics(const scenario::Scenario& sc, const scenario::ScenarioRun& run, int repetition,
                             json& metrics)
{
  double step = run.result.step_time;
  if (sc.variability) {
    auto v = *sc.variability;
    v.seed += static_cast<std::uint64_t>(repetition);
    reliability::SampleOptions o;
    o.steps      = 200;
    const auto s = reliability::sample_steps(
        {run.placed->topology(), run.placed->graph(), run.placed->placement(), sc.placement, sc.options, run.result}, v,
        o);
    step                        = s.mean;
    metrics["sampled_mean_s"]   = s.mean;
    metrics["sampled_p99_s"]    = s.p99;
    metrics["variability_loss"] = s.lost_share;
  }
  if (sc.reliability) {
    auto r = *sc.reliability;
    r.seed += static_cast<std::uint64_t>(repetition);
    const auto shape = reliability::run_shape(sc.job, run.placed->topology(), run.placed->placement(), r, step);
    const auto costs = reliability::costs(r, shape);
    reliability::Horizon h;
    h.days                           = r.horizon_days;
    h.trials                         = 50;
    const auto o                     = reliability::simulate_run(r, shape, costs, h);
    metrics["ettr"]                  = o.ettr;
    metrics["interruptions_per_day"] = o.interruptions / r.horizon_days;
    metrics["checkpoint_interval_s"] = costs.interval;
    metrics["goodput_tokens_per_s"]  = o.tokens / o.wall_seconds;
  }
}

// The body of a worker process: simulate one point and record it. Errors of the scenario are recorded (they
// would recur on every run); a crash records nothing, so that a re-run tries again.
void run_point(const Campaign& campaign, const Point& point, const std::string& points_directory)
{
  const auto t0 = Clock::now();
  json axes     = json::object();
  for (std::size_t k = 0; k < campaign.axes.size(); ++k)
    axes[campaign.axes[k].name] = campaign.axes[k].labels[point.steps[k]];
  json record = {{"key", point.key},      {"index", point.index}, {"repetition", point.repetition},
                 {"seed", point.seed},    {"axes", axes},         {"spansim_version", version()},
                 {"git_hash", git_hash()}};
  try {
    auto scenario = scenario::parse_scenario(point.scenario, campaign.scenario_file, campaign.scenario_json_path);
    scenario.options.engine.packet.seed = point.seed;
    const auto run                      = scenario::run_scenario(scenario);
    if (campaign.record.stages)
      record["stages"] = stage_record(run.result);
    if (campaign.record.links)
      record["links"] = link_record(run.placed->topology(), run.result.link_bytes);
    if (campaign.record.ranks)
      record["ranks"] = rank_record(run);
    record["summary"] = report::summary_json(run, {.stages = false, .over_time = false, .timeline = false});
    add_reliability_metrics(scenario, run, point.repetition, record["summary"]["metrics"]);
    if (run.diloco) {
      // step_time_s stays the inner step (the run's step); DiLoCo's own figures are what its axes move.
      auto& metrics                  = record["summary"]["metrics"];
      metrics["diloco_outer_s"]      = run.diloco->outer.seconds;
      metrics["diloco_mean_step_s"]  = run.diloco->mean_step;
      metrics["diloco_tokens_per_s"] = run.diloco->tokens_per_second;
    }
    record["status"] = "ok";
  } catch (const std::exception& e) {
    record["status"] = "error";
    record["error"]  = e.what();
  }
  record["elapsed_s"] = seconds_since(t0);
  if (!write_record((fs::path(points_directory) / (point.key + ".json")).string(), record.dump()))
    ::_exit(1);
}

class Lock {
public:
  explicit Lock(const std::string& path)
  {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw UsageError("cannot open the lock file \"" + path + "\": " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd_);
      throw UsageError("another run of this campaign is in progress (it holds \"" + path + "\")");
    }
  }
  Lock(const Lock&)            = delete;
  Lock& operator=(const Lock&) = delete;
  ~Lock() { ::close(fd_); } // closing releases the lock; so does the kernel if we are killed

private:
  int fd_ = -1;
};

// Temporary files of writers that no longer exist (a killed run) on this machine.
void remove_stale_temporaries(const std::string& directory)
{
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    auto at                = name.rfind(".tmp-");
    if (at == std::string::npos)
      continue;
    const pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + at + 5));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH)
      fs::remove(entry.path(), ec);
  }
}

} // namespace

bool write_record(const std::string& path, const std::string& text)
{
  // Created exclusively under an unpredictable name: a symlink planted at a guessable temporary is never followed.
  TemporaryFile tmp;
  try {
    tmp = create_temporary(path);
  } catch (const UsageError&) {
    return false;
  }
  bool ok = process::write_all(tmp.fd, text) && ::fsync(tmp.fd) == 0;
  ok      = ::close(tmp.fd) == 0 && ok;
  if (!ok || ::rename(tmp.name.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.name.c_str());
    return false;
  }
  return true;
}

OutputPaths output_paths(const std::string& hdf5)
{
  OutputPaths p;
  p.hdf5 = hdf5;
  fs::path h(hdf5);
  p.csv = (h.extension() == ".h5" || h.extension() == ".hdf5" ? fs::path(h).replace_extension(".csv")
                                                              : fs::path(hdf5 + ".csv"))
              .string();
  p.directory = hdf5 + ".d";
  p.points    = p.directory + "/points";
  return p;
}

std::string describe_point(const Campaign& campaign, const Point& point)
{
  std::string s;
  for (std::size_t k = 0; k < campaign.axes.size(); ++k)
    s += (s.empty() ? "" : ", ") + campaign.axes[k].name + "=" + campaign.axes[k].labels[point.steps[k]];
  if (campaign.repetitions > 1)
    s += (s.empty() ? "" : ", ") + std::string("repetition=") + std::to_string(point.repetition);
  return s;
}

ResultMap load_results(const std::vector<Point>& points, const std::string& points_directory)
{
  ResultMap results;
  for (const auto& p : points) {
    const fs::path file = fs::path(points_directory) / (p.key + ".json");
    std::ifstream in(file);
    if (!in)
      continue;
    try {
      json record = json::parse(in);
      if (usable_record(record, p.key))
        results[p.key] = std::move(record);
    } catch (const json::exception&) {
      // Records are renamed into place whole, so this is a file someone else put there: run the point again.
    }
  }
  return results;
}

RunReport run_campaign(const Campaign& campaign, const RunOptions& options)
{
  if (options.shards < 1 || options.shard < 0 || options.shard >= options.shards)
    throw UsageError("shard " + std::to_string(options.shard) + " of " + std::to_string(options.shards) +
                     ": expected 0 <= shard < shards");
  const auto t0     = Clock::now();
  const auto points = expand(campaign);
  const auto paths  = output_paths(options.output.empty() ? campaign.output : options.output);
  std::error_code ec;
  fs::create_directories(paths.points, ec);
  if (ec)
    throw UsageError("cannot create \"" + paths.points + "\": " + ec.message());
  const bool sharded = options.shards > 1 && !options.merge_only;
  Lock lock(paths.directory + (sharded ? "/lock-shard-" + std::to_string(options.shard) : "/lock"));
  remove_stale_temporaries(paths.points);
  remove_stale_temporaries(fs::path(paths.hdf5).parent_path().empty() ? "."
                                                                      : fs::path(paths.hdf5).parent_path().string());

  RunReport report;
  report.points           = static_cast<int>(points.size());
  report.points_directory = paths.points;
  std::vector<Point> mine;
  for (const auto& p : points)
    if (options.merge_only || p.index % options.shards == options.shard)
      mine.push_back(p);
  report.shard_points = static_cast<int>(mine.size());

  ResultMap results = load_results(mine, paths.points);
  report.found      = static_cast<int>(results.size());
  std::vector<const Point*> pending;
  if (!options.merge_only)
    for (const auto& p : mine)
      if (!results.count(p.key))
        pending.push_back(&p);

  if (sharded) {
    report.hdf5 = paths.directory + "/shards/shard-" + std::to_string(options.shard) + ".h5";
  } else {
    report.hdf5 = paths.hdf5;
    report.csv  = paths.csv;
  }
  auto write_outputs = [&] {
    write_results_hdf5(campaign, mine, results, report.hdf5);
    if (!report.csv.empty())
      write_results_csv(campaign, mine, results, report.csv);
  };

  Progress progress;
  progress.total = static_cast<int>(mine.size());
  progress.found = report.found;
  auto count     = [&] {
    progress.done   = static_cast<int>(results.size());
    progress.failed = 0;
    for (const auto& [key, r] : results)
      progress.failed += r.value("status", "") != "ok";
    progress.elapsed_s = seconds_since(t0);
    if (options.on_progress)
      options.on_progress(progress);
  };
  count();

  const int jobs = options.jobs > 0 ? options.jobs : process::available_cores();
  std::map<pid_t, const Point*> workers;
  std::map<std::string, std::string> crashes;
  std::size_t next = 0;
  auto last_flush  = Clock::now();
  bool unflushed   = false;
  try {
    while (next < pending.size() || !workers.empty()) {
      while (next < pending.size() && static_cast<int>(workers.size()) < jobs) {
        const Point* p = pending[next++];
        // A worker outliving a killed run would race the re-run for the same point: it dies with its parent.
        const pid_t pid = process::start_worker([&] { run_point(campaign, *p, paths.points); }, true);
        workers[pid]    = p;
      }
      progress.running = static_cast<int>(workers.size());
      int status       = 0;
      pid_t pid        = ::waitpid(-1, &status, 0);
      if (pid < 0) {
        if (errno == EINTR)
          continue;
        throw SimulationError(std::string("waiting for campaign workers: ") + std::strerror(errno));
      }
      auto it = workers.find(pid);
      if (it == workers.end())
        continue;
      const Point* p = it->second;
      workers.erase(it);
      progress.running = static_cast<int>(workers.size());
      auto loaded      = load_results({*p}, paths.points);
      if (loaded.empty()) {
        crashes[p->key] = "point " + std::to_string(p->index) + " (" + describe_point(campaign, *p) + "): worker " +
                          (WIFSIGNALED(status) ? "died with signal " + std::to_string(WTERMSIG(status))
                                               : "ended with status " + std::to_string(WEXITSTATUS(status))) +
                          " without a result";
      } else {
        results[p->key] = std::move(loaded.begin()->second);
        ++report.ran;
        unflushed = true;
      }
      count();
      if (unflushed && seconds_since(last_flush) >= options.flush_every_s) {
        write_outputs();
        last_flush = Clock::now();
        unflushed  = false;
      }
    }
  } catch (...) {
    for (const auto& [pid, p] : workers) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    throw;
  }
  write_outputs();

  for (const auto& p : mine) {
    auto it = results.find(p.key);
    if (it == results.end()) {
      ++report.missing;
      report.missing_points.push_back(p.index);
    } else if (it->second.value("status", "") != "ok") {
      ++report.failed;
      report.errors.push_back("point " + std::to_string(p.index) + " (" + describe_point(campaign, p) +
                              "): " + it->second.value("error", ""));
    }
  }
  for (const auto& [key, what] : crashes)
    report.errors.push_back(what);
  report.elapsed_s = seconds_since(t0);
  return report;
}

} // namespace spansim::experiments
