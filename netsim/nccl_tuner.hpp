#pragma once
/// @file
/// @brief NCCL's tuner as NCCL runs it (src/graph/tuning.cc, enqueue.cc): for one call on one communicator, the
/// time of every (algorithm, protocol) its tables model, from the release's own tables (netsim/nccl/
/// tuner-tables.json), and the pick: the first strict minimum, as NCCL's loop takes it. The communicator's graphs
/// (channels and per-channel bandwidths) come from netsim/nccl_layout.hpp.

#include "common/collective.hpp"
#include "netsim/nccl.hpp"

#include <array>
#include <string>
#include <string_view>

namespace spansim::netsim {

/// @brief What NCCL's graph search found for one algorithm's graph (search.cc), as the tuner reads it.
struct NcclGraph {
  int channels    = 0;     ///< the search's channels (the tuner's nChannels); 0: no such graph
  double bw_intra = 0;     ///< GB/s per channel inside a node
  double bw_inter = 0;     ///< GB/s per channel between nodes
  bool pci_intra  = false; ///< the path inside a node is not NVLink (PCI latency row)
  /// @brief The TREE pattern rather than BALANCED_TREE: one GPU takes all NIC traffic (the tuner's x0.85).
  bool tree_pattern    = false;
  double latency_inter = 0;    ///< microseconds: the net plugin's latency (graph.latencyInter)
  bool ll128           = true; ///< LL128 is enabled by default on this graph's path types
};

/// @brief NCCL's view of a communicator: what its tuner reads.
struct NcclComm {
  NcclVersion version;
  int ranks = 2;
  int nodes = 1;
  int arch  = 2; ///< NCCL's compute-capability row: 0 Volta, 1 Ampere, 2 Hopper, 3 Blackwell
  std::array<NcclGraph, kNcclAlgorithms> graphs{};
  bool nvls            = false; ///< comm->nvlsSupport
  bool collnet         = false; ///< comm->collNetSupport (a SHARP fabric, CollNet enabled, 2 nodes or more)
  bool pat             = false; ///< ncclPatEnable (one GPU per node, 2.23 and later)
  int channels         = 1;     ///< comm->nChannels: the ring and tree channels the kernels run
  int nvls_channels    = 0;
  int local_ranks_most = 1; ///< the largest number of the communicator's ranks on one node
  /// @brief Every NIC's receive side unpacks on the GPU (GPUDirect-TCPX/TCPXO): Postset's x2 rule.
  bool unpack            = false;
  double net_overhead_us = 1; ///< NCCL_NET_OVERHEAD's default on an x86 Intel host
};

/// @brief NCCL's pick for one call.
struct NcclPick {
  NcclAlgorithm algorithm = NcclAlgorithm::ring;
  Protocol protocol       = Protocol::simple;
  double latency_us       = 0; ///< the tuner's latency for the pick (lat * latCount)
  double algbw            = 0; ///< the tuner's algorithm bandwidth for the pick, GB/s (its time's bandwidth term)
  double time_us          = 0; ///< the tuner's estimate: latency + bytes / algbw
  /// @brief The algorithm bandwidth the pick's kernels reach at most, from the tuner's per-channel tables alone
  /// (GB/s; 0: none), whatever the links carry.
  double kernel_algbw = 0;
};

/// @brief The tuner's time (microseconds) of `op` of `bytes` (nccl-tests size: total for all-gather and
/// reduce-scatter) under (algorithm, protocol); negative when NCCL does not model or allow that pair here.
double nccl_time(const NcclComm& comm, CollectiveOp op, double bytes, NcclAlgorithm algorithm, Protocol protocol,
                 NcclPick* detail = nullptr);

/// @brief The pick among the algorithms `allowed` (NCCL_ALGO) and the protocol `protocol` (NCCL_PROTO; automatic:
/// LL, LL128, Simple), as ncclTopoGetAlgoInfo makes it: the first strict minimum in NCCL's order.
/// @throws UsageError when nothing allowed applies (NCCL's ncclInvalidUsage), naming what was asked.
NcclPick nccl_pick(const NcclComm& comm, CollectiveOp op, double bytes, const NcclAlgorithmSet& allowed,
                   Protocol protocol);

/// @brief The runtime channels NCCL gives a call (enqueue.cc): the communicator's, fewer while the bytes are below
/// channels x threads x threshold (NVLS: its own channel count).
int nccl_call_channels(const NcclComm& comm, const NcclPick& pick, double bytes, const NcclSettings& settings);

/// @brief A path type of NCCL's latency tables (hwLat's first index).
enum class NcclPath { nvlink, pci, net };

/// @brief The parts of NCCL's ring latencies a group of sends and receives (an all-to-all, a send/recv) pays, which
/// NCCL's tuner does not model for point-to-point: the call's launch (`base_us`: baseLat of Ring under `protocol`)
/// and one step over a path of `path`'s type (`step_us`: hwLat of Ring there). Microseconds.
struct NcclP2pLatency {
  double base_us = 0;
  double step_us = 0;
};
/// @brief The release's tables for a send/recv under `protocol` (LL or Simple: NCCL's p2p uses no LL128) over `path`.
NcclP2pLatency nccl_p2p_latency(NcclVersion version, Protocol protocol, NcclPath path);

} // namespace spansim::netsim
