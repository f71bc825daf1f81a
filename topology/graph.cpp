// Imported graphs: vertices, links and locations from a GraphSpec, and least-cost routing over it.
//
// GPUs never forward, so a route is: a first link out of the source GPU, a least-cost walk between two fabric
// switches (switches with a switch neighbour), and a last link into the destination; or, through a switch that
// joins only GPUs (an NVSwitch), two links. Distances between fabric switches are computed once (Dijkstra from
// each), which keeps a route a few table lookups; ties go to the lowest link ids, i.e. the file's order.
#include "common/error.hpp"
#include "common/random.hpp"
#include "topology/topology.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <tuple>
#include <unordered_map>

namespace spansim::topology {

namespace {

constexpr std::int32_t kUnreachable = std::numeric_limits<std::int32_t>::max();

/// @brief Disjoint sets over vertex ids, for connected parts.
struct DisjointSets {
  std::vector<int> parent;
  explicit DisjointSets(std::size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int v)
  {
    while (parent[v] != v)
      v = parent[v] = parent[parent[v]];
    return v;
  }
  void join(int a, int b) { parent[find(a)] = find(b); }
};

} // namespace

void Topology::build_from_graph()
{
  const auto& g    = *graph_;
  const auto where = g.json_path;
  auto fail        = [&](const std::string& what) { throw SpecError(g.file, where, what); };
  std::map<std::string, int> building_index;
  for (std::size_t r = 0; r < spec_.regions.size(); ++r) {
    region_first_building_.push_back(static_cast<int>(building_names_.size()));
    for (const auto& b : spec_.regions[r].buildings) {
      building_index[b] = static_cast<int>(building_names_.size());
      building_names_.push_back(b);
      building_region_.push_back(static_cast<int>(r));
    }
  }

  // GPUs first, grouped by node in the order nodes first appear; then the switches in file order.
  std::map<std::string, int> node_index;
  std::vector<std::vector<int>> node_members;
  for (std::size_t i = 0; i < g.vertices.size(); ++i) {
    const auto& v = g.vertices[i];
    if (v.kind != VertexKind::gpu)
      continue;
    auto [it, fresh] = node_index.emplace(v.node, static_cast<int>(node_members.size()));
    if (fresh) {
      node_members.emplace_back();
      node_names_.push_back(v.node);
    }
    const auto& first = g.vertices[node_members[it->second].empty() ? i : node_members[it->second].front()];
    if (first.building != v.building || first.pod != v.pod)
      fail("node \"" + v.node + "\" has GPUs in two places (" + first.id + " in " + first.building + "/" + first.pod +
           ", " + v.id + " in " + v.building + "/" + v.pod + "): a node sits in one pod of one building");
    node_members[it->second].push_back(static_cast<int>(i));
  }
  if (node_members.empty())
    fail("the graph has no GPUs");
  // Nodes may differ in size (an HGX building next to an NVL72 one); the template's node size that other stages
  // read is the smallest.
  std::size_t smallest = node_members.front().size();
  for (const auto& m : node_members) {
    smallest = std::min(smallest, m.size());
    node_size_.push_back(static_cast<int>(m.size()));
  }
  smallest_node_ = static_cast<int>(smallest);

  std::vector<int> id_of(g.vertices.size(), -1);
  std::map<std::pair<int, std::string>, int> pod_index;
  for (std::size_t n = 0; n < node_members.size(); ++n)
    for (std::size_t local = 0; local < node_members[n].size(); ++local) {
      const int i     = node_members[n][local];
      const auto& v   = g.vertices[i];
      id_of[i]        = static_cast<int>(vertex_kind_.size());
      const int b     = building_index.at(v.building);
      const int pod   = pod_index.emplace(std::make_pair(b, v.pod), static_cast<int>(pod_index.size())).first->second;
      GpuLocation loc = {building_region_[b], b, pod, static_cast<int>(n), static_cast<int>(local), -1};
      gpu_location_.push_back(loc);
      vertex_kind_.push_back(VertexKind::gpu);
      vertex_names_.push_back(v.id);
      vertex_building_.push_back(b);
      vertex_region_.push_back(building_region_[b]);
    }
  for (std::size_t i = 0; i < g.vertices.size(); ++i) {
    const auto& v = g.vertices[i];
    if (v.kind == VertexKind::gpu)
      continue;
    id_of[i] = static_cast<int>(vertex_kind_.size());
    vertex_kind_.push_back(v.kind);
    vertex_names_.push_back(v.id);
    vertex_building_.push_back(v.building.empty() ? -1 : building_index.at(v.building));
    int region = v.building.empty() ? -1 : building_region_[vertex_building_.back()];
    for (std::size_t r = 0; r < spec_.regions.size() && region < 0; ++r)
      if (spec_.regions[r].name == v.region)
        region = static_cast<int>(r);
    vertex_region_.push_back(region);
  }
  std::map<std::string, int> vertex_of;
  for (std::size_t i = 0; i < g.vertices.size(); ++i)
    vertex_of[g.vertices[i].id] = id_of[i];

  const int gpus = static_cast<int>(gpu_location_.size());
  adjacency_.resize(vertex_kind_.size());
  for (const auto& e : g.edges) {
    const int a = vertex_of.at(e.a), b = vertex_of.at(e.b);
    const int k = static_cast<int>(links_.size());
    add_link(e.tier, a, b, e.bandwidth, e.latency);
    link_cost_.push_back(e.cost);
    adjacency_[a].push_back({k, b});
    adjacency_[b].push_back({k, a});
  }
  gpu_nvlink_.assign(gpus, -1);
  gpu_nic_.assign(gpus, -1);
  leaf_uplink_of_.assign(vertex_kind_.size(), -1);
  for (int v = 0; v < static_cast<int>(vertex_kind_.size()); ++v)
    for (auto [k, u] : adjacency_[v]) {
      if (v < gpus) {
        auto& slot = vertex_kind_[u] == VertexKind::nvswitch ? gpu_nvlink_[v] : gpu_nic_[v];
        if (slot < 0)
          slot = k;
      } else if (u >= gpus && leaf_uplink_of_[v] < 0) {
        leaf_uplink_of_[v] = k;
      }
    }
  for (int gpu = 0; gpu < gpus; ++gpu) {
    if (adjacency_[gpu].empty())
      fail("GPU \"" + vertex_names_[gpu] + "\" has no links");
    if (gpu_nic_[gpu] >= 0)
      gpu_location_[gpu].leaf = links_[gpu_nic_[gpu]].a == gpu ? links_[gpu_nic_[gpu]].b : links_[gpu_nic_[gpu]].a;
  }

  const int gpn = static_cast<int>(smallest);
  if (g.rail_optimized) {
    // Rail symmetry (one rail simulated for all) holds only if no leaf mixes rails.
    std::vector<int> rail_of(vertex_kind_.size(), -1);
    for (int gpu = 0; gpu < gpus; ++gpu)
      for (auto [k, u] : adjacency_[gpu]) {
        if (vertex_kind_[u] == VertexKind::nvswitch)
          continue;
        const int rail = gpu_location_[gpu].local;
        if (rail_of[u] >= 0 && rail_of[u] != rail)
          fail("\"rail_optimized\" is true, but " + vertex_names_[u] + " joins GPUs of rails " +
               std::to_string(rail_of[u]) + " and " + std::to_string(rail) + " (GPU i of a node is on rail i)");
        rail_of[u] = rail;
      }
    for (int gpu = 0; gpu < gpus; ++gpu)
      if (gpu_nic_[gpu] < 0)
        fail("\"rail_optimized\" is true, but GPU \"" + vertex_names_[gpu] + "\" has no link to a leaf");
  }

  counts_.gpus            = gpus;
  counts_.nodes           = static_cast<std::int64_t>(node_members.size());
  counts_.pods            = static_cast<std::int64_t>(pod_index.size());
  counts_.buildings       = static_cast<std::int64_t>(building_names_.size());
  counts_.regions         = static_cast<std::int64_t>(spec_.regions.size());
  counts_.leaves          = std::count(vertex_kind_.begin(), vertex_kind_.end(), VertexKind::leaf);
  counts_.physical_spines = std::count(vertex_kind_.begin(), vertex_kind_.end(), VertexKind::spine);
  for (const auto& name : building_names_)
    building_gpu_.push_back(spec_.site_of(name).gpu);
  finish_graph_build();
  if (!spec_.graph)
    return; // a template expanded per building keeps its own spec
  // The template's fields stand for the graph where other stages read them: node size, rails, first speeds.
  spec_.node                  = NodeSpec{};
  spec_.node.gpus             = gpn;
  spec_.node.nvlink           = g.nvlink;
  spec_.node.nvls             = g.nvls;
  spec_.node.step_latency     = g.step_latency >= 0 ? g.step_latency : nvlink_step_latency(g.nvlink);
  spec_.node.nvls_warp_rate   = g.nvls_warp_rate >= 0 ? g.nvls_warp_rate : nvlink_nvls_warp_rate(g.nvlink);
  spec_.node.p2p_channel_rate = g.p2p_channel_rate >= 0 ? g.p2p_channel_rate : nvlink_p2p_channel_rate(g.nvlink);
  spec_.node.p2p_ll_channel_rate =
      g.p2p_ll_channel_rate >= 0 ? g.p2p_ll_channel_rate : nvlink_p2p_ll_channel_rate(g.nvlink);
  spec_.node.nvlink_bandwidth = gpu_nvlink_[0] >= 0 ? links_[gpu_nvlink_[0]].bandwidth : 0;
  spec_.node.nvlink_latency   = gpu_nvlink_[0] >= 0 ? links_[gpu_nvlink_[0]].latency : 0;
  spec_.pod                   = PodSpec{};
  spec_.pod.fabric            = g.fabric;
  spec_.pod.sharp             = g.sharp;
  spec_.pod.net_latency       = g.net_latency >= 0 ? g.net_latency : fabric_defaults(g.fabric).net_latency;
  spec_.pod.rail_optimized    = g.rail_optimized;
  spec_.pod.nic_bandwidth     = gpu_nic_[0] >= 0 ? links_[gpu_nic_[0]].bandwidth : 0;
  spec_.pod.link_latency      = gpu_nic_[0] >= 0 ? links_[gpu_nic_[0]].latency : 0;
  read_graph_nics(node_members.front().size());
  spec_.pod.nodes     = static_cast<int>(counts_.nodes / std::max<std::int64_t>(1, counts_.pods));
  spec_.building.pods = static_cast<int>(counts_.pods / std::max<std::int64_t>(1, counts_.buildings));
}

void Topology::read_graph_nics(std::size_t first_node_gpus)
{
  // The first node's NICs as its links give them: NIC vertices its GPUs share (their local GPUs, the NIC's own
  // port to the fabric), or one port per GPU; several ports per GPU only the "nccl" block can say (they are one
  // fused link).
  const auto& g = *graph_;
  auto fail     = [&](const std::string& what) { throw SpecError(g.file, g.json_path, what); };
  const int gpn = static_cast<int>(first_node_gpus);
  std::map<int, int> nic_index;
  for (int local = 0; local < gpn; ++local) {
    const int k = gpu_nic_[local];
    if (k < 0)
      continue;
    const int nic = links_[k].a == local ? links_[k].b : links_[k].a;
    if (vertex_kind_[nic] != VertexKind::nic)
      continue;
    auto [it, fresh] = nic_index.emplace(nic, static_cast<int>(spec_.node.nic_gpus.size()));
    if (fresh) {
      spec_.node.nic_gpus.emplace_back();
      for (auto [up, u] : adjacency_[nic])
        if (u >= counts_.gpus)
          spec_.pod.nic_bandwidth = links_[up].bandwidth;
    }
    spec_.node.nic_gpus[it->second].push_back(local);
  }
  const int shared = static_cast<int>(spec_.node.nic_gpus.size());
  int behind       = 0;
  for (const auto& list : spec_.node.nic_gpus)
    behind += static_cast<int>(list.size());
  if (shared > 0 && behind < gpn)
    fail("some GPUs of node \"" + node_names_.front() +
         "\" reach the fabric through NIC vertices and others not: give every GPU of a node a NIC vertex or none");
  if (shared > 0 && shared < gpn) {
    spec_.node.nics = shared;
    if (g.nics > 0 && g.nics != shared)
      fail("the \"nccl\" block says " + std::to_string(g.nics) + " NICs per node, but the first node's GPUs share " +
           std::to_string(shared) + " NIC vertices");
    return;
  }
  spec_.node.nic_gpus.clear();
  if (g.nics == 0 || g.nics == gpn)
    return;
  if (g.nics < gpn || g.nics % gpn != 0)
    fail("the \"nccl\" block says " + std::to_string(g.nics) + " NICs per node for " + std::to_string(gpn) +
         "-GPU nodes: fewer NICs than GPUs are NIC vertices the GPUs link to; more must be a whole number of ports "
         "per GPU");
  spec_.node.nics = g.nics;
  spec_.pod.nic_bandwidth /= g.nics / gpn;
}

void Topology::finish_graph_build()
{
  const auto& g    = *graph_;
  const auto where = g.json_path;
  build_routes();
  mark_cut_off("");
  int reached = 0;
  while (reached + 1 < counts_.gpus && !gpu_fault_[reached].empty())
    ++reached;
  for (int gpu = 0; gpu < counts_.gpus; ++gpu)
    if (!gpu_fault_[gpu].empty())
      throw SpecError(g.file, where,
                      "GPU \"" + vertex_names_[gpu] + "\" cannot reach GPU \"" + vertex_names_[reached] +
                          "\": the graph is disconnected (GPUs do not forward traffic)");
  gpu_fault_.clear();
}

struct Topology::RouteCache {
  /// @brief Hops kept at most (128 MiB of them) before the cache starts again.
  static constexpr std::size_t kMaxHops = std::size_t{1} << 24;
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::uint32_t>> index; ///< key -> (first, count)
  std::vector<Hop> hops;
};

void Topology::build_routes()
{
  const int gpus = static_cast<int>(counts_.gpus);
  const int n    = static_cast<int>(vertex_kind_.size());
  fabric_index_.assign(n, -1);
  std::vector<int> fabric;
  for (int v = gpus; v < n; ++v)
    for (auto [k, u] : adjacency_[v])
      if (u >= gpus) {
        fabric_index_[v] = static_cast<int>(fabric.size());
        fabric.push_back(v);
        break;
      }
  fabric_count_ = static_cast<int>(fabric.size());
  fabric_       = std::move(fabric);
  // Distances to a switch are computed when a route first ends there: a job touching a few pods of a large graph
  // pays for their leaves only, not for every pair of switches.
  rows_.assign(fabric_.size(), {});
  route_cache_ = std::make_shared<RouteCache>();
}

const std::int32_t* Topology::distances_to(int fb) const
{
  auto& row = rows_[fb];
  if (!row.empty())
    return row.data();
  row.assign(fabric_.size(), kUnreachable);
  using Item = std::pair<std::int32_t, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> queue;
  row[fb] = 0;
  queue.push({0, fabric_[fb]});
  while (!queue.empty()) {
    auto [d, v] = queue.top();
    queue.pop();
    if (d > row[fabric_index_[v]])
      continue;
    for (auto [k, u] : adjacency_[v]) {
      const int fu = fabric_index_[u];
      if (fu < 0 || !(links_[k].bandwidth > 0))
        continue;
      const std::int32_t nd = d + link_cost_[k];
      if (nd < row[fu]) {
        row[fu] = nd;
        queue.push({nd, u});
      }
    }
  }
  return row.data();
}

void Topology::mark_cut_off(const std::string& why)
{
  // Connected parts of the switches over the links left; a GPU belongs to the parts of the switches it reaches.
  const int gpus = static_cast<int>(counts_.gpus);
  const int n    = static_cast<int>(vertex_kind_.size());
  DisjointSets sets(n);
  for (const auto& l : links_)
    if (l.a >= gpus && l.b >= gpus && l.bandwidth > 0)
      sets.join(l.a, l.b);
  std::map<int, int> gpus_in; // part -> GPUs reaching it
  std::vector<std::vector<int>> parts(gpus);
  for (int gpu = 0; gpu < gpus; ++gpu) {
    for (auto [k, u] : adjacency_[gpu])
      if (links_[k].bandwidth > 0)
        parts[gpu].push_back(sets.find(u));
    std::sort(parts[gpu].begin(), parts[gpu].end());
    parts[gpu].erase(std::unique(parts[gpu].begin(), parts[gpu].end()), parts[gpu].end());
    for (int p : parts[gpu])
      ++gpus_in[p];
  }
  int main = -1, most = 0;
  for (auto [p, count] : gpus_in)
    if (count > most) {
      main = p;
      most = count;
    }
  gpu_fault_.resize(gpus);
  for (int gpu = 0; gpu < gpus; ++gpu)
    if (gpu_fault_[gpu].empty() && std::find(parts[gpu].begin(), parts[gpu].end(), main) == parts[gpu].end())
      gpu_fault_[gpu] = "cut off from the rest of the graph" + (why.empty() ? std::string() : " by " + why);
}

std::vector<Topology::Way> Topology::least_cost_ways(int src, int dst) const
{
  // The cheapest ways in and out: a first link to a switch, a last link from one (the same NVSwitch, or two
  // fabric switches joined by a least-cost walk), in (first link, last link) order.
  std::int64_t cheapest = std::numeric_limits<std::int64_t>::max();
  std::vector<Way> ways;
  auto consider = [&](std::int64_t cost, Way w) {
    if (cost < cheapest) {
      cheapest = cost;
      ways.clear();
    }
    if (cost == cheapest)
      ways.push_back(w);
  };
  for (auto [l1, a] : adjacency_[src]) {
    if (!(links_[l1].bandwidth > 0))
      continue;
    if (fabric_index_[a] < 0) {
      for (auto [l2, x] : adjacency_[a])
        if (x == dst && links_[l2].bandwidth > 0)
          consider(std::int64_t(link_cost_[l1]) + link_cost_[l2], {l1, l2, a, a});
      continue;
    }
    for (auto [l2, b] : adjacency_[dst])
      if (fabric_index_[b] >= 0 && links_[l2].bandwidth > 0) {
        const auto d = distances_to(fabric_index_[b])[fabric_index_[a]]; // links cost the same both ways
        if (d != kUnreachable)
          consider(std::int64_t(link_cost_[l1]) + d + link_cost_[l2], {l1, l2, a, b});
      }
  }
  std::sort(ways.begin(), ways.end(),
            [](const Way& x, const Way& y) { return std::tie(x.l1, x.l2) < std::tie(y.l1, y.l2); });
  return ways;
}

std::vector<Hop> Topology::graph_route(int src, int dst, int qp) const
{
  // GPU indices fit 24 bits (16M GPUs) and queue pairs 16; others are walked every time.
  auto* cache = route_cache_.get();
  if (!cache || src >= (1 << 24) || dst >= (1 << 24) || qp < 0 || qp >= (1 << 16))
    return walk_route(src, dst, qp);
  const std::uint64_t key = (static_cast<std::uint64_t>(src) << 40) | (static_cast<std::uint64_t>(dst) << 16) |
                            static_cast<std::uint64_t>(qp);
  if (auto it = cache->index.find(key); it != cache->index.end())
    return {cache->hops.begin() + it->second.first, cache->hops.begin() + it->second.first + it->second.second};
  auto route = walk_route(src, dst, qp);
  // Bounded: a search's worker routes point after point on one site.
  if (cache->hops.size() + route.size() > RouteCache::kMaxHops) {
    cache->index.clear();
    cache->hops.clear();
  }
  cache->index.emplace(
      key, std::pair{static_cast<std::uint32_t>(cache->hops.size()), static_cast<std::uint32_t>(route.size())});
  cache->hops.insert(cache->hops.end(), route.begin(), route.end());
  return route;
}

std::vector<Hop> Topology::walk_route(int src, int dst, int qp) const
{
  const auto ways = least_cost_ways(src, dst);
  if (ways.empty())
    throw UsageError("no route from " + vertex_names_[src] + " to " + vertex_names_[dst] +
                     " (failed links cut them apart)");
  // ECMP: every choice among equal next hops by a hash of the flow (its ends and the seed) and of the switch,
  // as switches hash a flow's header with their own salt; otherwise the lowest link ids.
  const bool ecmp = spec_.multipath.ecmp;
  const std::uint64_t key =
      Random::hash(spec_.multipath.seed ^ Random::hash((std::uint64_t(src) << 32) | unsigned(dst)) ^
                   Random::hash(0x51D5ULL + static_cast<std::uint64_t>(qp)));
  auto pick = [&](std::size_t n, std::uint64_t salt) {
    return ecmp && n > 1 ? static_cast<std::size_t>(Random::hash(key ^ Random::hash(salt)) % n) : 0;
  };
  const Way& w = ways[pick(ways.size(), ~0ULL)];
  auto hop     = [&](int link, int from) { return Hop{link, links_[link].a == from}; };
  std::vector<Hop> route{hop(w.l1, src)};
  const std::int32_t* to_b = w.a == w.b ? nullptr : distances_to(fabric_index_[w.b]);
  std::vector<std::pair<int, int>> next;
  for (int v = w.a; v != w.b;) {
    next.clear();
    for (auto [k, u] : adjacency_[v]) {
      const int fu = fabric_index_[u];
      if (fu >= 0 && links_[k].bandwidth > 0 && to_b[fu] != kUnreachable &&
          to_b[fu] + link_cost_[k] == to_b[fabric_index_[v]]) {
        next.push_back({k, u});
        if (!ecmp)
          break;
      }
    }
    const auto [k, u] = next[pick(next.size(), static_cast<std::uint64_t>(v))];
    route.push_back(hop(k, v));
    v = u;
  }
  route.push_back(hop(w.l2, w.b));
  return route;
}

std::vector<std::vector<Hop>> Topology::equal_cost_routes(int src, int dst, int limit) const
{
  if (!imported() || src == dst)
    return {route(src, dst)};
  route(src, dst); // range checks, and the error when there is no route
  const auto ways = least_cost_ways(src, dst);
  std::vector<std::vector<Hop>> out;
  auto hop = [&](int link, int from) { return Hop{link, links_[link].a == from}; };
  for (const auto& w : ways) {
    const std::int32_t* to_b = fabric_index_[w.b] < 0 ? nullptr : distances_to(fabric_index_[w.b]);
    std::vector<Hop> path{hop(w.l1, src)};
    // Depth-first over the next hops that stay on a least-cost walk, in link order.
    std::function<void(int)> walk = [&](int v) {
      if (static_cast<int>(out.size()) >= limit)
        return;
      if (v == w.b) {
        auto r = path;
        r.push_back(hop(w.l2, w.b));
        out.push_back(std::move(r));
        return;
      }
      for (auto [k, u] : adjacency_[v]) {
        const int fu = fabric_index_[u];
        if (fu >= 0 && links_[k].bandwidth > 0 && to_b[fu] != kUnreachable &&
            to_b[fu] + link_cost_[k] == to_b[fabric_index_[v]]) {
          path.push_back(hop(k, v));
          walk(u);
          path.pop_back();
        }
      }
    };
    walk(w.a);
  }
  return out;
}

std::vector<std::pair<int, std::vector<Hop>>> Topology::spray_hops(int src, int dst, int qp) const
{
  const auto r = route(src, dst, qp);
  std::vector<std::pair<int, std::vector<Hop>>> out;
  auto from = [&](const Hop& h) { return h.forward ? links_[h.link].a : links_[h.link].b; };
  auto to   = [&](const Hop& h) { return h.forward ? links_[h.link].b : links_[h.link].a; };
  if (!imported() || r.size() < 3) {
    for (const auto& h : r)
      out.push_back({from(h), {h}});
    return out;
  }
  // The fabric part of the way route() took: from the switch its first link reaches to the one its last leaves.
  const int a = to(r.front()), b = from(r.back());
  out.push_back({src, {r.front()}});
  const std::int32_t* to_b = distances_to(fabric_index_[b]);
  std::vector<int> queue{a};
  std::vector<char> seen(vertex_kind_.size(), 0);
  seen[a] = 1;
  for (std::size_t i = 0; i < queue.size(); ++i) {
    const int v = queue[i];
    if (v == b) {
      out.push_back({b, {r.back()}});
      continue;
    }
    std::vector<Hop> hops;
    for (auto [k, u] : adjacency_[v]) {
      const int fu = fabric_index_[u];
      if (fu >= 0 && links_[k].bandwidth > 0 && to_b[fu] != kUnreachable &&
          to_b[fu] + link_cost_[k] == to_b[fabric_index_[v]]) {
        hops.push_back(Hop{k, links_[k].a == v});
        if (!seen[u]) {
          seen[u] = 1;
          queue.push_back(u);
        }
      }
    }
    out.push_back({v, std::move(hops)});
  }
  return out;
}

} // namespace spansim::topology
