// The spansim command line as a user meets it: bad input gives one clear line on stderr and exit code 2,
// --json gives one JSON document on stdout.
#include "run_spansim.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using cli_test::lines;
using cli_test::Run;
using cli_test::slurp;
using cli_test::spansim;

std::string data(const std::string& name)
{
  return std::string(SPANSIM_SOURCE_DIR) + "/tests/data/bad_topologies/" + name;
}

// Writes the first ```json block of a markdown file to a temporary file and returns its path.
std::string doc_example(const std::string& markdown)
{
  std::string doc = slurp(std::string(SPANSIM_SOURCE_DIR) + "/" + markdown);
  auto begin      = doc.find("```json\n");
  REQUIRE(begin != std::string::npos);
  begin += 8;
  auto end         = doc.find("```", begin);
  std::string path = "/tmp/spansim-doc-" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << doc.substr(begin, end - begin);
  return path;
}

} // namespace

TEST_CASE("bad topology files: one line on stderr naming file and JSON path, exit code 2", "[cli]")
{
  struct Bad {
    const char* file;
    const char* path; // JSON path in the message ("" when the file as a whole is wrong)
    const char* says;
  };
  const Bad cases[] = {
      {"syntax_error.json", "", "invalid JSON"},
      {"not_an_object.json", "at $:", "expected an object"},
      {"unknown_key.json",
       "at $.node:", "unknown key \"nvlink_lanes\" (allowed here: gpus, nccl_efficiency, nic_gpus, nics, nvlink"},
      {"misspelt_key.json",
       "at $.node:", "missing required key \"nvlink_latency\" (is \"nvlink_latnecy\" a misspelling"},
      {"missing_key.json", "at $.pod:", "missing required key \"nic_bandwidth\""},
      {"unknown_unit.json", "at $.pod.nic_bandwidth:", "missing or unknown unit"},
      {"number_without_unit.json", "at $.pod.nic_bandwidth:", "with a unit"},
      {"zero_bandwidth.json", "at $.pod.nic_bandwidth:", "greater than zero"},
      {"gpus_out_of_range.json", "at $.node.gpus:", "allowed: 1 to 1024"},
      {"fractional_count.json", "at $.pod.nodes:", "expected an integer"},
      {"wrong_type.json", "at $.pod.rail_optimized:", "expected true or false"},
      {"oversubscription_below_one.json", "at $.pod.oversubscription:", "out of range"},
      {"leaf_too_small.json", "at $.pod.leaf_radix:", "fewer than the 8 GPUs"},
      {"no_regions.json", "at $.regions:", "at least one region"},
      {"duplicate_region.json", "at $.regions[1].name:", "duplicate region name"},
      {"missing_inter_building.json", "at $:", "missing \"inter_building\""},
      {"distance_and_latency.json", "at $.inter_building:", "either \"distance\""},
      {"override_unknown_building.json", "at $.inter_building.overrides[0].between:", "unknown building \"r-b7\""},
      {"missing_inter_region.json", "at $:", "missing \"inter_region\""},
      {"bad_fabric.json", "at $.pod.fabric:", "allowed: \"ib\", \"roce\", \"efa\", \"tcpx\", \"tcpxo\""},
      {"too_many_gpus.json", "at $:", "at most 4000000"},
  };
  for (const auto& c : cases) {
    auto r = spansim("topology describe " + data(c.file));
    INFO(c.file << "\nexit code " << r.exit_code << "\nstderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.rfind("spansim: error: ", 0) == 0);
    CHECK(r.err.find(data(c.file)) != std::string::npos);
    CHECK(r.err.find(c.path) != std::string::npos);
    CHECK(r.err.find(c.says) != std::string::npos);
    CHECK(r.out.empty());
  }
}

TEST_CASE("bad command-line arguments: one line, exit code 2", "[cli]")
{
  const std::pair<const char*, const char*> cases[] = {
      {"topology describe no-such-preset", "not a preset name"},
      {"collective -t hgx-h100-pod --ranks 1", "at least 2 GPUs"},
      {"collective -t hgx-h100-pod --ranks 8 --op alltoal", "allowed: allreduce, reducescatter"},
      {"collective -t hgx-h100-pod --ranks 8 --op alltoall --algo ring", "allowed: direct"},
      {"collective -t hgx-h100-pod --ranks 8 --fidelity fluid", "allowed: analytical, flow, packet"},
      {"collective -t hgx-h100-pod --ranks 8 --sizes 1MiB:1Gfoo", "--sizes"},
      {"collective -t hgx-h100-pod --gpus 0,3072", "outside the topology"},
      {"collective -t hgx-h100-pod --gpus 0,1,1", "appears twice"},
      {"collective -t hgx-h100-pod", "--ranks"},
  };
  for (const auto& [args, says] : cases) {
    auto r = spansim(args);
    INFO(args << "\nexit code " << r.exit_code << "\nstderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find(says) != std::string::npos);
  }
  auto r = spansim("--no-such-flag");
  CHECK(r.exit_code == 2);
}

TEST_CASE("topology describe --json prints one document with counts, tiers and boundaries", "[cli]")
{
  auto r = spansim("topology describe two-buildings --json");
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["spansim"]["version"].is_string());
  CHECK(j["spansim"]["git_hash"].is_string());
  CHECK(j["counts"]["gpus"] == 32768);
  CHECK(j["counts"]["buildings"] == 2);
  REQUIRE(j["boundaries"].size() == 2);
  // The inter-building link (204.8 Tbps) is the only way out of a building.
  CHECK(j["boundaries"][0]["max_flow_Bps"].get<double>() == Approx(204.8e12 / 8));
}

TEST_CASE("topology describe --dot writes Graphviz with every vertex and link", "[cli]")
{
  std::string dot = "/tmp/spansim-test-" + std::to_string(::getpid()) + ".dot";
  auto r =
      spansim("topology describe " + std::string(SPANSIM_SOURCE_DIR) + "/tests/data/tiny.json --json --dot " + dot);
  REQUIRE(r.exit_code == 0);
  auto j        = nlohmann::json::parse(r.out);
  std::string g = slurp(dot);
  std::remove(dot.c_str());
  std::size_t vertices = 0, edges = 0;
  std::istringstream in(g);
  for (std::string line; std::getline(in, line);) {
    vertices += line.find(" [label=") != std::string::npos;
    edges += line.find(" -- ") != std::string::npos;
  }
  CHECK(vertices == j["counts"]["vertices"].get<std::size_t>());
  CHECK(edges == j["counts"]["links"].get<std::size_t>());
}

TEST_CASE("collective --json: an NVLink ring all-reduce equals its alpha-beta time after NCCL's latency", "[cli]")
{
  auto r = spansim("collective -t hgx-h100-pod --ranks 8 --algo ring --protocol Simple --sizes 1MiB:64MiB --json");
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["engines"]["flow"]["config"]["network/model"] == "CM02");
  REQUIRE(j["results"].size() == 7);
  for (const auto& row : j["results"]) {
    double s = row["bytes"];
    // B = 450 GB/s at the preset's NCCL efficiency 0.82 (nccl-tests' ~370 GB/s), alpha = 2 x 0.5 us, and NCCL's
    // latency for a ring all-reduce on one node under Simple, which is larger than the chain's 14 x 1 us:
    // baseLat 8.4 + (2(8-1) = 14 steps) x NVLink's hwLat 3.4 = 56.0 us (tuning.cc, 2.27).
    // Then each of the ring's 14 steps (one loop: a step carries S / (24 channels x 8 ranks), at most 2 MiB, up
    // to 384 MiB) pays the node's fitted step latency (topology/fabrics.json, in the effective configuration).
    const double nccl = (8.4 + 14 * 3.4) * 1e-6;
    CHECK(row["nccl_latency_s"].get<double>() == Approx(nccl).epsilon(1e-12));
    CHECK(row["nccl_channels"] == 24);
    const double step = std::stod(j["topology"]["node"]["step_latency"].get<std::string>()) * 1e-6; // "1.8us"
    double expected   = 2.0 * 7 / 8 * s / (450e9 * 0.82) + std::max(2 * 7 * 1e-6, nccl) + 14 * step;
    double t          = row["flow"]["time_s"];
    std::cout << "cli ring all-reduce of " << s << " B: expected " << expected << " s, actual " << t << " s\n";
    CHECK(t == Approx(expected).epsilon(0.01));
    CHECK(row["flow"]["busbw_Bps"].get<double>() == Approx(s / t * 2 * 7 / 8));
  }
}

TEST_CASE("every example and preset topology, and the format doc's example, loads and describes", "[cli][docs]")
{
  std::vector<std::string> files;
  for (const char* name : {"three-building-campus", "two-region-nvl72"})
    files.push_back(std::string(SPANSIM_SOURCE_DIR) + "/examples/topologies/" + name + ".json");
  for (const char* name : {"hgx-h100-pod", "llama3-24k", "two-buildings"})
    files.push_back(name);
  // The JSON block of topology/README.md is an example users copy: it must stay valid.
  const std::string path = doc_example("topology/README.md");
  files.push_back(path);
  for (const auto& f : files) {
    auto r = spansim("topology describe " + f + " --json");
    INFO(f << ": " << r.err);
    REQUIRE(r.exit_code == 0);
    auto j = nlohmann::json::parse(r.out);
    CHECK(j["counts"]["gpus"].get<long>() > 0);
  }
  auto j = nlohmann::json::parse(spansim("topology describe " + path + " --json").out);
  std::remove(path.c_str());
  // 3 buildings x 2 pods x 128 nodes x 8 GPUs; the override makes east-west 80 Tbps.
  CHECK(j["counts"]["gpus"] == 6144);
  CHECK(j["boundaries"][3]["name"] == "east");
  CHECK(j["boundaries"][3]["boundary_links_Bps"].get<double>() == Approx(80e12 / 8));
}

TEST_CASE("run: the scenario format doc's example runs and writes summary, CSV and trace", "[cli][docs][run]")
{
  std::string scenario = doc_example("netsim/README.md");
  std::string out      = "/tmp/spansim-run-" + std::to_string(::getpid());
  auto r               = spansim("run " + scenario + " --out " + out + " --json");
  std::remove(scenario.c_str());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["spansim"]["git_hash"].is_string());
  CHECK(j["configuration"]["engine"]["config"]["network/model"] == "CM02");
  // The job's number formats and kernels as in force, the GPU's defaults filled in.
  const auto& job = j["configuration"]["job"];
  CHECK(job["precision"]["compute"].is_string());
  CHECK(job["precision"]["activation_cache"]["attention_output"].is_string());
  CHECK(job["kernels"]["attention"].is_string());
  CHECK(job["kernels"]["gemm"].is_string());
  double step = j["metrics"]["step_time_s"];
  CHECK(step > 0);
  // Every stage's parts add up to the step time.
  for (const auto& s : j["breakdown"]["stages"]) {
    double sum = s["compute_s"].get<double>() + s["bubble_s"].get<double>() + s["idle_s"].get<double>();
    for (const char* d : {"tp", "cp", "pp", "dp", "ep"})
      sum += s[std::string("exposed_") + d + "_s"].get<double>();
    CHECK(sum == Approx(step).epsilon(1e-9));
  }
  // Stage 0 and stage 1 sit in different regions: pipeline bytes cross the long haul.
  double inter_region = 0;
  for (const auto& t : j["network"]["tiers"])
    if (t["tier"] == "inter_region")
      inter_region = t["bytes"];
  CHECK(inter_region > 0);
  auto summary = nlohmann::json::parse(slurp(out + "/summary.json"));
  CHECK(summary["metrics"]["step_time_s"] == j["metrics"]["step_time_s"]);
  auto trace = nlohmann::json::parse(slurp(out + "/trace.json"));
  CHECK(trace["traceEvents"].size() > 100);
  std::string csv = slurp(out + "/layers.csv");
  CHECK(csv.rfind("stage,chunk,layers,forward_s", 0) == 0);
  CHECK(lines(csv) == 1 + 2); // header + one chunk per stage (1F1B, two stages)
  std::system(("rm -rf " + out).c_str());
}

TEST_CASE("run --out: symlinks planted at the output names are replaced, never written through", "[cli][run]")
{
  std::string scenario  = doc_example("netsim/README.md");
  const std::string dir = "/tmp/spansim-symlinks-" + std::to_string(::getpid());
  std::system(("rm -rf " + dir + " && mkdir -p " + dir + "/out").c_str());
  for (const char* name : {"summary.json", "layers.csv", "trace.json"}) {
    std::ofstream(dir + "/victim-" + name) << "keep\n";
    REQUIRE(::symlink((dir + "/victim-" + name).c_str(), (dir + "/out/" + name).c_str()) == 0);
  }
  auto r = spansim("run " + scenario + " --out " + dir + "/out");
  std::remove(scenario.c_str());
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  for (const char* name : {"summary.json", "layers.csv", "trace.json"}) {
    INFO(name);
    CHECK(slurp(dir + "/victim-" + name) == "keep\n");
    struct stat st {};
    REQUIRE(::lstat((dir + "/out/" + name).c_str(), &st) == 0);
    CHECK(S_ISREG(st.st_mode));
  }
  CHECK(nlohmann::json::parse(slurp(dir + "/out/summary.json"))["metrics"]["step_time_s"].get<double>() > 0);
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("run: bad scenarios give one line and exit code 2", "[cli][run]")
{
  const std::pair<const char*, const char*> cases[] = {
      {R"({"name": "x", "topology": "two-buildings", "job": "examples/jobs/llama3-8b-64-h100.json", "fidelty": "flow"})",
       "unknown key \"fidelty\""},
      {R"({"name": "x", "topology": "two-buildings", "job": "examples/jobs/llama3-8b-64-h100.json", "fidelity": "fluid"})",
       "allowed: \"analytical\", \"flow\", \"packet\""},
      {R"({"name": "x", "topology": "two-buildings", "job": "examples/jobs/llama3-8b-64-h100.json",
           "placement": {"buildings": ["bldg-z"]}})",
       "unknown building \"bldg-z\""},
      {R"({"name": "x", "topology": "two-buildings", "job": "examples/jobs/llama3-8b-64-h100.json",
           "collectives": {"auto": "per-op"}})",
       "allowed: \"per-step\", \"per-call\""},
      {R"({"name": "x", "topology": "two-buildings", "job": "examples/jobs/no-such-job.json"})",
       "at $.job: no such file"},
      {R"({"name": "x", "topology": "hgx-h100-pod", "job": "examples/jobs/llama3-405b-8k-h100.json"})",
       "topology \"hgx-h100-pod\" has 3072"},
  };
  std::string path = "/tmp/spansim-bad-scenario-" + std::to_string(::getpid()) + ".json";
  for (const auto& [text, says] : cases) {
    std::ofstream(path) << text;
    auto r = spansim("run " + path + " --no-outputs");
    INFO(text << "\nexit " << r.exit_code << "\nstderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find(says) != std::string::npos);
  }
  std::remove(path.c_str());
}

TEST_CASE("optimize: the printed scenarios reproduce the reported times and speedup with spansim run",
          "[cli][optimizer]")
{
  // One campus (two buildings) and one two-region case, as the optimizer issue asks.
  auto example    = GENERATE(as<std::string>{}, "llama3-8b-two-regions", "llama3-8b-two-buildings");
  std::string out = "/tmp/spansim-opt-" + std::to_string(::getpid());
  auto r          = spansim("optimize " + std::string(SPANSIM_SOURCE_DIR) + "/examples/optimize/" + example +
                            ".json --top-k 2 --out " + out + " --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["ranked"].size() == 2);
  auto rerun = [&](const std::string& file) {
    auto run = spansim("run " + file + " --no-outputs --json");
    INFO(run.err);
    REQUIRE(run.exit_code == 0);
    return nlohmann::json::parse(run.out)["metrics"]["step_time_s"].get<double>();
  };
  double winner   = rerun(j["ranked"][0]["scenario"]);
  double baseline = rerun(j["baseline"]["scenario"]);
  std::cout << example << ": optimizer winner " << j["ranked"][0]["step_time_s"] << " s, re-run " << winner
            << " s; baseline " << j["baseline"]["step_time_s"] << " s, re-run " << baseline << " s\n";
  CHECK(winner == Approx(j["ranked"][0]["step_time_s"].get<double>()).epsilon(1e-9));
  CHECK(baseline == Approx(j["baseline"]["step_time_s"].get<double>()).epsilon(1e-9));
  CHECK(baseline / winner == Approx(j["speedup_over_baseline"].get<double>()).epsilon(1e-9));
  CHECK(winner <= baseline);
  if (example == "llama3-8b-two-buildings")
    CHECK(baseline / winner > 1.05); // 8 micro-batches on a pipeline: the production 1F1B default is beatable
  std::system(("rm -rf " + out).c_str());
}

TEST_CASE("validate --json on a few small published runs: each error is the throughput ratio", "[cli][calibration]")
{
  auto r = spansim("validate --only mpt-7b-8k-8xa100 --only korthikanti-22b --only nemo2407-llama3-8b --no-loo "
                   "--json --workers 1");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["rows"].size() == 3);
  for (const auto& row : j["rows"]) {
    INFO(row.dump());
    const double published = row["published"], simulated = row["simulated"], error = row["throughput_error"];
    // Throughput metrics compare directly; a step time inversely.
    const double expected = row["metric"] == "step_time" ? published / simulated - 1 : simulated / published - 1;
    std::cout << row["run"].get<std::string>() << ": published " << published << ", simulated " << simulated
              << ", error " << error << "\n";
    CHECK(error == Approx(expected).epsilon(1e-9));
    CHECK(std::fabs(error) < 0.5);
    CHECK(row["profile"].get<std::string>().ends_with("-published"));
    // Each row names what it ran: the MPT row its FlashAttention-2 kernel (llm-foundry's Triton kernel is named
    // apart), the NeMo FP8 row its recipe.
    CHECK(row["kernels"]["gemm"] == "cublas");
    if (row["run"] == "mpt-7b-8k-8xa100")
      CHECK(row["kernels"]["attention"] == "flash2");
    if (row["run"].get<std::string>().starts_with("nemo2407"))
      CHECK(row["precision"]["compute"] == "fp8");
    double parts = 0;
    for (const auto& [part, seconds] : row["breakdown_s"].items())
      parts += seconds.get<double>();
    CHECK(parts > 0);
  }
  CHECK(j["mape"]["fit"].get<double>() >= 0);
  CHECK(j["spansim"].contains("git_hash"));
}

TEST_CASE("reliability --json and --plot: ETTR beside its closed form, interruptions beside rate x days",
          "[cli][reliability]")
{
  const std::string png = "/tmp/spansim-test-reliability-" + std::to_string(getpid()) + ".png";
  auto r = spansim("reliability examples/scenarios/llama3-405b-24k-reliability.json --days 30 --trials 100 --steps 50 "
                   "--json --plot " +
                   png);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j            = nlohmann::json::parse(r.out);
  const double ettr = j["outcome"]["ettr"], closed = j["outcome"]["ettr_closed_form"];
  const double per_day = j["costs"]["failures_per_day"], interruptions = j["outcome"]["interruptions"];
  const double sampled = j["sampled_steps"]["mean_s"], step = j["step_time_s"];
  std::cout << "ETTR: closed form " << closed << ", Monte Carlo " << ettr << "; interruptions: expected "
            << per_day * 30 << ", Monte Carlo " << interruptions << "\n";
  CHECK(std::fabs(ettr - closed) < 0.01);
  CHECK(std::fabs(interruptions / (per_day * 30) - 1) < 0.05);
  CHECK(sampled == Approx(step).epsilon(1e-12));
  CHECK(j["configuration"]["failures"]["name"] == "llama3-405b");
  std::ifstream in(png, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  CHECK(std::string(magic + 1, 3) == "PNG");
  std::remove(png.c_str());
  std::remove((png + ".json").c_str());
}

TEST_CASE("run --steps: the same seed gives the same samples, another seed others", "[cli][reliability]")
{
  auto a = spansim("run examples/scenarios/llama3-405b-24k-reliability.json --steps 20 --no-outputs --json");
  auto b = spansim("run examples/scenarios/llama3-405b-24k-reliability.json --steps 20 --no-outputs --json");
  auto c = spansim("run examples/scenarios/llama3-405b-24k-reliability.json --steps 20 --seed 9 --no-outputs --json");
  REQUIRE(a.exit_code == 0);
  REQUIRE(c.exit_code == 0);
  auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out), jc = nlohmann::json::parse(c.out);
  CHECK(ja["sampled_steps"] == jb["sampled_steps"]);
  CHECK(ja["sampled_steps"]["mean_s"] != jc["sampled_steps"]["mean_s"]);
  CHECK(ja["sampled_steps"]["mean_s"].get<double>() >= ja["sampled_steps"]["deterministic_s"].get<double>());
  CHECK(ja["configuration"]["variability"]["seed"] == 1);
}

TEST_CASE("run with faults: the step against the healthy site and the boundary capacity lost", "[cli][faults]")
{
  auto r = spansim("run examples/scenarios/llama3-405b-two-buildings-faults.json --no-outputs --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j        = nlohmann::json::parse(r.out);
  const auto& f = j["faults"];
  // 32 NIC links and the uplink of the failed leaf; the inter-building link at a quarter.
  CHECK(f["failed_links"] == 33);
  CHECK(f["degraded_links"] == 1);
  CHECK(f["step_time_s"].get<double>() >= f["healthy_step_time_s"].get<double>() * (1 - 1e-12));
  for (const auto& b : f["boundaries"]) {
    const double lost = b["lost_Bps"], healthy = b["healthy_max_flow_Bps"];
    std::cout << b["name"].get<std::string>() << ": healthy " << healthy << " B/s, lost " << lost
              << " B/s (expected three quarters of the 204.8 Tbps link: " << 0.75 * 204.8e12 / 8 << ")\n";
    CHECK(lost == Approx(0.75 * 204.8e12 / 8).epsilon(1e-9));
  }
  CHECK(j["configuration"]["faults"]["switches"][0] == "bldg-b/pod3/leaf5");
  CHECK(j["configuration"]["engine"]["rail_symmetry"] == false);
}

TEST_CASE("topology links: names a faults block accepts", "[cli][faults]")
{
  auto r = spansim("topology links two-buildings --tier inter_building --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["links"].size() == 1);
  CHECK(j["links"][0]["name"] == "bldg-a/aggregation -- bldg-b/aggregation");
  CHECK(j["links"][0]["bandwidth_Bps"].get<double>() == Approx(204.8e12 / 8).epsilon(1e-12));
  auto bad = spansim("topology links two-buildings --tier fiber");
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("inter_building") != std::string::npos);
}

TEST_CASE("run with diloco: the outer step, the mean step over H and the bytes per step in the summary",
          "[cli][diloco]")
{
  auto r =
      spansim("run examples/scenarios/llama3-8b-two-regions-diloco.json --fidelity analytical --no-outputs --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j             = nlohmann::json::parse(r.out);
  const auto& d      = j["diloco"];
  const double inner = d["inner_step_s"], outer = d["outer_sync_s"];
  CHECK(inner == j["metrics"]["step_time_s"].get<double>());
  // Every 8 steps, one step of overlap.
  CHECK(d["mean_step_s"].get<double>() == Approx(inner + std::max(0.0, outer - inner) / 8).epsilon(1e-12));
  // 64 ranks each send their share of the pseudo-gradient, compressed 4x, to one counterpart across. The shard is
  // the larger stage's (the two stages differ by the embedding and the output layer: 5e-7 here).
  const double shard = d["outer"]["shard_bytes"];
  CHECK(d["outer"]["bytes_across_regions"].get<double>() == Approx(64 * shard / 4).epsilon(1e-5));
  CHECK(d["outer"]["bytes_across_regions"].get<double>() <= 64 * shard / 4);
  CHECK(d["bytes_across_regions_per_step"].get<double>() ==
        Approx(d["outer"]["bytes_across_regions"].get<double>() / 8).epsilon(1e-12));
  CHECK(j["configuration"]["diloco"]["every"] == 8);
  CHECK(j["configuration"]["diloco"]["compression"]["ratio"] == 4);
  CHECK(j["configuration"]["engine"]["data_parallel"].get<std::string>().find("inside each region") !=
        std::string::npos);
  for (const auto& t : j["network"]["tiers"])
    if (t["tier"] == "inter_region")
      CHECK(t["bytes"].get<double>() == 0); // the inner step's data parallelism stays in its region
}

TEST_CASE("share --json: the example's jobs, their slowdowns and the bytes each moves over the long haul",
          "[cli][sharing]")
{
  auto r = spansim("share examples/shared/pretrain-finetune-eval-two-regions.json --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["provenance"]["tool"] == "spansim");
  REQUIRE(j["jobs"].size() == 3);
  for (const auto& job : j["jobs"]) {
    const double alone = job["alone_step_s"], shared = job["shared_step_s"];
    std::cout << job["name"].get<std::string>() << ": alone " << alone << " s, shared " << shared << " s\n";
    // In this example every job is slowed or unchanged.
    CHECK(shared >= alone * (1 - 1e-9));
    CHECK(job["slowdown"].get<double>() == Approx(shared / alone).epsilon(1e-12));
  }
  // The third job sits on the next free GPUs of one building: no bytes over the long haul, and not slowed.
  CHECK(j["jobs"][2]["buildings"] == nlohmann::json::array({"east-b0"}));
  CHECK(j["jobs"][2]["slowdown"].get<double>() == Approx(1).epsilon(1e-9));
  // The two jobs across the thin long haul contend on it: the example's point.
  for (int k : {0, 1})
    CHECK(j["jobs"][k]["slowdown"].get<double>() > 1.01);
  bool long_haul = false;
  for (const auto& b : j["boundaries"])
    if (b["tier"] == "inter_region") {
      long_haul = true;
      CHECK(b["bytes_per_step"]["pretrain"].get<double>() > 0);
      CHECK(b["bytes_per_step"]["finetune"].get<double>() > 0);
      CHECK(b["bytes_per_step"]["eval"].get<double>() == 0);
    }
  CHECK(long_haul);
  // The table form prints the same jobs.
  auto t = spansim("share examples/shared/pretrain-finetune-eval-two-regions.json");
  REQUIRE(t.exit_code == 0);
  CHECK(t.out.find("finetune") != std::string::npos);
  CHECK(t.out.find("Bytes across boundaries, per job") != std::string::npos);
}

TEST_CASE("optimize on a DLRM scenario: sharding and towers ranked by step time", "[cli][dlrm]")
{
  auto r = spansim("optimize examples/scenarios/dlrm-dcnv2-1024-two-buildings.json --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(!j["candidates"].empty());
  double previous = 0, without_towers = 0;
  for (const auto& c : j["candidates"]) {
    if (c.contains("refused"))
      continue;
    const double step = c["step_time_s"];
    CHECK(step >= previous);
    previous = step;
    if (c["towers"] == 0 && c["sharding"] == "row-wise")
      without_towers = step;
  }
  // 26 tables over 1,024 GPUs: only row-wise applies; two towers (one per building's pod) beat none.
  const auto& best = j["candidates"][0];
  CHECK(best["sharding"] == "row-wise");
  CHECK(best["towers"] == 2);
  CHECK(without_towers > best["step_time_s"].get<double>());
}

namespace {

// A one-line refusal: exit code 2, one "spansim: error: " line saying `says`, nothing on stdout.
void check_refused(const std::string& args, const std::string& says)
{
  const auto r = spansim(args);
  INFO("spansim " << args << "\nexit code " << r.exit_code << "\nstderr: " << r.err << "\nstdout: " << r.out);
  CHECK(r.exit_code == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.rfind("spansim: error: ", 0) == 0);
  CHECK(r.err.find(says) != std::string::npos);
  CHECK(r.out.empty());
}

// A Topology Zoo GraphML of two separate pairs of routers, A-B and C-D, with `speed` as the A-B link's LinkSpeedRaw
// (a file of its own for each speed).
std::string two_pairs(const std::string& dir, const std::string& speed = "1e10")
{
  const std::string path = dir + "/two-pairs-" + speed + ".graphml";
  std::ofstream(path)
      << R"(<?xml version="1.0" encoding="utf-8"?><graphml xmlns="http://graphml.graphdrawing.org/xmlns">
<key attr.name="label" attr.type="string" for="node" id="d1" />
<key attr.name="LinkSpeedRaw" attr.type="double" for="edge" id="d4" />
<graph edgedefault="undirected">
<node id="a"><data key="d1">A</data></node><node id="b"><data key="d1">B</data></node>
<node id="c"><data key="d1">C</data></node><node id="d"><data key="d1">D</data></node>
<edge source="a" target="b"><data key="d4">)" +
             speed +
             R"(</data></edge>
<edge source="c" target="d"><data key="d4">1e10</data></edge>
</graph></graphml>
)";
  return path;
}

} // namespace

TEST_CASE("collective --sizes: a sweep over 64 sizes is refused before it grows, 0 bytes refused", "[cli][options]")
{
  // 1B:1TiB at a factor of 1.0000001 is 2.7e8 sizes (GBs): under a 2 GB address space it must still be exit 2.
  const auto r = cli_test::run_shell("ulimit -v 2000000; timeout 20 " + std::string(SPANSIM_BINARY) +
                                     " collective -t two-buildings --ranks 8 --sizes 1B:1TiB --factor 1.0000001 "
                                     "--fidelity analytical");
  INFO("exit code " << r.exit_code << "\nstderr: " << r.err);
  CHECK(r.exit_code == 2);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("--sizes \"1B:1TiB\": more than 64 sizes per sweep") != std::string::npos);
  check_refused("collective -t two-buildings --ranks 8 --sizes 1MiB:1Gfoo", "--sizes: invalid size \"1Gfoo\"");
  CHECK(spansim("collective -t two-buildings --ranks 8 --sizes 1MiB:1Gfoo").err.find("--sizes: --sizes") ==
        std::string::npos);
  check_refused("collective -t two-buildings --ranks 8 --sizes 2MiB:1MiB", "from a smaller size up to a larger one");
  // A call of 0 bytes has no bandwidth (0/0): refused rather than printed as NaN.
  for (const char* sizes : {"0B", "0B:1MiB", "1MiB,0B"})
    check_refused("collective -t two-buildings --ranks 8 --sizes " + std::string(sizes), "\"0B\" is 0 bytes");
  check_refused("collective -t two-buildings --ranks 8 --op alltoall --sizes 0B,1MiB", "sizes are at least 1 byte");
  // 64 sizes still run; a list of 65 is refused as a range is.
  std::string list;
  for (int i = 1; i <= 64; ++i)
    list += (list.empty() ? "" : ",") + std::to_string(i) + "KiB";
  const auto full = spansim("collective -t hgx-h100-pod --ranks 8 --fidelity analytical --json --sizes " + list);
  INFO(full.err);
  REQUIRE(full.exit_code == 0);
  const auto rows = nlohmann::json::parse(full.out)["results"];
  std::cout << "collective over a list of 64 sizes: expected 64 rows, actual " << rows.size() << "\n";
  CHECK(rows.size() == 64);
  check_refused("collective -t hgx-h100-pod --ranks 8 --fidelity analytical --sizes " + list + ",65KiB",
                "more than 64 sizes per sweep");
}

TEST_CASE("topology import-zoo: a refused import leaves --out as it was and names the sites, edge or option",
          "[cli][options][zoo]")
{
  const std::string dir = "/tmp/spansim-test-zoo-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string out     = dir + "/out.json";
  const std::string old     = "{\"old\": 1}\n";
  const std::string abilene = std::string(SPANSIM_SOURCE_DIR) + "/tests/data/foreign/zoo/Abilene.graphml";
  struct Case {
    std::string args, says;
  };
  const Case cases[] = {
      {two_pairs(dir) + " --site A --site C", "--site \"C\" cannot reach --site \"A\""},
      {two_pairs(dir, "1e300") + " --site A --site B",
       "at edge \"a\" -- \"b\" (\"A\" -- \"B\"): LinkSpeedRaw \"1e300\" is out of range"},
      {two_pairs(dir, "fast") + " --site A --site B", "LinkSpeedRaw \"fast\" is not a number"},
      {abilene + " --site 0 --site 1 --default-speed 0Gbps", "--default-speed 0 bps: allowed a bandwidth above 0"},
      {abilene + " --site 0 --uplink 0Gbps", "--uplink 0 bps: allowed a bandwidth above 0"},
  };
  for (const auto& c : cases) {
    std::ofstream(out) << old;
    check_refused("topology import-zoo " + c.args + " --out " + out, c.says);
    CHECK(slurp(out) == old);
  }
  // Accepted: the sites in the order given (Los Angeles has id 5, Chicago 1), one JSON document.
  const auto r = spansim("topology import-zoo " + abilene + " --out " + out +
                         " --site 'Los Angeles' --site Indianapolis --site Chicago --json");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(nlohmann::json::parse(r.out)["gpus"] == 192);
  const auto written = nlohmann::json::parse(slurp(out));
  CHECK(written["regions"][0]["name"] == "los-angeles");
  CHECK(written["regions"][2]["name"] == "chicago");
  std::filesystem::remove_all(dir);
}

TEST_CASE("options that cannot apply are refused, not ignored", "[cli][options]")
{
  const std::string src = SPANSIM_SOURCE_DIR;
  // --seed, as --steps, needs the scenario's variability block.
  check_refused("run " + src + "/examples/scenarios/llama3-8b-two-regions-dp.json --seed 5 --no-outputs",
                "--seed sets the seed of the scenario's \"variability\" block");
  check_refused("run " + src + "/examples/scenarios/llama3-8b-two-regions-dp.json --steps 5 --no-outputs",
                "--steps samples steps under the scenario's \"variability\" block");
  check_refused("run --no-outputs --out /tmp/spansim-never", "--out excludes --no-outputs");
  // An explicit GPU list has no stride or first GPU.
  check_refused("collective -t hgx-h100-pod --gpus 0,1 --stride 2", "--stride excludes --gpus");
  check_refused("collective -t hgx-h100-pod --gpus 0,1 --first 2", "--first excludes --gpus");
  // Slurm's options without --slurm.
  const std::string spec = src + "/examples/optimize/llama3-8b-two-buildings.json";
  for (const char* option : {"--task-time 5min", "--partition gpu", "--max-tasks 3", "--cpus-per-task 4",
                             "--time 1:00:00", "--sbatch-arg=--qos=low"}) {
    const std::string name = std::string(option).substr(0, std::string(option).find_first_of(" ="));
    check_refused("optimize " + spec + " " + option, name + " shapes the Slurm job arrays: it needs --slurm");
    check_refused("validate " + std::string(option), name + " shapes the Slurm job arrays: it needs --slurm");
  }
  const std::string never = "/tmp/spansim-test-validate-out-" + std::to_string(::getpid());
  check_refused("validate --out " + never, "it needs --slurm or --slurm-dry-run");
  CHECK(!std::filesystem::exists(never));
  // GraphML on standard output is no JSON document: --json needs -o there.
  check_refused("topology export hgx-h100-pod --format graphml --json", "--json with --format graphml needs -o FILE");
  const std::string graphml = "/tmp/spansim-test-export-" + std::to_string(::getpid()) + ".graphml";
  const auto r              = spansim("topology export hgx-h100-pod --format graphml --json -o " + graphml);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["format"] == "graphml");
  CHECK(j["file"] == graphml);
  CHECK(slurp(graphml).rfind("<?xml", 0) == 0);
  std::remove(graphml.c_str());
}

TEST_CASE("help and text output say what holds: hybrid fidelity, --no-boundaries, no rows, one trial, packet level's "
          "in-switch reduction",
          "[cli][options]")
{
  const auto run_help = spansim("run --help");
  CHECK(run_help.out.find("analytical, flow, packet, hybrid") != std::string::npos);
  const auto describe_help = spansim("topology describe --help");
  INFO(describe_help.out);
  CHECK(describe_help.out.find("--no-boundaries ") != std::string::npos);
  CHECK(describe_help.out.find("{false}") == std::string::npos);
  CHECK(spansim("topology describe hgx-h100-pod --no-boundaries").out.find("Capacity out of") == std::string::npos);
  // One fit row and no check row: the check MAPE is no figure.
  const auto v = spansim("validate --only mpt-7b-8k-8xa100 --no-loo --workers 1");
  INFO(v.err);
  REQUIRE(v.exit_code == 0);
  CHECK(v.out.find("check rows - (0)") != std::string::npos);
  CHECK(v.out.find("0.0% (0)") == std::string::npos);
  // One trial has no spread, in the table and in JSON (no standard deviation rather than a 0 that reads as a
  // certain figure).
  const std::string one_trial = "reliability " + std::string(SPANSIM_SOURCE_DIR) +
                                "/examples/scenarios/llama3-405b-24k-reliability.json --days 30 --trials 1";
  const auto one = spansim(one_trial);
  INFO(one.err);
  REQUIRE(one.exit_code == 0);
  CHECK(one.out.find("one trial: no spread") != std::string::npos);
  CHECK(one.out.find("+- ") == std::string::npos);
  const auto one_json = spansim(one_trial + " --json");
  REQUIRE(one_json.exit_code == 0);
  const auto outcome = nlohmann::json::parse(one_json.out)["outcome"];
  CHECK(outcome["ettr_stddev"].is_null());
  CHECK(outcome["trials"] == 1);
  // What packet level cannot carry is said: an NVLSTree all-reduce's in-switch reduction, in the row and the table;
  // a ring's packet row says nothing of it.
  const auto nvls = spansim("collective -t dgx-h100 --ranks 16 --sizes 1MiB --fidelity packet --json");
  INFO(nvls.err);
  REQUIRE(nvls.exit_code == 0);
  const auto row = nlohmann::json::parse(nvls.out)["results"][0];
  CHECK(row["algorithm"] == "nvls-tree");
  CHECK(row["packet"]["approximated"].get<std::string>().find("not simulated at packet level") != std::string::npos);
  CHECK(nlohmann::json::parse(nvls.out)["engines"]["packet"].contains("in_switch_reduction"));
  CHECK(
      spansim("collective -t dgx-h100 --ranks 16 --sizes 1MiB --fidelity packet").out.find("not simulated at packet") !=
      std::string::npos);
  const auto ring = spansim("collective -t dgx-h100 --ranks 16 --sizes 1MiB --algo ring --fidelity packet --json");
  REQUIRE(ring.exit_code == 0);
  CHECK_FALSE(nlohmann::json::parse(ring.out)["results"][0]["packet"].contains("approximated"));
}

TEST_CASE("workload describe on a trace read without a model prints no model, tokens or MFU, as run does",
          "[cli][traces]")
{
  const std::string dir = "/tmp/spansim-trace-only-" + std::to_string(::getpid());
  std::system(("mkdir -p " + dir).c_str());
  std::ofstream(dir + "/job.json") << nlohmann::json{
      {"name", "astra-sim-all-gather"},
      {"kind", "chakra"},
      {"trace", std::string(SPANSIM_SOURCE_DIR) + "/tests/data/foreign/astra-sim/all_gather_16npus_1MB/"
                                                  "all_gather"},
      {"gpu", "h100"}}.dump();
  const auto r = spansim("workload describe " + dir + "/job.json");
  INFO(r.err << r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("trace-only") == std::string::npos); // the placeholder model's name and size stay out
  CHECK(r.out.find("B params") == std::string::npos);
  CHECK(r.out.find("nan") == std::string::npos);
  const auto json = spansim("workload describe " + dir + "/job.json --json");
  REQUIRE(json.exit_code == 0);
  CHECK(nlohmann::json::parse(json.out)["tokens_per_step"].is_null());
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("tables escape control characters of names from input files, as error messages do", "[cli]")
{
  // A region named with a terminal escape: topology describe shows it escaped, never the raw byte.
  auto topo = nlohmann::json::parse(std::ifstream(std::string(SPANSIM_SOURCE_DIR) + "/tests/data/tiny.json"));
  topo["regions"][0]["name"] = "r\x1b[31m0";
  const auto path =
      (std::filesystem::temp_directory_path() / ("ctrl-" + std::to_string(::getpid()) + ".json")).string();
  std::ofstream(path) << topo.dump();
  const auto r = spansim("topology describe " + path);
  std::filesystem::remove(path);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find('\x1b') == std::string::npos);
  CHECK(r.out.find("region r\\u001b[31m0") != std::string::npos);
}

TEST_CASE("optimize --slurm records carry their search's identity: another search's record of the same point is "
          "not trusted",
          "[cli]")
{
  // Two searches of one space, on H100 and on H200: their first phases name their records by the point alone, so
  // the first points' records have the same file name. A dry run evaluates one point here and records it.
  const auto dir = std::filesystem::temp_directory_path() / ("records-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto spec = nlohmann::json::parse(
      std::ifstream(std::string(SPANSIM_SOURCE_DIR) + "/examples/optimize/llama3-8b-two-regions.json"));
  std::ofstream((dir / "h100.json").string()) << spec.dump();
  spec["gpu"] = "h200";
  std::ofstream((dir / "h200.json").string()) << spec.dump();
  auto found = [&](const std::string& name) {
    const auto r = spansim("optimize " + (dir / (name + ".json")).string() + " --out " + (dir / name).string() +
                           " --slurm-dry-run --json");
    REQUIRE(r.exit_code == 0);
    return nlohmann::json::parse(r.out)["phase"]["found"].get<int>();
  };
  CHECK(found("h100") == 0);
  CHECK(found("h200") == 0);
  CHECK(found("h100") == 1); // its own record answers
  // The H100 search's records copied over the H200 search's: same names, another search's identity.
  int copied = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "h100" / "slurm" / "records")) {
    std::filesystem::copy_file(e.path(), dir / "h200" / "slurm" / "records" / e.path().filename(),
                               std::filesystem::copy_options::overwrite_existing);
    ++copied;
  }
  REQUIRE(copied >= 1);
  CHECK(found("h200") == 0);
  std::filesystem::remove_all(dir);
}
