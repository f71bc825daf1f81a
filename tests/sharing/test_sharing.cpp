// Several jobs on one network against closed forms: two identical jobs in phase on one bottleneck link each get
// half of it; a job whose links no other job uses is unchanged; placements that overlap are refused.
#include "sharing/sharing.hpp"

#include "common/error.hpp"

#include "tests/support.hpp"
#include "tests/support_job.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>

using namespace spansim;
using nlohmann::json;
using spansim::test::expect_within;

namespace {

// A 130M-parameter model, data parallel over `dp` GPUs with DDP: a step is a little compute and one gradient
// all-reduce, which over a slow link between the buildings is almost all of it.
json small_job(int dp)
{
  json model   = test::small_narrow_model();
  model["mlp"] = "swiglu";
  return {{"name", "small"},
          {"model", model},
          {"gpu", "h100"},
          {"gpus", dp},
          {"parallelism", {{"tp", 1}, {"pp", 1}, {"dp", dp}, {"data_parallel", "ddp"}}},
          {"batch", {{"global_tokens", 2048 * dp}, {"sequence_length", 2048}, {"micro_batch", 1}}},
          {"schedule", {{"kind", "1f1b"}}},
          {"recompute", "none"}};
}

json shared(json jobs)
{
  return {{"name", "test-shared"}, {"topology", "two-buildings"}, {"window", {{"steps", 3}}}, {"jobs", jobs}};
}

// Two buildings, w and e, of 4 one-GPU nodes on one switch each (400 Gb/s NICs), the switches joined by one
// 1 GB/s link: the only link two buildings' GPUs share.
sharing::SharedSpec parse(const json& doc)
{
  auto spec = sharing::parse_shared(doc, "shared.json");
  test::TwoSites sites;
  sites.gpus     = 4;
  sites.parallel = 1;
  sites.capacity = "8Gbps";
  sites.latency  = "10us";
  spec.topology  = test::two_sites(sites);
  return spec;
}

} // namespace

TEST_CASE("two identical jobs on one bottleneck link each get half of it", "[sharing]")
{
  // Each job: GPU i of w and GPU i of e, DP 2 across the 1 GB/s link. In phase (both start at 0 and are alike),
  // each job's all-reduce moves its bytes over the link at half the rate: the step grows by the bytes one
  // direction carries over the link's capacity, once more.
  const json jobs     = json::array({{{"name", "a"}, {"job", small_job(2)}, {"placement", {{"buildings", {"w", "e"}}}}},
                                     {{"name", "b"}, {"job", small_job(2)}, {"placement", {{"buildings", {"w", "e"}}}}}});
  const auto fidelity = GENERATE(as<std::string>{}, "analytical", "flow");
  auto doc            = shared(jobs);
  doc["fidelity"]     = fidelity;
  std::cout << "at " << fidelity << " fidelity\n";
  const auto run = sharing::run_shared(parse(doc));
  REQUIRE(run.jobs.size() == 2);
  REQUIRE(run.boundaries.size() == 1);
  const double capacity = 1e9; // 8 Gb/s
  for (std::size_t j = 0; j < 2; ++j) {
    const auto& o          = run.jobs[j];
    const double both_ways = run.boundaries[0].bytes[j];
    const double expected  = o.alone_step + both_ways / 2 / capacity;
    std::cout << o.name << ": alone " << o.alone_step << " s, " << both_ways / 2 << " bytes each way over the link\n";
    expect_within("job " + o.name + " together: alone + its bytes one way / capacity", expected, o.shared_step, 0.01);
    expect_within("job " + o.name + " slowdown (link-bound step: about 2)", 2.0, o.slowdown, 0.05);
  }
  expect_within("the two jobs alike", run.jobs[0].shared_step, run.jobs[1].shared_step, 1e-9);
}

TEST_CASE("a job on links no other job uses is unchanged", "[sharing]")
{
  // a crosses the link; b runs on GPUs of w alone (their NICs and switch ports are their own).
  const json jobs = json::array({{{"name", "a"}, {"job", small_job(2)}, {"placement", {{"buildings", {"w", "e"}}}}},
                                 {{"name", "b"}, {"job", small_job(2)}, {"placement", {{"buildings", {"w"}}}}}});
  const auto run  = sharing::run_shared(parse(shared(jobs)));
  for (const auto& o : run.jobs) {
    expect_within("job " + o.name + " together against alone", o.alone_step, o.shared_step, 1e-9);
    double previous = 0;
    for (double end : o.step_ends) {
      INFO("job " << o.name << " step ending at " << end);
      CHECK(std::fabs((end - previous) - o.alone_step) <= 1e-9 * o.alone_step);
      previous = end;
    }
  }
  CHECK(run.boundaries.size() == 1);
  CHECK(run.boundaries[0].bytes[1] == 0);
  // The window: three steps of the slower job, each job one step past it.
  const double slow = std::max(run.jobs[0].alone_step, run.jobs[1].alone_step);
  expect_within("window = 3 steps of the slowest", 3 * slow, run.window, 1e-12);
}

TEST_CASE("jobs take the next free GPUs, and overlapping ranges are refused naming the other job", "[sharing]")
{
  const json next = json::array({{{"name", "a"}, {"job", small_job(2)}, {"placement", {{"first_gpu", 0}}}},
                                 {{"name", "b"}, {"job", small_job(2)}}});
  const auto run  = sharing::run_shared(parse(shared(next)));
  CHECK(run.jobs[0].first_gpu == 0);
  CHECK(run.jobs[0].last_gpu == 1);
  CHECK(run.jobs[1].first_gpu == 2); // the next free GPU
  CHECK(run.jobs[1].last_gpu == 3);
  // The next free GPUs are the first run long enough: GPU 0 alone is free before a's GPUs 1 and 2.
  const json gap  = json::array({{{"name", "a"}, {"job", small_job(2)}, {"placement", {{"first_gpu", 1}}}},
                                 {{"name", "b"}, {"job", small_job(2)}}});
  const auto gaps = sharing::run_shared(parse(shared(gap)));
  CHECK(gaps.jobs[1].first_gpu == 3);
  CHECK(gaps.jobs[1].last_gpu == 4);
  for (const auto& o : gaps.jobs) {
    CHECK(o.measured_under_load);
    CHECK_FALSE(o.all_to_all_isolated);
  }

  const json overlap = json::array({{{"name", "a"}, {"job", small_job(2)}, {"placement", {{"first_gpu", 0}}}},
                                    {{"name", "b"}, {"job", small_job(2)}, {"placement", {{"first_gpu", 1}}}}});
  try {
    sharing::run_shared(parse(shared(overlap)));
    FAIL("an overlapping range was accepted");
  } catch (const SpecError& e) {
    std::cout << e.what() << "\n";
    CHECK(e.json_path() == "$.jobs[1].placement.first_gpu");
    CHECK(std::string(e.what()).find("overlap job \"a\"") != std::string::npos);
  }
  // Buildings with too few free GPUs left say how many are free.
  const json full = json::array({{{"name", "a"}, {"job", small_job(8)}, {"placement", {{"buildings", {"w", "e"}}}}},
                                 {{"name", "b"}, {"job", small_job(2)}, {"placement", {{"buildings", {"w", "e"}}}}}});
  CHECK_THROWS_WITH(sharing::run_shared(parse(shared(full))), Catch::Contains("0 of them free"));
}

TEST_CASE("placing a second job around a first: inside one building beats crossing the shared link", "[sharing]")
{
  // a crosses the link; b (DP 2) can go in w, in e, or across both. Across, both jobs are link-bound and halve
  // each other's share (slowdown about 2, as above); inside one building neither is slowed.
  const json jobs   = json::array({{{"name", "a"}, {"job", small_job(2)}, {"placement", {{"buildings", {"w", "e"}}}}},
                                   {{"name", "b"}, {"job", small_job(2)}}});
  const auto spec   = parse(shared(jobs));
  const auto search = sharing::place_around(spec, "b");
  REQUIRE(search.options.size() == 3); // {w}, {e}, {w, e}
  CHECK(search.fixed == std::vector<std::string>{"a"});
  for (std::size_t i = 0; i < 2; ++i) {
    INFO("option " << i);
    CHECK(search.options[i].buildings.size() == 1);
    expect_within("inside one building: no one slowed", 1.0, search.options[i].weighted_slowdown, 1e-9);
  }
  const auto& across = search.options[2];
  CHECK(across.buildings == std::vector<std::string>{"w", "e"});
  expect_within("across the link: a slowed about 2x", 2.0, across.slowdowns[0], 0.05);
  expect_within("across the link: b slowed about 2x", 2.0, across.slowdown, 0.05);
  CHECK_THROWS_WITH(sharing::place_around(spec, "c"), Catch::Contains("no job \"c\"") && Catch::Contains("a, b"));
}
