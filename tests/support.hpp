#pragma once
// Helpers shared by the tests: closed-form checks that print expected against actual.

#include "topology/topology.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>
#include <string>

namespace spansim::test {

/// @brief Checks |actual - expected| / expected <= tolerance, printing both and the error either way.
inline void expect_within(const std::string& what, double expected, double actual, double tolerance)
{
  const double rel = std::fabs(actual - expected) / std::fabs(expected);
  std::cout << what << ": expected " << expected << ", actual " << actual << " (rel. error " << rel << ", tolerance "
            << tolerance << ")\n";
  INFO(what << ": expected " << expected << ", actual " << actual << ", rel. error " << rel);
  CHECK(rel <= tolerance);
}

/// @brief tests/data/tiny.json: 128 GPUs, 2 regions x 2 buildings x 2 pods x 4 nodes x 4 GPUs.
inline topology::Topology tiny_topology()
{
  return topology::Topology(topology::load_topology_spec(std::string(SPANSIM_SOURCE_DIR) + "/tests/data/tiny.json"));
}

} // namespace spansim::test
