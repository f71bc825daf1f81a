// NCCL's graph search, as far as the tuner reads it: per algorithm the channels and per-channel bandwidths
// (ncclTopoCompute's speed ladders, what each channel consumes of a NIC and of the NVLinks, DupChannels) and the
// communicator's runtime channels (ncclTopoPostset). Bandwidths are NCCL's own figures for the path: NVLink at
// NCCL's per-link constant, PCIe at width x speed / 80, a NIC at its line rate (topo.h, topo.cc).
#include "netsim/nccl_layout.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

namespace spansim::netsim {

using topology::NvLink;

namespace {

// search.cc's speed ladders (GB/s), per architecture and release.
std::vector<double> ladder(int arch, NcclVersion v, bool inter)
{
  if (arch >= 3 && v.at_least(25)) {
    if (!inter) {
      if (v.at_least(29))
        return {90, 80, 70, 60, 50, 45, 40, 30, 24, 20, 19, 18};
      return {90, 80, 70, 60, 50, 40, 30, 24, 20, 19, 18};
    }
    std::vector<double> tail = {42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12};
    std::vector<double> head = v.at_least(30)   ? std::vector<double>{96, 86, 80, 48, 45.1}
                               : v.at_least(29) ? std::vector<double>{96, 80, 48, 45.1}
                               : v.at_least(27) ? std::vector<double>{96, 48, 45.1}
                                                : std::vector<double>{48, 45};
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  }
  if (arch >= 2) {
    if (!inter)
      return v.at_least(21)   ? std::vector<double>{60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3}
             : v.at_least(19) ? std::vector<double>{60, 50, 40, 30, 24, 20, 15, 12, 6, 3}
                              : std::vector<double>{60, 40, 30, 24, 20, 15, 12, 6, 3};
    return {48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12};
  }
  if (!inter)
    return {40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3};
  return {48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12};
}

int arch_of(NvLink g)
{
  return g == NvLink::nvlink3 ? 1 : g == NvLink::nvlink4 ? 2 : 3;
}

// A GPU's NVLink bandwidth as NCCL's topology counts it: links x NCCL's per-link constant (SM80 20, SM90 20.6 from
// 2.20, SM100 40 then 40.1 from 2.27), from the node's line rate (25 GB/s per NVLink 3 or 4 link, 50 per NVLink 5).
double nccl_nvlink(const topology::NodeSpec& node, NcclVersion v)
{
  const double raw_per_link = node.nvlink == NvLink::nvlink5 ? 50 : 25;
  const double per_link     = node.nvlink == NvLink::nvlink3   ? 20
                              : node.nvlink == NvLink::nvlink4 ? (v.at_least(20) ? 20.6 : 20)
                              : v.at_least(27)                 ? 40.1
                                                               : 40;
  return node.nvlink_bandwidth / 1e9 / raw_per_link * per_link;
}

struct Found {
  int channels = 0;
  double speed = 0;
};

// The ring search: the best channels x speed, from the fastest speed down while a lower one may still be better
// (within half of it), stopping once the channels cover the GPUs' NVLink or reach the maximum.
Found search(const std::vector<double>& speeds, double max_bw, double total_bw, int max_channels,
             const std::function<int(double)>& channels_at)
{
  Found best;
  for (double s : speeds) {
    if (s > max_bw + 1e-9)
      continue;
    if (best.channels > 0 && s / best.speed <= 0.49)
      break;
    const int n = std::min(max_channels, channels_at(s));
    if (n >= 1 && n * s > best.channels * best.speed + 1e-9)
      best = {n, s};
    if (best.channels > 0 && (best.channels * best.speed >= total_bw - 1e-9 || best.channels == max_channels))
      break;
  }
  if (best.channels == 0)
    best = {1, speeds.back()};
  return best;
}

} // namespace

NcclLayout nccl_layout(const topology::Topology& topology, const std::vector<int>& gpus, const NcclSettings& settings)
{
  if (gpus.empty())
    throw UsageError("NCCL's layout needs a group of at least one GPU");
  NcclLayout L;
  auto& c   = L.comm;
  c.version = settings.version;
  c.ranks   = static_cast<int>(gpus.size());
  std::map<int, int> node_index;
  int arch = 3, arch_most = 1;
  std::vector<topology::TopologySpec::Site> sites; // of the group's nodes
  bool nvls_capable = true, sharp = true;
  const topology::NodeSpec* node0 = nullptr;
  const topology::PodSpec* pod0   = nullptr;
  for (int g : gpus) {
    const auto loc   = topology.locate(g);
    auto [it, fresh] = node_index.emplace(loc.node, static_cast<int>(L.by_node.size()));
    const auto site  = topology.spec().site_of(topology.building_name(loc.building));
    if (fresh) {
      L.by_node.emplace_back();
      L.nic_members.emplace_back();
      arch      = std::min(arch, arch_of(site.node->nvlink));
      arch_most = std::max(arch_most, arch_of(site.node->nvlink));
      sites.push_back(site);
      nvls_capable = nvls_capable && site.node->nvls;
      if (const double w = site.node->nvls_warp_rate; w > 0)
        L.nvls_warp_rate = L.nvls_warp_rate > 0 ? std::min(L.nvls_warp_rate, w) : w;
      sharp = sharp && site.pod->sharp;
      if (!node0) {
        node0 = site.node;
        pod0  = site.pod;
      }
    }
    L.by_node[it->second].push_back(g);
  }
  c.nodes = static_cast<int>(L.by_node.size());
  c.arch  = arch;
  for (const auto& members : L.by_node)
    c.local_ranks_most = std::max(c.local_ranks_most, static_cast<int>(members.size()));
  const int ppn = c.local_ranks_most;

  // NICs per node: the group's GPUs behind each (by the node's own NIC map).
  for (std::size_t n = 0; n < L.by_node.size(); ++n) {
    std::map<int, std::vector<int>> by_nic;
    for (int g : L.by_node[n]) {
      const auto loc  = topology.locate(g);
      const auto site = topology.spec().site_of(topology.building_name(loc.building));
      by_nic[site.node->nic_of(loc.local)].push_back(g);
    }
    for (auto& [nic, members] : by_nic) {
      std::sort(members.begin(), members.end(),
                [&](int a, int b) { return topology.locate(a).local < topology.locate(b).local; });
      L.nics_shared = L.nics_shared || members.size() > 1;
      L.nic_members[n].push_back(std::move(members));
    }
  }
  for (const auto& node : L.nic_members) {
    if (node.size() != L.nic_members[0].size())
      L.regular = false;
    for (std::size_t k = 0; k < node.size() && L.regular; ++k)
      L.regular = node[k].size() == L.nic_members[0][k].size();
  }
  const int rails = static_cast<int>(L.nic_members[0].size());
  L.nic_ports     = node0->ports_per_gpu();

  // NCCL's figures for the paths (GB/s): the narrowest of the group's nodes (NCCL takes the minimum over ranks).
  const NcclVersion v = c.version;
  double total_bw = 1e30, pcie = 1e30, nic = 1e30;
  for (const auto& site : sites) {
    total_bw = std::min(total_bw, nccl_nvlink(*site.node, v));
    pcie     = std::min(pcie, topology::pcie_bandwidth(site.node->nvlink) / 1e9);
    nic      = std::min(nic, site.pod->nic_bandwidth * site.node->ports_per_gpu() / 1e9);
  }
  const double max_inter = std::min(pcie, nic);
  const int max_channels = (v.at_least(25) ? 64 : 32) / 2;

  // Ring: one search channel per NIC and speed step (entering by one NIC, leaving by another); every GPU but the
  // exit carries each channel over NVLink once.
  Found ring;
  if (c.nodes > 1) {
    ring = search(ladder(arch, v, true), max_inter, total_bw, max_channels, [&](double s) {
      const int per_nic = static_cast<int>(std::floor(nic / s + 1e-9));
      const int by_nic  = rails * std::max(0, per_nic);
      if (ppn <= 1)
        return by_nic;
      const double nvlink_per_channel = s * (ppn - 1) / ppn;
      return std::min(by_nic, static_cast<int>(std::floor(total_bw / nvlink_per_channel + 1e-9)));
    });
  } else {
    ring = search(ladder(arch, v, false), total_bw, total_bw, max_channels,
                  [&](double s) { return static_cast<int>(std::floor(total_bw / s + 1e-9)); });
  }
  // DupChannels: min(2n, maxChannels) channels, the speed divided by how many copies each channel got.
  if (!(ring.speed < 25) && !(arch >= 2 && ring.speed < 50 && ring.channels > 4)) {
    const int dup = std::min(2 * ring.channels, max_channels);
    ring.speed /= (dup + ring.channels - 1) / ring.channels;
    ring.channels = dup;
  }
  auto& rg    = c.graphs[static_cast<int>(NcclAlgorithm::ring)];
  rg.channels = ring.channels;
  rg.bw_intra = rg.bw_inter = ring.speed;

  // Trees: the ring's channels; on two nodes the search raises the intra-node speed up to twice the inter-node one,
  // as far as the NVLinks carry it (a tree pattern's NVLink budget is ngpus / (ngpus - 1) of the ring's).
  auto& tg        = c.graphs[static_cast<int>(NcclAlgorithm::tree)];
  tg              = rg;
  tg.tree_pattern = c.nodes > 1 && (arch >= 2 || ppn == 1);
  if (c.nodes == 2 && ppn > 1) {
    // Pass 2 walks the same ladder as the search (the inter-node one: the nodes have NICs), one step up at a time.
    const double budget = total_bw * ppn / (ppn - 1) / ring.channels;
    for (double s : ladder(arch, v, true))
      if (s <= std::min(budget, 2 * ring.speed) + 1e-9 && s > tg.bw_intra)
        tg.bw_intra = s;
  }
  c.graphs[static_cast<int>(NcclAlgorithm::pat)] = tg;

  // NVLS: one head per GPU on a node alone, one per NIC across nodes; each head's channel costs every GPU bwIntra
  // both ways and its head twice (search.cc), so (heads + 1) x bwIntra fits the NVLink.
  const bool nvls_gpus = v.at_least(28) ? ppn >= 2 : ppn > 2;
  c.nvls               = settings.nvls && nvls_capable && nvls_gpus && arch >= 2 && v.at_least(18);
  if (c.nvls) {
    auto& ng          = c.graphs[static_cast<int>(NcclAlgorithm::nvls)];
    const int arity   = v.at_least(21) ? 32 : 8;
    const int heads   = std::min(arity, c.nodes == 1 ? ppn : rails);
    ng.channels       = heads;
    const auto speeds = ladder(arch, v, c.nodes > 1); // the search's ladder: the inter-node one where NICs exist
    ng.bw_intra       = speeds.back();
    for (double s : speeds)
      if ((heads + 1) * s <= total_bw + 1e-9) {
        ng.bw_intra = s;
        break;
      }
    ng.bw_inter = c.nodes == 1 ? std::min(2 * ng.bw_intra, speeds.front()) : max_inter;
    for (double s : ladder(arch, v, true))
      if (c.nodes > 1 && s <= max_inter + 1e-9) {
        ng.bw_inter = s;
        break;
      }
    c.graphs[static_cast<int>(NcclAlgorithm::nvls_tree)] = ng;
  }
  L.nvls_efficiency = arch >= 3 ? 0.74 : 0.85; // tuning.cc 2.28+: nvlsEfficiency of Hopper and Blackwell

  // CollNet (IB SHARP through its plugin): chains on the ring's channels, direct with a head per NIC (at most 8).
  c.collnet = settings.collnet && sharp && c.nodes >= 2;
  L.sharp   = c.collnet;
  if (c.collnet) {
    c.graphs[static_cast<int>(NcclAlgorithm::collnet_chain)] = rg;
    auto& d    = c.graphs[static_cast<int>(NcclAlgorithm::collnet_direct)];
    d          = rg;
    d.channels = std::min(rails, 8);
  }
  c.pat = v.at_least(23) && ppn == 1 && c.nodes == c.ranks;

  // Postset: the kernels' channels.
  int n = std::min(2 * ring.channels, 2 * max_channels);
  if (arch >= 2 && (arch == 2 || v.at_least(25)) && c.nodes > 1 && ring.speed > 45 &&
      (v.at_least(20) ? n < 16 : 2 * n <= 2 * max_channels))
    n = std::min(2 * n, 2 * max_channels);
  c.unpack = pod0->fabric == topology::Fabric::tcpx || pod0->fabric == topology::Fabric::tcpxo;
  if (c.unpack && v.at_least(22) && c.nodes > 1 && n < 16)
    n *= 2;
  c.channels      = n;
  c.nvls_channels = arch >= 3 ? (v.at_least(27) ? (c.nodes == 1 ? 24 : 32) : v.at_least(25) ? 32 : 16) : 16;
  if (v.at_least(28) && c.nodes > 1)
    c.nvls_channels = std::min(c.nvls_channels, c.channels);
  // LL128 is off by default where the group's GPUs differ in architecture (until 2.30).
  if (arch != arch_most && !v.at_least(30))
    for (auto& g : c.graphs)
      g.ll128 = false;

  return L;
}

} // namespace spansim::netsim
