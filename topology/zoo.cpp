// Topology Zoo graphs as published: routers and links of a GraphML file from topology-zoo.org become the wide-area
// part of a topology with an explicit graph, and GPU buildings (copies of a one-building template) attach at the
// routers the user names.
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/units.hpp"
#include "topology/graph_io.hpp"
#include "topology/topology.hpp"

#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <numbers>
#include <set>
#include <sstream>

namespace spansim::topology {

using nlohmann::json;

namespace {

namespace pt = boost::property_tree;

struct ZooNode {
  std::string id, label;
  std::optional<double> latitude, longitude;
  bool internal = true;
};

struct ZooEdge {
  std::string source, target;
  std::optional<double> bits_per_second;
  bool from_units = false; ///< the speed is LinkSpeed x LinkSpeedUnits (the file has no LinkSpeedRaw)
};

// "%.17g" with a unit: exact in the output file.
std::string with_unit(double v, const char* unit)
{
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g%s", v, unit);
  return buf;
}

// A name spansim accepts for a region or building: letters, digits, '-', '_' and '.', others become '-'.
std::string safe_name(const std::string& label)
{
  std::string out;
  for (unsigned char c : label)
    out += std::isalnum(c) || c == '-' || c == '_' || c == '.' ? static_cast<char>(std::tolower(c)) : '-';
  while (!out.empty() && (out.front() == '-' || out.front() == '.'))
    out.erase(out.begin());
  // Nor ending in one ("Kentucky Datalink " gave "kentucky-datalink-").
  while (!out.empty() && (out.back() == '-' || out.back() == '.'))
    out.pop_back();
  return out.empty() ? "site" : out;
}

std::optional<double> number(const std::string& text)
{
  try {
    std::size_t used = 0;
    const double v   = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v))
      return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// `text` without the blanks around it.
std::string trimmed(const std::string& text)
{
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos)
    return "";
  return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

// The number a <data> element holds, in [lo, hi] (above lo when `above`), or an error at `where` naming the key, the
// text and `allowed`. An absent or empty element is no value: the caller's default applies and is reported; a value
// that is present but wrong must not pass for a missing one.
std::optional<double> data_number(const std::map<std::string, std::string>& data, const std::string& key,
                                  const std::string& path, const std::string& where, double lo, double hi, bool above,
                                  const std::string& allowed)
{
  const auto it = data.find(key);
  if (it == data.end())
    return std::nullopt;
  const std::string text = trimmed(it->second);
  if (text.empty())
    return std::nullopt;
  const auto v = number(text);
  if (!v || *v < lo || (above && *v <= lo) || *v > hi)
    throw SpecError(path, where,
                    key + " \"" + text + "\" is " + (v ? "out of range" : "not a number") + " (allowed: " + allowed +
                        ")");
  return v;
}

// The graph's nodes and edges, the data keys resolved by name through the file's own <key> list (the Zoo numbers
// them d0, d1, ... differently in every file).
struct ZooGraph {
  std::string network;
  std::vector<ZooNode> nodes;
  std::vector<ZooEdge> edges;
};

ZooGraph read_zoo(const std::string& path)
{
  const std::string text = spec::load_text_file(path);
  detail::check_graphml_size(text, path);
  pt::ptree tree;
  try {
    std::istringstream in(text);
    pt::read_xml(in, tree);
  } catch (const pt::xml_parser_error& e) {
    throw SpecError(path, "", std::string("not XML: ") + e.what());
  }
  const auto root = tree.get_child_optional("graphml");
  if (!root)
    throw SpecError(path, "", "not GraphML: no <graphml> element");
  std::map<std::string, std::string> key_name; // key id -> attr.name
  for (const auto& [tag, child] : *root)
    if (tag == "key")
      // "attr.name" holds the path separator: spell the path with another.
      key_name[child.get<std::string>("<xmlattr>.id", "")] =
          child.get<std::string>(pt::ptree::path_type("<xmlattr>|attr.name", '|'), "");
  const auto graph = root->get_child_optional("graph");
  if (!graph)
    throw SpecError(path, "", "not GraphML: no <graph> element");
  auto data = [&](const pt::ptree& element) {
    std::map<std::string, std::string> out;
    for (const auto& [tag, d] : element)
      if (tag == "data") {
        const auto it = key_name.find(d.get<std::string>("<xmlattr>.key", ""));
        if (it != key_name.end())
          out[it->second] = d.data();
      }
    return out;
  };
  ZooGraph g;
  std::vector<std::map<std::string, std::string>> edge_data; // each edge's <data>, read once the labels are known
  g.network            = data(*graph).count("Network") ? data(*graph).at("Network") : "";
  std::size_t elements = 0;
  for (const auto& [tag, child] : *graph) {
    ++elements;
    if (tag == "node") {
      ZooNode n;
      n.id         = child.get<std::string>("<xmlattr>.id", "");
      const auto d = data(child);
      if (n.id.empty())
        throw SpecError(path, "", "a <node> without an id (element " + std::to_string(elements) + ")");
      n.label          = d.count("label") ? d.at("label") : n.id;
      const auto where = "node \"" + n.id + "\" (\"" + n.label + "\")";
      n.latitude       = data_number(d, "Latitude", path, where, -90, 90, false, "degrees from -90 to 90");
      n.longitude      = data_number(d, "Longitude", path, where, -180, 180, false, "degrees from -180 to 180");
      if (d.count("Internal"))
        n.internal = d.at("Internal") != "0";
      g.nodes.push_back(n);
    } else if (tag == "edge") {
      ZooEdge e;
      e.source = child.get<std::string>("<xmlattr>.source", "");
      e.target = child.get<std::string>("<xmlattr>.target", "");
      g.edges.push_back(e);
      edge_data.push_back(data(child));
    }
  }
  if (g.nodes.empty())
    throw SpecError(path, "", "the graph has no <node> elements");
  // Speeds once every node is read: an edge may come before its ends, and its error names them by label.
  std::map<std::string, std::string> label_of;
  for (const auto& n : g.nodes)
    label_of.emplace(n.id, n.label);
  auto label = [&](const std::string& id) {
    const auto it = label_of.find(id);
    return it == label_of.end() ? id : it->second;
  };
  for (std::size_t k = 0; k < g.edges.size(); ++k) {
    auto& e          = g.edges[k];
    const auto where = "edge \"" + e.source + "\" -- \"" + e.target + "\" (\"" + label(e.source) + "\" -- \"" +
                       label(e.target) + "\")";
    const auto& d     = edge_data[k];
    e.bits_per_second = data_number(d, "LinkSpeedRaw", path, where, 0, units::kMaxBandwidth * 8, true,
                                    "bits/s above 0, at most 1e18 = 1 Ebps");
    if (e.bits_per_second)
      continue;
    // Without LinkSpeedRaw (Garr), the speed as the Zoo states it: LinkSpeed in LinkSpeedUnits, from which the
    // Zoo's own tools derive LinkSpeedRaw.
    const auto speed = data_number(d, "LinkSpeed", path, where, 0, units::kMaxBandwidth * 8, true,
                                   "a number above 0, in LinkSpeedUnits");
    if (!speed)
      continue;
    static const std::map<std::string, double> kScale = {{"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}};
    const auto u                                      = d.find("LinkSpeedUnits");
    std::string unit                                  = u == d.end() ? std::string() : trimmed(u->second);
    if (unit.size() == 1)
      unit[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
    const auto scale = kScale.find(unit);
    if (scale == kScale.end())
      throw SpecError(path, where,
                      "LinkSpeed \"" + trimmed(d.at("LinkSpeed")) + "\" has " +
                          (u == d.end() ? std::string("no LinkSpeedUnits")
                                        : "LinkSpeedUnits \"" + trimmed(u->second).substr(0, 40) + "\"") +
                          " (allowed: K, M, G or T bits/s, as the Zoo writes them; or a LinkSpeedRaw in bits/s)");
    if (*speed * scale->second > units::kMaxBandwidth * 8)
      throw SpecError(path, where,
                      "LinkSpeed \"" + trimmed(d.at("LinkSpeed")) + "\" " + unit +
                          " is out of range (allowed: above 0, at most 1e18 bits/s = 1 Ebps)");
    e.bits_per_second = *speed * scale->second;
    e.from_units      = true;
  }
  return g;
}

} // namespace

double great_circle_km(double lat1, double lon1, double lat2, double lon2)
{
  constexpr double kEarthRadiusKm = 6371.0;
  const double rad                = std::numbers::pi / 180;
  const double dlat = (lat2 - lat1) * rad, dlon = (lon2 - lon1) * rad;
  const double a = std::sin(dlat / 2) * std::sin(dlat / 2) +
                   std::cos(lat1 * rad) * std::cos(lat2 * rad) * std::sin(dlon / 2) * std::sin(dlon / 2);
  return 2 * kEarthRadiusKm * std::asin(std::sqrt(std::clamp(a, 0.0, 1.0)));
}

ZooImport import_zoo(const std::string& path, const ZooOptions& options)
{
  // The options first: a link of 0 bytes/s would be refused only once the topology is read back.
  for (const auto& [value, option] :
       {std::pair{options.default_bandwidth, "--default-speed"}, std::pair{options.uplink_bandwidth, "--uplink"}})
    if (!(value > 0) || value > units::kMaxBandwidth)
      throw UsageError(std::string(option) + " " + units::format_bandwidth(value) +
                       ": allowed a bandwidth above 0, at most 1 Ebps (such as 100Gbps)");
  if (!(options.equipment_latency >= 0) || options.equipment_latency > units::kMaxTime)
    throw UsageError("--equipment-latency " + units::format_time(options.equipment_latency) +
                     ": allowed 0 to 1e10 s (such as 20us)");
  const auto zoo = read_zoo(path);
  ZooImport out;
  std::map<std::string, const ZooNode*> by_id;
  for (const auto& n : zoo.nodes)
    if (!by_id.emplace(n.id, &n).second)
      throw SpecError(path, "", "two <node> elements have the id \"" + n.id + "\"");
  // Degrees, to leave isolated nodes out (the Zoo keeps routers whose links it could not map).
  std::map<std::string, int> degree;
  std::vector<const ZooEdge*> edges;
  for (const auto& e : zoo.edges) {
    for (const auto& end : {e.source, e.target})
      if (!by_id.count(end))
        throw SpecError(path, "",
                        "an <edge> from \"" + e.source + "\" to \"" + e.target + "\" names node \"" + end +
                            "\", which the graph does not have");
    if (e.source == e.target) {
      out.notes.push_back("self loop at \"" + by_id.at(e.source)->label + "\" left out");
      continue;
    }
    ++degree[e.source];
    ++degree[e.target];
    edges.push_back(&e);
  }
  // Sites: by label or id, each once, in the order given: regions, buildings and GPU numbers follow it.
  std::vector<std::pair<std::string, std::string>> site_building; // node id, building name
  std::vector<std::string> labels;
  for (const auto& n : zoo.nodes)
    labels.push_back(n.label);
  for (const auto& site : options.sites) {
    // An id names one node; a label may name several (Cogentco has 11 labelled "None"): then every id is listed.
    const ZooNode* hit = nullptr;
    std::vector<std::string> same;
    for (const auto& n : zoo.nodes)
      if (n.id == site)
        hit = &n;
    if (!hit)
      for (const auto& n : zoo.nodes)
        if (n.label == site) {
          same.push_back(n.id);
          hit = &n;
        }
    if (same.size() > 1) {
      std::string ids;
      for (std::size_t i = 0; i < same.size() && i < 20; ++i)
        ids += (i == 0 ? "" : i + 1 == same.size() ? " or " : ", ") + same[i];
      if (same.size() > 20)
        ids += ", and " + std::to_string(same.size() - 20) + " more";
      throw UsageError("--site \"" + site + "\": " + std::to_string(same.size()) + " nodes of " + path +
                       " have that label; name one by id (" + ids + ")");
    }
    if (!hit)
      throw UsageError("--site \"" + site + "\": no node of " + path +
                       " has that label or id (nodes: " + listing(labels) + ")");
    if (degree[hit->id] == 0)
      throw UsageError("--site \"" + site + "\": the node is isolated (no link of " + path + " reaches it)");
    auto building = safe_name(hit->label);
    for (const auto& [id, b] : site_building)
      if (b == building || id == hit->id)
        throw UsageError("--site \"" + site + "\" is named twice, or shares its building name \"" + building +
                         "\" with another site");
    site_building.emplace_back(hit->id, building);
  }
  if (site_building.empty())
    throw UsageError("name at least one router that hosts a GPU building: --site LABEL (repeat for each building)");
  // Every site must reach the first over the Zoo's links: GPUs do not forward, so the topology would be refused
  // (and the message would name a vertex of the generated file rather than the sites).
  std::map<std::string, std::size_t> index; // node id -> its set in `parent` (union-find, path halving)
  for (const auto& n : zoo.nodes)
    index.emplace(n.id, index.size());
  std::vector<std::size_t> parent(index.size());
  for (std::size_t i = 0; i < parent.size(); ++i)
    parent[i] = i;
  auto root = [&](const std::string& id) {
    std::size_t i = index.at(id);
    while (parent[i] != i)
      i = parent[i] = parent[parent[i]];
    return i;
  };
  for (const auto* e : edges)
    parent[root(e->source)] = root(e->target);
  for (std::size_t k = 1; k < site_building.size(); ++k)
    if (root(site_building[k].first) != root(site_building[0].first))
      throw UsageError("--site \"" + options.sites[k] + "\" cannot reach --site \"" + options.sites[0] +
                       "\": no path of links of " + path + " joins them (the graph is disconnected; name sites of " +
                       "one connected part)");

  // The one-building template, as an explicit graph.
  const auto templ = load_topology_spec(options.building_template);
  const Topology t(templ);
  if (t.building_count() != 1)
    throw UsageError("--template " + options.building_template + " has " + std::to_string(t.building_count()) +
                     " buildings; a site copies a template of one building");
  const json tg           = t.to_graph_json();
  const std::string tb    = t.building_name(0);
  json vertices           = json::array();
  json links              = json::array();
  json regions            = json::array();
  json overrides          = json::array();
  const std::string zoo_n = "zoo/";
  for (const auto& site : site_building) {
    // Named copies, not structured bindings: the lambda below captures them (clang 14 cannot capture bindings).
    const std::string id       = site.first;
    const std::string building = site.second;
    regions.push_back({{"name", building}, {"buildings", {building}}});
    auto rename = [&](const std::string& v) { return building + "/" + v; };
    std::vector<std::string> tops;
    for (const char* kind : {"aggregation", "spine", "leaf"}) {
      for (const auto& v : tg["graph"]["vertices"])
        if (v["kind"] == kind && v.value("building", "") == tb)
          tops.push_back(v["id"].get<std::string>());
      if (!tops.empty())
        break;
    }
    if (tops.empty())
      throw UsageError("--template " + options.building_template + " has no switch to attach to a router");
    for (auto v : tg["graph"]["vertices"]) {
      if (!v.contains("building"))
        continue; // the template's own gateways: the Zoo's routers take their place
      v["id"]       = rename(v["id"]);
      v["building"] = building;
      if (v.contains("node"))
        v["node"] = rename(v["node"]);
      v.erase("region");
      vertices.push_back(v);
    }
    for (auto l : tg["graph"]["links"]) {
      const auto a = l["a"].get<std::string>(), b = l["b"].get<std::string>();
      if (a.rfind(tb + "/", 0) != 0 || b.rfind(tb + "/", 0) != 0)
        continue;
      l["a"] = rename(a);
      l["b"] = rename(b);
      links.push_back(l);
    }
    for (const auto& top : tops)
      links.push_back({{"a", rename(top)},
                       {"b", zoo_n + id},
                       {"bandwidth", with_unit(options.uplink_bandwidth / static_cast<double>(tops.size()), "Bps")},
                       {"latency", with_unit(options.uplink_latency, "s")},
                       {"tier", "building_uplink"}});
    for (const auto& o : tg.value("building_overrides", json::array()))
      if (o.value("building", "") == tb)
        overrides.push_back({{"building", building}, {"gpu", o["gpu"]}});
  }
  // Routers: every node with a link, as a switch of no building.
  for (const auto& n : zoo.nodes) {
    if (degree[n.id] == 0) {
      out.notes.push_back("isolated node \"" + n.label + "\" left out");
      continue;
    }
    vertices.push_back({{"id", zoo_n + n.id}, {"kind", "region_gateway"}});
    ++out.routers;
  }
  // Links: LinkSpeedRaw (bits/s) or the stated default; latency from the great-circle distance at 5 us/km plus
  // the equipment's, or the equipment's alone where an end has no coordinates.
  std::size_t without_speed = 0, without_length = 0, from_units = 0;
  for (const auto* e : edges) {
    const auto& a    = *by_id.at(e->source);
    const auto& b    = *by_id.at(e->target);
    double bandwidth = options.default_bandwidth;
    if (e->bits_per_second && *e->bits_per_second > 0)
      bandwidth = *e->bits_per_second / 8;
    else
      ++without_speed;
    from_units += e->from_units ? 1 : 0;
    double latency = options.equipment_latency;
    if (a.latitude && a.longitude && b.latitude && b.longitude)
      latency +=
          great_circle_km(*a.latitude, *a.longitude, *b.latitude, *b.longitude) * 1e3 * units::kFiberSecondsPerMeter;
    else
      ++without_length;
    links.push_back({{"a", zoo_n + a.id},
                     {"b", zoo_n + b.id},
                     {"bandwidth", with_unit(bandwidth, "Bps")},
                     {"latency", with_unit(latency, "s")},
                     {"tier", "inter_region"}});
    ++out.links;
  }
  if (from_units > 0)
    out.notes.push_back(std::to_string(from_units) + " of " + std::to_string(edges.size()) +
                        " links at the speed their LinkSpeed and LinkSpeedUnits state (no LinkSpeedRaw)");
  if (without_speed > 0)
    out.notes.push_back(std::to_string(without_speed) + " of " + std::to_string(edges.size()) +
                        " links have no LinkSpeedRaw or LinkSpeed: " +
                        units::format_bandwidth(options.default_bandwidth) + " (--default-speed)");
  if (without_length > 0)
    out.notes.push_back(std::to_string(without_length) +
                        " links join a node without coordinates: equipment latency only");
  const std::string network = zoo.network.empty() ? "zoo" : zoo.network;
  out.topology              = {
                   {"name", safe_name(network)},
                   {"description", "Topology Zoo's " + network + " (" + path + "): " + std::to_string(out.routers) + " routers, " +
                                       std::to_string(out.links) + " links; GPU buildings (" + options.building_template + ") at " +
                                       std::to_string(site_building.size()) + " of them (spansim topology import-zoo)."},
                   {"sources",
                    {"The Internet Topology Zoo (topology-zoo.org; Knight et al., IEEE JSAC 2011), CC BY 4.0: routers, links, "
                                  "LinkSpeedRaw (bits/s) and coordinates.",
                     "Latency: great-circle distance (haversine, 6,371 km) x 5 us/km (light in fiber) + " +
                         units::format_time(options.equipment_latency) + " of equipment per link."}},
                   {"regions", regions},
                   {"graph",
                    {{"rail_optimized", tg["graph"].value("rail_optimized", false)}, {"vertices", vertices}, {"links", links}}}};
  if (!overrides.empty())
    out.topology["building_overrides"] = overrides;
  out.sites = static_cast<int>(site_building.size());
  return out;
}

} // namespace spansim::topology
