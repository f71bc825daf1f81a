/// @file
/// @brief Fuzz target: a topology spec file (templates, regions, overrides, JSON graphs); small ones are also built.
#include "fuzz/fuzz.hpp"
#include "topology/topology.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  const std::string path = spansim::fuzz::write_input(data, size, "topology.json");
  return spansim::fuzz::run_parser([&] {
    auto spec = spansim::topology::load_topology_spec(path);
    if (spansim::fuzz::size_of(spec) <= 2048)
      spansim::topology::Topology topo(std::move(spec));
  });
}
