#pragma once
// Flow graphs built as the network tests build them (tests/netsim).
#include "common/collective.hpp"
#include "netsim/collectives.hpp"
#include "netsim/nccl_layout.hpp"
#include "netsim/nccl_tuner.hpp"
#include "netsim/netsim.hpp"
#include "topology/topology.hpp"

#include <catch2/catch.hpp>

#include <algorithm>

#include <utility>
#include <vector>

namespace spansim::test {

/// @brief Independent transfers of `bytes` each, one per (source GPU, destination GPU) pair, in that order.
inline netsim::FlowGraph transfers(const std::vector<std::pair<int, int>>& pairs, double bytes)
{
  netsim::FlowGraph g;
  for (const auto& [src, dst] : pairs)
    g.add_transfer(src, dst, bytes);
  return g;
}

/// @brief A preset (or file) with no per-step latency beyond NCCL's own and no NVLS warp bound (the fitted step and
/// net latencies and warp rates of topology/fabrics.json at 0): the site whose collectives the closed forms describe.
inline topology::Topology without_fitted_terms(const std::string& preset)
{
  auto spec                = topology::load_topology_spec(preset);
  spec.node.step_latency   = 0;
  spec.node.nvls_warp_rate = 0;
  spec.pod.net_latency     = 0;
  for (auto& b : spec.building_overrides) {
    b.node.step_latency   = 0;
    b.node.nvls_warp_rate = 0;
    b.pod.net_latency     = 0;
  }
  return topology::Topology(std::move(spec));
}

/// @brief The textbook alpha-beta time of a ring all-reduce: 2(K-1)/K S / B + 2(K-1) alpha.
inline double ring_allreduce_time(int ranks, double bytes, double bandwidth, double alpha)
{
  if (ranks < 2)
    return 0;
  return wire_bytes_per_rank(CollectiveOp::all_reduce, ranks, bytes) / bandwidth + 2.0 * (ranks - 1) * alpha;
}

/// @brief The protocol NCCL gives a send of `bytes` in the group of `c` (LL at most p2pnChannelsPerPeer x 16 KiB,
/// src/enqueue.cc addP2pToPlan; checked by hand in tests/netsim/test_nccl.cpp).
inline netsim::Protocol p2p_protocol_in(const topology::Topology& t, const netsim::Collective& c, double bytes)
{
  const auto layout = netsim::nccl_layout(t, c.gpus, c.nccl);
  const auto comm =
      netsim::p2p_comm(layout.comm.channels, static_cast<int>(c.gpus.size()), layout.comm.nodes, true, c.nccl);
  return netsim::p2p_plan(comm, bytes).protocol;
}

/// @brief What a group of sends and receives of `bytes` each over the path from gpus[0] to gpus[1] takes beyond its
/// bytes (seconds), for groups of at most 65 ranks (one wave of peers): NCCL's ring launch (baseLat), then one step
/// over the path (hwLat, plus the path's fitted step latency), under the protocol NCCL gives the send.
inline double p2p_floor(const topology::Topology& t, const netsim::Collective& c, double bytes)
{
  REQUIRE(c.gpus.size() <= 65);
  const bool inside = t.locate(c.gpus[0]).node == t.locate(c.gpus[1]).node;
  const auto tables = netsim::nccl_p2p_latency(c.nccl.version, p2p_protocol_in(t, c, bytes),
                                               inside ? netsim::NcclPath::nvlink : netsim::NcclPath::net);
  return (tables.base_us + tables.step_us) * 1e-6 + t.step_latency(c.gpus[0], c.gpus[1]);
}

/// @brief NCCL's tuner latency (seconds) for a call run as `algorithm` under Simple: the least a pipelined call takes
/// (netsim/lowering.cpp), checked by hand in tests/netsim/test_nccl.cpp.
inline double nccl_floor(const topology::Topology& t, const netsim::Collective& c,
                         netsim::NcclAlgorithm algorithm = netsim::NcclAlgorithm::ring)
{
  const auto layout = netsim::nccl_layout(t, c.gpus, c.nccl);
  netsim::NcclPick pick;
  REQUIRE(netsim::nccl_time(layout.comm, c.op, c.bytes, algorithm, netsim::Protocol::simple, &pick) >= 0);
  return pick.latency_us * 1e-6;
}

/// @brief A ring all-reduce as spansim runs it: the bytes at the links' rate after the larger of the chain of 2(K-1)
/// step latencies and NCCL's own latency for the call.
inline double ring_allreduce_time(const topology::Topology& t, const netsim::Collective& c, double bandwidth,
                                  double alpha)
{
  const int k = static_cast<int>(c.gpus.size());
  return ring_allreduce_time(k, c.bytes, bandwidth, 0) + std::max(2.0 * (k - 1) * alpha, nccl_floor(t, c));
}

} // namespace spansim::test
