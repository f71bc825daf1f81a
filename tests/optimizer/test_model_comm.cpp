// The optimizer's model-parallel communication knobs: Transformer Engine's TP overlap and the context-parallel
// variants (all-gather, ring, Ulysses all-to-all, hierarchical a2a+p2p) searched with the degrees.
#include "common/error.hpp"
#include "optimizer/indexed_space.hpp"
#include "optimizer/optimizer.hpp"
#include "scenario/scenario.hpp"

#include "tests/optimizer/support_optimizer.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <map>
#include <set>

using namespace spansim;
using nlohmann::json;

namespace {

// Llama 3 8B at 64K tokens on 32 H100s of one building: long enough that context parallelism pays, small enough to
// search every point at flow fidelity.
json long_context_space()
{
  json j        = test::small_space();
  j["name"]     = "long-context";
  j["topology"] = "two-buildings";
  j.erase("buildings");
  j["batch"]           = {{"global_sequences", 4}, {"sequence_length", 65536}};
  j["search"]          = {{"tp", {1, 2, 4, 8}},
                          {"cp", {1, 2, 4, 8}},
                          {"pp", {1}},
                          {"data_parallel", {"fsdp"}},
                          {"schedule", {"1f1b"}},
                          {"recompute", {"selective"}},
                          {"tp_overlap", {false, true}},
                          {"cp_comm", {"allgather", "ring", "a2a", "a2a+p2p"}}};
  j["top_k"]           = 3;
  j["refine_fidelity"] = "analytical";
  return j;
}

} // namespace

TEST_CASE("a2a+p2p's all-to-all group is the largest divisor of cp that fits in a node and splits the heads",
          "[optimizer]")
{
  struct Case {
    int cp, tp, node, heads, expected;
  };
  for (const Case c : {Case{8, 2, 8, 16, 4}, Case{8, 1, 8, 32, 4}, Case{4, 1, 8, 32, 2}, Case{6, 2, 8, 48, 3},
                       Case{8, 8, 8, 4, 0}, Case{16, 1, 72, 64, 8}, Case{2, 1, 8, 32, 0}, Case{12, 4, 72, 24, 6},
                       Case{16, 1, 8, 12, 4}, Case{6, 1, 8, 8, 2}, Case{8, 1, 8, 3, 0}}) {
    const int actual = optimizer::node_cp_a2a(c.cp, c.tp, c.node, c.heads);
    std::cout << "cp " << c.cp << " tp " << c.tp << " node " << c.node << " heads " << c.heads << ": expected "
              << c.expected << ", actual " << actual << "\n";
    CHECK(actual == c.expected);
  }
}

TEST_CASE("TP overlap and CP variants: canonical points, the pick against the exhaustive optimum, ring never slower "
          "than all-gather, scenarios that re-run to their times",
          "[optimizer][cp]")
{
  auto spec = test::spec_from(long_context_space());
  const optimizer::IndexedSpace space(spec);
  // The knobs collapse where they do not apply: no TP overlap at tp 1, all-gather at cp 1; every canonical
  // combination a distinct point.
  std::set<std::string> labels;
  const auto points = test::canonical_points(space);
  for (const auto& p : points) {
    labels.insert(p.label());
    CHECK((p.cp > 1 || p.cp_comm == workload::CpComm::allgather));
    CHECK((p.tp > 1 || !p.tp_overlap));
    // Each travels to a farm's task and back.
    CHECK(optimizer::decode_point(spec, optimizer::encode_point(spec, p)) == p);
  }
  std::cout << space.size() << " combinations, " << points.size() << " canonical points\n";
  CHECK(labels.size() == points.size());

  const auto searched = test::pick_and_exhaustive(spec);
  std::cout << "exhaustive optimum " << searched.best << " s (" << searched.exhaustive.ranked.front().point.label()
            << "), pick " << searched.pick << " s\n";
  CHECK(searched.pick <= searched.best * 1.02);
  // a2a+p2p has no group inside a node of 8 at tp 8 or at cp 2: such points are pruned as cp-comm, the others
  // (tp 4 cp 4, tp 1 cp 8, ...) run.
  CHECK(searched.exhaustive.pruned.count("cp-comm") == 1);
  int hierarchical = 0;
  for (const auto& e : searched.exhaustive.ranked)
    if (e.point.cp_comm == workload::CpComm::a2a_p2p) {
      INFO(e.point.label());
      CHECK(e.point.tp < 8);
      CHECK(e.point.cp > 2);
      CHECK(e.point.cp_a2a * e.point.tp <= 8);
      ++hierarchical;
    }
  CHECK(hierarchical > 0);

  // A ring passes the all-gather's bytes under the attention: never slower than the same point all-gathering.
  std::map<std::string, double> by_label;
  for (const auto& e : searched.exhaustive.ranked)
    by_label[e.point.label()] = *e.refined;
  int rings = 0, overlaps = 0;
  for (const auto& e : searched.exhaustive.ranked) {
    auto p = e.point;
    if (p.cp_comm == workload::CpComm::ring) {
      p.cp_comm = workload::CpComm::allgather;
      REQUIRE(by_label.count(p.label()) == 1);
      INFO(e.point.label() << ": " << *e.refined << " s, all-gather " << by_label[p.label()] << " s");
      CHECK(*e.refined <= by_label[p.label()] * (1 + 1e-9));
      ++rings;
    }
    p = e.point;
    if (p.tp_overlap) {
      p.tp_overlap = false;
      REQUIRE(by_label.count(p.label()) == 1);
      INFO(e.point.label() << ": " << *e.refined << " s, without overlap " << by_label[p.label()] << " s");
      CHECK(*e.refined <= by_label[p.label()] * (1 + 1e-9));
      ++overlaps;
    }
  }
  std::cout << rings << " ring points, " << overlaps << " overlapped points compared\n";
  CHECK(rings > 0);
  CHECK(overlaps > 0);

  // The scenario written for a hierarchical point with TP overlap carries both and re-runs to its time.
  const auto it = std::find_if(searched.exhaustive.ranked.begin(), searched.exhaustive.ranked.end(), [](const auto& e) {
    return e.point.cp_comm == workload::CpComm::a2a_p2p && e.point.tp_overlap;
  });
  REQUIRE(it != searched.exhaustive.ranked.end());
  const auto scenario = optimizer::scenario_json(spec, it->point);
  const auto& par     = scenario["job"]["parallelism"];
  CHECK(par["cp_comm"] == "a2a+p2p");
  CHECK(par["cp_a2a"] == it->point.cp_a2a);
  CHECK(par["tp_overlap"] == true);
  const auto rerun = scenario::run_scenario(scenario::parse_scenario(scenario, "hierarchical.json"));
  std::cout << it->point.label() << ": " << *it->refined << " s in the search, " << rerun.result.step_time
            << " s re-run from its scenario\n";
  CHECK(rerun.result.step_time == Approx(*it->refined).epsilon(1e-9));
}

TEST_CASE("TP overlap or a CP variant with no degree to apply to is refused at its path", "[optimizer]")
{
  auto j            = long_context_space();
  j["search"]["tp"] = {1};
  j["search"]["cp"] = {1, 2};
  CHECK_THROWS_WITH(test::spec_from(j), Catch::Contains("$.search.tp_overlap") && Catch::Contains("tp 2 or more"));
  j["search"]["tp"] = {2};
  j["search"]["cp"] = {1};
  CHECK_THROWS_WITH(test::spec_from(j), Catch::Contains("$.search.cp_comm") && Catch::Contains("cp 2 or more"));
  j["search"]["cp_comm"] = {"ulysses"};
  CHECK_THROWS_WITH(test::spec_from(j), Catch::Contains("$.search.cp_comm") && Catch::Contains("a2a+p2p"));
}
