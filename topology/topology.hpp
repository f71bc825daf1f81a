#pragma once
/// @file
/// @brief The topology stage: spec files -> a value graph of GPUs, switches and links, with routing.
///
/// Nothing here knows SimGrid or ns-3: the engines in netsim/ are built from this graph and use
/// `Topology::route` so that every fidelity sends a flow over the same links.

#include "common/json_reader.hpp"

#include <boost/graph/adjacency_list.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace spansim::topology {

enum class VertexKind { gpu, nvswitch, leaf, spine, aggregation, region_gateway, nic };
constexpr std::array<std::string_view, 7> enum_names(VertexKind)
{
  return {"gpu", "nvswitch", "leaf", "spine", "aggregation", "region_gateway", "nic"};
}
/// @brief The tiers of links, from the scale-up domain outwards.
/// The PCIe tier joins GPUs to NICs they share (a node with fewer NICs than GPUs).
enum class Tier { nvlink, nic, leaf_spine, pod_aggregation, inter_building, building_uplink, inter_region, pcie };
constexpr std::array<std::string_view, 8> enum_names(Tier)
{
  return {"nvlink",          "nic",          "leaf_spine", "pod_aggregation", "inter_building",
          "building_uplink", "inter_region", "pcie"};
}
inline constexpr int kTierCount = 8;

/// @brief Largest imported graph (JSON or GraphML): vertices and links. Larger graphs are refused before they are
/// parsed, with the limits named (GraphML's XML reading costs about 3.5 KB of memory per element).
inline constexpr std::size_t kMaxGraphVertices = 262'144;
inline constexpr std::size_t kMaxGraphLinks    = 1'048'576;

/// @brief The NVLink generation of a scale-up domain: NCCL's architecture row (Ampere, Hopper, Blackwell) and
/// whether its NVSwitch reduces in the switch (NVLink SHARP: NVLink 4 and 5 switches do, NVLink 3's do not).
/// Names: "nvlink3" (A100), "nvlink4" (H100, H200), "nvlink5" (B200, B300, GB200, GB300).
enum class NvLink { nvlink3, nvlink4, nvlink5 };
constexpr std::array<std::string_view, 3> enum_names(NvLink)
{
  return {"nvlink3", "nvlink4", "nvlink5"};
}

/// @brief The scale-out transport NCCL runs over (names: "ib", "roce", "efa", "tcpx", "tcpxo"): InfiniBand and
/// RoCE through NCCL's IB verbs transport, AWS EFA (SRD) through aws-ofi-nccl, Google's GPUDirect-TCPX and TCPXO
/// through their net plugins (which unpack received data on the GPU). Properties: topology/fabrics.json.
enum class Fabric { ib, roce, efa, tcpx, tcpxo };
constexpr std::array<std::string_view, 5> enum_names(Fabric)
{
  return {"ib", "roce", "efa", "tcpx", "tcpxo"};
}

/// @brief An explicit graph of GPUs and switches, imported from JSON or GraphML (format: topology/README.md).
/// Vertices and links keep the file's order, which breaks ties between equal routes.
struct GraphSpec {
  struct Vertex {
    std::string id;
    VertexKind kind = VertexKind::gpu;
    std::string building; ///< empty: a switch of no building (a long-haul router)
    std::string pod;      ///< a label inside the building; empty: the building's one pod
    std::string node;     ///< GPUs: their scale-up domain, a name unique in the graph
    std::string region;   ///< a switch of no building: the region it stands in (a gateway); empty: none
  };
  struct Edge {
    std::string a;
    std::string b;
    Tier tier        = Tier::nic;
    double bandwidth = 0; ///< bytes/s per direction: what the link carries (NCCL efficiency included)
    double latency   = 0; ///< seconds
    int cost         = 1; ///< routing metric: routes minimize the sum over their links
  };
  std::vector<Vertex> vertices;
  std::vector<Edge> edges;
  bool rail_optimized = false; ///< GPU i of every node reaches its leaves only through rail i (checked)
  /// @brief What NCCL sees of the nodes and fabric that the links do not say (a JSON graph's "nccl" block; NVLS
  /// off, the fabric's and generation's fitted latencies where not given: negative).
  NvLink nvlink              = NvLink::nvlink4;
  bool nvls                  = false;
  double step_latency        = -1;
  double nvls_warp_rate      = -1;
  double p2p_channel_rate    = -1;
  double p2p_ll_channel_rate = -1;
  Fabric fabric              = Fabric::roce;
  bool sharp                 = false;
  double net_latency         = -1;
  /// @brief NIC ports per node when each GPU has several (fused into one device by NCCL); 0: what the links say
  /// (one per GPU, or the NIC vertices that GPUs share).
  int nics = 0;
  std::string file;      ///< where the graph was read from
  std::string json_path; ///< where it sits in `file` ("$.topology.graph"); empty: the whole file
};

/// @brief Scale-up domain: GPUs of one node joined through an NVSwitch, and the NICs they reach the fabric by.
struct NodeSpec {
  int gpus                = 8;
  double nvlink_bandwidth = 0; ///< bytes/s per GPU per direction
  double nvlink_latency   = 0; ///< seconds per link (GPU <-> NVSwitch)
  /// @brief Share of the NVLink rate NCCL's collectives reach (nccl-tests bus bandwidth over the link rate):
  /// the NVLink links carry this share. 1: the link rate.
  double nccl_efficiency = 1;
  NvLink nvlink          = NvLink::nvlink4;
  /// @brief NCCL may reduce in the NVSwitch (NVLS; needs nvlink4 or nvlink5 and the fabric manager's multicast).
  bool nvls = false;
  /// @brief NICs per node (0: one per GPU). Fewer than the GPUs: each NIC serves the GPUs `nic_gpus` gives it;
  /// more: each GPU has nics / gpus ports, which NCCL fuses into one device (the pod's `nic_bandwidth` is per port).
  int nics = 0;
  /// @brief Per NIC, the local GPUs behind its PCIe switch (empty: consecutive blocks of gpus / nics).
  std::vector<std::vector<int>> nic_gpus;
  /// @brief Seconds NCCL's kernels add to each step inside the node beyond its tuner's NVLink latency. Not given:
  /// the NVLink generation's (topology/fabrics.json).
  double step_latency = 0;
  /// @brief Bytes/s one warp of NCCL's NVLS all-reduce kernels copies (its scatter and gather warps bound a
  /// channel); 0: no such bound. Not given: the NVLink generation's (topology/fabrics.json).
  double nvls_warp_rate = 0;
  /// @brief Bytes/s one channel of NCCL's send/recv kernel moves between two GPUs of the node; 0: no such bound.
  /// Not given: the NVLink generation's (topology/fabrics.json).
  double p2p_channel_rate = 0;
  /// @brief The same for an LL send (wire bytes: each 16-byte line carries 8 of data); 0: no such bound.
  double p2p_ll_channel_rate = 0;
  /// @brief The rate the NVLink links carry (bytes/s): the link rate times nccl_efficiency.
  double nvlink_rate() const { return nvlink_bandwidth * nccl_efficiency; }
  int nic_count() const { return nics > 0 ? nics : gpus; }
  /// @brief Ports per GPU (1 unless a GPU has several).
  int ports_per_gpu() const { return nics > gpus ? nics / gpus : 1; }
  /// @brief Whether NICs are shared (fewer NICs than GPUs): the node has NIC vertices of its own.
  bool shared_nics() const { return nics > 0 && nics < gpus; }
  /// @brief The NIC a local GPU reaches the fabric by (its own when each GPU has one).
  int nic_of(int local) const;
  bool operator==(const NodeSpec&) const = default;
};

/// @brief Scale-out fabric of one pod (or "AI zone"): leaf/spine, rail-optimized or not.
struct PodSpec {
  int nodes               = 1;
  bool rail_optimized     = true;
  double nic_bandwidth    = 0; ///< bytes/s per NIC port per direction; also the switch port speed
  int leaf_radix          = 64;
  int spine_radix         = 64;
  double oversubscription = 1; ///< leaf downlink : uplink ports
  double link_latency     = 0; ///< seconds per link (GPU <-> leaf, leaf <-> spine)
  Fabric fabric           = Fabric::roce;
  /// @brief The switches reduce in the network (InfiniBand SHARP, NCCL's CollNet through its plugin).
  bool sharp = false;
  /// @brief Share of the NIC rate NCCL reaches across nodes (nccl-tests bus bandwidth over the port rate): the
  /// GPU-to-leaf links carry this share. Not given: the fabric's (topology/fabrics.json).
  double nccl_efficiency = 1;
  /// @brief Seconds the net transport adds to each of NCCL's network steps (graph.latencyInter). Not given: the
  /// fabric's (topology/fabrics.json).
  double net_latency = 0;
  /// @brief The rate the GPU-to-leaf links carry (bytes/s): the port rate times nccl_efficiency.
  double nic_rate() const { return nic_bandwidth * nccl_efficiency; }
  bool operator==(const PodSpec&) const = default;
};

/// @brief What a fabric gives NCCL where a pod does not say (topology/fabrics.json, fitted by `spansim calibrate
/// --network`).
struct FabricDefaults {
  double nccl_efficiency = 0.94;
  double net_latency     = 0; ///< seconds
};
/// @brief The shipped defaults of a fabric. @throws SpecError naming topology/fabrics.json if it is malformed.
FabricDefaults fabric_defaults(Fabric fabric);
/// @brief The shipped step latency of an NVLink generation (seconds; topology/fabrics.json).
double nvlink_step_latency(NvLink generation);
/// @brief The shipped NVLS warp rate of an NVLink generation (bytes/s; 0: none fitted; topology/fabrics.json).
double nvlink_nvls_warp_rate(NvLink generation);
/// @brief The shipped send/recv channel rate of an NVLink generation (bytes/s; 0: none fitted; topology/fabrics.json).
double nvlink_p2p_channel_rate(NvLink generation);
/// @brief The same for LL sends (wire bytes/s).
double nvlink_p2p_ll_channel_rate(NvLink generation);
/// @brief The file the defaults are read from.
std::string fabrics_file();

/// @brief A building: pods joined by an aggregation layer.
struct BuildingSpec {
  int pods                            = 1;
  double aggregation_oversubscription = 1; ///< pod spine capacity : pod uplink capacity to the aggregation layer
  double aggregation_latency          = 0; ///< seconds per link (pod spine <-> aggregation)
};

/// @brief A long link (between buildings or regions): capacity and latency, the latter from distance or given.
struct LongLinkSpec {
  double bandwidth         = 0; ///< bytes/s per direction
  double distance          = 0; ///< meters (0 when the latency was given directly)
  double equipment_latency = 0; ///< seconds added to the fiber latency (transceivers, DWDM, switches)
  double latency           = 0; ///< effective one-way latency in seconds
};

/// @brief A per-pair override of a long link's defaults, by building or region names.
struct LinkOverride {
  std::string a;
  std::string b;
  LongLinkSpec link;
};

/// @brief A region: its name and its buildings' names.
struct RegionSpec {
  std::string name;
  std::vector<std::string> buildings;
};

struct TopologySpec;

/// @brief How a training step under ECMP is simulated (a scenario's `multipath.ecmp_mode`; netsim/README.md).
enum class EcmpMode {
  automatic,  ///< rails apart where they separate and the job has more than kExactEcmpGpus GPUs (kExactEcmpAllToAllGpus
              ///< when all-to-alls cross nodes), else exact
  exact,      ///< every rail's flows together
  rails_apart ///< each rail alone, the links rails share divided by its share of their bytes (of their flows over
              ///< time when all-to-alls cross nodes); the slowest rail
};
constexpr std::array<std::string_view, 3> enum_names(EcmpMode)
{
  return {"auto", "exact", "rails-apart"};
}
/// @brief Jobs up to this many GPUs run ECMP exactly under EcmpMode::automatic (minutes at most, analytical).
inline constexpr std::int64_t kExactEcmpGpus = 4096;
/// @brief Jobs whose all-to-alls cross nodes run ECMP exactly under EcmpMode::automatic up to this many GPUs (about a
/// minute at flow fidelity at 16K, bench/README.md); above, the rails apart with time-resolved shares.
inline constexpr std::int64_t kExactEcmpAllToAllGpus = 16384;

/// @brief How traffic uses parallel paths (a scenario's `multipath` block; format: topology/README.md).
struct MultipathSpec {
  bool ecmp            = false; ///< false: "ideal" (one path per pair, ties to the lowest link ids)
  std::uint64_t seed   = 1;     ///< ECMP's hash seed
  int long_links       = 1;     ///< parallel links (wavelengths) per inter-building and inter-region pair
  bool explicit_spines = false; ///< a pod's physical spines as switches of their own (else one ideal-ECMP vertex)
  int qps              = 1;     ///< queue pairs per GPU pair: a transfer splits into this many flows, hashed apart
  /// @brief Per-packet spraying over every equal-cost next hop, at packet fidelity (there, ecmp is set too: the
  /// analytical and flow engines route as ECMP, so hybrid fidelity's corrections carry spraying's effect).
  bool spray         = false;
  EcmpMode ecmp_mode = EcmpMode::automatic; ///< how a step is simulated under ECMP
  bool is_default() const { return !ecmp && long_links == 1 && !explicit_spines && qps == 1; }
};

/// @brief What one building has of its own: its GPU type, scale-up domain, pods and fabric. Every field not
/// overridden is the template's.
struct BuildingOverride {
  std::string building;
  std::string gpu;            ///< a GPU file name ("b200") the building's GPUs are; empty: the job's
  NodeSpec node;              ///< GPUs per node (8 for HGX, 72 for NVL72), NVLink bandwidth, latency, NCCL efficiency
  PodSpec pod;                ///< nodes, rails, NIC speed, radixes, oversubscription, latency, fabric, NCCL efficiency
  BuildingSpec building_spec; ///< pods and the aggregation layer
  /// @brief Whether the building's element counts differ from the template's (then the graph is expanded
  /// building by building rather than computed from one template).
  bool changes_counts(const TopologySpec& t) const;
};

/// @brief The whole topology spec, as read from a file; units already converted to SI. Either a template
/// (node, pod, building, regions and long links) or, when `graph` is set, an explicit graph with its regions.
struct TopologySpec {
  std::string name;
  std::string description;
  std::string file; ///< where it was read from, for error messages and results
  NodeSpec node;
  PodSpec pod;
  BuildingSpec building;
  std::vector<RegionSpec> regions;
  LongLinkSpec inter_building;
  std::vector<LinkOverride> inter_building_overrides;
  LongLinkSpec inter_region;
  std::vector<LinkOverride> inter_region_overrides;
  double building_uplink_bandwidth = 0; ///< bytes/s from a building's aggregation to its region gateway
  double building_uplink_latency   = 0; ///< seconds
  std::vector<BuildingOverride> building_overrides;
  std::shared_ptr<const GraphSpec> graph; ///< set: the graph is explicit; node, pod and building are derived
  MultipathSpec multipath;                ///< set by a scenario: parallel long links and ECMP
  /// @brief Set by a scenario's `transport`: bytes a queue pair may have in flight (0: no limit, an idealized
  /// RDMA), so that a flow runs at most at window / round trip.
  double window = 0;

  /// @brief A building's own elements: its override's, or the template's.
  struct Site {
    const NodeSpec* node;
    const PodSpec* pod;
    const BuildingSpec* building;
    std::string gpu; ///< "" for the job's
  };
  Site site_of(const std::string& building) const;

  /// @brief The spec as canonical JSON with explicit units (the effective configuration).
  nlohmann::json to_json() const;
};

/// @brief Names of the shipped presets (topology/presets/NAME.json).
std::vector<std::string> preset_names();
/// @brief Directory holding the presets.
std::string preset_directory();
/// @brief Loads a spec from a file path, or from a preset name when no such file exists.
/// @throws SpecError naming the file, JSON path and allowed values.
/// @param referrer, when given, is the spec file and JSON path that names it: a missing file is reported there.
TopologySpec load_topology_spec(const std::string& file_or_preset, const spec::Location& referrer = {});
/// @brief Parses a spec from JSON; `file` is used in error messages.
/// `json_path` locates the document inside `file` (an inline topology of a scenario: "$.topology").
TopologySpec parse_topology_spec(const nlohmann::json& json, const std::string& file,
                                 const std::string& json_path = "$");

/// @brief How a Topology Zoo graph becomes a topology: where GPU buildings attach and what its links lack.
struct ZooOptions {
  std::vector<std::string> sites;              ///< routers (label or id) that host a GPU building each, in GPU order
  std::string building_template = "zoo-site";  ///< a topology of one building (preset or file), copied at each site
  double default_bandwidth      = 100e9 / 8;   ///< bytes/s of a link without LinkSpeedRaw
  double equipment_latency      = 20e-6;       ///< seconds added to each link's fiber delay
  double uplink_bandwidth       = 12.8e12 / 8; ///< bytes/s from a building to its router
  double uplink_latency         = 2e-6;        ///< seconds
};

/// @brief A Topology Zoo graph imported: the topology document and what was left out or assumed.
struct ZooImport {
  nlohmann::json topology; ///< a topology file with an explicit graph (load_topology_spec reads it)
  std::vector<std::string> notes;
  int routers = 0, links = 0, sites = 0;
};

/// @brief Reads a Topology Zoo GraphML file as published (keys resolved by name, graph-level data ignored): every
/// node with a link becomes a router (a switch of no building), every edge a link of LinkSpeedRaw bits/s (else
/// LinkSpeed in LinkSpeedUnits K, M, G or T, else the default) whose latency is the great-circle distance at 5 us/km
/// plus the equipment's; each site gets a copy of the template building joined to its router, in the order of `sites`.
/// Isolated nodes and self loops are left out and noted; an absent or empty LinkSpeedRaw or coordinate takes the
/// default and is noted.
/// @throws SpecError naming the file for what is not a GraphML graph, and the node or edge (ids and labels) with the
/// allowed range for a LinkSpeedRaw, LinkSpeed (or its units), Latitude or Longitude that is present but malformed or
/// out of range;
/// UsageError for an unknown or isolated site, a site the first cannot reach, and options out of range.
ZooImport import_zoo(const std::string& path, const ZooOptions& options);

/// @brief The great-circle distance in km between two points given in degrees (haversine, Earth radius 6,371 km).
double great_circle_km(double lat1, double lon1, double lat2, double lon2);

/// @brief A full-duplex link; `bandwidth` is available in each direction. Forward is a -> b.
struct Link {
  Tier tier;
  int a;
  int b;
  double bandwidth;
  double latency;
};

/// @brief One traversal of a link in a route.
struct Hop {
  int link;
  bool forward; ///< true when traversed from Link::a to Link::b
  bool operator==(const Hop&) const = default;
};

/// @brief Where a GPU sits in the hierarchy (all indices global, except local and rail).
struct GpuLocation {
  int region;
  int building;
  int pod;
  int node;
  int local; ///< index inside the node, which is also its rail
  int leaf;  ///< global leaf index
};

/// @brief Directed graph for Boost algorithms: one edge per link direction.
struct EdgeProperties {
  int link;
  bool forward;
  double capacity;
};
using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, boost::no_property, EdgeProperties>;

/// @brief Counts of the modelled and physical elements of a topology.
struct Counts {
  std::int64_t gpus, nodes, pods, buildings, regions;
  std::int64_t leaves; ///< modelled one vertex each
  std::int64_t leaves_per_pod;
  std::int64_t physical_spines; ///< from leaf uplinks and spine radix; modelled as one vertex per pod
  int leaf_down_ports, leaf_up_ports;
};

/// @brief Capacity across one boundary (out of one building or region), per direction.
struct BoundaryCapacity {
  std::string kind; ///< "building" or "region"
  std::string name;
  double boundary_links; ///< sum of the bandwidths of the links that cross the boundary
  double max_flow;       ///< max-flow from the GPUs inside to all GPUs outside
};

/// @brief Failed and degraded elements of a site, named as results name them ("bldg-a/pod0/leaf3",
/// "bldg-a/pod0/leaf3 -- bldg-a/pod0/spine"), or drawn at random with a seed. Format: topology/README.md.
struct FaultSpec {
  struct LinkFault {
    std::string name;
    double bandwidth = 0; ///< fraction of the capacity left; 0: failed
    spec::Location where;
  };
  struct ElementFault {
    std::string name;
    spec::Location where;
  };
  std::vector<LinkFault> links;
  std::vector<ElementFault> switches; ///< every link of the switch fails
  std::vector<ElementFault> nodes;    ///< every GPU of the node fails
  std::uint64_t seed      = 1;
  double random_links     = 0; ///< fraction of scale-out links (NIC and above) drawn to fail or degrade
  double random_bandwidth = 0; ///< what a drawn link keeps (0: failed)
  bool empty() const { return links.empty() && switches.empty() && nodes.empty() && random_links <= 0; }
};
/// @brief The template with per-building counts as an explicit graph: vertices named as a template names them.
GraphSpec expand_template(const TopologySpec& spec);
/// @brief The GPU-to-NIC PCIe rate NCCL's topology gives a node of this NVLink generation (bytes/s).
double pcie_bandwidth(NvLink generation);
/// @brief Reads a `multipath` block. @throws SpecError at its JSON path.
MultipathSpec read_multipath(spec::ObjectReader r);
/// @brief A multipath block as read_multipath reads it (what is not the default, and routing and queue pairs).
nlohmann::json multipath_json(const MultipathSpec& multipath);
/// @brief Reads a `faults` block. @throws SpecError at its JSON path.
FaultSpec read_faults(spec::ObjectReader r);

/// @brief The built topology: vertices, links and routes. A value; copying it is allowed but large.
class Topology {
public:
  /// @brief Builds the graph from a validated spec: the template's hierarchy, or the explicit graph.
  /// @throws SpecError for an explicit graph that cannot carry a job (disconnected GPUs, uneven nodes, ...).
  explicit Topology(TopologySpec spec);
  /// @brief Whether the graph was imported (routes are shortest paths) rather than built from the template.
  bool imported() const { return graph_ != nullptr; }
  /// @brief Whether links were scaled, degraded or failed after the site was built from its spec (faults,
  /// variability, a rail's shares): a site rebuilt from spec() would differ.
  bool altered() const { return altered_; }
  /// @brief Whether GPU i of every node reaches its leaves only through rail i, in every building.
  bool rail_optimized() const { return graph_ ? graph_->rail_optimized : spec_.pod.rail_optimized; }
  /// @brief GPUs of the smallest node (every node's, unless buildings differ).
  int node_gpus() const { return node_size_.empty() ? spec_.node.gpus : smallest_node_; }
  /// @brief GPUs of the node holding `gpu`.
  int node_gpus_of(int gpu) const { return node_size_.empty() ? spec_.node.gpus : node_size_[locate(gpu).node]; }

  /// @brief A copy whose links above the leaves (pod uplinks, inter-building, building uplinks, inter-region)
  /// have their bandwidth divided by `factor`: what one of `factor` identical rails sees of links all rails share.
  Topology with_shared_links_divided(double factor) const;
  /// @brief A copy folded by a symmetry (topology/symmetry.hpp): every hop of every route is replaced by
  /// `canonical[hop]` (hop = 2 * link + (forward ? 0 : 1)), and link `k` has its bandwidth divided by
  /// `stabilizer[k]`, the images of the whole site that coincide on it.
  Topology with_folded_routes(std::vector<int> canonical, const std::vector<int>& stabilizer) const;
  /// @brief Whether routes are folded (with_folded_routes).
  bool folded() const { return fold_ != nullptr; }
  /// @brief Whether routes may use link `k` (folded routes use only their canonical hops' links).
  bool route_link(int k) const { return !fold_ || (*fold_)[2 * k] == 2 * k || (*fold_)[2 * k + 1] == 2 * k + 1; }
  /// @brief A copy whose link `k` has its bandwidth multiplied by `factors[k]` (degraded links).
  Topology with_links_scaled(const std::vector<double>& factors) const;
  /// @brief The same site with each link direction's capacity scaled by factors[2 * link + (forward ? 0 : 1)]
  /// (each > 0; routes unchanged): what one rail gets of the links rails share when they run apart under ECMP.
  Topology with_directions_scaled(const std::vector<double>& factors) const;
  /// @brief A link direction's capacity: the link's bandwidth, times its with_directions_scaled factor.
  double hop_bandwidth(int link, bool forward) const
  {
    return direction_scale_.empty() ? links_[link].bandwidth
                                    : links_[link].bandwidth * direction_scale_[2 * link + (forward ? 0 : 1)];
  }
  /// @brief A copy with `faults` applied: failed links keep no bandwidth, degraded ones their fraction, and GPUs
  /// that are failed or cut off (routes are a tree: nothing below a failed link is reachable) are marked.
  /// @throws SpecError naming an unknown element at its JSON path.
  Topology with_faults(const FaultSpec& faults) const;
  /// @brief Why GPU `gpu` cannot be used (empty: it can).
  const std::string& gpu_fault(int gpu) const;
  /// @brief Links failed (no bandwidth left) and degraded by the faults applied.
  int failed_links() const { return failed_links_; }
  int degraded_links() const { return degraded_links_; }
  /// @brief The name of link `k`: "A -- B".
  std::string link_name(int k) const;

  const TopologySpec& spec() const { return spec_; }
  const Counts& counts() const { return counts_; }
  int gpu_count() const { return static_cast<int>(counts_.gpus); }
  const std::vector<VertexKind>& vertex_kinds() const { return vertex_kind_; }
  const std::vector<Link>& links() const { return links_; }
  /// @brief The GPU file a building's GPUs are ("" unless the spec overrides it).
  const std::string& building_gpu(int building) const { return building_gpu_[building]; }
  /// @brief Whether the buildings differ in GPU type or link speeds.
  bool heterogeneous() const { return !spec_.building_overrides.empty(); }
  /// @brief The human-readable name of a vertex, e.g. "east-b0/pod1/node3/gpu5".
  std::string vertex_name(int vertex) const;
  /// @brief The name of a building (global index) or region.
  const std::string& building_name(int building) const { return building_names_[building]; }
  const std::string& region_name(int region) const { return spec_.regions[region].name; }
  int building_count() const { return static_cast<int>(building_names_.size()); }
  int region_of_building(int building) const { return building_region_[building]; }

  /// @brief Where GPU `gpu` (0-based, in node order) sits.
  GpuLocation locate(int gpu) const;
  /// @brief The route from one GPU to another: NVLink inside a node, otherwise up the hierarchy to the
  /// lowest common level and down again (rails, pod spine, aggregation, inter-building, inter-region).
  std::vector<Hop> route(int src_gpu, int dst_gpu, int qp = 0) const;
  /// @brief Every least-cost route from one GPU to another (GPUs never forward), at most `limit` of them, in
  /// the order route() prefers them: route() returns the first, or under ECMP the one its hash picks. A template
  /// topology has one route per pair.
  std::vector<std::vector<Hop>> equal_cost_routes(int src_gpu, int dst_gpu, int limit = 64) const;
  /// @brief Per-packet spraying's choices: for each vertex on a least-cost route between the switches that
  /// route(src, dst, qp) enters and leaves the fabric by, every hop out of it that stays on a least-cost route,
  /// in link order (vertices in the order a walk first meets them). A template topology has one route per pair.
  std::vector<std::pair<int, std::vector<Hop>>> spray_hops(int src_gpu, int dst_gpu, int qp = 0) const;
  /// @brief The links between buildings (and regions) on the route from building `a` to building `b`.
  std::vector<int> building_path(int a, int b) const;
  /// @brief The GPUs of building `b`, in index order (buildings may differ in size); with `gpus_per_node`, each
  /// node's first that many only (the others spares).
  std::vector<int> building_gpus(int b, int gpus_per_node = 0) const;
  /// @brief How many buildings, from the first, a job of `gpus` GPUs needs when it splits evenly over them
  /// (a building holds at most its own GPUs, or `gpus_per_node` of each node's when given); more than
  /// building_count() when it does not fit.
  int buildings_needed(std::int64_t gpus, int gpus_per_node = 0) const;
  /// @brief The building a vertex belongs to (-1: a switch of no building).
  int vertex_building(int vertex) const;
  /// @brief The region a vertex belongs to: its building's, or a gateway's own (-1: none).
  int vertex_region(int vertex) const;
  /// @brief Sum of latencies along a route.
  double route_latency(const std::vector<Hop>& route) const;
  /// @brief The latency each pipelined step of a collective pays between two GPUs beyond its route (fitted in
  /// topology/fabrics.json): the node's `step_latency` inside a node, the sender's pod's `net_latency` between nodes.
  double step_latency(int src_gpu, int dst_gpu) const;
  /// @brief The most a queue pair from `src_gpu` to `dst_gpu` can carry under the spec's window and the transfer's
  /// own (`window` bytes, 0: none), the smaller of the two: window over the round trip (route there and back);
  /// infinity without a window.
  double window_rate(int src_gpu, int dst_gpu, int qp = 0, double window = 0) const;
  /// @brief The window a transfer runs under: the smaller of the spec's and its own (`window` bytes; 0: none).
  double effective_window(double window) const;
  /// @brief The round trip between two GPUs' queue pair (route there and back), in seconds.
  double round_trip(int src_gpu, int dst_gpu, int qp = 0) const;
  /// @brief The same site with another window (bytes; 0: none).
  Topology with_window(double window) const;
  /// @brief Smallest bandwidth along a route (each hop in its direction).
  double route_bandwidth(const std::vector<Hop>& route) const;

  /// @brief Vertex ids of special switches (for builders of engine platforms).
  int nvswitch_vertex(int node) const { return nvswitch_base_ + node; }
  int leaf_vertex(int leaf) const { return leaf_base_ + leaf; }
  int spine_vertex(int pod) const { return spine_base_ + pod; }
  int aggregation_vertex(int building) const { return aggregation_base_ + building; }
  /// @brief -1 when the topology has a single region (no gateways).
  int region_gateway_vertex(int region) const { return gateway_base_ < 0 ? -1 : gateway_base_ + region; }

  /// @brief Link ids by role (see route()). In an imported graph: a GPU's first link to an NVSwitch and to
  /// anything else (-1: none), and a leaf's first link to a switch.
  int nvlink_link(int gpu) const { return gpu_nvlink_.empty() ? gpu : gpu_nvlink_[gpu]; }
  int nic_link(int gpu) const { return gpu_nic_.empty() ? static_cast<int>(counts_.gpus) + gpu : gpu_nic_[gpu]; }
  int leaf_uplink(int leaf) const { return leaf_uplink_of_.empty() ? leaf_uplink_base_ + leaf : leaf_uplink_of_[leaf]; }
  int pod_uplink(int pod) const { return pod_uplink_base_ + pod; }
  /// @brief -1 when the two buildings are the same or in different regions.
  int inter_building_link(int building_a, int building_b) const;
  /// @brief -1 for a single-region topology.
  int building_uplink(int building) const { return building_uplink_base_ < 0 ? -1 : building_uplink_base_ + building; }
  int inter_region_link(int region_a, int region_b) const;

  /// @brief The directed graph (two edges per link) for Boost algorithms.
  Graph to_graph() const;
  /// @brief Max-flow from every GPU with inside[gpu] true to every other GPU (bytes/s).
  double max_flow_out(const std::vector<bool>& inside) const;
  /// @brief Capacity out of every building and every region: boundary links and max-flow.
  std::vector<BoundaryCapacity> boundary_capacities() const;
  /// @brief Writes the graph in Graphviz DOT.
  void write_dot(std::ostream& out) const;
  /// @brief The graph as a topology file with an explicit `graph` (readable by load_topology_spec): an
  /// imported copy routes and times every job as this topology does.
  nlohmann::json to_graph_json() const;
  /// @brief The graph in GraphML, with the attributes load_topology_spec() reads from a .graphml file.
  void write_graphml(std::ostream& out) const;

private:
  /// @brief GPUs attached to leaf `leaf_in_pod` of a pod (fewer than its down ports on a partly filled leaf).
  int leaf_gpus(int leaf_in_pod) const;
  void build_from_graph();
  /// @brief The node's NICs (NodeSpec::nics, nic_gpus, the pod's per-port NIC rate) from an imported graph.
  void read_graph_nics(std::size_t first_node_gpus);
  /// @brief Routes, and the check that every GPU reaches every other.
  void finish_graph_build();
  std::shared_ptr<const GraphSpec> graph_; ///< the imported graph, or the template expanded per building
  /// @brief Imported graphs: least-cost distances between fabric switches over the links left with bandwidth.
  void build_routes();
  /// @brief Imported graphs: marks GPUs that reach no GPU of the largest connected part.
  void mark_cut_off(const std::string& why);
  /// @brief Imported graphs: walk_route's route, cached.
  std::vector<Hop> graph_route(int src, int dst, int qp) const;
  /// @brief Imported graphs: a least-cost route, hashed per switch under ECMP.
  std::vector<Hop> walk_route(int src, int dst, int qp) const;
  /// @brief route() before folding.
  std::vector<Hop> unfolded_route(int src, int dst, int qp) const;
  /// @brief Imported graphs: a least-cost way between two GPUs, by its first and last links and the switches
  /// they reach (a == b: one switch joining only GPUs).
  struct Way {
    int l1, l2, a, b;
  };
  std::vector<Way> least_cost_ways(int src, int dst) const;

  void add_link(Tier tier, int a, int b, double bandwidth, double latency);

  TopologySpec spec_;
  Counts counts_{};
  std::vector<VertexKind> vertex_kind_;
  std::vector<Link> links_;
  std::vector<double> direction_scale_; ///< per hop index (empty: every direction at its link's bandwidth)
  std::vector<std::string> building_names_;
  std::vector<int> building_region_;
  std::vector<int> region_first_building_;
  int nvswitch_base_ = 0, leaf_base_ = 0, spine_base_ = 0, aggregation_base_ = 0, gateway_base_ = -1;
  int leaf_uplink_base_ = 0, pod_uplink_base_ = 0, building_uplink_base_ = -1;
  std::vector<int> inter_building_first_; ///< per region: first link id of its building mesh
  int inter_region_base_ = -1;
  std::vector<std::string> building_gpu_; ///< per building: its GPU file, "" for the job's
  bool altered_ = false;                  ///< see altered()
  std::vector<std::string> gpu_fault_;    ///< per GPU: why it is failed (empty: healthy); empty vector: no faults
  int failed_links_ = 0, degraded_links_ = 0;

  // Imported graphs only. Vertices: GPUs first (grouped by node), then switches in file order.
  std::vector<GpuLocation> gpu_location_;
  std::vector<int> gpu_nvlink_, gpu_nic_, leaf_uplink_of_;
  std::vector<std::string> vertex_names_;
  std::vector<int> vertex_building_;
  std::vector<int> vertex_region_;
  std::vector<std::string> node_names_;
  std::vector<int> node_size_; ///< per node: its GPUs
  int smallest_node_ = 0;
  std::vector<std::vector<std::pair<int, int>>> adjacency_; ///< per vertex: (link, other end), by link id
  std::vector<int>
      fabric_index_;        ///< per vertex: its index among the fabric switches (with a switch neighbour), else -1
  std::vector<int> fabric_; ///< the fabric switches' vertices
  /// @brief Per fabric switch: least cost from every fabric switch to it (kUnreachable when none), computed on first
  /// use; a cache, so mutable (simulations run single-threaded, one per process).
  mutable std::vector<std::vector<std::int32_t>> rows_;
  const std::int32_t* distances_to(int fabric_switch) const;
  /// @brief Imported graphs: the routes walked so far, by (source, destination, queue pair) (topology/graph.cpp). A
  /// collective repeats its pairs at every step, and each engine asks again per transfer (SimGrid's zone, the
  /// latency, the bytes): a walk under ECMP hashes at every switch. Shared by the copies whose routes cannot differ
  /// (scaled or divided bandwidths, windows, folds); build_routes() starts a new one.
  struct RouteCache;
  std::shared_ptr<RouteCache> route_cache_;
  int fabric_count_ = 0;
  std::vector<int> link_cost_;
  std::shared_ptr<const std::vector<int>> fold_; ///< canonical hop per hop (with_folded_routes)
};

/// @brief The long link between two buildings (or regions) `a` and `b`: their override's, or `fallback`.
const LongLinkSpec& long_link_between(const std::vector<LinkOverride>& overrides, const LongLinkSpec& fallback,
                                      const std::string& a, const std::string& b);

/// @brief Index of the unordered pair (i, j), i != j, among n items in a dense triangular layout.
int pair_index(int i, int j, int n);

} // namespace spansim::topology
