// Campaign files against hand-counted expansions, their errors, the HDF5 table read back, and a small campaign
// run in worker processes against the same scenarios run directly.
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/version.hpp"
#include "experiments/campaign.hpp"
#include "experiments/results.hpp"
#include "experiments/runner.hpp"
#include "report/report.hpp"
#include "scenario/scenario.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sys/file.h>
#include <unistd.h>

using namespace spansim;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kTinyCampaign = std::string(SPANSIM_SOURCE_DIR) + "/tests/experiments/data/tiny-campaign.json";

json base_campaign()
{
  return spec::load_json_file(kTinyCampaign);
}

std::string scratch(const std::string& name)
{
  auto dir = fs::temp_directory_path() / ("spansim-test-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void expect_error(const json& campaign, const std::string& needle)
{
  std::string message;
  try {
    auto c = experiments::parse_campaign(campaign, kTinyCampaign);
    experiments::expand(c);
  } catch (const SpecError& e) {
    message = e.what();
  }
  std::cout << "expected an error containing \"" << needle << "\", got: \"" << message << "\"\n";
  INFO("expected an error containing \"" << needle << "\", got: \"" << message << "\"");
  CHECK(message.find(needle) != std::string::npos);
}

// The record of a finished point as a worker writes it (with made-up numbers).
json ok_record(const std::string& key)
{
  json summary = {{"spansim", {{"version", "0.1.0"}, {"git_hash", "abc"}}},
                  {"configuration", {{"fidelity", "flow"}}},
                  {"metrics",
                   {{"step_time_s", 0.25},
                    {"tokens_per_s", 1e6},
                    {"tflops_per_gpu", 100.0},
                    {"mfu", 0.1},
                    {"model_flops_per_step", 1e15},
                    {"flow_graph_ops", 10},
                    {"transfers", 5}}},
                  {"breakdown", {{"over_stages", json::object()}}},
                  {"network",
                   {{"tiers", {{{"tier", "inter_region"}, {"bytes", 4096.0}, {"mean_utilisation", 0.5}}}},
                    {"boundaries", json::array()}}}};
  for (const char* part : {"compute", "exposed_tp", "exposed_cp", "exposed_pp", "exposed_dp", "exposed_ep", "bubble",
                           "idle", "exposed_total"})
    summary["breakdown"]["over_stages"][std::string(part) + "_s"] = {{"mean", 0.01}, {"max", 0.02}};
  return {{"key", key},
          {"git_hash", spansim::git_hash()},
          {"status", "ok"},
          {"summary", summary},
          {"elapsed_s", 0.5},
          {"stages",
           {{{"stage", 0},
             {"compute_s", 0.1},
             {"exposed_tp_s", 0},
             {"exposed_cp_s", 0},
             {"exposed_pp_s", 0},
             {"exposed_dp_s", 0},
             {"exposed_ep_s", 0},
             {"bubble_s", 0.1},
             {"idle_s", 0.05}}}},
          {"links", {{"name", {"a -- b"}}, {"tier", {"nic"}}, {"capacity_Bps", {1e9}}, {"bytes", {1.0, 2.0}}}}};
}

} // namespace

TEST_CASE("a Cartesian campaign expands first axis outermost, repetitions innermost, with stable keys", "[campaign]")
{
  json doc           = base_campaign();
  doc["repetitions"] = 2;
  doc["seed"]        = 7;
  auto c             = experiments::parse_campaign(doc, kTinyCampaign);
  auto points        = experiments::expand(c);
  // 6 bandwidths (5..30 GBps step 5) x 2 policies x 2 repetitions.
  std::cout << "points: expected 24, actual " << points.size() << "\n";
  REQUIRE(points.size() == 24);
  REQUIRE(c.axes[0].numeric);
  CHECK(c.axes[0].numbers == std::vector<double>{5, 10, 15, 20, 25, 30});
  CHECK(c.axes[1].labels == std::vector<std::string>{"dp-across", "pp-across"});
  const auto& p = points[7]; // 7 = ((1 * 2) + 1) * 2 + 1: bandwidth step 1, policy step 1, repetition 1
  CHECK(p.steps == std::vector<std::size_t>{1, 1});
  CHECK(p.repetition == 1);
  CHECK(p.seed == 8u);
  CHECK(p.scenario["topology"]["inter_region"]["bandwidth"] == "10GBps");
  CHECK(p.scenario["placement"]["order"] == json({"tp", "cp", "dp", "pp"}));
  // The topology path was replaced by the file's JSON so that its fields can be swept; the rest is kept.
  CHECK(p.scenario["topology"]["name"] == "tiny");
  CHECK(p.scenario["topology"]["inter_region"]["distance"] == "100km");
  std::set<std::string> keys;
  for (const auto& q : points)
    keys.insert(q.key);
  CHECK(keys.size() == points.size());
  auto again = experiments::expand(experiments::parse_campaign(doc, kTinyCampaign));
  for (std::size_t k = 0; k < points.size(); ++k)
    CHECK(again[k].key == points[k].key);
}

TEST_CASE("zipped fields step together and ranges are inclusive (linear or log, with units)", "[campaign]")
{
  json doc    = base_campaign();
  doc["axes"] = json::array({
      {{"name", "link"},
       {"zip",
        {{{"path", "topology.inter_region.bandwidth"}, {"values", {"10GBps", "40GBps"}}},
         {{"path", "/topology/inter_region/distance"}, {"values", {"10km", "4000km"}}}}},
       {"labels", {"short", "long"}}},
      {{"name", "buildings"},
       {"path", "topology.regions.0.buildings"},
       {"range", {{"from", 1}, {"to", 1000}, {"count", 4}, {"scale", "log"}}}},
  });
  auto c      = experiments::parse_campaign(doc, kTinyCampaign);
  CHECK(c.axes[0].size() == 2);
  CHECK_FALSE(c.axes[0].numeric);
  CHECK(c.axes[1].numbers == std::vector<double>{1, 10, 100, 1000});
  // Only the numbers are checked there; a sequence-length axis is expanded instead.
  doc["axes"][1] = {{"name", "seq"},
                    {"path", "job.batch.sequence_length"},
                    {"range", {{"from", 512}, {"to", 2048}, {"step", 2}, {"scale", "log"}}}};
  c              = experiments::parse_campaign(doc, kTinyCampaign);
  auto points    = experiments::expand(c);
  REQUIRE(points.size() == 6);
  CHECK(c.axes[1].numbers == std::vector<double>{512, 1024, 2048});
  CHECK(points[3].scenario["topology"]["inter_region"]["bandwidth"] == "40GBps");
  CHECK(points[3].scenario["topology"]["inter_region"]["distance"] == "4000km");
  CHECK(points[3].scenario["job"]["batch"]["sequence_length"] == 512);
  json lin    = base_campaign();
  lin["axes"] = json::array({{{"path", "topology.inter_region.bandwidth"},
                              {"range", {{"from", 0.1}, {"to", 0.5}, {"step", 0.1}, {"unit", "Tbps"}}}}});
  auto cl     = experiments::parse_campaign(lin, kTinyCampaign);
  CHECK(cl.axes[0].labels == std::vector<std::string>{"0.1Tbps", "0.2Tbps", "0.3Tbps", "0.4Tbps", "0.5Tbps"});
}

TEST_CASE("bad campaigns are refused with the file, the JSON path and why", "[campaign]")
{
  json unknown          = base_campaign();
  unknown["repetitons"] = 2;
  expect_error(unknown, "$: unknown key \"repetitons\"");

  json zip    = base_campaign();
  zip["axes"] = json::array({{{"zip",
                               {{{"path", "topology.inter_region.bandwidth"}, {"values", {"1GBps", "2GBps"}}},
                                {{"path", "topology.inter_region.distance"}, {"values", {"1km"}}}}}}});
  expect_error(zip, "zipped fields need as many values each");

  json parent    = base_campaign();
  parent["axes"] = json::array({{{"path", "topology.no_such_block.bandwidth"}, {"values", {"1GBps"}}}});
  expect_error(parent, "\"topology.no_such_block.bandwidth\" is not in the base scenario");

  json bad_value = base_campaign();
  bad_value["axes"] =
      json::array({{{"name", "bw"}, {"path", "topology.inter_region.bandwidth"}, {"values", {"1GBps", "fast"}}}});
  expect_error(bad_value, "point 1 (bw=fast) is not a valid scenario");

  json both    = base_campaign();
  both["axes"] = json::array({{{"path", "job.gpus"}, {"range", {{"from", 1}, {"to", 2}, {"step", 1}, {"count", 2}}}}});
  expect_error(both, "give exactly one of \"step\"");

  json labels    = base_campaign();
  labels["axes"] = json::array({{{"path", "job.gpus"}, {"values", {32, 64}}, {"labels", {"a"}}}});
  expect_error(labels, "expected one label per value (2), got 1");
}

TEST_CASE("seeds that are 0 or would wrap past 2^32-1 over the repetitions are refused at $.seed", "[campaign]")
{
  json zero    = base_campaign();
  zero["seed"] = 0;
  expect_error(zero, "$.seed");

  json wraps           = base_campaign();
  wraps["seed"]        = 4294967295ll;
  wraps["repetitions"] = 2;
  expect_error(wraps, "$.seed: seed 4294967295 with 2 repetitions needs seeds up to 4294967296");

  json last           = base_campaign();
  last["seed"]        = 4294967294ll;
  last["repetitions"] = 2;
  auto points         = experiments::expand(experiments::parse_campaign(last, kTinyCampaign));
  std::cout << "last seed: expected 4294967295, actual " << points[1].seed << "\n";
  CHECK(points[1].seed == 4294967295u);
}

TEST_CASE("point records of the wrong shape count as missing and the result files are still written", "[hdf5]")
{
  auto c                = experiments::parse_campaign(base_campaign(), kTinyCampaign);
  auto points           = experiments::expand(c);
  const std::string dir = scratch("shapes");
  auto put              = [&](std::size_t k, const json& record) {
    std::ofstream(dir + "/" + points[k].key + ".json") << record.dump();
  };
  json no_summary = ok_record(points[1].key);
  no_summary.erase("summary");
  json null_summary                                = ok_record(points[2].key);
  null_summary["summary"]                          = nullptr;
  json null_metrics                                = ok_record(points[3].key);
  null_metrics["summary"]["metrics"]               = nullptr;
  json text_metric                                 = ok_record(points[4].key);
  text_metric["summary"]["metrics"]["step_time_s"] = "fast";
  json bad_stage                                   = ok_record(points[8].key);
  bad_stage["stages"]                              = json::array({{{"stage", 0}}});
  json null_mfu                                    = ok_record(points[9].key);
  null_mfu["summary"]["metrics"]["mfu"]            = nullptr; // a NaN, as nlohmann writes it
  put(0, ok_record(points[0].key));
  put(1, no_summary);
  put(2, null_summary);
  put(3, null_metrics);
  put(4, text_metric);
  put(5, {{"key", points[5].key}, {"git_hash", spansim::git_hash()}, {"status", "error"}, {"error", "does not fit"}});
  put(6, {{"key", points[6].key}, {"status", 7}});
  put(7, json::array({1, 2}));
  put(8, bad_stage);
  put(9, null_mfu);
  put(10, ok_record(points[0].key)); // another point's record under this point's name

  auto results = experiments::load_results(points, dir);
  std::set<std::string> loaded;
  for (std::size_t k = 0; k < points.size(); ++k)
    if (results.count(points[k].key))
      loaded.insert(std::to_string(k));
  std::string got;
  for (const auto& k : loaded)
    got += k + " ";
  std::cout << "loaded points: expected 0 5 9, actual " << got << "\n";
  CHECK(loaded == std::set<std::string>{"0", "5", "9"});

  REQUIRE_NOTHROW(experiments::write_results_hdf5(c, points, results, dir + "/r.h5"));
  REQUIRE_NOTHROW(experiments::write_results_csv(c, points, results, dir + "/r.csv"));
  auto t = experiments::read_results_hdf5(dir + "/r.h5");
  std::cout << "rows: expected 3, actual " << t.rows << "\n";
  REQUIRE(t.rows == 3);
  CHECK(t.numbers["step_time_s"][0] == 0.25);
  CHECK(std::isnan(t.numbers["mfu"][2]));
  // A record of another spansim build (its git hash) answers for another model: computed again.
  {
    json other        = ok_record(points[0].key);
    other["git_hash"] = "another-build";
    put(0, other);
    CHECK(experiments::load_results(points, dir).count(points[0].key) == 0);
  }
  // Figures no step can have, in an otherwise well-formed record: a negative step, one of 1e308 s, negative tokens/s.
  for (const auto& [metric, value] :
       {std::pair{"step_time_s", -1.0}, std::pair{"step_time_s", 1e308}, std::pair{"tokens_per_s", -5.0}}) {
    json edited                          = ok_record(points[0].key);
    edited["summary"]["metrics"][metric] = value;
    put(0, edited);
    INFO(metric << " = " << value);
    CHECK(experiments::load_results(points, dir).count(points[0].key) == 0);
  }
  fs::remove_all(dir);
}

TEST_CASE("the HDF5 table reads back: a row per finished point in order, NaN metrics for failed points", "[hdf5]")
{
  auto c      = experiments::parse_campaign(base_campaign(), kTinyCampaign);
  auto points = experiments::expand(c);
  experiments::ResultMap results;
  // Point 3 finished, point 1 failed, the others have no record.
  results[points[3].key] = ok_record(points[3].key);
  results[points[1].key] = {{"key", points[1].key}, {"status", "error"}, {"error", "does not fit"}};
  const std::string dir  = scratch("hdf5");
  const std::string h5   = dir + "/r.h5";
  experiments::write_results_hdf5(c, points, results, h5);
  auto t = experiments::read_results_hdf5(h5);
  std::cout << "rows: expected 2, actual " << t.rows << "\n";
  REQUIRE(t.rows == 2);
  CHECK(t.attributes["points_total"] == "12");
  CHECK(t.attributes["points_done"] == "2");
  CHECK(t.numbers["index"] == std::vector<double>{1, 3});
  CHECK(t.texts["status"] == std::vector<std::string>{"error", "ok"});
  CHECK(t.texts["error"][0] == "does not fit");
  CHECK(std::isnan(t.numbers["step_time_s"][0]));
  CHECK(t.numbers["step_time_s"][1] == 0.25);
  CHECK(t.numbers["bytes_inter_region"][1] == 4096.0);
  CHECK(t.numbers["compute_max_s"][1] == 0.02);
  CHECK(t.numbers["axis.inter_region_bandwidth"] == std::vector<double>{5, 10});
  CHECK(t.texts["axis.policy"] == std::vector<std::string>{"pp-across", "pp-across"});
  CHECK(t.texts["label.inter_region_bandwidth"] == std::vector<std::string>{"5GBps", "10GBps"});
  CHECK(json::parse(t.texts["scenario"][1]) == points[3].scenario);
  // No temporary file is left next to the result.
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir))
    ++files;
  CHECK(files == 1);
  fs::remove_all(dir);
}

TEST_CASE("a campaign run in workers gives each point the result of running its scenario directly", "[run]")
{
  json doc                      = base_campaign();
  doc["axes"]                   = json::array({doc["axes"][0], doc["axes"][1]});
  doc["axes"][0]["range"]["to"] = 10; // 2 bandwidths x 2 policies
  const std::string dir         = scratch("run");
  auto c                        = experiments::parse_campaign(doc, kTinyCampaign);
  auto points                   = experiments::expand(c);
  REQUIRE(points.size() == 4);
  experiments::RunOptions o;
  o.output = dir + "/r.h5"; // as --out: a campaign file itself may not name a place outside the working directory
  o.jobs   = 2;
  auto rep = experiments::run_campaign(c, o);
  std::cout << "ran: expected 4, actual " << rep.ran << "; failed " << rep.failed << ", missing " << rep.missing
            << "\n";
  CHECK(rep.ran == 4);
  CHECK(rep.failed == 0);
  CHECK(rep.missing == 0);
  auto t = experiments::read_results_hdf5(rep.hdf5);
  REQUIRE(t.rows == 4);
  for (std::size_t k = 0; k < points.size(); ++k) {
    auto direct =
        scenario::run_scenario(scenario::parse_scenario(points[k].scenario, c.scenario_file, c.scenario_json_path));
    std::cout << "point " << k << " step time: direct " << direct.result.step_time << " s, campaign "
              << t.numbers["step_time_s"][k] << " s\n";
    CHECK(t.numbers["step_time_s"][k] == direct.result.step_time);
    CHECK(t.numbers["tokens_per_s"][k] == direct.result.tokens_per_second);
  }
  // DP across the regions moves the gradients over the inter-region link; PP across moves only activations.
  CHECK(t.numbers["bytes_inter_region"][0] > t.numbers["bytes_inter_region"][1]);
  // A second run finds every point and runs none.
  auto again = experiments::run_campaign(c, o);
  std::cout << "second run: found " << again.found << " (expected 4), ran " << again.ran << " (expected 0)\n";
  CHECK(again.found == 4);
  CHECK(again.ran == 0);
  CHECK(fs::exists(rep.csv));
  fs::remove_all(dir);
}

TEST_CASE("a DiLoCo campaign records the outer exchange, the mean step and its tokens/s of each point", "[run]")
{
  // The tiny job with DP across the regions synchronized every 8 steps over an uplink swept 1 -> 10 Gb/s: the
  // inner step is the same, the outer exchange and the mean step shrink, each as running the point directly.
  json doc                              = base_campaign();
  doc["scenario"]["diloco"]             = {{"every", 8}, {"uplink", "1Gbps"}};
  doc["scenario"]["fidelity"]           = "analytical";
  doc["scenario"]["placement"]["order"] = {"tp", "cp", "pp", "dp"};
  doc["axes"]   = json::array({{{"name", "uplink"}, {"path", "diloco.uplink"}, {"values", {"1Gbps", "10Gbps"}}}});
  doc["record"] = {{"links", false}, {"stages", false}, {"ranks", false}};
  const std::string dir = scratch("diloco");
  auto c                = experiments::parse_campaign(doc, kTinyCampaign);
  auto points           = experiments::expand(c);
  REQUIRE(points.size() == 2);
  experiments::RunOptions o;
  o.output       = dir + "/d.h5";
  o.jobs         = 2;
  const auto rep = experiments::run_campaign(c, o);
  REQUIRE(rep.failed == 0);
  auto t = experiments::read_results_hdf5(rep.hdf5);
  REQUIRE(t.rows == 2);
  for (std::size_t k = 0; k < points.size(); ++k) {
    const auto direct =
        scenario::run_scenario(scenario::parse_scenario(points[k].scenario, c.scenario_file, c.scenario_json_path));
    REQUIRE(direct.diloco);
    std::cout << "point " << k << ": outer " << t.numbers["diloco_outer_s"][k] << " s (direct "
              << direct.diloco->outer.seconds << "), mean step " << t.numbers["diloco_mean_step_s"][k] << " s (direct "
              << direct.diloco->mean_step << ")\n";
    CHECK(t.numbers["diloco_outer_s"][k] == direct.diloco->outer.seconds);
    CHECK(t.numbers["diloco_mean_step_s"][k] == direct.diloco->mean_step);
    CHECK(t.numbers["diloco_tokens_per_s"][k] == direct.diloco->tokens_per_second);
    CHECK(t.numbers["step_time_s"][k] == direct.result.step_time);
  }
  CHECK(t.numbers["diloco_outer_s"][0] > t.numbers["diloco_outer_s"][1]);
  CHECK(t.numbers["step_time_s"][0] == t.numbers["step_time_s"][1]);
  fs::remove_all(dir);
}

TEST_CASE("the shipped campaigns parse and expand to the documented points", "[campaign]")
{
  const std::string dir = std::string(SPANSIM_SOURCE_DIR) + "/experiments/campaigns/";
  const std::vector<std::pair<std::string, std::size_t>> expected{
      {"inter-region-dp-vs-pp", 42}, {"building-oversubscription", 18}, {"dense-vs-moe-regions", 10}};
  for (const auto& [name, count] : expected) {
    auto c      = experiments::load_campaign(dir + name + ".json");
    auto points = experiments::expand(c);
    std::cout << name << ": expected " << count << " points, actual " << points.size() << "\n";
    CHECK(points.size() == count);
  }
  auto b = experiments::load_campaign(dir + "building-oversubscription.json");
  CHECK(b.axes[0].numeric);
  CHECK(b.axes[0].unit == "GPU injection : boundary");
  CHECK(b.axes[0].numbers == std::vector<double>{1, 2, 4, 8, 16, 32, 64, 128, 256});
  CHECK(b.axes[0].labels[8] == "0.8Tbps");
  auto m = experiments::expand(experiments::load_campaign(dir + "dense-vs-moe-regions.json"));
  CHECK(m[0].scenario["job"]["model"] == "llama3-70b");
  CHECK(m[0].scenario["job"]["parallelism"]["ep"] == 1);
  CHECK(m[1].scenario["job"]["model"] == "llama4-maverick");
  CHECK(m[1].scenario["job"]["parallelism"]["ep"] == 16);
}

TEST_CASE("a second run of the same campaign output is refused while the first holds the lock", "[run]")
{
  json doc              = base_campaign();
  const std::string dir = scratch("lock");
  auto c                = experiments::parse_campaign(doc, kTinyCampaign);
  fs::create_directories(dir + "/r.h5.d");
  const int fd = ::open((dir + "/r.h5.d/lock").c_str(), O_RDWR | O_CREAT, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  std::string message;
  experiments::RunOptions o;
  o.output = dir + "/r.h5";
  try {
    experiments::run_campaign(c, o);
  } catch (const UsageError& e) {
    message = e.what();
  }
  std::cout << "expected \"another run of this campaign is in progress\", got \"" << message << "\"\n";
  CHECK(message.find("another run of this campaign is in progress") != std::string::npos);
  ::close(fd); // the kernel releases the lock, as it does when a run is killed
  o.jobs   = 2;
  auto rep = experiments::run_campaign(c, o);
  CHECK(rep.ran == 12);
  fs::remove_all(dir);
}
