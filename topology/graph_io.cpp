// Reading explicit graphs: a spec's inline "graph" block, or a GraphML file read with Boost.Graph's read_graphml.
// Both end in one GraphSpec whose labels are checked against the regions, and whose links without a tier get
// one from what they join.
#include "topology/graph_io.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/names.hpp"
#include "common/units.hpp"

#include <boost/graph/graphml.hpp>
#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>

#include <cctype>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

namespace spansim::topology::detail {

using spec::Location;
using spec::ObjectReader;

namespace {

std::string join(const std::vector<std::string>& items)
{
  std::string out;
  for (const auto& i : items)
    out += (out.empty() ? "" : ", ") + i;
  return out;
}

/// @brief A graph being read, with where each element came from and which links named their tier.
struct RawGraph {
  GraphSpec graph;
  std::vector<Location> vertex_at;
  std::vector<Location> edge_at;
  std::vector<bool> tier_given;
};

// A link's tier from what it joins: a GPU's links are NVLink (to its NVSwitch) or NIC; links between buildings
// or regions are the long links; inside a building leaf-spine, or the aggregation layer.
Tier infer_tier(const GraphSpec::Vertex& x, const GraphSpec::Vertex& y,
                const std::map<std::string, int>& region_of_building)
{
  if (x.kind == VertexKind::gpu || y.kind == VertexKind::gpu) {
    const auto& other = x.kind == VertexKind::gpu ? y : x;
    return other.kind == VertexKind::nvswitch ? Tier::nvlink : Tier::nic;
  }
  if (x.building.empty() && y.building.empty())
    return Tier::inter_region;
  if (x.building.empty() || y.building.empty())
    return Tier::building_uplink;
  if (region_of_building.at(x.building) != region_of_building.at(y.building))
    return Tier::inter_region;
  if (x.building != y.building)
    return Tier::inter_building;
  auto is = [&](VertexKind a, VertexKind b) { return x.kind == a && y.kind == b; };
  if (is(VertexKind::leaf, VertexKind::spine) || is(VertexKind::spine, VertexKind::leaf))
    return Tier::leaf_spine;
  return Tier::pod_aggregation;
}

void finish_graph(RawGraph& raw, const std::vector<RegionSpec>& regions)
{
  auto& g = raw.graph;
  std::map<std::string, int> region_of_building;
  std::vector<std::string> buildings;
  for (std::size_t r = 0; r < regions.size(); ++r)
    for (const auto& b : regions[r].buildings) {
      region_of_building[b] = static_cast<int>(r);
      buildings.push_back(b);
    }
  if (g.vertices.empty())
    throw SpecError(g.file, "", "the graph has no vertices");
  std::unordered_map<std::string, int> index;
  for (std::size_t i = 0; i < g.vertices.size(); ++i) {
    const auto& v     = g.vertices[i];
    const auto& where = raw.vertex_at[i];
    if (v.id.empty())
      where.member("id").fail("a vertex needs a non-empty id");
    if (!index.emplace(v.id, static_cast<int>(i)).second)
      where.member("id").fail("duplicate vertex id \"" + v.id + "\"");
    if (!v.building.empty() && region_of_building.count(v.building) == 0)
      where.member("building").fail("unknown building \"" + v.building + "\" (buildings: " + join(buildings) + ")");
    if (!v.region.empty()) {
      std::vector<std::string> names;
      int r = -1;
      for (std::size_t i = 0; i < regions.size(); ++i) {
        names.push_back(regions[i].name);
        if (regions[i].name == v.region)
          r = static_cast<int>(i);
      }
      if (r < 0)
        where.member("region").fail("unknown region \"" + v.region + "\" (regions: " + join(names) + ")");
      if (!v.building.empty() && region_of_building.at(v.building) != r)
        where.member("region").fail("building \"" + v.building + "\" is in region \"" +
                                    regions[region_of_building.at(v.building)].name + "\", not \"" + v.region + "\"");
    }
    if (v.kind == VertexKind::gpu) {
      if (v.building.empty())
        where.member("building").fail("a GPU needs a building");
      if (v.node.empty())
        where.member("node").fail("a GPU needs a node: the name of its scale-up domain");
    } else if (!v.node.empty()) {
      where.member("node").fail("only GPUs belong to a node");
    }
  }
  for (std::size_t k = 0; k < g.edges.size(); ++k) {
    auto& e           = g.edges[k];
    const auto& where = raw.edge_at[k];
    auto end          = [&](const std::string& id, const char* key) {
      auto it = index.find(id);
      if (it == index.end())
        where.member(key).fail("unknown vertex \"" + id + "\"");
      return it->second;
    };
    const int a = end(e.a, "a"), b = end(e.b, "b");
    if (a == b)
      where.fail("a link joins two different vertices (\"" + e.a + "\" twice)");
    if (!(e.bandwidth > 0))
      where.member("bandwidth").fail("a link needs a bandwidth above 0 (a failed link goes in a scenario's faults)");
    if (e.latency < 0)
      where.member("latency").fail("a latency cannot be negative");
    if (g.vertices[a].kind == VertexKind::gpu && g.vertices[b].kind == VertexKind::gpu)
      where.fail("GPUs join through switches (an NVSwitch inside a node), not directly");
    if (!raw.tier_given[k])
      e.tier = infer_tier(g.vertices[a], g.vertices[b], region_of_building);
  }
}

// A graph's "nccl" block: what NCCL sees of its nodes and fabric beyond the links.
void read_nccl_block(ObjectReader& r, GraphSpec& g)
{
  auto n = r.optional_object("nccl");
  if (!n)
    return;
  g.nvlink              = n->optional_enumeration<NvLink>("nvlink").value_or(g.nvlink);
  g.nvls                = n->optional_boolean("nvls").value_or(g.nvls);
  g.step_latency        = n->optional_time("step_latency").value_or(g.step_latency);
  g.nvls_warp_rate      = n->optional_bandwidth("nvls_warp_rate").value_or(g.nvls_warp_rate);
  g.p2p_channel_rate    = n->optional_bandwidth("p2p_channel_rate").value_or(g.p2p_channel_rate);
  g.p2p_ll_channel_rate = n->optional_bandwidth("p2p_ll_channel_rate").value_or(g.p2p_ll_channel_rate);
  g.fabric              = n->optional_enumeration<Fabric>("fabric").value_or(g.fabric);
  g.sharp               = n->optional_boolean("sharp").value_or(g.sharp);
  g.net_latency         = n->optional_time("net_latency").value_or(g.net_latency);
  g.nics                = static_cast<int>(n->optional_integer("nics", 1, 4096).value_or(0));
  if (g.nvls && g.nvlink == NvLink::nvlink3)
    n->fail("nvls", "NVLS (NVLink SHARP) needs an NVSwitch that reduces: nvlink4 or nvlink5");
  if (g.sharp && g.fabric != Fabric::ib)
    n->fail("sharp", "SHARP needs InfiniBand switches that reduce (fabric \"ib\")");
  n->finish();
}

RawGraph read_json_graph(ObjectReader& r, const std::string& file)
{
  RawGraph raw;
  raw.graph.file           = file;
  raw.graph.rail_optimized = r.optional_boolean("rail_optimized").value_or(false);
  read_nccl_block(r, raw.graph);
  for (const auto& [key, limit] : {std::pair{"vertices", kMaxGraphVertices}, std::pair{"links", kMaxGraphLinks}})
    if (r.has(key) && r.raw(key).is_array() && r.raw(key).size() > limit)
      r.fail(key, std::to_string(r.raw(key).size()) + " entries; imported graphs are limited to " +
                      std::to_string(kMaxGraphVertices) + " vertices and " + std::to_string(kMaxGraphLinks) + " links");
  for (auto& v : r.objects("vertices", true)) {
    GraphSpec::Vertex vertex;
    vertex.id       = v.string("id");
    vertex.kind     = v.enumeration<VertexKind>("kind");
    vertex.building = v.optional_string("building").value_or("");
    vertex.pod      = v.optional_string("pod").value_or("");
    vertex.node     = v.optional_string("node").value_or("");
    vertex.region   = v.optional_string("region").value_or("");
    v.finish();
    raw.graph.vertices.push_back(std::move(vertex));
    raw.vertex_at.push_back(v.where());
  }
  for (auto& l : r.objects("links", true)) {
    GraphSpec::Edge edge;
    edge.a         = l.string("a");
    edge.b         = l.string("b");
    edge.bandwidth = l.bandwidth("bandwidth");
    edge.latency   = l.time("latency");
    auto tier      = l.optional_enumeration<Tier>("tier");
    edge.tier      = tier.value_or(Tier::nic);
    edge.cost      = static_cast<int>(l.optional_integer("cost", 1, 1000).value_or(1));
    l.finish();
    raw.graph.edges.push_back(std::move(edge));
    raw.edge_at.push_back(l.where());
    raw.tier_given.push_back(tier.has_value());
  }
  r.finish();
  return raw;
}

// GraphML attributes, all strings: quantities carry their units as in JSON specs.
struct GmlVertex {
  std::string kind, building, region, pod, node;
};
struct GmlEdge {
  std::string bandwidth, latency, tier, cost;
};
using GmlGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, GmlVertex, GmlEdge>;

} // namespace

void check_graphml_size(const std::string& text, const std::string& path)
{
  // Boost's XML reading holds about 3.5 KB per element, whatever its name (a 52 MB file of a million vertices and
  // a million edges took 7 GB): count the elements before parsing and refuse a file over the limits, naming them.
  const auto count_tags = [&](std::string_view tag) {
    std::size_t n = 0;
    for (auto pos = text.find(tag); pos != std::string::npos; pos = text.find(tag, pos + tag.size()))
      ++n;
    return n;
  };
  std::size_t elements = 0;
  for (std::size_t i = 0; i + 1 < text.size(); ++i)
    if (text[i] == '<' && (std::isalpha(static_cast<unsigned char>(text[i + 1])) || text[i + 1] == '_'))
      ++elements;
  const std::size_t vertices = count_tags("<node"), edges = count_tags("<edge");
  if (vertices > kMaxGraphVertices || edges > kMaxGraphLinks)
    throw SpecError(path, "",
                    "the graph has " + std::to_string(vertices) + " <node> and " + std::to_string(edges) +
                        " <edge> elements; imported graphs are limited to " + std::to_string(kMaxGraphVertices) +
                        " vertices and " + std::to_string(kMaxGraphLinks) + " links");
  if (elements > kMaxGraphmlElements)
    throw SpecError(path, "",
                    "the file has " + std::to_string(elements) + " XML elements; GraphML files are limited to " +
                        std::to_string(kMaxGraphmlElements) + " (nodes, edges and their data: about 3.5 GB to read)");
  // Boost's XML reader recurses once per level: tens of thousands of nested elements overflow the stack. Count the
  // depth first (start tags not closed by "/>" open a level, end tags close one; comments, declarations and
  // processing instructions do neither), with the limit of JSON specs.
  int depth = 0, line = 1;
  for (std::size_t i = 0; i + 1 < text.size(); ++i) {
    line += text[i] == '\n' ? 1 : 0;
    if (text[i] != '<')
      continue;
    const char next = text[i + 1];
    if (next == '/') {
      depth = std::max(0, depth - 1);
      continue;
    }
    if (!(std::isalpha(static_cast<unsigned char>(next)) || next == '_'))
      continue;
    // The end of the start tag, quotes respected.
    char quote    = 0;
    std::size_t j = i + 1;
    for (; j < text.size(); ++j) {
      if (quote)
        quote = text[j] == quote ? 0 : quote;
      else if (text[j] == '"' || text[j] == '\'')
        quote = text[j];
      else if (text[j] == '>')
        break;
    }
    if (j < text.size() && text[j - 1] == '/')
      continue;
    if (++depth > spec::kMaxJsonDepth)
      throw SpecError(path, "line " + std::to_string(line),
                      "XML elements nest deeper than " + std::to_string(spec::kMaxJsonDepth) +
                          " levels; GraphML files are limited to " + std::to_string(spec::kMaxJsonDepth));
  }
}

namespace {

RawGraph read_graphml(const std::string& path, const Location& referrer)
{
  spec::check_referenced_file(path, referrer);
  const std::string text = spec::load_text_file(path);
  check_graphml_size(text, path);
  // read_graphml keeps no vertex ids; the document order it adds vertices in gives them back.
  boost::property_tree::ptree tree;
  std::istringstream xml(text);
  try {
    boost::property_tree::read_xml(xml, tree);
  } catch (const boost::property_tree::xml_parser_error& e) {
    throw SpecError(path, "line " + std::to_string(e.line()), "not well-formed XML: " + e.message());
  }
  auto graph_node = tree.get_child_optional("graphml.graph");
  if (!graph_node)
    throw SpecError(path, "", "no <graphml><graph> element: not a GraphML file");
  std::vector<std::string> ids;
  for (const auto& [tag, child] : *graph_node)
    if (tag == "node")
      ids.push_back(child.get<std::string>("<xmlattr>.id", ""));
  // Boost merges two <node> elements of one id into a vertex: name the id instead of counting vertices later.
  {
    std::set<std::string> seen;
    for (const auto& id : ids)
      if (!seen.insert(id).second)
        throw SpecError(path, "node \"" + id + "\"", "a second <node> with this id (every node id is unique)");
  }
  // Boost adds a vertex for an edge end that names no <node>: name the edge instead of counting vertices later.
  {
    const std::set<std::string> known(ids.begin(), ids.end());
    for (const auto& [tag, child] : *graph_node)
      if (tag == "edge")
        for (const char* end : {"source", "target"}) {
          const auto id = child.get<std::string>(std::string("<xmlattr>.") + end, "");
          if (!known.count(id))
            throw SpecError(path,
                            "edge \"" + child.get<std::string>("<xmlattr>.source", "") + "\" -- \"" +
                                child.get<std::string>("<xmlattr>.target", "") + "\"",
                            std::string("its ") + end + " \"" + id + "\" is not a <node> of the graph");
        }
  }

  GmlGraph g;
  boost::dynamic_properties dp;
  dp.property("kind", boost::get(&GmlVertex::kind, g));
  dp.property("building", boost::get(&GmlVertex::building, g));
  dp.property("region", boost::get(&GmlVertex::region, g));
  dp.property("pod", boost::get(&GmlVertex::pod, g));
  dp.property("node", boost::get(&GmlVertex::node, g));
  dp.property("bandwidth", boost::get(&GmlEdge::bandwidth, g));
  dp.property("latency", boost::get(&GmlEdge::latency, g));
  dp.property("tier", boost::get(&GmlEdge::tier, g));
  dp.property("cost", boost::get(&GmlEdge::cost, g));
  std::istringstream in(text);
  try {
    boost::read_graphml(in, g, dp);
  } catch (const boost::property_not_found& e) {
    // A Topology Zoo graph (its keys: LinkSpeedRaw, Latitude, Network, DateObtained, ...) has routers, not GPUs:
    // say how to use it rather than which attributes to add by hand.
    const bool zoo = text.find("attr.name=\"LinkSpeedRaw\"") != std::string::npos ||
                     text.find("attr.name=\"Latitude\"") != std::string::npos ||
                     text.find("attr.name=\"GeoLocation\"") != std::string::npos;
    if (zoo)
      throw SpecError(path, "",
                      "a Topology Zoo graph (attribute \"" + e.property +
                          "\"): its routers have no GPUs; import it with `spansim topology import-zoo " + path +
                          " --out TOPO.json --site ROUTER --site ROUTER` (GPU buildings at the routers named), then "
                          "use TOPO.json");
    throw SpecError(path, "",
                    "unknown GraphML attribute \"" + e.property +
                        "\" (allowed: kind, building, region, pod, node on vertices; bandwidth, latency, "
                        "tier, cost on links)");
  } catch (const std::exception& e) {
    throw SpecError(path, "", std::string("not a readable GraphML graph: ") + e.what());
  }
  if (boost::num_vertices(g) != ids.size())
    throw SpecError(path, "",
                    "read " + std::to_string(boost::num_vertices(g)) + " vertices but the file lists " +
                        std::to_string(ids.size()) + " <node> elements");

  RawGraph raw;
  raw.graph.file = path;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto& p = g[i];
    Location where{path, "node \"" + ids[i] + "\""};
    GraphSpec::Vertex v;
    v.id = ids[i];
    if (p.kind.empty())
      where.member("kind").fail("missing \"kind\" (allowed: " + allowed_names<VertexKind>(true) + ")");
    auto kind = parse_name<VertexKind>(p.kind);
    if (!kind)
      where.member("kind").fail("unknown value \"" + p.kind + "\" (allowed: " + allowed_names<VertexKind>(true) + ")");
    v.kind     = *kind;
    v.building = p.building;
    v.pod      = p.pod;
    v.node     = p.node;
    v.region   = p.region;
    raw.graph.vertices.push_back(std::move(v));
    raw.vertex_at.push_back(where);
  }
  for (auto [it, end] = boost::edges(g); it != end; ++it) {
    const auto& p = g[*it];
    GraphSpec::Edge e;
    e.a = ids[boost::source(*it, g)];
    e.b = ids[boost::target(*it, g)];
    Location where{path, "edge \"" + e.a + "\" -- \"" + e.b + "\""};
    auto quantity = [&](const std::string& text, const char* key, double (*parse)(std::string_view)) {
      if (text.empty())
        where.member(key).fail(std::string("missing \"") + key + "\"");
      try {
        return parse(text);
      } catch (const std::exception& ex) {
        where.member(key).fail(ex.what());
      }
    };
    e.bandwidth = quantity(p.bandwidth, "bandwidth", units::parse_bandwidth);
    e.latency   = quantity(p.latency, "latency", units::parse_time);
    if (!p.tier.empty()) {
      auto tier = parse_name<Tier>(p.tier);
      if (!tier)
        where.member("tier").fail("unknown value \"" + p.tier + "\" (allowed: " + allowed_names<Tier>(true) + ")");
      e.tier = *tier;
    }
    if (!p.cost.empty()) {
      char* rest   = nullptr;
      const long c = std::strtol(p.cost.c_str(), &rest, 10);
      if (*rest != '\0' || c < 1 || c > 1000)
        where.member("cost").fail("expected an integer from 1 to 1000, got \"" + p.cost + "\"");
      e.cost = static_cast<int>(c);
    }
    raw.graph.edges.push_back(std::move(e));
    raw.edge_at.push_back(where);
    raw.tier_given.push_back(!p.tier.empty());
  }
  return raw;
}

// A graph named by file: GraphML by its extension, otherwise a JSON document holding the graph block.
RawGraph read_graph_file(const std::string& path, const Location& where)
{
  if (std::filesystem::path(path).extension() == ".graphml")
    return read_graphml(path, where);
  auto doc = spec::load_referenced_json(path, where);
  ObjectReader r(doc, Location{path, "$"});
  return read_json_graph(r, path);
}

} // namespace

void parse_graph_topology(ObjectReader& root, TopologySpec& s)
{
  RawGraph raw;
  const auto& g = root.raw("graph");
  if (g.is_string()) {
    const auto where = root.where().member("graph");
    raw              = read_graph_file(spec::referenced_path(g.get<std::string>(), where), where);
  } else if (g.is_object() && g.contains("file")) {
    // A graph file with what GraphML has no place for: the rail claim.
    auto r                   = root.object("graph");
    const auto where         = r.where().member("file");
    raw                      = read_graph_file(spec::referenced_path(r.string("file"), where), where);
    raw.graph.rail_optimized = r.optional_boolean("rail_optimized").value_or(raw.graph.rail_optimized);
    read_nccl_block(r, raw.graph);
    r.finish();
  } else {
    auto r              = root.object("graph");
    raw                 = read_json_graph(r, s.file);
    raw.graph.json_path = r.where().path;
  }
  finish_graph(raw, s.regions);
  for (auto o : root.objects("building_overrides", false)) {
    BuildingOverride b;
    b.building = o.string("building");
    bool known = false;
    for (const auto& r : s.regions)
      known = known || std::find(r.buildings.begin(), r.buildings.end(), b.building) != r.buildings.end();
    if (!known)
      o.fail("building", "unknown building \"" + b.building + "\"");
    for (const auto& other : s.building_overrides)
      if (other.building == b.building)
        o.fail("building", "building \"" + b.building + "\" is overridden twice");
    b.gpu = o.string("gpu");
    o.finish(); // link speeds are the graph's own: only the GPU type is a building's here
    s.building_overrides.push_back(std::move(b));
  }
  s.graph = std::make_shared<const GraphSpec>(std::move(raw.graph));
}

TopologySpec load_graphml_topology(const std::string& path, const Location& referrer)
{
  RawGraph raw = read_graphml(path, referrer);
  TopologySpec s;
  s.file        = path;
  s.name        = std::filesystem::path(path).stem().string();
  s.description = "imported from " + path;
  for (std::size_t i = 0; i < raw.graph.vertices.size(); ++i) {
    const auto& building = raw.graph.vertices[i].building;
    if (building.empty())
      continue;
    const std::string region = raw.graph.vertices[i].region.empty() ? "region0" : raw.graph.vertices[i].region;
    RegionSpec* found        = nullptr;
    for (auto& r : s.regions)
      if (r.name == region)
        found = &r;
    for (auto& r : s.regions)
      if (&r != found && std::find(r.buildings.begin(), r.buildings.end(), building) != r.buildings.end())
        raw.vertex_at[i].member("region").fail("building \"" + building + "\" is in region \"" + r.name +
                                               "\" on other vertices");
    if (found == nullptr)
      found = &s.regions.emplace_back(RegionSpec{region, {}});
    if (std::find(found->buildings.begin(), found->buildings.end(), building) == found->buildings.end())
      found->buildings.push_back(building);
  }
  if (s.regions.empty())
    throw SpecError(path, "", "no vertex names a building");
  finish_graph(raw, s.regions);
  s.graph = std::make_shared<const GraphSpec>(std::move(raw.graph));
  return s;
}

} // namespace spansim::topology::detail

namespace spansim::topology {

namespace {

// Bit-exact on reading back: an imported copy must time a step as its original does.
std::string exact(double value, const char* unit)
{
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g%s", value, unit);
  return buf;
}

/// @brief The labels of vertex `v` for an exported graph: building, pod and node (the node's name is unique).
struct VertexLabels {
  std::string building, region, pod, node;
};

VertexLabels labels_of(const Topology& t, int v)
{
  VertexLabels out;
  const int b = t.vertex_building(v);
  if (b >= 0)
    out.building = t.building_name(b);
  if (t.vertex_region(v) >= 0)
    out.region = t.region_name(t.vertex_region(v));
  if (t.vertex_kinds()[v] == VertexKind::gpu) {
    const auto loc = t.locate(v);
    out.pod        = "pod" + std::to_string(t.imported() ? loc.pod : loc.pod % t.spec().building.pods);
    const auto nv  = t.imported() ? std::string() : t.vertex_name(t.nvswitch_vertex(loc.node));
    out.node       = t.imported() ? "node" + std::to_string(loc.node) : nv.substr(0, nv.size() - 9);
  }
  return out;
}

} // namespace

nlohmann::json Topology::to_graph_json() const
{
  nlohmann::json vertices = nlohmann::json::array(), links = nlohmann::json::array();
  for (int v = 0; v < static_cast<int>(vertex_kind_.size()); ++v) {
    nlohmann::json j = {{"id", vertex_name(v)}, {"kind", name_of(vertex_kind_[v])}};
    const auto l     = labels_of(*this, v);
    if (!l.building.empty())
      j["building"] = l.building;
    else if (!l.region.empty())
      j["region"] = l.region;
    if (!l.pod.empty())
      j["pod"] = l.pod;
    if (!l.node.empty())
      j["node"] = imported() ? node_names_[locate(v).node] : l.node;
    vertices.push_back(std::move(j));
  }
  for (std::size_t k = 0; k < links_.size(); ++k) {
    const auto& l    = links_[k];
    nlohmann::json j = {{"a", vertex_name(l.a)},
                        {"b", vertex_name(l.b)},
                        {"tier", name_of(l.tier)},
                        {"bandwidth", exact(l.bandwidth, "Bps")},
                        {"latency", exact(l.latency, "s")}};
    if (!link_cost_.empty() && link_cost_[k] != 1)
      j["cost"] = link_cost_[k];
    links.push_back(std::move(j));
  }
  nlohmann::json regions = nlohmann::json::array();
  for (const auto& r : spec_.regions)
    regions.push_back({{"name", r.name}, {"buildings", r.buildings}});
  nlohmann::json doc       = {{"name", spec_.name + "-graph"},
                              {"description", "The explicit graph of topology " + spec_.name + " (spansim topology export)."},
                              {"regions", regions}};
  nlohmann::json overrides = nlohmann::json::array();
  for (int b = 0; b < building_count(); ++b)
    if (!building_gpu_[b].empty())
      overrides.push_back({{"building", building_names_[b]}, {"gpu", building_gpu_[b]}});
  if (!overrides.empty())
    doc["building_overrides"] = overrides;
  const auto& n = spec_.node;
  const auto& p = spec_.pod;
  doc["graph"]  = {{"rail_optimized", rail_optimized()},
                   {"nccl",
                    {{"nvlink", name_of(n.nvlink)},
                     {"nvls", n.nvls},
                     {"step_latency", exact(n.step_latency, "s")},
                     {"fabric", name_of(p.fabric)},
                     {"sharp", p.sharp},
                     {"net_latency", exact(p.net_latency, "s")},
                     {"nics", n.nic_count()}}},
                   {"vertices", vertices},
                   {"links", links}};
  if (n.nvls_warp_rate > 0)
    doc["graph"]["nccl"]["nvls_warp_rate"] = exact(n.nvls_warp_rate, "Bps");
  if (n.p2p_channel_rate > 0)
    doc["graph"]["nccl"]["p2p_channel_rate"] = exact(n.p2p_channel_rate, "Bps");
  if (n.p2p_ll_channel_rate > 0)
    doc["graph"]["nccl"]["p2p_ll_channel_rate"] = exact(n.p2p_ll_channel_rate, "Bps");
  return doc;
}

void Topology::write_graphml(std::ostream& out) const
{
  auto escape = [](const std::string& s) {
    std::string o;
    for (char c : s)
      switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
      }
    return o;
  };
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<graphml xmlns=\"http://graphml.graphdrawing.org/xmlns\">\n";
  for (const char* key : {"kind", "building", "region", "pod", "node"})
    out << "  <key id=\"" << key << "\" for=\"node\" attr.name=\"" << key << "\" attr.type=\"string\"/>\n";
  for (const char* key : {"bandwidth", "latency", "tier", "cost"})
    out << "  <key id=\"" << key << "\" for=\"edge\" attr.name=\"" << key << "\" attr.type=\"string\"/>\n";
  out << "  <graph id=\"" << escape(spec_.name) << "\" edgedefault=\"undirected\">\n";
  for (int v = 0; v < static_cast<int>(vertex_kind_.size()); ++v) {
    const auto l = labels_of(*this, v);
    out << "    <node id=\"" << escape(vertex_name(v)) << "\"><data key=\"kind\">" << name_of(vertex_kind_[v])
        << "</data>";
    if (!l.building.empty())
      out << "<data key=\"building\">" << escape(l.building) << "</data>";
    if (!l.region.empty())
      out << "<data key=\"region\">" << escape(l.region) << "</data>";
    if (!l.pod.empty())
      out << "<data key=\"pod\">" << escape(l.pod) << "</data>";
    if (!l.node.empty())
      out << "<data key=\"node\">" << escape(imported() ? node_names_[locate(v).node] : l.node) << "</data>";
    out << "</node>\n";
  }
  for (std::size_t k = 0; k < links_.size(); ++k) {
    const auto& l = links_[k];
    out << "    <edge source=\"" << escape(vertex_name(l.a)) << "\" target=\"" << escape(vertex_name(l.b))
        << "\"><data key=\"bandwidth\">" << exact(l.bandwidth, "Bps") << "</data><data key=\"latency\">"
        << exact(l.latency, "s") << "</data><data key=\"tier\">" << name_of(l.tier) << "</data>";
    if (!link_cost_.empty() && link_cost_[k] != 1)
      out << "<data key=\"cost\">" << link_cost_[k] << "</data>";
    out << "</edge>\n";
  }
  out << "  </graph>\n</graphml>\n";
}

} // namespace spansim::topology
