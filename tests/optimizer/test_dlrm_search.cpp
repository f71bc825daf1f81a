// The DLRM search: sharding plans and towers on two buildings joined by a slow link.
#include "optimizer/dlrm_search.hpp"

#include "tests/support.hpp"
#include "tests/support_job.hpp"

#include <catch2/catch.hpp>

#include <iostream>

using namespace spansim;
using nlohmann::json;

TEST_CASE("DLRM search: towers per building win over a slow inter-building link, levels that cannot hold them "
          "are skipped",
          "[dlrm][optimizer]")
{
  test::TwoSites sites;
  sites.gpus        = 8;
  sites.parallel    = 1;
  sites.capacity    = "10Gbps";
  auto topology     = test::two_sites(sites);
  json sc           = {{"name", "dlrm-search"},
                       {"topology", "two-buildings"}, // replaced below by the two-site graph
                       {"job",
                        {{"name", "dlrm-s"},
                         {"kind", "dlrm"},
                         {"model", test::small_dlrm_model(16)},
                         {"gpu", "h100"},
                         {"gpus", 16},
                         {"batch", {{"global_samples", 16 * 256}}},
                         {"towers", {{"count", 2}, {"level", "building"}}}}}};
  auto scenario     = scenario::parse_scenario(sc, std::string(SPANSIM_SOURCE_DIR) + "/tests/data/search.json");
  scenario.topology = topology;
  const auto search = optimizer::search_dlrm(scenario);
  double previous   = 0;
  int simulated     = 0;
  for (const auto& c : search.candidates) {
    std::cout << name_of(c.sharding) << ", " << c.towers << " towers per " << name_of(c.level) << ": "
              << (c.refused.empty() ? std::to_string(c.step_time) + " s" : c.refused) << "\n";
    if (!c.refused.empty())
      continue;
    ++simulated;
    CHECK(c.step_time >= previous); // fastest first
    previous = c.step_time;
    // One-GPU nodes hold only towers of one GPU.
    CHECK((c.towers == 0 || c.level != workload::TowerLevel::node || c.towers == 16));
  }
  REQUIRE(simulated >= 3);
  const auto& best = search.candidates.front();
  CHECK(best.towers > 0);
  // Without towers more crosses the slow link than with the best towers.
  for (const auto& c : search.candidates)
    if (c.refused.empty() && c.towers == 0 && c.sharding == best.sharding)
      CHECK(c.boundary_bytes > best.boundary_bytes);
}
