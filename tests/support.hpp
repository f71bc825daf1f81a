#pragma once
// Helpers shared by the tests: closed-form checks that print expected against actual.

#include "topology/topology.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>
#include <string>

namespace spansim::test {

/// @brief Checks |actual - expected| / expected <= tolerance, printing both and the error either way (the absolute
/// error where 0 is expected).
inline void expect_within(const std::string& what, double expected, double actual, double tolerance)
{
  const double error = std::fabs(actual - expected);
  const double rel   = expected != 0 ? error / std::fabs(expected) : error;
  std::cout << what << ": expected " << expected << ", actual " << actual << " (rel. error " << rel << ", tolerance "
            << tolerance << ")\n";
  INFO(what << ": expected " << expected << ", actual " << actual << ", rel. error " << rel);
  CHECK(rel <= tolerance);
}

/// @brief Runs an engine twice on the same input (`run` does it) and checks that every op ends at the same time in
/// both runs; returns the first run's result.
template <class Run>
auto check_deterministic(Run run)
{
  auto a = run();
  auto b = run();
  REQUIRE(a.ops.size() == b.ops.size());
  for (std::size_t i = 0; i < a.ops.size(); ++i)
    CHECK(a.ops[i].end == b.ops[i].end);
  return a;
}

/// @brief Two buildings, w and e, of `gpus` one-GPU nodes on one switch each (400 Gb/s NICs, 1 us), the switches
/// joined by `parallel` links of `capacity` and `latency`.
struct TwoSites {
  int gpus             = 2;
  int parallel         = 2;
  std::string capacity = "100Gbps";
  std::string latency  = "10us";
  std::uint64_t seed   = 1;
  std::string routing  = "ecmp"; ///< "ecmp" or "spray"
  int qps              = 1;
};

/// @brief The TwoSites graph as a topology spec (multipath set as asked).
inline topology::TopologySpec two_sites(const TwoSites& p)
{
  using nlohmann::json;
  json vertices = json::array(), links = json::array();
  for (const char* b : {"w", "e"}) {
    vertices.push_back({{"id", std::string(b) + "/sw"}, {"kind", "leaf"}, {"building", b}});
    for (int g = 0; g < p.gpus; ++g) {
      const std::string id = std::string(b) + "/g" + std::to_string(g);
      vertices.push_back({{"id", id}, {"kind", "gpu"}, {"building", b}, {"node", id}});
      links.push_back({{"a", id}, {"b", std::string(b) + "/sw"}, {"bandwidth", "400Gbps"}, {"latency", "1us"}});
    }
  }
  for (int l = 0; l < p.parallel; ++l)
    links.push_back({{"a", "w/sw"}, {"b", "e/sw"}, {"bandwidth", p.capacity}, {"latency", p.latency}});
  json doc             = {{"name", "two-sites"},
                          {"regions", json::array({{{"name", "r"}, {"buildings", {"w", "e"}}}})},
                          {"graph", {{"vertices", vertices}, {"links", links}}}};
  auto spec            = topology::parse_topology_spec(doc, "two-sites.json");
  spec.multipath.ecmp  = true;
  spec.multipath.spray = p.routing == "spray";
  spec.multipath.seed  = p.seed;
  spec.multipath.qps   = p.qps;
  return spec;
}

/// @brief tests/data/tiny.json: 128 GPUs, 2 regions x 2 buildings x 2 pods x 4 nodes x 4 GPUs.
inline topology::Topology tiny_topology()
{
  return topology::Topology(topology::load_topology_spec(std::string(SPANSIM_SOURCE_DIR) + "/tests/data/tiny.json"));
}

} // namespace spansim::test
