// Tiers 2 and 3 of a search as Slurm job arrays (experiments/optimize_farm.hpp).
#include "experiments/optimize_farm.hpp"

#include "common/error.hpp"
#include "common/process.hpp"
#include "common/version.hpp"
#include "experiments/runner.hpp"
#include "experiments/slurm_phase.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/wait.h>
#include <thread>

namespace spansim::experiments {

namespace fs = std::filesystem;
using nlohmann::json;
using optimizer::Work;

namespace {

constexpr const char* kHeader = "# spansim optimize work list: ";

// FNV-1a, 64 bits: a record's name from the work and the point (content-addressed, so a resumed search or a later
// phase asking for the same point finds it).
std::string key_of(Work work, const std::string& line)
{
  std::uint64_t h = 14695981039346656037ull;
  for (char c : std::string(name_of(work)) + ":" + line) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string(name_of(work)) + "-" + hex;
}

std::string record_path(const std::string& records, Work work, const std::string& line)
{
  return records + "/" + key_of(work, line) + ".rec";
}

// A record's identity, its first line: the search's fingerprint (spec, topology, build) and the point's line. A
// record of another search or of another point (a file swapped or copied in) does not answer.
std::string identity(const std::string& fingerprint, const std::string& line)
{
  return fingerprint + " " + line;
}

// A record: its identity, a newline, then the worker's bytes.
std::optional<std::string> read_record(const std::string& path, const std::string& fingerprint, const std::string& line)
{
  return read_tagged(path, identity(fingerprint, line));
}

void write_point_record(const std::string& path, const std::string& fingerprint, const std::string& line,
                        const std::string& bytes)
{
  write_tagged(path, identity(fingerprint, line), bytes);
}

// What a search's records answer for: its spec (model, GPU, topology, search space, fidelities) and this build.
std::string search_fingerprint(const optimizer::OptimizeSpec& spec)
{
  const std::string text =
      spec.to_json().dump() + "\n" + spec.topology.to_json().dump() + "\n" + provenance()["git_hash"].dump();
  std::uint64_t h = 14695981039346656037ull;
  for (char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return std::to_string(h);
}

constexpr const char* kFingerprintTag = "spansim optimize fingerprint";

// The fingerprint a records folder's search wrote beside it (records/../fingerprint).
std::string recorded_fingerprint(const std::string& records)
{
  const auto path = (fs::path(records).parent_path() / "fingerprint").string();
  const auto fp   = read_tagged(path, kFingerprintTag);
  if (!fp)
    throw UsageError("\"" + path + "\" is missing or not a search's fingerprint: the records beside it cannot be read");
  return *fp;
}

struct WorkList {
  Work work = Work::score;
  std::vector<std::string> lines;
};

WorkList read_work_list(const std::string& path)
{
  std::ifstream f(path);
  if (!f)
    throw UsageError("cannot read the work list \"" + path + "\"");
  WorkList w;
  std::string line;
  std::getline(f, line);
  const std::string header(kHeader);
  if (line.rfind(header, 0) != 0)
    throw UsageError("\"" + path + "\" line 1: not a spansim work list (expected \"" + header + "score|refine\")");
  const std::string work = line.substr(header.size());
  if (work == "score")
    w.work = Work::score;
  else if (work == "refine")
    w.work = Work::refine;
  else
    throw UsageError("\"" + path + "\" line 1: unknown work \"" + work + "\" (allowed: score, refine)");
  while (std::getline(f, line))
    if (!line.empty())
      w.lines.push_back(line);
  return w;
}

std::string records_of(const std::string& work_list)
{
  return (fs::path(work_list).parent_path().parent_path() / "records").string();
}

double seconds_since(std::chrono::steady_clock::time_point t)
{
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

} // namespace

json FarmPhase::to_json() const
{
  auto j     = PhaseReport::to_json();
  j["phase"] = name;
  j["work"]  = name_of(work);
  return j;
}

SlurmFarm::SlurmFarm(const optimizer::OptimizeSpec& spec, FarmOptions options)
    : spec_(spec), options_(std::move(options))
{
  options_.directory = fs::absolute(options_.directory).string();
  options_.spec_file = fs::absolute(options_.spec_file).string();
  records_           = options_.directory + "/slurm/records";
  if (options_.task_seconds <= 0)
    throw UsageError("--task-time must be positive");
  if (options_.max_tasks < 1)
    throw UsageError("--max-tasks must be at least 1");
  std::error_code ec;
  fs::create_directories(records_, ec);
  if (ec)
    throw UsageError("cannot create \"" + records_ + "\": " + ec.message());
  // Records are named by the point alone: they answer for this search only if its spec (model, GPU, topology,
  // search space, fidelities) and this build are the same. Another search in the same --out is refused, never
  // answered from the earlier one's records.
  fingerprint_           = search_fingerprint(spec_);
  const std::string path = options_.directory + "/slurm/fingerprint";
  if (auto old = read_tagged(path, kFingerprintTag)) {
    if (*old != fingerprint_)
      throw UsageError("\"" + options_.directory +
                       "/slurm\" holds the records of another search (its spec, topology or spansim build differ): "
                       "give another --out or remove that folder");
  } else {
    write_tagged(path, kFingerprintTag, fingerprint_);
  }
}

std::vector<std::string> SlurmFarm::operator()(Work work, const std::vector<optimizer::Point>& points)
{
  FarmPhase phase;
  phase.work            = work;
  phase.name            = "phase-" + std::to_string(phases_.size() + 1) + "-" + std::string(name_of(work));
  const std::string dir = options_.directory + "/slurm/" + phase.name;
  std::vector<std::string> lines;
  for (const auto& p : points)
    lines.push_back(optimizer::encode_point(spec_, p));
  std::map<std::string, std::string> recorded; // line -> record
  auto missing = [&] {
    std::vector<std::string> out;
    for (const auto& line : lines)
      if (!recorded.count(line)) {
        if (auto r = read_record(record_path(records_, work, line), fingerprint_, line))
          recorded[line] = *r;
        else if (std::find(out.begin(), out.end(), line) == out.end())
          out.push_back(line);
      }
    return out;
  };
  auto todo = missing();
  for (const auto& line : lines)
    phase.found += recorded.count(line);
  phase.items = phase.found + todo.size();

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw UsageError("cannot create \"" + dir + "\": " + ec.message());
  auto count = [&] {
    std::size_t n = 0;
    for (const auto& line : lines)
      n += fs::exists(record_path(records_, work, line));
    return n;
  };
  // A run killed while its array ran: wait for that array (its tasks still record) before sending the rest again.
  if (!todo.empty()) {
    phase.add(wait_for_earlier(dir, options_.slurm, count, lines.size(), options_.progress));
    todo = missing();
  }
  // The time of one point sizes the chunks to the stated time per task: the rate an earlier phase of this search
  // measured for the same work (its points cost alike); else one point timed here, before the array for scoring
  // (seconds), beside it for re-simulation (minutes at scale: timed first, it would sit on the phase's critical
  // path), the array then taking one point per task up to --max-tasks.
  const FarmPhase* earlier = nullptr;
  for (const auto& p : phases_)
    if (p.work == work && p.measured > 0)
      earlier = &p;
  auto evaluate_here = [&](const std::string& line) {
    const topology::Topology topo(spec_.topology);
    const auto point = optimizer::decode_point(spec_, line);
    return optimizer::evaluate_point(spec_, topo, work, point);
  };
  const std::string beside_seconds = dir + "/beside.seconds", beside_error = dir + "/beside.error";
  std::string beside_line;
  // The worker beside the array, reaped here; killed and reaped if the phase throws (sbatch refused, say).
  struct Beside {
    pid_t pid = 0;
    int wait()
    {
      int status = 0;
      while (pid > 0 && ::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      pid = 0;
      return status;
    }
    ~Beside()
    {
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        wait();
      }
    }
  } beside;
  if (!todo.empty() && earlier) {
    phase.item_seconds = earlier->item_seconds;
    phase.sized_by     = earlier->name;
  } else if (!todo.empty() && work == Work::score) {
    const auto t0     = std::chrono::steady_clock::now();
    const auto record = process::run_in_child([&] { return evaluate_here(todo.front()); });
    write_point_record(record_path(records_, work, todo.front()), fingerprint_, todo.front(), record);
    recorded[todo.front()] = record;
    phase.measured         = 1;
    phase.item_seconds     = seconds_since(t0);
    phase.sized_by         = "here";
    todo.erase(todo.begin());
  } else if (!todo.empty() && !options_.slurm.submit) {
    phase.item_seconds = options_.task_seconds; // a dry run measures nothing: one point per task
    phase.sized_by     = "unmeasured";
  } else if (!todo.empty()) {
    beside_line = todo.front();
    todo.erase(todo.begin());
    fs::remove(beside_seconds, ec);
    fs::remove(beside_error, ec);
    beside.pid = process::start_worker(
        [&] {
          const auto t0 = std::chrono::steady_clock::now();
          try {
            write_point_record(record_path(records_, work, beside_line), fingerprint_, beside_line,
                               evaluate_here(beside_line));
          } catch (const std::exception& e) {
            write_record(beside_error, encode_error(e));
            throw;
          }
          write_record(beside_seconds, std::to_string(seconds_since(t0)) + "\n");
        },
        true);
    phase.measured     = 1;
    phase.item_seconds = options_.task_seconds; // unknown yet: one point per task
    phase.sized_by     = "beside";
  }
  if (!todo.empty()) {
    const std::string work_list = dir + "/work.txt";
    {
      std::string text = std::string(kHeader) + std::string(name_of(work)) + "\n";
      for (const auto& line : todo)
        text += line + "\n";
      if (!write_record(work_list, text))
        throw UsageError("cannot write \"" + work_list + "\"");
    }
    const std::string spansim = shell_quote(spansim_binary(options_.slurm));
    const std::string command = spansim + " optimize " + shell_quote(options_.spec_file);
    PhaseJob job;
    job.directory    = dir;
    job.name         = "spansim-" + spec_.name + "-" + phase.name;
    job.generator    = "spansim optimize --slurm: " + std::string(name_of(work)) + " the work list's points";
    job.items        = todo.size();
    job.item_seconds = phase.item_seconds;
    job.task_seconds = options_.task_seconds;
    job.max_tasks    = options_.max_tasks;
    job.task_command = [&](int tasks) {
      return command + " --slurm-task " + shell_quote(work_list) + " --task \"${SLURM_ARRAY_TASK_ID}/" +
             std::to_string(tasks) + "\" --workers " + std::to_string(options_.slurm.cpus_per_task);
    };
    job.merge_command = command + " --slurm-merge " + shell_quote(work_list);
    job.recorded      = count;
    job.progress      = options_.progress;
    const auto run    = run_phase(job, options_.slurm);
    phase.add(run);
    if (!options_.slurm.submit)
      throw FarmDryRun{phase, run.scripts};
  }
  if (beside.pid > 0) {
    // The point beside the array: its record and time, or its error as the worker threw it.
    const int status = beside.wait();
    double seconds   = 0;
    std::ifstream timed(beside_seconds);
    if (timed >> seconds)
      phase.item_seconds = seconds;
    if (!read_record(record_path(records_, work, beside_line), fingerprint_, beside_line)) {
      std::ifstream thrown(beside_error, std::ios::binary);
      std::ostringstream encoded;
      encoded << thrown.rdbuf();
      if (thrown && !encoded.str().empty())
        rethrow_error(encoded.str(), "the point evaluated beside " + phase.name + "'s array: ");
      throw SimulationError("the point evaluated beside " + phase.name + "'s array ended with status " +
                            std::to_string(process::exit_code(status)) +
                            " and no record (killed, or out of memory?); run the search again to resume it");
    }
  }
  todo = missing();
  if (!todo.empty())
    throw SimulationError(std::to_string(todo.size()) + " of " + std::to_string(phase.items) + " points of " +
                          phase.name + " have no record after array job " + phase.array_job + " (see " + dir +
                          "/task-*.log and merge.log); run the search again to resume it");
  phases_.push_back(phase);
  std::vector<std::string> out;
  for (const auto& line : lines)
    out.push_back(recorded.at(line));
  return out;
}

std::size_t run_farm_task(const optimizer::OptimizeSpec& spec, const std::string& work_list, int task, int tasks,
                          int jobs)
{
  const auto list = read_work_list(work_list);
  if (tasks < 1 || task < 0 || task >= tasks)
    throw UsageError("--task " + std::to_string(task) + "/" + std::to_string(tasks) + ": allowed K/N with 0 <= K < N");
  // The coordinator checked the folder's fingerprint against its search; the task tags with what it wrote.
  const std::string records     = records_of(work_list);
  const std::string fingerprint = recorded_fingerprint(records);
  const std::size_t per         = (list.lines.size() + tasks - 1) / tasks;
  std::vector<std::string> mine;
  for (std::size_t i = per * task; i < std::min(list.lines.size(), per * (task + 1)); ++i)
    if (!read_record(record_path(records, list.work, list.lines[i]), fingerprint, list.lines[i]))
      mine.push_back(list.lines[i]);
  const topology::Topology topo(spec.topology);
  // Each record is written as its point finishes: a task killed mid-way keeps what it did.
  process::parallel_map(
      mine.size(), jobs,
      [&](std::size_t i) {
        const auto point = optimizer::decode_point(spec, mine[i]);
        return mine[i] + "\n" + optimizer::evaluate_point(spec, topo, list.work, point);
      },
      [&](std::size_t, const std::string& out) {
        const auto eol = out.find('\n');
        write_point_record(record_path(records, list.work, out.substr(0, eol)), fingerprint, out.substr(0, eol),
                           out.substr(eol + 1));
      },
      [&] {
        // A point whose worker dies is recorded as failed (its line with the failed outcome), as a local search does.
        auto o          = optimizer::worker_options(spec, jobs);
        const auto lost = o.on_lost;
        o.on_lost       = [&, lost](std::size_t i, const std::string& why) { return mine[i] + "\n" + lost(i, why); };
        return o;
      }());
  return mine.size();
}

json merge_farm_phase(const std::string& work_list)
{
  const auto list               = read_work_list(work_list);
  const std::string records     = records_of(work_list);
  const std::string fingerprint = recorded_fingerprint(records);
  std::size_t recorded          = 0;
  for (const auto& line : list.lines)
    recorded += read_record(record_path(records, list.work, line), fingerprint, line).has_value();
  json j = {{"points", list.lines.size()}, {"recorded", recorded}, {"missing", list.lines.size() - recorded}};
  const std::string path = (fs::path(work_list).parent_path() / "merged.json").string();
  if (!write_record(path, j.dump(2) + "\n"))
    throw UsageError("cannot write \"" + path + "\"");
  return j;
}

} // namespace spansim::experiments
