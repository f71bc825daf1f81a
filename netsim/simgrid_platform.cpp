#include "netsim/simgrid_platform.hpp"

#include <simgrid/kernel/routing/NetPoint.hpp>
#include <simgrid/kernel/routing/NetZoneImpl.hpp>
#include <xbt/log.h>

#include <unordered_map>

namespace spansim::netsim::detail {

namespace skr = simgrid::kernel::routing;
using topology::Hop;
using topology::Topology;

namespace {

sg4::LinkInRoute in_route(sg4::Link* link, bool forward)
{
  return {link, forward ? sg4::LinkInRoute::Direction::UP : sg4::LinkInRoute::Direction::DOWN};
}

/// @brief A zone of ours whose routes are lists of topology hops over the platform's links.
class HopZone : public skr::NetZoneImpl {
public:
  HopZone(const std::string& name, const Topology& topology, const std::vector<sg4::Link*>& links,
          const std::vector<bool>& slack)
      : NetZoneImpl(name), topology_(topology), links_(links), slack_(slack)
  {
  }

  void get_graph(const s_xbt_graph_t*, std::map<std::string, xbt_node_t, std::less<>>*,
                 std::map<std::string, xbt_edge_t, std::less<>>*) override
  {
    // Graph export (for visualisation tools) is not needed: spansim writes its own DOT from the topology.
  }

protected:
  void append(skr::Route* into, const std::vector<Hop>& hops) const
  {
    std::vector<sg4::LinkInRoute> in;
    in.reserve(hops.size());
    for (const auto& h : hops)
      if (slack_.empty() || !slack_[direction_index(h)])
        in.push_back(in_route(links_[h.link], h.forward));
    auto impls = get_link_list_impl(in, false);
    into->link_list_.insert(into->link_list_.end(), impls.begin(), impls.end());
  }

  const Topology& topology_;
  const std::vector<sg4::Link*>& links_;
  const std::vector<bool>& slack_;
};

/// @brief A pod: its GPUs and its spine router; every route comes from Topology::route.
class RailZone : public HopZone {
public:
  using HopZone::HopZone;

  void register_gpu(const skr::NetPoint* point, int gpu) { gpu_of_[point] = gpu; }
  void set_spine(const skr::NetPoint* point) { spine_ = point; }

  void get_local_route(const skr::NetPoint* src, const skr::NetPoint* dst, skr::Route* into, double*) override
  {
    std::vector<Hop> hops;
    if (src == spine_)
      hops = towards_spine(gpu(dst), false);
    else if (dst == spine_)
      hops = towards_spine(gpu(src), true);
    else
      hops = topology_.route(gpu(src), gpu(dst));
    append(into, hops);
  }

private:
  int gpu(const skr::NetPoint* point) const { return gpu_of_.at(point); }

  // GPU -> leaf -> spine, or the reverse; the last hop is the leaf uplink of the GPU's leaf.
  std::vector<Hop> towards_spine(int gpu, bool up) const
  {
    auto loc = topology_.locate(gpu);
    if (up)
      return {{topology_.nic_link(gpu), true}, {topology_.leaf_uplink(loc.leaf), true}};
    return {{topology_.leaf_uplink(loc.leaf), false}, {topology_.nic_link(gpu), false}};
  }

  const skr::NetPoint* spine_ = nullptr;
  std::unordered_map<const skr::NetPoint*, int> gpu_of_;
};

/// @brief An imported graph: every GPU a host of one zone, every route from Topology::route (least cost).
class GraphZone : public HopZone {
public:
  using HopZone::HopZone;

  void register_gpu(const skr::NetPoint* point, int gpu, int qp = 0) { gpu_of_[point] = {gpu, qp}; }

  void get_local_route(const skr::NetPoint* src, const skr::NetPoint* dst, skr::Route* into, double*) override
  {
    const auto [from, qp] = gpu_of_.at(src);
    append(into, topology_.route(from, gpu_of_.at(dst).first, qp));
  }

private:
  std::unordered_map<const skr::NetPoint*, std::pair<int, int>> gpu_of_; ///< (GPU, queue pair)
};

sg4::NetZone* child_full_zone(const std::string& name, sg4::NetZone* parent)
{
  auto* zone = sg4::create_full_zone(name);
  zone->set_parent(parent);
  return zone;
}

// A zone holding one router: SimGrid's full zones route between zones, not between a zone and a router.
std::pair<sg4::NetZone*, skr::NetPoint*> router_zone(const std::string& name, sg4::NetZone* parent)
{
  auto* zone   = child_full_zone(name + "-zone", parent);
  auto* router = zone->create_router(name);
  zone->seal();
  return {zone, router};
}

} // namespace

bool hop_routed(const Topology& topology, int id)
{
  if (topology.imported() || topology.folded())
    return true;
  const auto tier = topology.links()[id].tier;
  return tier == topology::Tier::nvlink || tier == topology::Tier::nic || tier == topology::Tier::leaf_spine;
}

std::string SimgridPlatform::link_name(const Topology& topology, int id)
{
  return std::string(name_of(topology.links()[id].tier)) + "-" + std::to_string(id);
}

SimgridPlatform::SimgridPlatform(const Topology& topology, double gpu_speed, const std::vector<bool>& gpus,
                                 const std::vector<bool>& slack)
    : slack_(slack)
{
  const auto& counts = topology.counts();
  const auto& spec   = topology.spec();
  const auto& tl     = topology.links();
  hosts_.resize(counts.gpus, nullptr);
  links_.resize(tl.size(), nullptr);
  // A platform of 131K hosts and 400K links takes seconds and half a GiB to build; a run touching a few
  // thousand GPUs needs only theirs.
  auto wanted    = [&](int gpu) { return gpus.empty() || gpus[gpu]; };
  auto make_link = [&](sg4::NetZone* zone, int id) {
    auto* link = zone->create_split_duplex_link(link_name(topology, id), tl[id].bandwidth);
    // A direction scaled on its own (a rail's share under ECMP with the rails apart): "_UP" is forward.
    const double up = topology.hop_bandwidth(id, true), down = topology.hop_bandwidth(id, false);
    if (up != tl[id].bandwidth)
      link->get_link_up()->set_bandwidth(up);
    if (down != tl[id].bandwidth)
      link->get_link_down()->set_bandwidth(down);
    link->seal();
    links_[id] = link;
    return link;
  };
  if (topology.imported() || topology.folded()) {
    // No hierarchy to nest zones by (or folded routes, which leave one building and come down another's links):
    // one zone, routes computed on demand (a full zone would store GPUs^2).
    auto* root = sg4::create_full_zone("spansim");
    auto* impl = new GraphZone("spansim-graph", topology, links_, slack_);
    auto* zone = impl->get_iface();
    zone->set_parent(root);
    // A host per queue pair: SimGrid routes per pair of hosts, and ECMP sends each queue pair its own way.
    qps_ = topology.spec().multipath.qps;
    if (qps_ > 1)
      qp_hosts_.assign(static_cast<std::size_t>(counts.gpus) * qps_, nullptr);
    for (int g = 0; g < counts.gpus; ++g)
      if (wanted(g)) {
        hosts_[g] = zone->create_host(topology.vertex_name(g), gpu_speed);
        hosts_[g]->seal();
        impl->register_gpu(hosts_[g]->get_netpoint(), g);
        for (int q = 1; q < qps_; ++q) {
          auto* h = zone->create_host(topology.vertex_name(g) + "#qp" + std::to_string(q), gpu_speed);
          h->seal();
          impl->register_gpu(h->get_netpoint(), g, q);
          qp_hosts_[static_cast<std::size_t>(g) * qps_ + q] = h;
        }
      }
    for (std::size_t id = 0; id < tl.size(); ++id)
      if (tl[id].bandwidth > 0 && topology.route_link(static_cast<int>(id)))
        make_link(zone, static_cast<int>(id));
    zone->seal();
    root->seal();
    return;
  }
  std::vector<bool> leaf_used(counts.leaves, gpus.empty());
  for (int g = 0; g < counts.gpus; ++g)
    if (wanted(g))
      leaf_used[topology.locate(g).leaf] = true;

  auto* root = sg4::create_full_zone("spansim");

  std::vector<sg4::NetZone*> region_zones;
  std::vector<skr::NetPoint*> gateways;
  std::vector<sg4::NetZone*> gateway_zones;
  std::vector<sg4::NetZone*> building_zones(counts.buildings, nullptr);
  std::vector<skr::NetPoint*> aggregations(counts.buildings, nullptr);

  for (int r = 0; r < counts.regions; ++r) {
    auto* region = child_full_zone(topology.region_name(r), root);
    region_zones.push_back(region);
    if (counts.regions > 1) {
      auto [zone, router] = router_zone(topology.region_name(r) + "/gateway", region);
      gateway_zones.push_back(zone);
      gateways.push_back(router);
    }
  }

  int pods_per_building = spec.building.pods;
  int gpus_per_pod      = spec.pod.nodes * spec.node.gpus;
  for (int b = 0; b < counts.buildings; ++b) {
    auto* region      = region_zones[topology.region_of_building(b)];
    auto* building    = child_full_zone(topology.building_name(b), region);
    building_zones[b] = building;
    std::vector<sg4::NetZone*> pod_zones;
    std::vector<skr::NetPoint*> spines;
    for (int p = b * pods_per_building; p < (b + 1) * pods_per_building; ++p) {
      auto* impl = new RailZone(topology.vertex_name(topology.spine_vertex(p)) + "-zone", topology, links_, slack_);
      auto* pod  = impl->get_iface();
      pod->set_parent(building);
      for (int g = p * gpus_per_pod; g < (p + 1) * gpus_per_pod; ++g) {
        if (!wanted(g))
          continue;
        hosts_[g] = pod->create_host(topology.vertex_name(g), gpu_speed);
        hosts_[g]->seal();
        impl->register_gpu(hosts_[g]->get_netpoint(), g);
        make_link(pod, topology.nvlink_link(g));
        make_link(pod, topology.nic_link(g));
      }
      for (int l = static_cast<int>(p * counts.leaves_per_pod); l < (p + 1) * counts.leaves_per_pod; ++l)
        if (leaf_used[l])
          make_link(pod, topology.leaf_uplink(l));
      auto* spine = pod->create_router(topology.vertex_name(topology.spine_vertex(p)));
      impl->set_spine(spine);
      pod->seal();
      pod_zones.push_back(pod);
      spines.push_back(spine);
    }
    auto [agg_zone, agg] = router_zone(topology.vertex_name(topology.aggregation_vertex(b)), building);
    aggregations[b]      = agg;
    std::vector<sg4::Link*> uplinks;
    for (int i = 0; i < pods_per_building; ++i)
      uplinks.push_back(make_link(building, topology.pod_uplink(b * pods_per_building + i)));
    for (int i = 0; i < pods_per_building; ++i) {
      building->add_route(pod_zones[i]->get_netpoint(), agg_zone->get_netpoint(), spines[i], agg,
                          {in_route(uplinks[i], true)}, false);
      building->add_route(agg_zone->get_netpoint(), pod_zones[i]->get_netpoint(), agg, spines[i],
                          {in_route(uplinks[i], false)}, false);
      for (int j = 0; j < pods_per_building; ++j)
        if (i != j)
          building->add_route(pod_zones[i]->get_netpoint(), pod_zones[j]->get_netpoint(), spines[i], spines[j],
                              {in_route(uplinks[i], true), in_route(uplinks[j], false)}, false);
    }
    building->seal();
  }

  for (int r = 0; r < counts.regions; ++r) {
    auto* region = region_zones[r];
    std::vector<int> members;
    for (int b = 0; b < counts.buildings; ++b)
      if (topology.region_of_building(b) == r)
        members.push_back(b);
    for (std::size_t i = 0; i < members.size(); ++i)
      for (std::size_t j = i + 1; j < members.size(); ++j) {
        int a = members[i], c = members[j];
        int id      = topology.inter_building_link(a, c);
        auto* link  = make_link(region, id);
        bool a_is_a = tl[id].a == topology.aggregation_vertex(a);
        region->add_route(building_zones[a]->get_netpoint(), building_zones[c]->get_netpoint(), aggregations[a],
                          aggregations[c], {in_route(link, a_is_a)}, false);
        region->add_route(building_zones[c]->get_netpoint(), building_zones[a]->get_netpoint(), aggregations[c],
                          aggregations[a], {in_route(link, !a_is_a)}, false);
      }
    if (counts.regions > 1)
      for (int b : members) {
        auto* link = make_link(region, topology.building_uplink(b));
        region->add_route(building_zones[b]->get_netpoint(), gateway_zones[r]->get_netpoint(), aggregations[b],
                          gateways[r], {in_route(link, true)}, false);
        region->add_route(gateway_zones[r]->get_netpoint(), building_zones[b]->get_netpoint(), gateways[r],
                          aggregations[b], {in_route(link, false)}, false);
      }
    region->seal();
  }

  for (int a = 0; a < counts.regions; ++a)
    for (int c = a + 1; c < counts.regions; ++c) {
      int id      = topology.inter_region_link(a, c);
      auto* link  = make_link(root, id);
      bool a_is_a = tl[id].a == topology.region_gateway_vertex(a);
      root->add_route(region_zones[a]->get_netpoint(), region_zones[c]->get_netpoint(), gateways[a], gateways[c],
                      {in_route(link, a_is_a)}, false);
      root->add_route(region_zones[c]->get_netpoint(), region_zones[a]->get_netpoint(), gateways[c], gateways[a],
                      {in_route(link, !a_is_a)}, false);
    }
  root->seal();
}

void configure_engine(sg4::Engine& engine, const SimgridSettings& settings)
{
  xbt_log_control_set("root.thresh:warning");
  for (const auto& line : settings.config_lines())
    engine.set_config(line);
}

} // namespace spansim::netsim::detail
