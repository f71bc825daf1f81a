// The report's parallel-link groups under ECMP: long links split into wavelengths and each leaf's uplinks over
// explicit spines, checked against the link bytes they summarize.
#include "report/report.hpp"
#include "scenario/scenario.hpp"

#include "tests/support_job.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <iostream>
#include <map>

using nlohmann::json;
namespace sc = spansim::scenario;
namespace tp = spansim::topology;

TEST_CASE("report: each parallel group's busiest and mean bytes, and the most uneven leaves' uplinks",
          "[scenario][multipath]")
{
  json doc           = {{"name", "parallel-report"},
                        {"topology", std::string(SPANSIM_SOURCE_DIR) + "/tests/data/tiny.json"},
                        {"job", spansim::test::small_job_json(32, {{"tp", 4}, {"pp", 1}, {"dp", 8}, {"data_parallel", "ddp"}})},
                        {"placement", {{"buildings", {"r0-b0", "r0-b1"}}}},
                        {"fidelity", "analytical"},
                        {"multipath", {{"routing", "ecmp"}, {"seed", 3}, {"long_links", 4}, {"spines", "explicit"}}}};
  const auto run     = sc::run_scenario(sc::parse_scenario(doc, "parallel-report.json"));
  const auto network = spansim::report::network_report(run);
  const auto& topo   = run.placed->topology();
  const auto& bytes  = run.result.link_bytes;

  // The same groups, recomputed from the links: (ends) -> links, and leaf -> its uplinks.
  std::map<std::string, std::vector<int>> expected;
  std::map<std::pair<int, int>, std::vector<int>> by_ends;
  for (std::size_t l = 0; l < topo.links().size(); ++l)
    by_ends[std::minmax(topo.links()[l].a, topo.links()[l].b)].push_back(static_cast<int>(l));
  for (const auto& [ends, group] : by_ends)
    if (group.size() > 1)
      expected[topo.vertex_name(ends.first) + " -- " + topo.vertex_name(ends.second)] = group;
  for (std::size_t l = 0; l < topo.links().size(); ++l)
    if (topo.links()[l].tier == tp::Tier::leaf_spine)
      expected[topo.vertex_name(topo.links()[l].a) + " -- spines"].push_back(static_cast<int>(l));

  int long_groups = 0, leaf_rows = 0;
  double previous_leaf_imbalance = 1e300;
  for (const auto& p : network.parallel) {
    INFO(p.ends);
    REQUIRE(expected.count(p.ends) == 1);
    const auto& group = expected.at(p.ends);
    double max = 0, sum = 0;
    for (int l : group) {
      max = std::max(max, bytes[2 * l] + bytes[2 * l + 1]);
      sum += bytes[2 * l] + bytes[2 * l + 1];
    }
    std::cout << p.ends << ": " << p.links << " links, busiest " << p.max_bytes << " B against mean " << p.mean_bytes
              << " B (" << p.imbalance() << "x)\n";
    CHECK(p.links == static_cast<int>(group.size()));
    CHECK(p.max_bytes == Approx(max).epsilon(1e-12));
    CHECK(p.mean_bytes == Approx(sum / group.size()).epsilon(1e-12));
    CHECK(p.imbalance() >= 1);
    if (p.ends.ends_with(" -- spines")) {
      ++leaf_rows;
      CHECK(p.mean_bytes > 0);
      CHECK(p.imbalance() <= previous_leaf_imbalance); // most uneven first
      previous_leaf_imbalance = p.imbalance();
    } else {
      ++long_groups;
      CHECK(p.links == 4); // the wavelengths asked for
    }
  }
  // Four wavelengths between every pair of buildings in a region, and between the regions' uplinks.
  CHECK(long_groups >= 2);
  CHECK(leaf_rows >= 1);
  CHECK(leaf_rows <= 10);
}
