// Reading topology spec files: strict, with units, and with errors that name the file, the JSON
// path and what is allowed.
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/paths.hpp"
#include "common/units.hpp"
#include "topology/graph_io.hpp"
#include "topology/site_spec.hpp"
#include "topology/topology.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#ifndef SPANSIM_DATA_DIR
#error "SPANSIM_DATA_DIR must point at the source tree (topology/presets lives there)"
#endif

namespace spansim::topology {

using nlohmann::json;
using spec::Location;
using spec::ObjectReader;

namespace {

constexpr std::int64_t kMaxGpus = 4'000'000;

// Either "distance" (latency = distance * 5 us/km + equipment latency) or "latency", never both.
LongLinkSpec read_long_link(ObjectReader& r, const LongLinkSpec* fallback)
{
  LongLinkSpec link;
  if (fallback != nullptr)
    link = *fallback;
  if (auto bw = r.optional_bandwidth("bandwidth"))
    link.bandwidth = *bw;
  else if (fallback == nullptr)
    r.bandwidth("bandwidth"); // throws: missing required key
  bool has_distance = r.has("distance");
  bool has_latency  = r.has("latency");
  if (has_distance && has_latency)
    r.where().fail("give either \"distance\" (latency = 5 us/km plus \"equipment_latency\") or \"latency\", not both");
  if (auto eq = r.optional_time("equipment_latency")) {
    if (has_latency)
      r.fail("equipment_latency", "only meaningful with \"distance\"; with \"latency\" give the total");
    link.equipment_latency = *eq;
  }
  if (has_distance) {
    link.distance = r.distance("distance");
    link.latency  = link.distance * units::kFiberSecondsPerMeter + link.equipment_latency;
  } else if (has_latency) {
    link.distance          = 0;
    link.equipment_latency = 0;
    link.latency           = r.time("latency");
  } else if (fallback == nullptr) {
    r.where().fail("missing \"distance\" or \"latency\" (give one of them)");
  } else if (link.distance > 0) {
    link.latency = link.distance * units::kFiberSecondsPerMeter + link.equipment_latency;
  }
  return link;
}

std::vector<LinkOverride> read_overrides(ObjectReader& r, const LongLinkSpec& fallback,
                                         const std::vector<std::string>& known, const char* what)
{
  std::vector<LinkOverride> out;
  std::set<std::pair<std::string, std::string>> seen;
  for (auto& o : r.objects("overrides", false)) {
    auto names = o.strings("between");
    if (names.size() != 2)
      o.fail("between", "expected exactly two " + std::string(what) + " names");
    for (const auto& n : names)
      if (std::find(known.begin(), known.end(), n) == known.end()) {
        std::string list;
        for (const auto& k : known)
          list += (list.empty() ? "" : ", ") + k;
        o.fail("between", "unknown " + std::string(what) + " \"" + n + "\" (known: " + list + ")");
      }
    if (names[0] == names[1])
      o.fail("between", "a link joins two different " + std::string(what) + "s");
    auto key = std::minmax(names[0], names[1]);
    if (!seen.insert(key).second)
      o.fail("between", "a second override for the same pair");
    LinkOverride ov{names[0], names[1], read_long_link(o, &fallback)};
    o.finish();
    out.push_back(ov);
  }
  return out;
}

using detail::config_bandwidth;
using detail::config_distance;
using detail::config_number;
using detail::config_time;

json long_link_json(const LongLinkSpec& l)
{
  json j = {{"bandwidth", config_bandwidth(l.bandwidth)}, {"effective_latency", config_time(l.latency)}};
  if (l.distance > 0) {
    j["distance"]          = config_distance(l.distance);
    j["equipment_latency"] = config_time(l.equipment_latency);
  }
  return j;
}

// A leaf needs ports both ways, and without rails room for a whole node.
void check_leaf_ports(ObjectReader& r, const NodeSpec& node, const PodSpec& pod, std::string_view key = "leaf_radix")
{
  int down = static_cast<int>(std::lround(pod.leaf_radix * pod.oversubscription / (1 + pod.oversubscription)));
  int up   = pod.leaf_radix - down;
  if (up < 1 || down < 1)
    r.fail(key, "a leaf of radix " + std::to_string(pod.leaf_radix) + " at oversubscription " +
                    config_number(pod.oversubscription) + " leaves no uplink or downlink port");
  if (!pod.rail_optimized && down < node.gpus)
    r.fail(key, "a leaf has " + std::to_string(down) + " downlink ports, fewer than the " + std::to_string(node.gpus) +
                    " GPUs of a node: without rails a whole node must sit under one leaf");
}

// What a building (or every building of a region) may have of its own; fields not given keep b's values.
void read_site_fields(ObjectReader& o, BuildingOverride& b)
{
  if (o.has("gpu")) {
    b.gpu = o.string("gpu");
    // A zoo name must name a shipped GPU file (a path is read, and checked, with the job).
    const std::filesystem::path zoo = std::filesystem::path(SPANSIM_DATA_DIR) / "workload" / "gpus";
    if (b.gpu.find('/') == std::string::npos && std::filesystem::path(b.gpu).extension() != ".json" &&
        !std::filesystem::exists(zoo / (b.gpu + ".json"))) {
      std::vector<std::string> names;
      for (const auto& f : std::filesystem::directory_iterator(zoo))
        if (f.path().extension() == ".json")
          names.push_back(f.path().stem().string());
      std::sort(names.begin(), names.end());
      std::string list;
      for (const auto& n : names)
        list += (list.empty() ? "" : ", ") + n;
      o.fail("gpu", "unknown GPU \"" + b.gpu + "\" (zoo: " + list + "; or a path to a GPU file)");
    }
  }
  if (auto n = o.optional_object("node"))
    detail::read_node(*n, b.node, false);
  if (auto p = o.optional_object("pod"))
    detail::read_pod(*p, b.pod, false);
  // Node size and leaf ports may come from different blocks (or from a region's override): check them together,
  // at the block that was given.
  if (auto p = o.optional_object("pod"))
    check_leaf_ports(*p, b.node, b.pod);
  else if (auto n = o.optional_object("node"))
    check_leaf_ports(*n, b.node, b.pod, "gpus");
  else
    check_leaf_ports(o, b.node, b.pod, o.has("building") ? "building" : "region");
  // The template's "building" block, flattened: "building" here names the building.
  b.building_spec.pods = static_cast<int>(o.optional_integer("pods", 1, 100'000).value_or(b.building_spec.pods));
  b.building_spec.aggregation_oversubscription =
      o.optional_number("aggregation_oversubscription", 1, 1000).value_or(b.building_spec.aggregation_oversubscription);
  b.building_spec.aggregation_latency =
      o.optional_time("aggregation_latency").value_or(b.building_spec.aggregation_latency);
}

} // namespace

MultipathSpec read_multipath(ObjectReader r)
{
  MultipathSpec m;
  const std::string routing =
      r.optional_string("routing").has_value() ? r.choice("routing", {"ideal", "ecmp", "spray"}) : "ideal";
  m.spray      = routing == "spray";
  m.ecmp       = routing != "ideal"; // spraying routes as ECMP wherever packets are not simulated
  m.seed       = static_cast<std::uint64_t>(r.optional_integer("seed", 0, std::int64_t{1} << 53).value_or(1));
  m.long_links = static_cast<int>(r.optional_integer("long_links", 1, 256).value_or(1));
  m.qps        = static_cast<int>(r.optional_integer("qps", 1, 64).value_or(1));
  if (m.qps > 1 && !m.ecmp)
    r.fail("qps", "queue pairs need \"routing\": \"ecmp\" or \"spray\" (\"ideal\" puts them on one path)");
  if (r.has("spines"))
    m.explicit_spines = r.choice("spines", {"aggregate", "explicit"}) == "explicit";
  if (m.explicit_spines && !m.ecmp)
    r.fail("spines", "explicit spines need \"routing\": \"ecmp\" (\"ideal\" would put every flow on the first)");
  if (r.has("seed") && !m.ecmp)
    r.fail("seed", "only meaningful with \"routing\": \"ecmp\"");
  if (m.long_links > 1 && !m.ecmp)
    r.fail("long_links", "parallel links need \"routing\": \"ecmp\" (\"ideal\" is one fluid pipe per pair)");
  if (auto mode = r.optional_enumeration<EcmpMode>("ecmp_mode")) {
    m.ecmp_mode = *mode;
    if (!m.ecmp)
      r.fail("ecmp_mode", "only meaningful with \"routing\": \"ecmp\"");
  }
  r.finish();
  return m;
}

nlohmann::json multipath_json(const MultipathSpec& m)
{
  nlohmann::json j = {{"routing", m.spray ? "spray" : m.ecmp ? "ecmp" : "ideal"}, {"qps", m.qps}};
  if (m.ecmp) {
    j["seed"]      = m.seed;
    j["ecmp_mode"] = std::string(name_of(m.ecmp_mode));
  }
  if (m.long_links > 1)
    j["long_links"] = m.long_links;
  if (m.explicit_spines)
    j["spines"] = "explicit";
  return j;
}

TopologySpec::Site TopologySpec::site_of(const std::string& name) const
{
  for (const auto& o : building_overrides)
    if (o.building == name)
      return {&o.node, &o.pod, &o.building_spec, o.gpu};
  return {&node, &pod, &building, ""};
}

bool BuildingOverride::changes_counts(const TopologySpec& t) const
{
  return node.gpus != t.node.gpus || node.nic_count() != t.node.nic_count() || node.nic_gpus != t.node.nic_gpus ||
         pod.nodes != t.pod.nodes || pod.rail_optimized != t.pod.rail_optimized || pod.leaf_radix != t.pod.leaf_radix ||
         pod.spine_radix != t.pod.spine_radix || pod.oversubscription != t.pod.oversubscription ||
         building_spec.pods != t.building.pods ||
         building_spec.aggregation_oversubscription != t.building.aggregation_oversubscription ||
         building_spec.aggregation_latency != t.building.aggregation_latency;
}

std::string preset_directory()
{
  return std::string(SPANSIM_DATA_DIR) + "/topology/presets";
}

std::vector<std::string> preset_names()
{
  return json_names_in(preset_directory());
}

TopologySpec load_topology_spec(const std::string& file_or_preset, const spec::Location& referrer)
{
  std::string path = file_or_preset;
  if (!std::filesystem::exists(path)) {
    auto names = preset_names();
    if (std::find(names.begin(), names.end(), file_or_preset) == names.end()) {
      std::string list;
      for (const auto& n : names)
        list += (list.empty() ? "" : ", ") + n;
      const std::string what = "no such file, and not a preset name (presets: " + list + ")";
      if (referrer.file.empty())
        throw SpecError(file_or_preset, "", what);
      referrer.fail("\"" + file_or_preset + "\": " + what);
    }
    path = preset_directory() + "/" + file_or_preset + ".json";
  }
  if (std::filesystem::path(path).extension() == ".graphml")
    return detail::load_graphml_topology(path, referrer);
  return parse_topology_spec(spec::load_referenced_json(path, referrer), path);
}

TopologySpec parse_topology_spec(const json& document, const std::string& file, const std::string& json_path)
{
  TopologySpec s;
  s.file = file;
  ObjectReader root(document, Location{file, json_path});
  s.name        = root.string("name");
  s.description = root.optional_string("description").value_or("");
  if (root.has("sources"))
    root.strings("sources"); // free text citations, kept in the file for readers

  // An explicit graph has no template: its elements and link speeds are its own.
  const bool explicit_graph = root.has("graph");
  if (!explicit_graph) {
    auto r = root.object("node");
    detail::read_node(r, s.node, true);
  }
  if (!explicit_graph) {
    auto r = root.object("pod");
    detail::read_pod(r, s.pod, true);
    check_leaf_ports(r, s.node, s.pod);
  }
  if (!explicit_graph) {
    auto r                                  = root.object("building");
    s.building.pods                         = static_cast<int>(r.integer("pods", 1, 100'000));
    s.building.aggregation_oversubscription = r.number("aggregation_oversubscription", 1, 1000);
    s.building.aggregation_latency          = r.time("aggregation_latency");
    r.finish();
  }

  std::vector<std::string> building_names;
  std::vector<std::string> region_names;
  auto regions = root.objects("regions", true);
  if (regions.empty())
    root.fail("regions", "at least one region is needed");
  bool any_multi_building = false;
  for (auto& r : regions) {
    RegionSpec region;
    region.name = r.string("name");
    if (region.name.empty() || region.name.find_first_of("/ ") != std::string::npos)
      r.fail("name", "region names must be non-empty, without spaces or '/'");
    if (std::find(region_names.begin(), region_names.end(), region.name) != region_names.end())
      r.fail("name", "duplicate region name \"" + region.name + "\"");
    region_names.push_back(region.name);
    const json& b = r.raw("buildings");
    if (b.is_number_integer()) {
      auto n = r.integer("buildings", 1, 64);
      for (int i = 0; i < n; ++i)
        region.buildings.push_back(region.name + "-b" + std::to_string(i));
    } else if (b.is_array()) {
      region.buildings = r.strings("buildings");
      if (region.buildings.empty())
        r.fail("buildings", "a region needs at least one building");
      if (region.buildings.size() > 64)
        r.fail("buildings", "at most 64 buildings per region");
    } else {
      r.fail("buildings", "expected a count (e.g. 2) or a list of building names");
    }
    for (const auto& name : region.buildings) {
      if (name.empty() || name.find_first_of("/ ") != std::string::npos)
        r.fail("buildings", "building names must be non-empty, without spaces or '/'");
      if (std::find(building_names.begin(), building_names.end(), name) != building_names.end())
        r.fail("buildings", "duplicate building name \"" + name + "\"");
      building_names.push_back(name);
    }
    any_multi_building = any_multi_building || region.buildings.size() > 1;
    r.finish();
    s.regions.push_back(std::move(region));
  }
  if (s.regions.size() > 16)
    root.fail("regions", "at most 16 regions");
  if (explicit_graph) {
    detail::parse_graph_topology(root, s);
    root.finish();
    return s;
  }

  std::int64_t gpus = std::int64_t(s.node.gpus) * s.pod.nodes * s.building.pods * std::int64_t(building_names.size());
  if (gpus > kMaxGpus)
    root.where().fail("the topology has " + std::to_string(gpus) + " GPUs; at most " + std::to_string(kMaxGpus) +
                      " are supported");

  if (auto r = root.optional_object("inter_building")) {
    s.inter_building = read_long_link(*r, nullptr);
    // Overrides name buildings of one region: links only join buildings of the same region.
    s.inter_building_overrides = read_overrides(*r, s.inter_building, building_names, "building");
    for (const auto& ov : s.inter_building_overrides) {
      auto region_of = [&](const std::string& name) {
        for (std::size_t i = 0; i < s.regions.size(); ++i)
          for (const auto& b : s.regions[i].buildings)
            if (b == name)
              return i;
        return s.regions.size();
      };
      if (region_of(ov.a) != region_of(ov.b))
        r->fail("overrides", "\"" + ov.a + "\" and \"" + ov.b +
                                 "\" are in different regions: they are joined by inter_region links");
    }
    r->finish();
  } else if (any_multi_building) {
    root.where().fail("missing \"inter_building\": a region has several buildings");
  }

  // Buildings of their own: GPU type, scale-up domain, pods and fabric.
  // Regions of their own first: a building override starts from its region's.
  std::vector<std::pair<std::string, BuildingOverride>> region_base; // region name -> its override
  for (auto o : root.objects("region_overrides", false)) {
    const std::string region = o.string("region");
    if (std::find(region_names.begin(), region_names.end(), region) == region_names.end()) {
      std::string list;
      for (const auto& n : region_names)
        list += (list.empty() ? "" : ", ") + n;
      o.fail("region", "unknown region \"" + region + "\" (regions: " + list + ")");
    }
    for (const auto& [other, ov] : region_base)
      if (other == region)
        o.fail("region", "region \"" + region + "\" is overridden twice");
    BuildingOverride b;
    b.node          = s.node;
    b.pod           = s.pod;
    b.building_spec = s.building;
    read_site_fields(o, b);
    o.finish({"region"});
    region_base.emplace_back(region, std::move(b));
  }
  auto region_of_building = [&](const std::string& building) -> const BuildingOverride* {
    for (const auto& r : s.regions)
      if (std::find(r.buildings.begin(), r.buildings.end(), building) != r.buildings.end())
        for (const auto& [name, ov] : region_base)
          if (name == r.name)
            return &ov;
    return nullptr;
  };
  for (auto o : root.objects("building_overrides", false)) {
    BuildingOverride b;
    b.building = o.string("building");
    if (std::find(building_names.begin(), building_names.end(), b.building) == building_names.end()) {
      std::string list;
      for (const auto& n : building_names)
        list += (list.empty() ? "" : ", ") + n;
      o.fail("building", "unknown building \"" + b.building + "\" (buildings: " + list + ")");
    }
    for (const auto& other : s.building_overrides)
      if (other.building == b.building)
        o.fail("building", "building \"" + b.building + "\" is overridden twice");
    const BuildingOverride* base = region_of_building(b.building);
    b.gpu                        = base != nullptr ? base->gpu : "";
    b.node                       = base != nullptr ? base->node : s.node;
    b.pod                        = base != nullptr ? base->pod : s.pod;
    b.building_spec              = base != nullptr ? base->building_spec : s.building;
    read_site_fields(o, b);
    o.finish();
    s.building_overrides.push_back(std::move(b));
  }
  for (const auto& name : building_names) {
    const BuildingOverride* base = region_of_building(name);
    bool own                     = false;
    for (const auto& o : s.building_overrides)
      own = own || o.building == name;
    if (base != nullptr && !own) {
      BuildingOverride b = *base;
      b.building         = name;
      s.building_overrides.push_back(std::move(b));
    }
  }
  std::int64_t total = 0;
  for (const auto& name : building_names) {
    const auto site = s.site_of(name);
    total += std::int64_t(site.node->gpus) * site.pod->nodes * site.building->pods;
  }
  if (total > kMaxGpus)
    root.where().fail("the topology has " + std::to_string(total) + " GPUs; at most " + std::to_string(kMaxGpus) +
                      " are supported");

  if (auto r = root.optional_object("inter_region")) {
    s.inter_region              = read_long_link(*r, nullptr);
    s.building_uplink_bandwidth = r->bandwidth("building_uplink");
    s.building_uplink_latency   = r->time("building_uplink_latency");
    s.inter_region_overrides    = read_overrides(*r, s.inter_region, region_names, "region");
    r->finish();
  } else if (s.regions.size() > 1) {
    root.where().fail("missing \"inter_region\": there are several regions");
  }
  root.finish();
  return s;
}

json TopologySpec::to_json() const
{
  json regions_json = json::array();
  for (const auto& r : regions)
    regions_json.push_back({{"name", r.name}, {"buildings", r.buildings}});
  if (graph) {
    // The graph itself can be large: the effective configuration names it and counts it.
    json j = {{"name", name},
              {"regions", regions_json},
              {"graph",
               {{"file", graph->file},
                {"vertices", graph->vertices.size()},
                {"links", graph->edges.size()},
                {"rail_optimized", graph->rail_optimized}}}};
    if (!building_overrides.empty()) {
      json a = json::array();
      for (const auto& o : building_overrides)
        a.push_back({{"building", o.building}, {"gpu", o.gpu}});
      j["building_overrides"] = a;
    }
    if (!file.empty())
      j["file"] = file;
    if (!multipath.is_default())
      j["multipath"] = {{"routing", multipath.spray  ? "spray"
                                    : multipath.ecmp ? "ecmp"
                                                     : "ideal"},
                        {"seed", multipath.seed},
                        {"qps", multipath.qps}};
    if (window > 0)
      j["transport"] = {{"window_bytes", window}};
    return j;
  }
  json j              = {{"name", name},
                         {"node", detail::node_json(node)},
                         {"pod", detail::pod_json(pod)},
                         {"building",
                          {{"pods", building.pods},
                           {"aggregation_oversubscription", building.aggregation_oversubscription},
                           {"aggregation_latency", config_time(building.aggregation_latency)}}},
                         {"regions", regions_json}};
  auto overrides_json = [](const std::vector<LinkOverride>& ovs) {
    json a = json::array();
    for (const auto& ov : ovs) {
      json o       = long_link_json(ov.link);
      o["between"] = {ov.a, ov.b};
      a.push_back(o);
    }
    return a;
  };
  if (inter_building.bandwidth > 0) {
    j["inter_building"]              = long_link_json(inter_building);
    j["inter_building"]["overrides"] = overrides_json(inter_building_overrides);
  }
  if (inter_region.bandwidth > 0) {
    j["inter_region"]                            = long_link_json(inter_region);
    j["inter_region"]["building_uplink"]         = config_bandwidth(building_uplink_bandwidth);
    j["inter_region"]["building_uplink_latency"] = config_time(building_uplink_latency);
    j["inter_region"]["overrides"]               = overrides_json(inter_region_overrides);
  }
  if (!building_overrides.empty()) {
    json a = json::array();
    for (const auto& o : building_overrides)
      a.push_back({{"building", o.building},
                   {"gpu", o.gpu},
                   {"node", detail::node_json(o.node)},
                   {"pod", detail::pod_json(o.pod)},
                   {"pods", o.building_spec.pods},
                   {"aggregation_oversubscription", o.building_spec.aggregation_oversubscription},
                   {"aggregation_latency", config_time(o.building_spec.aggregation_latency)}});
    j["building_overrides"] = a;
  }
  if (!file.empty())
    j["file"] = file;
  if (!multipath.is_default())
    j["multipath"] = multipath_json(multipath);
  if (window > 0)
    j["transport"] = {{"window_bytes", window}};
  return j;
}

} // namespace spansim::topology
