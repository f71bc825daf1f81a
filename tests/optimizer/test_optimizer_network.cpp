// The optimizer's network-layer knobs (compression, DiLoCo, queue pairs, long-haul capacity) against an exhaustive
// flow-fidelity search; the capacity front; scenarios of such points re-run. Slow: two searches at flow level.
#include "optimizer/optimizer.hpp"
#include "scenario/scenario.hpp"

#include "tests/optimizer/support_optimizer.hpp"

#include <catch2/catch.hpp>

#include <iostream>
#include <limits>
#include <map>

using namespace spansim;
using nlohmann::json;
using spansim::test::small_space;
using spansim::test::spec_from;

TEST_CASE("network-layer knobs: the pick against the exhaustive optimum, a monotone capacity front, and scenarios "
          "that re-run to their times",
          "[optimizer][network]")
{
  // Two regions 1,000 km apart with a thin long haul: compression, DiLoCo, queue pairs and capacity all matter.
  // A quarter of small_space's batch (32 sequences): the 72 points' flow runs take a quarter of the time, and the
  // thinner compute only makes the network knobs matter more.
  json j                       = small_space();
  j["batch"]["global_tokens"]  = 262144;
  j["multipath"]               = {{"routing", "ecmp"}};
  j["search"]["tp"]            = {8};
  j["search"]["data_parallel"] = {"fsdp"};
  j["search"]["qps"]           = {1, 4};
  j["search"]["compression"]   = json::array({"none", json::array({{{"dim", "dp"},
                                                                    {"across", "region"},
                                                                    {"ratio", 4},
                                                                    {"compress_rate", "500GBps"},
                                                                    {"decompress_rate", "500GBps"}}})});
  j["search"]["diloco"]        = json::array({"none", {{"every", 8}}});
  j["search"]["inter_region"]  = {"0.4Tbps", "1.6Tbps", "6.4Tbps"};
  j["capacity_cost"]           = {{"per_tbps_inter_region", 2.5}, {"unit", "M$"}, {"within", 0.05}, {"budget", 5}};
  auto spec                    = spec_from(j);
  const auto searched          = spansim::test::pick_and_exhaustive(spec);
  const auto& picked           = searched.picked;
  const auto& exhaustive       = searched.exhaustive;
  const double best = searched.best, pick = searched.pick;
  std::cout << "network knobs: exhaustive optimum " << best << " s (" << exhaustive.ranked.front().point.label()
            << "), pick " << pick << " s (" << picked.ranked.front().point.label() << "), over "
            << exhaustive.ranked.size() << " feasible points\n";
  CHECK(pick <= best * 1.02);

  // More capacity is never slower: the exhaustive best at each inter-region capacity, cheapest first.
  std::map<double, double> best_at;
  for (const auto& e : exhaustive.ranked) {
    auto [it, fresh] = best_at.emplace(e.point.inter_region, *e.refined);
    if (!fresh)
      it->second = std::min(it->second, *e.refined);
  }
  REQUIRE(best_at.size() == 3);
  double previous = std::numeric_limits<double>::infinity();
  for (auto [capacity, step] : best_at) {
    std::cout << "inter-region " << capacity * 8 / 1e12 << " Tbps: best " << step << " s\n";
    CHECK(step <= previous * (1 + 1e-9));
    previous = step;
  }
  // The optimizer's front: one choice per capacity, costed at 2.5 per Tbps of inter-region link, cheapest first.
  REQUIRE(exhaustive.capacity.size() == 3);
  topology::Topology as_built(spec.topology);
  int inter_region_links = 0;
  for (const auto& l : as_built.links())
    inter_region_links += l.tier == topology::Tier::inter_region;
  for (std::size_t k = 0; k < exhaustive.capacity.size(); ++k) {
    const auto& c = exhaustive.capacity[k];
    CHECK(c.cost == Approx(2.5 * inter_region_links * c.inter_region * 8 / 1e12).epsilon(1e-12));
    CHECK(*c.best.refined == Approx(best_at[c.inter_region]).epsilon(1e-9));
    if (k > 0)
      CHECK(c.cost > exhaustive.capacity[k - 1].cost);
  }
  // The front: a choice is on it when it is faster than every cheaper one.
  double fastest_cheaper = std::numeric_limits<double>::infinity();
  for (const auto& c : exhaustive.capacity) {
    CHECK(c.on_front == (c.best.effective_step() < fastest_cheaper));
    fastest_cheaper = std::min(fastest_cheaper, c.best.effective_step());
  }
  REQUIRE(exhaustive.cheapest_within);
  CHECK(exhaustive.capacity[*exhaustive.cheapest_within].best.effective_step() <= best * 1.05);
  for (std::size_t k = 0; k < *exhaustive.cheapest_within; ++k)
    CHECK(exhaustive.capacity[k].best.effective_step() > best * 1.05);
  REQUIRE(exhaustive.best_in_budget);
  CHECK(exhaustive.capacity[*exhaustive.best_in_budget].cost <= 5);

  // The explanation names the best change in the network dimension, at the refine fidelity.
  bool network = false;
  for (const auto& d : exhaustive.by_dimension) {
    std::cout << name_of(d.dimension) << ": " << d.change << " -> " << *d.evaluation.refined << " s (default "
              << *exhaustive.baseline.refined << " s)\n";
    network = network || d.dimension == optimizer::SearchDimension::network;
  }
  CHECK(network);
  CHECK(exhaustive.baseline.point.compression.empty());
  CHECK(!exhaustive.baseline.point.diloco);

  // A compressed point and a DiLoCo point re-run from their scenarios to the times the search gave them.
  bool compressed = false, diloco = false;
  for (const auto& e : exhaustive.ranked) {
    const bool c = !e.point.compression.empty() && !e.point.diloco && !compressed;
    const bool d = e.point.diloco && !diloco;
    if (!c && !d)
      continue;
    const auto scenario = optimizer::scenario_json(spec, e.point);
    const auto rerun    = scenario::run_scenario(scenario::parse_scenario(scenario, "point.json"));
    const double step   = rerun.diloco ? rerun.diloco->mean_step : rerun.result.step_time;
    std::cout << e.point.label() << ": " << *e.refined << " s in the search, " << step << " s re-run\n";
    CHECK(step == Approx(*e.refined).epsilon(1e-9));
    compressed = compressed || c;
    diloco     = diloco || d;
  }
  CHECK(compressed);
  CHECK(diloco);
}
