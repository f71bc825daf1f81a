// `spansim topology describe`: counts, per-tier capacity and boundary capacities of a topology.
#include "cli/commands.hpp"
#include "cli/output.hpp"
#include "common/error.hpp"
#include "common/paths.hpp"
#include "common/units.hpp"
#include "topology/topology.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

namespace spansim::cli {

namespace {

struct TopologyDescribeOptions {
  std::string topology;
  std::string dot_file;
  bool json          = false;
  bool no_boundaries = false;
};

struct TierRow {
  topology::Tier tier;
  std::int64_t links = 0;
  double min_bw      = std::numeric_limits<double>::infinity();
  double max_bw      = 0;
  double min_lat     = std::numeric_limits<double>::infinity();
  double max_lat     = 0;
  double capacity    = 0;
};

std::string range(double lo, double hi, std::string (*format)(double))
{
  return lo == hi ? format(lo) : format(lo) + " - " + format(hi);
}

std::string with_commas(std::int64_t v)
{
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
    s.insert(static_cast<std::size_t>(i), ",");
  return s;
}

void describe_topology(const TopologyDescribeOptions& o)
{
  topology::Topology topo(topology::load_topology_spec(o.topology));
  const auto& c = topo.counts();

  std::vector<TierRow> tiers(topology::kTierCount);
  for (int t = 0; t < topology::kTierCount; ++t)
    tiers[t].tier = static_cast<topology::Tier>(t);
  for (const auto& l : topo.links()) {
    auto& row = tiers[static_cast<int>(l.tier)];
    row.links++;
    row.min_bw  = std::min(row.min_bw, l.bandwidth);
    row.max_bw  = std::max(row.max_bw, l.bandwidth);
    row.min_lat = std::min(row.min_lat, l.latency);
    row.max_lat = std::max(row.max_lat, l.latency);
    row.capacity += l.bandwidth;
  }
  std::vector<topology::BoundaryCapacity> boundaries;
  if (!o.no_boundaries)
    boundaries = topo.boundary_capacities();
  if (!o.dot_file.empty()) {
    // Whole or not at all: a failed write leaves an earlier file as it was.
    std::ostringstream dot;
    topo.write_dot(dot);
    write_file_replacing(o.dot_file, dot.str());
  }

  if (o.json) {
    nlohmann::json j;
    j["spansim"]  = provenance();
    j["topology"] = topo.spec().to_json();
    j["counts"]   = {{"gpus", c.gpus},
                     {"nodes", c.nodes},
                     {"pods", c.pods},
                     {"buildings", c.buildings},
                     {"regions", c.regions},
                     {"nvswitches", c.nodes},
                     {"leaves", c.leaves},
                     {"leaf_down_ports", c.leaf_down_ports}, // 0 for an imported graph: its leaves vary
                     {"leaf_up_ports", c.leaf_up_ports},
                     {"physical_spines", c.physical_spines},
                     {"modelled_spines", topo.imported() ? c.physical_spines : c.pods},
                     {"aggregations", c.buildings},
                     {"region_gateways", std::count(topo.vertex_kinds().begin(), topo.vertex_kinds().end(),
                                                    topology::VertexKind::region_gateway)},
                     {"vertices", topo.vertex_kinds().size()},
                     {"links", topo.links().size()}};
    j["tiers"]    = nlohmann::json::array();
    for (const auto& t : tiers)
      if (t.links > 0)
        j["tiers"].push_back({{"tier", name_of(t.tier)},
                              {"links", t.links},
                              {"bandwidth_min_Bps", t.min_bw},
                              {"bandwidth_max_Bps", t.max_bw},
                              {"latency_min_s", t.min_lat},
                              {"latency_max_s", t.max_lat},
                              {"capacity_Bps", t.capacity}});
    j["boundaries"] = nlohmann::json::array();
    for (const auto& b : boundaries)
      j["boundaries"].push_back(
          {{"kind", b.kind}, {"name", b.name}, {"boundary_links_Bps", b.boundary_links}, {"max_flow_Bps", b.max_flow}});
    if (!o.dot_file.empty())
      j["dot_file"] = o.dot_file;
    std::cout << j.dump(2) << "\n";
    return;
  }

  const auto& s = topo.spec();
  std::cout << "Topology " << s.name << " (" << s.file << ")\n";
  if (!s.description.empty())
    std::cout << "  " << s.description << "\n";
  std::cout << "\n"
            << with_commas(c.gpus) << " GPUs: " << with_commas(c.nodes)
            << (topo.imported() ? " nodes, " + std::to_string(c.pods) + " pod(s), "
                                : " nodes of " + std::to_string(s.node.gpus) + ", " + std::to_string(c.pods) +
                                      " pod(s) of " + std::to_string(s.pod.nodes) + " nodes, ")
            << c.buildings << " building(s), " << c.regions << " region(s)\n";
  if (topo.imported()) {
    // An explicit graph: its own elements; no template to describe.
    std::map<topology::VertexKind, std::int64_t> kinds;
    for (auto k : topo.vertex_kinds())
      ++kinds[k];
    std::cout << (s.graph ? "Explicit graph from " + s.graph->file
                          : std::string("The template expanded building by building (their element counts differ)"))
              << ": " << with_commas(topo.vertex_kinds().size()) << " vertices, " << with_commas(topo.links().size())
              << " links; least-cost routes" << (s.pod.rail_optimized ? ", rail-optimized" : "") << "\n";
    for (const auto& o : s.building_overrides)
      std::cout << "Building " << o.building << ": " << (o.gpu.empty() ? std::string("the job's") : o.gpu) << " GPUs"
                << (s.graph ? std::string()
                            : ", " + std::to_string(o.node.gpus) + " per node, " + std::to_string(o.pod.nodes) +
                                  " nodes per pod, " + std::to_string(o.building_spec.pods) + " pods, NVLink " +
                                  units::format_bandwidth(o.node.nvlink_bandwidth) + ", " +
                                  std::string(name_of(o.pod.fabric)) + " " +
                                  units::format_bandwidth(o.pod.nic_bandwidth) + " per GPU")
                << "\n";
    std::cout << "\n";
    Table switches{"Vertices", {"kind", "count"}, {}};
    for (auto [k, n] : kinds)
      switches.rows.push_back({std::string(name_of(k)), with_commas(n)});
    print_table(std::cout, switches);
    std::cout << "\n";
  } else {
    std::cout << "Scale-out: " << (s.pod.rail_optimized ? "rail-optimized " : "") << name_of(s.pod.fabric) << ", "
              << units::format_bandwidth(s.pod.nic_bandwidth) << " per GPU, leaf radix " << s.pod.leaf_radix << " ("
              << c.leaf_down_ports << " down / " << c.leaf_up_ports << " up)\n";
    std::cout << "NCCL efficiency: NVLink " << fmt(s.node.nccl_efficiency) << ", NIC " << fmt(s.pod.nccl_efficiency)
              << " (those links carry this share of their rate, as nccl-tests' bus bandwidth does)\n";
    for (const auto& o : s.building_overrides)
      std::cout << "Building " << o.building << ": " << (o.gpu.empty() ? std::string("the job's") : o.gpu)
                << " GPUs, NVLink " << units::format_bandwidth(o.node.nvlink_bandwidth) << " (NCCL "
                << fmt(o.node.nccl_efficiency) << "), " << name_of(o.pod.fabric) << " "
                << units::format_bandwidth(o.pod.nic_bandwidth) << " per GPU (NCCL " << fmt(o.pod.nccl_efficiency)
                << ")\n";
    std::cout << "\n";

    Table switches{"Switches", {"kind", "count", "note"}, {}};
    switches.rows.push_back({"nvswitch", with_commas(c.nodes), "one per node"});
    switches.rows.push_back({"leaf", with_commas(c.leaves), std::to_string(c.leaves_per_pod) + " per pod"});
    switches.rows.push_back(
        {"spine", with_commas(c.physical_spines), "physical; modelled as one ideal-ECMP spine per pod"});
    switches.rows.push_back({"aggregation", with_commas(c.buildings), "one non-blocking layer per building"});
    if (c.regions > 1)
      switches.rows.push_back({"region gateway", with_commas(c.regions), "one per region"});
    print_table(std::cout, switches);
    std::cout << "\n";
  }

  Table t{"Links per tier (bandwidth per direction, at NCCL efficiency)",
          {"tier", "links", "bandwidth/link", "latency", "capacity"},
          {}};
  for (const auto& row : tiers)
    if (row.links > 0)
      t.rows.push_back({std::string(name_of(row.tier)), with_commas(row.links),
                        range(row.min_bw, row.max_bw, units::format_bandwidth),
                        range(row.min_lat, row.max_lat, units::format_time), units::format_bandwidth(row.capacity)});
  print_table(std::cout, t);
  if (!boundaries.empty()) {
    std::cout << "\n";
    Table b{"Capacity out of each building and region (per direction)", {"boundary", "boundary links", "max-flow"}, {}};
    for (const auto& row : boundaries)
      b.rows.push_back({row.kind + " " + row.name, units::format_bandwidth(row.boundary_links),
                        units::format_bandwidth(row.max_flow)});
    print_table(std::cout, b);
  }
  if (!o.dot_file.empty())
    std::cout << "\nGraphviz DOT written to " << o.dot_file << "\n";
}

} // namespace

struct LinksOptions {
  std::string topology;
  std::string tier;
  std::string under;
  bool json = false;
};

// Every link by name, as a faults block names them: the names to write failures with.
void links(const LinksOptions& o)
{
  topology::Topology t(topology::load_topology_spec(o.topology));
  std::optional<topology::Tier> tier;
  if (!o.tier.empty())
    tier = parse_enum<topology::Tier>(o.tier, "tier");
  nlohmann::json rows = nlohmann::json::array();
  Table table{"Links of " + t.spec().name + " (bandwidth per direction, at NCCL efficiency)",
              {"link", "tier", "bandwidth"},
              {}};
  for (std::size_t k = 0; k < t.links().size(); ++k) {
    const auto& l = t.links()[k];
    if (tier && l.tier != *tier)
      continue;
    const std::string name = t.link_name(static_cast<int>(k));
    if (!o.under.empty() && name.find(o.under) == std::string::npos)
      continue;
    if (o.json)
      rows.push_back({{"name", name}, {"tier", name_of(l.tier)}, {"bandwidth_Bps", l.bandwidth}});
    else
      table.rows.push_back({name, std::string(name_of(l.tier)), units::format_bandwidth(l.bandwidth)});
  }
  if (o.json) {
    std::cout << nlohmann::json{{"spansim", provenance()}, {"topology", t.spec().name}, {"links", rows}}.dump(2)
              << "\n";
    return;
  }
  print_table(std::cout, table);
}

struct GraphExportOptions {
  std::string topology;
  std::string format = "json";
  std::string output;
  bool json = false;
};

struct ZooOptions {
  std::string file, out;
  topology::ZooOptions options;
  std::string default_speed = "100Gbps", equipment = "20us", uplink = "12.8Tbps";
  bool json = false;
};

// A Topology Zoo graph with GPU buildings at named routers, checked as a topology file is and then written.
void import_zoo(ZooOptions& o)
{
  auto quantity = [](const std::string& text, const char* option, auto parse) {
    try {
      return parse(text);
    } catch (const std::exception& e) {
      throw UsageError(std::string(option) + " \"" + text + "\": " + e.what());
    }
  };
  o.options.default_bandwidth = quantity(o.default_speed, "--default-speed", units::parse_bandwidth);
  o.options.equipment_latency = quantity(o.equipment, "--equipment-latency", units::parse_time);
  o.options.uplink_bandwidth  = quantity(o.uplink, "--uplink", units::parse_bandwidth);
  const auto imported         = topology::import_zoo(o.file, o.options);
  // Loaded as any topology file is, before anything is written: a topology that does not load, route and connect
  // every GPU must not replace what --out held. The importer names the GraphML's nodes and edges for what it can
  // check; what only the loader finds is reported against the generated document.
  std::optional<topology::Topology> loaded;
  try {
    loaded.emplace(topology::parse_topology_spec(imported.topology, o.out));
  } catch (const SpecError& e) {
    throw SpecError(o.file, "",
                    "imported, the topology is refused at " + e.json_path() + " of the document for --out \"" + o.out +
                        "\" (nothing written): " + e.detail());
  }
  const topology::Topology& t = *loaded;
  if (const auto parent = std::filesystem::path(o.out).parent_path(); !parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec)
      throw UsageError("--out \"" + o.out + "\": cannot create its folder: " + ec.message());
  }
  write_file_replacing(o.out, imported.topology.dump(1) + "\n");
  if (o.json) {
    std::cout << nlohmann::json{{"spansim", provenance()},     {"graphml", o.file},       {"topology", o.out},
                                {"routers", imported.routers}, {"links", imported.links}, {"sites", imported.sites},
                                {"gpus", t.counts().gpus},     {"notes", imported.notes}}
                     .dump(2)
              << "\n";
    return;
  }
  std::cout << "Wrote " << o.out << ": " << imported.routers << " routers and " << imported.links << " links of "
            << o.file << ", " << imported.sites << " GPU buildings of " << o.options.building_template << " ("
            << t.counts().gpus << " GPUs)\n";
  for (const auto& n : imported.notes)
    std::cout << "  " << n << "\n";
}

// The explicit graph of any topology, in the import formats: an imported copy routes and times as the original.
void export_graph(const GraphExportOptions& o)
{
  const bool to_stdout = o.output.empty() || o.output == "-";
  // On standard output the graph is the document: a JSON summary beside GraphML would make it neither.
  if (o.json && to_stdout && o.format == "graphml")
    throw UsageError("--json with --format graphml needs -o FILE (without it the GraphML itself goes to standard "
                     "output; --format json prints the graph as one JSON document)");
  topology::Topology t(topology::load_topology_spec(o.topology));
  std::ostringstream text;
  if (o.format == "graphml")
    t.write_graphml(text);
  else
    text << t.to_graph_json().dump(t.links().size() < 10'000 ? 1 : -1) << "\n"; // large graphs compact: spec files
                                                                                // are limited to 64 MiB
  if (to_stdout) {
    std::cout << text.str();
    return;
  }
  write_file_replacing(o.output, text.str());
  if (o.json)
    std::cout
        << nlohmann::json{{"spansim", provenance()}, {"topology", t.spec().name},           {"format", o.format},
                          {"file", o.output},        {"vertices", t.vertex_kinds().size()}, {"links", t.links().size()}}
               .dump(2)
        << "\n";
  else
    std::cout << "Wrote " << t.vertex_kinds().size() << " vertices and " << t.links().size() << " links of "
              << t.spec().name << " to " << o.output << " (" << o.format << ")\n";
}

void add_topology_command(CLI::App& app)
{
  auto* topo = app.add_subcommand("topology", "Inspect topologies");
  topo->require_subcommand(1);
  auto options = std::make_shared<TopologyDescribeOptions>();
  auto* d = topo->add_subcommand("describe", "GPU, switch and link counts, capacity per tier and across boundaries");
  d->add_option(
       "topology", options->topology,
       "Topology file or preset name (" +
           [] {
             std::string list;
             for (const auto& n : topology::preset_names())
               list += (list.empty() ? "" : ", ") + n;
             return list;
           }() +
           ")")
      ->required();
  d->add_option("--dot", options->dot_file, "Write the graph as Graphviz DOT to this file");
  d->add_flag("--json", options->json, "Print one JSON document");
  d->add_flag("--no-boundaries", options->no_boundaries, "Skip the max-flow across building and region boundaries");
  d->callback([options] { describe_topology(*options); });

  auto lo = std::make_shared<LinksOptions>();
  auto* l = topo->add_subcommand("links", "Every link by name (as a scenario's faults block names them)");
  l->add_option("topology", lo->topology, "Topology file or preset name")->required();
  l->add_option("--tier", lo->tier,
                "Only this tier: nvlink, nic, leaf_spine, pod_aggregation, inter_building, "
                "building_uplink, inter_region");
  l->add_option("--match", lo->under, "Only links whose name contains this, e.g. bldg-a/pod0/leaf3");
  l->add_flag("--json", lo->json, "Print one JSON document");
  l->callback([lo] { links(*lo); });

  auto eo = std::make_shared<GraphExportOptions>();
  auto* e = topo->add_subcommand("export", "The explicit graph of a topology, to edit and import (JSON or GraphML)");
  e->add_option("topology", eo->topology, "Topology file or preset name")->required();
  e->add_option("--format", eo->format,
                "json (a topology file with a graph block) or graphml (the graph alone: name it from a JSON "
                "topology as {\"file\": F, \"rail_optimized\": ...} with the buildings' GPU types)")
      ->check(CLI::IsMember({"json", "graphml"}));
  e->add_option("-o,--output", eo->output, "Write to this file instead of standard output");
  e->add_flag("--json", eo->json,
              "With -o: print a JSON summary (without -o, --format json prints the graph as the one document; "
              "--format graphml refuses --json)");
  e->callback([eo] { export_graph(*eo); });

  auto zo = std::make_shared<ZooOptions>();
  auto* z = topo->add_subcommand("import-zoo", "A Topology Zoo GraphML graph as published, with GPU buildings at the "
                                               "routers you name, as a topology file");
  z->add_option("graphml", zo->file, "A Topology Zoo GraphML file (topology-zoo.org)")->required();
  z->add_option("--out", zo->out, "Topology file to write (JSON with an explicit graph)")->required();
  z->add_option("--site", zo->options.sites, "A router (its label or id) that hosts a GPU building; repeat")
      ->required();
  z->add_option("--template", zo->options.building_template,
                "Topology of one building copied at each site (default zoo-site: 64 H100 GPUs)");
  z->add_option("--default-speed", zo->default_speed,
                "Bandwidth of links without LinkSpeedRaw or LinkSpeed (default 100Gbps)");
  z->add_option("--equipment-latency", zo->equipment, "Latency added to each link's fiber delay (default 20us)");
  z->add_option("--uplink", zo->uplink, "Bandwidth from a building to its router (default 12.8Tbps)");
  z->add_flag("--json", zo->json, "Print one JSON document");
  z->callback([zo] { import_zoo(*zo); });
}

} // namespace spansim::cli
