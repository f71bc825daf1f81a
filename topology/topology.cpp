// Builds the explicit graph of a hierarchical scale-across network and routes over it.
//
//   region gateway ========= inter-region (long haul, latency from distance) ========= region gateway
//        |  building uplink                                                                  |
//   aggregation (one per building) ===== inter-building (mesh inside a region) ===== aggregation
//        |  pod uplink = pod leaf uplinks / aggregation oversubscription
//   pod spine (one vertex per pod: ideal ECMP over the physical spines)
//        |  leaf uplink = up ports x port speed
//   leaf (rail r of a node range, or a whole node range when not rail-optimized)
//        |  NIC, one per GPU
//   GPU --- NVLink --- NVSwitch (one per node)
//
// A route goes up only as far as the lowest level the two GPUs share, then down: NVLink inside a
// node, one leaf when they share it, the pod spine inside a pod, and so on. GPUs never forward.
#include "topology/topology.hpp"

#include "common/error.hpp"

#include <boost/graph/push_relabel_max_flow.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>

namespace spansim::topology {

int pair_index(int i, int j, int n)
{
  if (i > j)
    std::swap(i, j);
  // Rows i = 0..n-2 hold pairs (i, i+1..n-1).
  return i * n - i * (i + 1) / 2 + (j - i - 1);
}

Topology::Topology(TopologySpec spec) : spec_(std::move(spec))
{
  graph_ = spec_.graph;
  for (const auto& o : spec_.building_overrides)
    if (!graph_ && (o.changes_counts(spec_) || o.node.nic_count() != o.node.gpus))
      graph_ = std::make_shared<const GraphSpec>(expand_template(spec_));
  // NICs other than one per GPU (shared ones, or several ports per GPU) have no arithmetic layout: expanded.
  if (!graph_ && !spec_.graph && spec_.node.nic_count() != spec_.node.gpus)
    graph_ = std::make_shared<const GraphSpec>(expand_template(spec_));
  // ECMP hashes over a graph's ties; a template's tree has none, so it is expanded (spines, wavelengths).
  if (!graph_ && spec_.multipath.ecmp) // long_links and explicit spines come with ecmp only
    graph_ = std::make_shared<const GraphSpec>(expand_template(spec_));
  if (graph_) {
    build_from_graph();
    return;
  }
  const auto& node = spec_.node;
  const auto& pod  = spec_.pod;

  for (std::size_t r = 0; r < spec_.regions.size(); ++r) {
    region_first_building_.push_back(static_cast<int>(building_names_.size()));
    for (const auto& b : spec_.regions[r].buildings) {
      building_names_.push_back(b);
      building_region_.push_back(static_cast<int>(r));
    }
  }

  counts_.leaf_down_ports =
      static_cast<int>(std::lround(pod.leaf_radix * pod.oversubscription / (1 + pod.oversubscription)));
  counts_.leaf_up_ports = pod.leaf_radix - counts_.leaf_down_ports;
  const int down        = counts_.leaf_down_ports;
  if (pod.rail_optimized)
    counts_.leaves_per_pod = std::int64_t(node.gpus) * ((pod.nodes + down - 1) / down);
  else {
    int nodes_per_leaf     = down / node.gpus;
    counts_.leaves_per_pod = (pod.nodes + nodes_per_leaf - 1) / nodes_per_leaf;
  }
  counts_.regions   = static_cast<std::int64_t>(spec_.regions.size());
  counts_.buildings = static_cast<std::int64_t>(building_names_.size());
  counts_.pods      = counts_.buildings * spec_.building.pods;
  counts_.nodes     = counts_.pods * pod.nodes;
  counts_.gpus      = counts_.nodes * node.gpus;
  counts_.leaves    = counts_.pods * counts_.leaves_per_pod;
  counts_.physical_spines =
      counts_.pods * ((counts_.leaves_per_pod * counts_.leaf_up_ports + pod.spine_radix - 1) / pod.spine_radix);

  // Vertices in blocks, so that ids are arithmetic: GPUs first (vertex id == GPU index).
  auto add_block = [this](VertexKind kind, std::int64_t n) {
    int base = static_cast<int>(vertex_kind_.size());
    vertex_kind_.insert(vertex_kind_.end(), static_cast<std::size_t>(n), kind);
    return base;
  };
  add_block(VertexKind::gpu, counts_.gpus);
  nvswitch_base_    = add_block(VertexKind::nvswitch, counts_.nodes);
  leaf_base_        = add_block(VertexKind::leaf, counts_.leaves);
  spine_base_       = add_block(VertexKind::spine, counts_.pods);
  aggregation_base_ = add_block(VertexKind::aggregation, counts_.buildings);
  if (counts_.regions > 1)
    gateway_base_ = add_block(VertexKind::region_gateway, counts_.regions);

  // Each building's node and pod: the template's, or its override's.
  std::vector<const NodeSpec*> node_of;
  std::vector<const PodSpec*> pod_of;
  for (const auto& name : building_names_) {
    const auto site = spec_.site_of(name);
    node_of.push_back(site.node);
    pod_of.push_back(site.pod);
    building_gpu_.push_back(site.gpu);
  }
  const auto per_building_pods = spec_.building.pods;

  links_.reserve(static_cast<std::size_t>(2 * counts_.gpus + counts_.leaves + counts_.pods + 64));
  for (int g = 0; g < counts_.gpus; ++g) {
    const auto& n = *node_of[locate(g).building];
    add_link(Tier::nvlink, g, nvswitch_vertex(g / node.gpus), n.nvlink_rate(), n.nvlink_latency);
  }
  for (int g = 0; g < counts_.gpus; ++g) {
    const auto& p = *pod_of[locate(g).building];
    add_link(Tier::nic, g, leaf_vertex(locate(g).leaf), p.nic_rate(), p.link_latency);
  }

  // A leaf's uplink is its up ports at port speed, scaled down for a partly filled leaf so that it keeps the
  // oversubscription ratio (nobody cables 32 uplinks to a leaf with 16 GPUs). ECMP over the physical spines
  // is taken as ideal: one spine vertex per pod.
  leaf_uplink_base_ = static_cast<int>(links_.size());
  std::vector<double> pod_leaf_capacity(building_names_.size(), 0.0); // per building: a pod's leaf uplinks
  for (std::size_t b = 0; b < building_names_.size(); ++b)
    for (int l = 0; l < counts_.leaves_per_pod; ++l)
      pod_leaf_capacity[b] += leaf_gpus(l) * pod_of[b]->nic_bandwidth * counts_.leaf_up_ports / counts_.leaf_down_ports;
  for (int l = 0; l < counts_.leaves; ++l) {
    const int in_pod = static_cast<int>(l % counts_.leaves_per_pod);
    const int pod_id = static_cast<int>(l / counts_.leaves_per_pod);
    const auto& p    = *pod_of[pod_id / per_building_pods];
    add_link(Tier::leaf_spine, leaf_vertex(l), spine_vertex(pod_id),
             leaf_gpus(in_pod) * p.nic_bandwidth * counts_.leaf_up_ports / counts_.leaf_down_ports, p.link_latency);
  }

  pod_uplink_base_ = static_cast<int>(links_.size());
  for (int p = 0; p < counts_.pods; ++p)
    add_link(Tier::pod_aggregation, spine_vertex(p), aggregation_vertex(p / spec_.building.pods),
             pod_leaf_capacity[p / per_building_pods] / spec_.building.aggregation_oversubscription,
             spec_.building.aggregation_latency);

  for (std::size_t r = 0; r < spec_.regions.size(); ++r) {
    inter_building_first_.push_back(static_cast<int>(links_.size()));
    int first = region_first_building_[r];
    int n     = static_cast<int>(spec_.regions[r].buildings.size());
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) {
        const auto& l = long_link_between(spec_.inter_building_overrides, spec_.inter_building,
                                          building_names_[first + i], building_names_[first + j]);
        add_link(Tier::inter_building, aggregation_vertex(first + i), aggregation_vertex(first + j), l.bandwidth,
                 l.latency);
      }
  }

  if (counts_.regions > 1) {
    building_uplink_base_ = static_cast<int>(links_.size());
    for (int b = 0; b < counts_.buildings; ++b)
      add_link(Tier::building_uplink, aggregation_vertex(b), region_gateway_vertex(building_region_[b]),
               spec_.building_uplink_bandwidth, spec_.building_uplink_latency);
    inter_region_base_ = static_cast<int>(links_.size());
    int n              = static_cast<int>(counts_.regions);
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) {
        const auto& l =
            long_link_between(spec_.inter_region_overrides, spec_.inter_region, region_name(i), region_name(j));
        add_link(Tier::inter_region, region_gateway_vertex(i), region_gateway_vertex(j), l.bandwidth, l.latency);
      }
  }
}

Topology Topology::with_shared_links_divided(double factor) const
{
  Topology copy = *this;
  for (auto& l : copy.links_)
    if (l.tier == Tier::pod_aggregation || l.tier == Tier::inter_building || l.tier == Tier::building_uplink ||
        l.tier == Tier::inter_region)
      l.bandwidth /= factor;
  return copy;
}

Topology Topology::with_links_scaled(const std::vector<double>& factors) const
{
  Topology copy = *this;
  copy.altered_ = true;
  bool failed   = false;
  for (std::size_t k = 0; k < copy.links_.size() && k < factors.size(); ++k) {
    copy.links_[k].bandwidth *= factors[k];
    // By what is left, not the factor: a tiny factor can leave nothing too.
    failed = failed || (links_[k].bandwidth > 0 && !(copy.links_[k].bandwidth > 0));
  }
  if (failed && imported())
    copy.build_routes(); // routes go around links left with nothing
  return copy;
}

Topology Topology::with_directions_scaled(const std::vector<double>& factors) const
{
  if (factors.size() != 2 * links_.size())
    throw UsageError("with_directions_scaled: one factor per link direction");
  for (double f : factors)
    if (!(f > 0) || !std::isfinite(f))
      throw UsageError("with_directions_scaled: factors must be positive");
  Topology copy = *this;
  copy.altered_ = true;
  if (copy.direction_scale_.empty())
    copy.direction_scale_ = factors;
  else
    for (std::size_t k = 0; k < factors.size(); ++k)
      copy.direction_scale_[k] *= factors[k];
  return copy;
}

int Topology::leaf_gpus(int leaf_in_pod) const
{
  const auto& pod = spec_.pod;
  const int down  = counts_.leaf_down_ports;
  if (pod.rail_optimized) {
    int leaves_per_rail = (pod.nodes + down - 1) / down;
    int first_node      = (leaf_in_pod % leaves_per_rail) * down;
    return std::min(down, pod.nodes - first_node);
  }
  int nodes_per_leaf = down / spec_.node.gpus;
  int first_node     = leaf_in_pod * nodes_per_leaf;
  return std::min(nodes_per_leaf, pod.nodes - first_node) * spec_.node.gpus;
}

void Topology::add_link(Tier tier, int a, int b, double bandwidth, double latency)
{
  links_.push_back(Link{tier, a, b, bandwidth, latency});
}

const LongLinkSpec& long_link_between(const std::vector<LinkOverride>& overrides, const LongLinkSpec& fallback,
                                      const std::string& a, const std::string& b)
{
  for (const auto& ov : overrides)
    if ((ov.a == a && ov.b == b) || (ov.a == b && ov.b == a))
      return ov.link;
  return fallback;
}

GpuLocation Topology::locate(int gpu) const
{
  if (imported())
    return gpu_location_[gpu];
  const auto& pod = spec_.pod;
  const int gpn   = spec_.node.gpus;
  GpuLocation loc{};
  loc.node        = gpu / gpn;
  loc.local       = gpu % gpn;
  loc.pod         = loc.node / pod.nodes;
  loc.building    = loc.pod / spec_.building.pods;
  loc.region      = building_region_[loc.building];
  int node_in_pod = loc.node % pod.nodes;
  const int down  = counts_.leaf_down_ports;
  int leaf_in_pod = 0;
  if (pod.rail_optimized) {
    int leaves_per_rail = (pod.nodes + down - 1) / down;
    leaf_in_pod         = loc.local * leaves_per_rail + node_in_pod / down;
  } else {
    leaf_in_pod = node_in_pod / (down / gpn);
  }
  loc.leaf = static_cast<int>(loc.pod * counts_.leaves_per_pod + leaf_in_pod);
  return loc;
}

int Topology::inter_building_link(int building_a, int building_b) const
{
  if (imported())
    return -1;
  int r = building_region_[building_a];
  if (building_a == building_b || r != building_region_[building_b])
    return -1;
  int first = region_first_building_[r];
  int n     = static_cast<int>(spec_.regions[r].buildings.size());
  return inter_building_first_[r] + pair_index(building_a - first, building_b - first, n);
}

int Topology::inter_region_link(int region_a, int region_b) const
{
  if (imported() || inter_region_base_ < 0 || region_a == region_b)
    return -1;
  return inter_region_base_ + pair_index(region_a, region_b, static_cast<int>(counts_.regions));
}

std::vector<Hop> Topology::route(int src, int dst, int qp) const
{
  auto hops = unfolded_route(src, dst, qp);
  if (fold_)
    for (auto& h : hops) {
      const int c = (*fold_)[2 * h.link + (h.forward ? 0 : 1)];
      h           = {c / 2, c % 2 == 0};
    }
  return hops;
}

Topology Topology::with_folded_routes(std::vector<int> canonical, const std::vector<int>& stabilizer) const
{
  Topology copy = *this;
  for (std::size_t k = 0; k < copy.links_.size() && k < stabilizer.size(); ++k)
    copy.links_[k].bandwidth /= stabilizer[k];
  copy.fold_ = std::make_shared<const std::vector<int>>(std::move(canonical));
  return copy;
}

std::vector<Hop> Topology::unfolded_route(int src, int dst, int qp) const
{
  if (src < 0 || dst < 0 || src >= counts_.gpus || dst >= counts_.gpus)
    throw UsageError("GPU index out of range: " + std::to_string(src) + " -> " + std::to_string(dst) +
                     " (the topology has " + std::to_string(counts_.gpus) + " GPUs)");
  std::vector<Hop> up;
  std::vector<Hop> down; // built from the destination upwards, reversed at the end
  if (src == dst)
    return up;
  if (imported())
    return graph_route(src, dst, qp);
  GpuLocation s = locate(src);
  GpuLocation d = locate(dst);
  auto finish   = [&]() {
    up.insert(up.end(), down.rbegin(), down.rend());
    return up;
  };
  if (s.node == d.node) {
    up.push_back({nvlink_link(src), true});
    down.push_back({nvlink_link(dst), false});
    return finish();
  }
  up.push_back({nic_link(src), true});
  down.push_back({nic_link(dst), false});
  if (s.leaf == d.leaf)
    return finish();
  up.push_back({leaf_uplink(s.leaf), true});
  down.push_back({leaf_uplink(d.leaf), false});
  if (s.pod == d.pod)
    return finish();
  up.push_back({pod_uplink(s.pod), true});
  down.push_back({pod_uplink(d.pod), false});
  if (s.building == d.building)
    return finish();
  if (s.region == d.region) {
    int l = inter_building_link(s.building, d.building);
    up.push_back({l, links_[l].a == aggregation_vertex(s.building)});
    return finish();
  }
  up.push_back({building_uplink(s.building), true});
  down.push_back({building_uplink(d.building), false});
  int l = inter_region_link(s.region, d.region);
  up.push_back({l, links_[l].a == region_gateway_vertex(s.region)});
  return finish();
}

Topology Topology::with_window(double window) const
{
  Topology t     = *this;
  t.spec_.window = window;
  return t;
}

double Topology::round_trip(int src, int dst, int qp) const
{
  return route_latency(route(src, dst, qp)) + route_latency(route(dst, src, qp));
}

double Topology::effective_window(double window) const
{
  return spec_.window > 0 && window > 0 ? std::min(spec_.window, window) : std::max(spec_.window, window);
}

double Topology::window_rate(int src, int dst, int qp, double window) const
{
  const double w = effective_window(window);
  if (w <= 0 || src == dst)
    return std::numeric_limits<double>::infinity();
  const double rtt = round_trip(src, dst, qp);
  return rtt > 0 ? w / rtt : std::numeric_limits<double>::infinity();
}

double Topology::route_latency(const std::vector<Hop>& route) const
{
  double sum = 0;
  for (const auto& h : route)
    sum += links_[h.link].latency;
  return sum;
}

double Topology::step_latency(int src_gpu, int dst_gpu) const
{
  const auto a = locate(src_gpu), b = locate(dst_gpu);
  const auto site = spec_.site_of(building_name(a.building));
  return a.node == b.node ? site.node->step_latency : site.pod->net_latency;
}

double Topology::route_bandwidth(const std::vector<Hop>& route) const
{
  double bw = std::numeric_limits<double>::infinity();
  for (const auto& h : route)
    bw = std::min(bw, hop_bandwidth(h.link, h.forward));
  return bw;
}

std::string Topology::vertex_name(int v) const
{
  if (imported())
    return vertex_names_[v];
  switch (vertex_kind_[v]) {
  case VertexKind::gpu: {
    auto loc = locate(v);
    return building_names_[loc.building] + "/pod" + std::to_string(loc.pod % spec_.building.pods) + "/node" +
           std::to_string(loc.node % spec_.pod.nodes) + "/gpu" + std::to_string(loc.local);
  }
  case VertexKind::nvswitch: {
    int n = v - nvswitch_base_;
    int p = n / spec_.pod.nodes;
    return building_names_[p / spec_.building.pods] + "/pod" + std::to_string(p % spec_.building.pods) + "/node" +
           std::to_string(n % spec_.pod.nodes) + "/nvswitch";
  }
  case VertexKind::leaf: {
    int l = v - leaf_base_;
    int p = static_cast<int>(l / counts_.leaves_per_pod);
    return building_names_[p / spec_.building.pods] + "/pod" + std::to_string(p % spec_.building.pods) + "/leaf" +
           std::to_string(l % counts_.leaves_per_pod);
  }
  case VertexKind::spine: {
    int p = v - spine_base_;
    return building_names_[p / spec_.building.pods] + "/pod" + std::to_string(p % spec_.building.pods) + "/spine";
  }
  case VertexKind::aggregation:
    return building_names_[v - aggregation_base_] + "/aggregation";
  case VertexKind::region_gateway:
    return spec_.regions[v - gateway_base_].name + "/gateway";
  case VertexKind::nic: // shared NICs are an expanded graph's (named by the graph), never a template's
    break;
  }
  return "?";
}

Graph Topology::to_graph() const
{
  Graph g(vertex_kind_.size());
  for (std::size_t i = 0; i < links_.size(); ++i) {
    const auto& l = links_[i];
    boost::add_edge(l.a, l.b, EdgeProperties{static_cast<int>(i), true, l.bandwidth}, g);
    boost::add_edge(l.b, l.a, EdgeProperties{static_cast<int>(i), false, l.bandwidth}, g);
  }
  return g;
}

double Topology::max_flow_out(const std::vector<bool>& inside) const
{
  // A separate flow network: Boost's push-relabel wants explicit reverse edges with zero capacity.
  using Traits   = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
  using FlowEdge = Traits::edge_descriptor;
  using FlowGraph =
      boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, boost::no_property,
                            boost::property<boost::edge_capacity_t, double,
                                            boost::property<boost::edge_residual_capacity_t, double,
                                                            boost::property<boost::edge_reverse_t, FlowEdge>>>>;
  const auto n = vertex_kind_.size();
  FlowGraph g(n + 2);
  const auto source = n;
  const auto sink   = n + 1;
  auto capacity     = boost::get(boost::edge_capacity, g);
  auto reverse      = boost::get(boost::edge_reverse, g);
  auto add          = [&](std::size_t a, std::size_t b, double c) {
    FlowEdge e   = boost::add_edge(a, b, g).first;
    FlowEdge re  = boost::add_edge(b, a, g).first;
    capacity[e]  = c;
    capacity[re] = 0;
    reverse[e]   = re;
    reverse[re]  = e;
  };
  for (const auto& l : links_) {
    add(l.a, l.b, l.bandwidth);
    add(l.b, l.a, l.bandwidth);
  }
  // Unbounded source and sink edges: only the network limits the flow.
  const double unbounded = 1e30;
  for (int gpu = 0; gpu < counts_.gpus; ++gpu)
    if (inside[gpu])
      add(source, gpu, unbounded);
    else
      add(gpu, sink, unbounded);
  return boost::push_relabel_max_flow(g, source, sink);
}

int Topology::vertex_building(int v) const
{
  if (imported())
    return vertex_building_[v];
  const int pods = spec_.building.pods;
  switch (vertex_kind_[v]) {
  case VertexKind::gpu:
    return locate(v).building;
  case VertexKind::nvswitch:
    return (v - nvswitch_base_) / spec_.pod.nodes / pods;
  case VertexKind::leaf:
    return static_cast<int>((v - leaf_base_) / counts_.leaves_per_pod) / pods;
  case VertexKind::spine:
    return (v - spine_base_) / pods;
  case VertexKind::aggregation:
    return v - aggregation_base_;
  case VertexKind::region_gateway:
  case VertexKind::nic: // an expanded graph's (vertex_building_), never a template's
    return -1;
  }
  return -1;
}

std::vector<int> Topology::building_gpus(int b, int gpus_per_node) const
{
  std::vector<int> out;
  auto used = [&](int g) { return gpus_per_node <= 0 || locate(g).local < gpus_per_node; };
  if (!imported()) {
    const auto per = counts_.gpus / counts_.buildings;
    for (std::int64_t i = 0; i < per; ++i)
      if (used(static_cast<int>(b * per + i)))
        out.push_back(static_cast<int>(b * per + i));
    return out;
  }
  for (int g = 0; g < counts_.gpus; ++g)
    if (gpu_location_[g].building == b && used(g))
      out.push_back(g);
  return out;
}

int Topology::buildings_needed(std::int64_t gpus, int gpus_per_node) const
{
  std::vector<std::int64_t> size(building_count(), 0);
  for (int g = 0; g < counts_.gpus; ++g)
    if (gpus_per_node <= 0 || locate(g).local < gpus_per_node)
      ++size[locate(g).building];
  std::int64_t smallest = std::numeric_limits<std::int64_t>::max();
  for (int n = 1; n <= building_count(); ++n) {
    smallest = std::min(smallest, size[n - 1]);
    if ((gpus + n - 1) / n <= smallest)
      return n;
  }
  return building_count() + 1;
}

int Topology::vertex_region(int v) const
{
  if (imported())
    return vertex_region_[v];
  if (vertex_kind_[v] == VertexKind::region_gateway)
    return v - gateway_base_;
  const int b = vertex_building(v);
  return b < 0 ? -1 : building_region_[b];
}

std::vector<int> Topology::building_path(int a, int b) const
{
  if (a == b)
    return {};
  if (!imported()) {
    const int ra = building_region_[a], rb = building_region_[b];
    if (ra == rb)
      return {inter_building_link(a, b)};
    return {building_uplink(a), inter_region_link(ra, rb), building_uplink(b)};
  }
  // Between the first healthy GPUs of the two buildings: the links whose ends are not both in one building.
  int ga = -1, gb = -1;
  for (int g = 0; g < counts_.gpus && (ga < 0 || gb < 0); ++g) {
    if (!gpu_fault(g).empty())
      continue;
    if (ga < 0 && gpu_location_[g].building == a)
      ga = g;
    if (gb < 0 && gpu_location_[g].building == b)
      gb = g;
  }
  std::vector<int> out;
  if (ga < 0 || gb < 0)
    return out;
  for (const auto& h : route(ga, gb)) {
    const int va = vertex_building(links_[h.link].a), vb = vertex_building(links_[h.link].b);
    if (va != vb || va < 0)
      out.push_back(h.link);
  }
  return out;
}

std::vector<BoundaryCapacity> Topology::boundary_capacities() const
{
  // The links with one end inside and the other outside; a switch of no building is outside every building,
  // and a region gateway inside its region.
  std::vector<BoundaryCapacity> out;
  // One building or region: `vertex_in` says which vertices are inside it, `gpu_in` which GPUs (by location).
  auto add = [&](const std::string& kind, const std::string& name, auto vertex_in, auto gpu_in) {
    BoundaryCapacity c{kind, name, 0, 0};
    for (const auto& l : links_)
      if (vertex_in(l.a) != vertex_in(l.b))
        c.boundary_links += l.bandwidth;
    std::vector<bool> inside(counts_.gpus, false);
    for (int g = 0; g < counts_.gpus; ++g)
      inside[g] = gpu_in(locate(g));
    c.max_flow = max_flow_out(inside);
    out.push_back(c);
  };
  if (counts_.buildings < 2)
    return out;
  for (int b = 0; b < counts_.buildings; ++b)
    add(
        "building", building_names_[b], [&](int v) { return vertex_building(v) == b; },
        [&](const auto& at) { return at.building == b; });
  if (counts_.regions < 2)
    return out;
  for (int r = 0; r < counts_.regions; ++r)
    add(
        "region", spec_.regions[r].name, [&](int v) { return vertex_region(v) == r; },
        [&](const auto& at) { return at.region == r; });
  return out;
}

void Topology::write_dot(std::ostream& out) const
{
  out << "graph \"" << spec_.name << "\" {\n  node [shape=box, fontsize=8];\n";
  for (std::size_t v = 0; v < vertex_kind_.size(); ++v)
    out << "  v" << v << " [label=\"" << vertex_name(static_cast<int>(v)) << "\", class=\"" << name_of(vertex_kind_[v])
        << "\"];\n";
  for (const auto& l : links_)
    out << "  v" << l.a << " -- v" << l.b << " [tier=\"" << name_of(l.tier)
        << "\", bandwidth_Gbps=" << l.bandwidth * 8 / 1e9 << ", latency_us=" << l.latency * 1e6 << "];\n";
  out << "}\n";
}

} // namespace spansim::topology
