#pragma once
// Internal to topology/: reading explicit graphs (a spec's "graph" block, GraphML files).

#include "topology/topology.hpp"

namespace spansim::topology::detail {

/// @brief Largest GraphML file in XML elements (vertices, links and their data children): Boost's XML reading holds
/// about 3.5 KB per element.
inline constexpr std::size_t kMaxGraphmlElements = 1'000'000;

/// @brief Refuses GraphML text over the vertex, link or element limits before it is parsed (Boost's XML reading
/// holds about 3.5 KB per element). @throws SpecError naming `path` and the counts.
void check_graphml_size(const std::string& text, const std::string& path);

/// @brief Fills `s` from a topology document with a "graph": its regions, its buildings' GPU types and the
/// graph itself (inline, or a GraphML or JSON file it names). @throws SpecError at the offending JSON path.
void parse_graph_topology(spec::ObjectReader& root, TopologySpec& s);

/// @brief A topology read straight from a GraphML file: regions and buildings come from the vertices' labels.
TopologySpec load_graphml_topology(const std::string& path, const spec::Location& referrer);

} // namespace spansim::topology::detail
