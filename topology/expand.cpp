// A template whose buildings differ in element counts (an HGX building next to an NVL72 one) cannot be indexed
// by arithmetic on one template: it is expanded building by building into an explicit graph, with the names,
// link speeds and capacities the template rules give each building, and routed as an imported graph.
#include "topology/topology.hpp"

#include <algorithm>
#include <cmath>

namespace spansim::topology {

namespace {

struct Expander {
  GraphSpec graph;

  void vertex(std::string id, VertexKind kind, std::string building, std::string pod = {}, std::string node = {},
              std::string region = {})
  {
    graph.vertices.push_back(
        {std::move(id), kind, std::move(building), std::move(pod), std::move(node), std::move(region)});
  }
  void link(std::string a, std::string b, Tier tier, double bandwidth, double latency)
  {
    graph.edges.push_back({std::move(a), std::move(b), tier, bandwidth, latency, 1});
  }
};

} // namespace

double pcie_bandwidth(NvLink generation)
{
  // NCCL's topology (src/graph/topo.cc): a PCIe link carries width x speed / 80 GB/s, Gen4 x16 24 GB/s (A100
  // systems), Gen5 x16 48 GB/s (H100 and Blackwell systems).
  return generation == NvLink::nvlink3 ? 24e9 : 48e9;
}

GraphSpec expand_template(const TopologySpec& s)
{
  Expander x;
  x.graph.file           = s.file;
  x.graph.rail_optimized = s.pod.rail_optimized;
  std::vector<std::string> buildings;
  for (const auto& region : s.regions)
    for (const auto& name : region.buildings) {
      buildings.push_back(name);
      const auto site         = s.site_of(name);
      const NodeSpec* node    = site.node;
      const PodSpec* pod      = site.pod;
      const BuildingSpec* bld = site.building;
      // Rails are NICs: where GPUs share them, GPU i of a node is not on rail i.
      x.graph.rail_optimized = x.graph.rail_optimized && pod->rail_optimized && !node->shared_nics();
      // The template's rules (topology.cpp), with this building's counts. A node reaches its leaves by its NICs (its
      // GPUs' own, or shared ones with NIC vertices of their own); a GPU with several ports takes as many leaf ports.
      const int gpn       = node->gpus;
      const bool shared   = node->shared_nics();
      const int endpoints = shared ? node->nics : gpn; // per node, each on a rail of its own
      const int ports     = node->ports_per_gpu();
      const int down_ports =
          static_cast<int>(std::lround(pod->leaf_radix * pod->oversubscription / (1 + pod->oversubscription)));
      const int down            = std::max(1, down_ports / ports); // endpoints a leaf takes
      const int up              = pod->leaf_radix - down_ports;
      const int leaves_per_rail = (pod->nodes + down - 1) / down;
      const int nodes_per_leaf  = pod->rail_optimized ? 0 : std::max(1, down / endpoints);
      const int leaves =
          pod->rail_optimized ? endpoints * leaves_per_rail : (pod->nodes + nodes_per_leaf - 1) / nodes_per_leaf;
      auto leaf_gpus = [&](int l) { // endpoints under leaf l
        if (pod->rail_optimized)
          return std::min(down, pod->nodes - (l % leaves_per_rail) * down);
        return std::min(nodes_per_leaf, pod->nodes - l * nodes_per_leaf) * endpoints;
      };
      auto leaf_of = [&](int n, int rail) {
        return pod->rail_optimized ? rail * leaves_per_rail + n / down : n / nodes_per_leaf;
      };
      // An endpoint's share of its leaf's uplinks: its ports at the leaf's up:down ratio.
      const double endpoint_uplink = pod->nic_bandwidth * ports * up / std::max(1, down_ports);
      double pod_leaf_capacity     = 0;
      for (int l = 0; l < leaves; ++l)
        pod_leaf_capacity += leaf_gpus(l) * endpoint_uplink;
      const std::string aggregation = name + "/aggregation";
      for (int p = 0; p < bld->pods; ++p) {
        const std::string pod_label = "pod" + std::to_string(p);
        const std::string prefix    = name + "/" + pod_label;
        auto node_name              = [&](int n) { return prefix + "/node" + std::to_string(n); };
        auto gpu_name               = [&](int n, int g) { return node_name(n) + "/gpu" + std::to_string(g); };
        auto leaf_name              = [&](int l) { return prefix + "/leaf" + std::to_string(l); };
        for (int n = 0; n < pod->nodes; ++n)
          for (int g = 0; g < gpn; ++g)
            x.vertex(gpu_name(n, g), VertexKind::gpu, name, pod_label, node_name(n));
        for (int n = 0; n < pod->nodes; ++n)
          x.vertex(node_name(n) + "/nvswitch", VertexKind::nvswitch, name);
        for (int l = 0; l < leaves; ++l)
          x.vertex(leaf_name(l), VertexKind::leaf, name);
        // Physical spines: enough radix for every leaf uplink port (as Counts::physical_spines).
        const bool own   = s.multipath.explicit_spines;
        const int spines = own ? (leaves * up + pod->spine_radix - 1) / pod->spine_radix : 1;
        auto spine_name  = [&](int k) { return own ? prefix + "/spine" + std::to_string(k) : prefix + "/spine"; };
        for (int k = 0; k < spines; ++k)
          x.vertex(spine_name(k), VertexKind::spine, name);
        for (int n = 0; n < pod->nodes; ++n)
          for (int g = 0; g < gpn; ++g)
            x.link(gpu_name(n, g), node_name(n) + "/nvswitch", Tier::nvlink, node->nvlink_rate(), node->nvlink_latency);
        if (shared) {
          // NICs behind PCIe switches, each serving its GPUs at the PCIe rate NCCL's topology gives the path.
          auto nic_name = [&](int n, int k) { return node_name(n) + "/nic" + std::to_string(k); };
          for (int n = 0; n < pod->nodes; ++n)
            for (int k = 0; k < node->nics; ++k) {
              x.vertex(nic_name(n, k), VertexKind::nic, name);
              for (int g : node->nic_gpus[k])
                x.link(gpu_name(n, g), nic_name(n, k), Tier::pcie, pcie_bandwidth(node->nvlink), 0);
              x.link(nic_name(n, k), leaf_name(leaf_of(n, k)), Tier::nic, pod->nic_rate(), pod->link_latency);
            }
        } else {
          for (int n = 0; n < pod->nodes; ++n)
            for (int g = 0; g < gpn; ++g)
              x.link(gpu_name(n, g), leaf_name(leaf_of(n, g)), Tier::nic, pod->nic_rate() * ports, pod->link_latency);
        }
        // A leaf's up ports spread over the spines, round robin when it has fewer ports than there are spines;
        // each spine takes its share of the pod's uplink.
        for (int l = 0; l < leaves; ++l) {
          const double uplink = leaf_gpus(l) * endpoint_uplink;
          const int fanout    = std::min(up, spines);
          for (int i = 0; i < fanout; ++i)
            x.link(leaf_name(l), spine_name((l * fanout + i) % spines), Tier::leaf_spine, uplink / fanout,
                   pod->link_latency);
        }
        for (int k = 0; k < spines; ++k)
          x.link(spine_name(k), aggregation, Tier::pod_aggregation,
                 pod_leaf_capacity / bld->aggregation_oversubscription / spines, bld->aggregation_latency);
      }
      x.vertex(aggregation, VertexKind::aggregation, name);
    }
  for (const auto& region : s.regions)
    for (std::size_t i = 0; i < region.buildings.size(); ++i)
      for (std::size_t j = i + 1; j < region.buildings.size(); ++j) {
        const auto& a = region.buildings[i];
        const auto& b = region.buildings[j];
        const auto& l = long_link_between(s.inter_building_overrides, s.inter_building, a, b);
        for (int k = 0; k < s.multipath.long_links; ++k) // wavelengths: equal shares of the pair's capacity
          x.link(a + "/aggregation", b + "/aggregation", Tier::inter_building, l.bandwidth / s.multipath.long_links,
                 l.latency);
      }
  if (s.regions.size() > 1) {
    for (const auto& region : s.regions) {
      x.vertex(region.name + "/gateway", VertexKind::region_gateway, "", "", "", region.name);
      for (const auto& b : region.buildings)
        x.link(b + "/aggregation", region.name + "/gateway", Tier::building_uplink, s.building_uplink_bandwidth,
               s.building_uplink_latency);
    }
    for (std::size_t i = 0; i < s.regions.size(); ++i)
      for (std::size_t j = i + 1; j < s.regions.size(); ++j) {
        const auto& l =
            long_link_between(s.inter_region_overrides, s.inter_region, s.regions[i].name, s.regions[j].name);
        for (int k = 0; k < s.multipath.long_links; ++k)
          x.link(s.regions[i].name + "/gateway", s.regions[j].name + "/gateway", Tier::inter_region,
                 l.bandwidth / s.multipath.long_links, l.latency);
      }
  }
  return std::move(x.graph);
}

} // namespace spansim::topology
