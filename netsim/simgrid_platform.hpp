#pragma once
// Internal: the SimGrid platform built from a topology graph. Only ever built inside a child process.
//
//   root (full zone)
//    +-- region zone (full)           inter-region links, gateways as zone-to-zone routes
//    |    +-- building zone (full)    inter-building links, building uplinks
//    |    |    +-- pod zone (RailZone) GPUs as hosts, spine as the gateway; routes from Topology::route
//    |    |    +-- aggregation zone (full, one router)
//    |    +-- gateway zone (full, one router; only with several regions)
//
// Full zones hold the few zone-to-zone routes of the upper levels. Pods use a zone of our own, because
// neither SimGrid's fat-tree nor its star zones express rails, and Dijkstra would let traffic transit
// through GPUs (a GPU is a vertex joined to both its NVSwitch and its leaf).

#include "netsim/netsim.hpp"

#include <simgrid/s4u.hpp>

#include <vector>

namespace spansim::netsim::detail {

namespace sg4 = simgrid::s4u;

/// @brief The SimGrid objects standing for a topology: one host per GPU, one split-duplex link per link.
/// Only the GPUs a run uses get a host, with their NVLink, NIC and leaf uplinks: the zones and the links
/// above the leaves are always built, so routes between the hosts that exist are those of the whole platform.
/// Links have no latency here: CM02 weighs a flow's share by the inverse of its route latency (TCP's RTT
/// unfairness), which would give a 5 ms inter-region flow a thousandth of a local flow's share of a NIC. The
/// flow engine pays each route's latency itself before the bytes start, so shares are plain max-min.
class SimgridPlatform {
public:
  /// @brief Builds the platform into the (already configured) engine's root, with hosts for the GPUs marked
  /// in `gpus` (all of them when it is empty); host() of any other GPU is null. Routes computed from topology
  /// hops leave out the link directions marked in `slack` (2 x link + 0 forward, + 1 backward; netsim/slack_links.hpp).
  SimgridPlatform(const topology::Topology& topology, double gpu_speed, const std::vector<bool>& gpus = {},
                  const std::vector<bool>& slack = {});

  sg4::Host* host(int gpu) const { return hosts_[gpu]; }
  /// @brief The host standing for queue pair `qp` of a GPU (an imported graph under ECMP routes each apart).
  sg4::Host* host(int gpu, int qp) const { return qp == 0 ? hosts_[gpu] : qp_hosts_[gpu * qps_ + qp]; }
  sg4::Link* link(int id) const { return links_[id]; }
  /// @brief Name of a link of the topology as created in SimGrid.
  static std::string link_name(const topology::Topology& topology, int id);

private:
  std::vector<sg4::Host*> hosts_;
  std::vector<sg4::Host*> qp_hosts_; ///< gpu x qps + qp, for qp > 0
  int qps_ = 1;
  std::vector<sg4::Link*> links_;
  std::vector<bool> slack_; ///< read by the zones' routes while the engine runs
};

/// @brief Index of a link direction in per-direction vectors: 2 x link, + 1 when traversed backward.
inline std::size_t direction_index(const topology::Hop& hop)
{
  return 2 * static_cast<std::size_t>(hop.link) + (hop.forward ? 0 : 1);
}

/// @brief Whether SimgridPlatform's routes take link `id` from topology hops, where a slack direction can be left
/// out: every link of an imported or folded topology; in the nested platform, the NVLinks, NICs and leaf uplinks
/// inside pods (the links above them are on zone-to-zone routes, which are kept whole).
bool hop_routed(const topology::Topology& topology, int id);

/// @brief Applies spansim's pinned settings to a new engine and quiets SimGrid's own logging.
void configure_engine(sg4::Engine& engine, const SimgridSettings& settings);

} // namespace spansim::netsim::detail
