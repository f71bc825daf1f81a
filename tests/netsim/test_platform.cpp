// The SimGrid platform routes exactly as the topology graph does, at every level of the hierarchy.
#include "netsim/netsim.hpp"
#include "topology/topology.hpp"

#include <catch2/catch.hpp>

using namespace spansim;

TEST_CASE("SimGrid routes equal Topology::route on every level of tiny", "[platform]")
{
  topology::Topology t(topology::load_topology_spec(std::string(SPANSIM_SOURCE_DIR) + "/tests/data/tiny.json"));
  std::vector<std::pair<int, int>> pairs;
  for (int d : {1, 4, 8, 5, 16, 32, 48, 64, 127})
    pairs.emplace_back(0, d);
  for (int s : {1, 4, 8, 5, 16, 32, 48, 64, 127})
    pairs.emplace_back(s, 0);
  pairs.emplace_back(70, 99);
  auto routes = netsim::simgrid_routes(t, pairs);
  REQUIRE(routes.size() == pairs.size());
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    auto expected = netsim::route_link_names(t, t.route(pairs[i].first, pairs[i].second));
    std::string e, a;
    for (const auto& n : expected)
      e += n + " ";
    for (const auto& n : routes[i])
      a += n + " ";
    INFO(pairs[i].first << " -> " << pairs[i].second << "\nexpected: " << e << "\nactual:   " << a);
    CHECK(routes[i] == expected);
  }
}
