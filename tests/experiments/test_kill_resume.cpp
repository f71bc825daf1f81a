// A real `spansim campaign run` SIGKILLed several times mid-run: after every kill the HDF5 file opens and holds
// only complete points; the re-runs finish the campaign with every point exactly once and results identical to
// an uninterrupted run. Then h5py and pandas read the file.
#include "experiments/results.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using spansim::experiments::read_results_hdf5;
using spansim::experiments::ResultTable;
namespace fs = std::filesystem;

namespace {

const std::string kCampaign = std::string(SPANSIM_SOURCE_DIR) + "/tests/experiments/data/tiny-campaign.json";

pid_t start_run(const std::string& out, const std::string& jobs)
{
  // Otherwise the child's freopen would flush what this process has buffered a second time.
  std::cout.flush();
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    ::execl(SPANSIM_BINARY, SPANSIM_BINARY, "campaign", "run", kCampaign.c_str(), "--out", out.c_str(), "--jobs",
            jobs.c_str(), "--flush-every", "0", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid)
{
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int records(const std::string& dir)
{
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    n += e.path().extension() == ".json";
  return n;
}

std::string scratch()
{
  auto dir = fs::temp_directory_path() / ("spansim-kill-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

} // namespace

TEST_CASE("a campaign run killed with SIGKILL resumes, loses no point and matches an uninterrupted run", "[kill]")
{
  const std::string dir  = scratch();
  const std::string full = dir + "/full.h5", killed = dir + "/killed.h5";
  REQUIRE(wait_exit(start_run(full, "2")) == 0);
  const ResultTable reference = read_results_hdf5(full);
  std::cout << "uninterrupted run: expected 12 rows, actual " << reference.rows << "\n";
  REQUIRE(reference.rows == 12);

  const std::string points = killed + ".d/points";
  int kills = 0, rounds = 0;
  for (; rounds < 12; ++rounds) {
    const int before = records(points);
    if (before >= 12)
      break;
    pid_t pid = start_run(killed, "1");
    // Kill as soon as `step` more points are recorded (1 or 2, so the kill lands at varying moments: sometimes while
    // the HDF5 file is being rewritten). Only the record count decides, so the test behaves alike on fast and slow
    // machines; the timeout only keeps a broken run from hanging the test.
    const int step     = 1 + rounds % 2;
    const auto t0      = std::chrono::steady_clock::now();
    const auto give_up = std::chrono::seconds(120);
    bool exited        = false;
    bool timed_out     = false;
    int status         = 0;
    while (!exited && records(points) < before + step) {
      if (std::chrono::steady_clock::now() - t0 > give_up) {
        timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      exited = ::waitpid(pid, &status, WNOHANG) == pid;
    }
    if (!exited) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ++kills;
    }
    if (timed_out)
      FAIL("round " << rounds << ": expected " << before + step << " point records within " << give_up.count()
                    << " s, actual " << records(points) << "; the run was stuck");
    const int after = records(points);
    std::cout << "round " << rounds << ": " << before << " -> " << after << " point records"
              << (exited ? " (run ended by itself)" : " (SIGKILLed)") << "\n";
    if (fs::exists(killed)) {
      ResultTable t;
      REQUIRE_NOTHROW(t = read_results_hdf5(killed));
      std::set<double> seen(t.numbers["index"].begin(), t.numbers["index"].end());
      INFO("after round " << rounds << ": " << t.rows << " rows, " << seen.size() << " distinct, " << after
                          << " records on disk");
      CHECK(seen.size() == t.rows);
      CHECK(static_cast<int>(t.rows) <= after);
      for (std::size_t r = 0; r < t.rows; ++r) {
        CHECK(t.texts["status"][r] == "ok");
        CHECK(t.numbers["step_time_s"][r] > 0);
        CHECK(fs::exists(points + "/" + t.texts["key"][r] + ".json"));
      }
    }
  }
  // With 12 points and a kill every one or two new records, only the last round or two can end by themselves.
  std::cout << "SIGKILLs of a running campaign: expected at least 2, actual " << kills << "\n";
  CHECK(kills >= 2);
  // The last run completes whatever is left (or finds everything done) and exits 0.
  REQUIRE(wait_exit(start_run(killed, "2")) == 0);
  ResultTable t = read_results_hdf5(killed);
  std::cout << "resumed run: expected 12 rows, actual " << t.rows << "\n";
  REQUIRE(t.rows == 12);
  for (std::size_t r = 0; r < 12; ++r)
    CHECK(t.numbers["index"][r] == static_cast<double>(r));
  for (const auto& [name, column] : reference.numbers) {
    if (name == "elapsed_s")
      continue;
    INFO("column " << name);
    for (std::size_t r = 0; r < 12; ++r) {
      const double a = column[r], b = t.numbers[name][r];
      INFO("row " << r << ": uninterrupted " << a << ", resumed " << b);
      CHECK(((std::isnan(a) && std::isnan(b)) || a == b));
    }
  }
  for (const auto& [name, column] : reference.texts) {
    INFO("column " << name);
    CHECK(column == t.texts[name]);
  }
  const std::string csv = dir + "/killed.csv";
  CHECK(fs::exists(csv));
  fs::remove_all(dir);
}

TEST_CASE("h5py and pandas read a campaign result", "[kill]")
{
  const std::string dir = scratch() + "-py";
  fs::create_directories(dir);
  const std::string out = dir + "/r.h5";
  REQUIRE(wait_exit(start_run(out, "2")) == 0);
  const ResultTable t = read_results_hdf5(out);
  const std::string cmd =
      "/usr/bin/python3 " + std::string(SPANSIM_SOURCE_DIR) + "/tests/experiments/read_with_pandas.py " + out + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string text;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p))
    text += buf;
  const int rc = ::pclose(p);
  std::cout << "read_with_pandas.py (exit " << rc << "):\n" << text;
  REQUIRE(rc == 0);
  // The script prints "rows N", "columns C", the step time sum with 17 digits and the ranks of the 32-GPU job
  // (after checking that every rank has its own GPU and its stage's breakdown).
  double sum = 0;
  for (double s : t.numbers.at("step_time_s"))
    sum += s;
  char expected[128];
  std::snprintf(expected, sizeof expected, "rows %zu\ncolumns %zu\nstep_time_sum %.17g\nranks per point 32\n", t.rows,
                t.numbers.size() + t.texts.size(), sum);
  std::cout << "expected:\n" << expected;
  CHECK(text.find(expected) != std::string::npos);
  fs::remove_all(dir);
}

namespace {

struct Output {
  int status = -1;
  std::string text;
};

Output run_shell(const std::string& command)
{
  std::cout.flush();
  FILE* p = ::popen(command.c_str(), "r");
  Output o;
  if (!p)
    return o;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p))
    o.text += buf;
  int rc   = ::pclose(p);
  o.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
  return o;
}

} // namespace

TEST_CASE("campaign command errors: one stderr line naming file and JSON path, exit code 2", "[cli]")
{
  const std::string dir = scratch() + "-cli";
  fs::create_directories(dir);
  const std::string bad = dir + "/bad.json";
  {
    std::FILE* f = std::fopen(bad.c_str(), "w");
    std::fputs("{\"name\": \"bad\", \"scenario\": \"examples/scenarios/llama3-405b-two-buildings.json\", \"axes\": "
               "[{\"path\": \"topology.inter_building.bandwidth\", \"values\": [\"1Tbps\"], \"step\": 2}]}\n",
               f);
    std::fclose(f);
  }
  auto o = run_shell(std::string(SPANSIM_BINARY) + " campaign run " + bad + " 2>&1 >/dev/null");
  std::cout << "exit " << o.status << " (expected 2), stderr: " << o.text;
  CHECK(o.status == 2);
  CHECK(o.text.find(bad + ": at $.axes[0]: unknown key \"step\"") != std::string::npos);
  CHECK(std::count(o.text.begin(), o.text.end(), '\n') == 1);
  auto shard = run_shell(std::string(SPANSIM_BINARY) + " campaign run " + kCampaign + " --shard 3/3 2>&1 >/dev/null");
  std::cout << "exit " << shard.status << " (expected 2), stderr: " << shard.text;
  CHECK(shard.status == 2);
  CHECK(shard.text.find("expected 0 <= shard < shards") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("campaign plot draws step time and breakdown as PNG and SVG", "[cli]")
{
  const std::string dir = scratch() + "-plot";
  fs::create_directories(dir);
  REQUIRE(wait_exit(start_run(dir + "/r.h5", "2")) == 0);
  auto o = run_shell(std::string(SPANSIM_BINARY) + " campaign plot " + dir + "/r.h5 --out " + dir + "/fig --json");
  std::cout << "exit " << o.status << ":\n" << o.text;
  REQUIRE(o.status == 0);
  auto j = nlohmann::json::parse(o.text);
  CHECK(j["x"] == "inter_region_bandwidth");
  CHECK(j["series"] == "policy");
  REQUIRE(j["figures"].size() == 4);
  for (const auto& f : j["figures"]) {
    const std::string path = f.get<std::string>();
    std::FILE* in          = std::fopen(path.c_str(), "rb");
    REQUIRE(in != nullptr);
    char head[8] = {};
    std::fread(head, 1, sizeof head, in);
    std::fclose(in);
    const bool png = path.ends_with(".png");
    INFO(path << ": " << fs::file_size(path) << " bytes");
    CHECK(fs::file_size(path) > 5000);
    CHECK((png ? std::string(head + 1, 3) == "PNG" : std::string(head, 5) == "<?xml"));
  }
  fs::remove_all(dir);
}

TEST_CASE("campaign plot refuses a missing or non-campaign file in one line, exit 2", "[cli]")
{
  const std::string dir = scratch() + "-plot-bad";
  fs::create_directories(dir);
  const std::string text_file = dir + "/notes.txt";
  std::ofstream(text_file) << "not HDF5\n";
  for (const std::string& file : {dir + "/missing.h5", text_file}) {
    auto o = run_shell(std::string(SPANSIM_BINARY) + " campaign plot " + file + " 2>&1 >/dev/null");
    std::cout << file << ": exit " << o.status << " (expected 2), stderr: " << o.text;
    CHECK(o.status == 2);
    CHECK(o.text.find(file) != std::string::npos);
    CHECK(o.text.find("Traceback") == std::string::npos);
    CHECK(std::count(o.text.begin(), o.text.end(), '\n') == 1);
  }
  fs::remove_all(dir);
}

TEST_CASE("campaign plot names an axis with an empty name by its path, as the result file does", "[cli]")
{
  const std::string dir = scratch() + "-plot-name";
  fs::create_directories(dir);
  auto doc                = nlohmann::json::parse(std::ifstream(kCampaign));
  doc["axes"][1]["name"]  = "";
  doc["axes"][0]["range"] = {{"from", 5}, {"to", 10}, {"step", 5}, {"unit", "GBps"}};
  const std::string file  = dir + "/c.json";
  std::ofstream(file) << doc.dump();
  auto run = run_shell(std::string(SPANSIM_BINARY) + " campaign run " + file + " --out " + dir + "/r.h5 2>&1");
  std::cout << "run: exit " << run.status << " (expected 0)\n" << run.text;
  REQUIRE(run.status == 0);
  auto o = run_shell(std::string(SPANSIM_BINARY) + " campaign plot " + dir + "/r.h5 --out " + dir + "/fig --json 2>&1");
  std::cout << "plot: exit " << o.status << " (expected 0)\n" << o.text;
  REQUIRE(o.status == 0);
  auto j = nlohmann::json::parse(o.text);
  std::cout << "series: expected \"placement.order\", actual " << j["series"] << "\n";
  CHECK(j["series"] == "placement.order");
  fs::remove_all(dir);
}

TEST_CASE("campaign merge fails naming the points no shard recorded", "[cli]")
{
  const std::string dir = scratch() + "-merge";
  fs::create_directories(dir);
  const std::string out = dir + "/r.h5";
  auto shard            = run_shell(std::string(SPANSIM_BINARY) + " campaign run " + kCampaign + " --out " + out +
                                    " --shard 0/3 --jobs 2 2>&1");
  std::cout << "shard 0/3: exit " << shard.status << " (expected 0)\n" << shard.text;
  REQUIRE(shard.status == 0);
  auto merge =
      run_shell(std::string(SPANSIM_BINARY) + " campaign merge " + kCampaign + " --out " + out + " 2>&1 >/dev/null");
  std::cout << "merge: exit " << merge.status << " (expected non-zero), stderr: " << merge.text;
  CHECK(merge.status != 0);
  const std::string expected = "8 of 12 points have no result (points 1, 2, 4, 5, 7, 8, 10, 11;";
  std::cout << "expected in stderr: " << expected << "\n";
  CHECK(merge.text.find(expected) != std::string::npos);
  fs::remove_all(dir);
}
