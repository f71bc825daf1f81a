/// @file
/// @brief Fuzz target: an imported GraphML topology; small ones are also built and routed.
#include "fuzz/fuzz.hpp"
#include "topology/graph_io.hpp"
#include "topology/topology.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  const std::string path = spansim::fuzz::write_input(data, size, "graph.graphml");
  return spansim::fuzz::run_parser([&] {
    auto spec = spansim::topology::detail::load_graphml_topology(path, {});
    if (spansim::fuzz::size_of(spec) <= 2048)
      spansim::topology::Topology topo(std::move(spec));
  });
}
