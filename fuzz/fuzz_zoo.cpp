/// @file
/// @brief Fuzz target: a Topology Zoo GraphML file imported with a GPU building at its first linked node; small
/// results are also read back as a topology and routed.
#include "fuzz/fuzz.hpp"
#include "topology/topology.hpp"

#include <map>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  const std::string path = spansim::fuzz::write_input(data, size, "zoo.graphml");
  return spansim::fuzz::run_parser([&] {
    spansim::topology::ZooOptions o;
    o.sites           = {"0"}; // the Zoo numbers its nodes from 0
    const auto zoo    = spansim::topology::import_zoo(path, o);
    const auto& links = zoo.topology["graph"]["links"];
    if (links.size() <= 4096)
      spansim::topology::Topology topo(spansim::topology::parse_topology_spec(zoo.topology, path));
  });
}
