#pragma once
/// @file
/// @brief How NCCL lays a communicator out on the site (src/graph/search.cc, connect.cc, paths.cc): its nodes, the
/// NICs its rings and trees leave each node by, and the channels and per-channel bandwidths its graph search finds
/// for each algorithm, which NCCL's tuner (netsim/nccl_tuner.hpp) reads.

#include "netsim/nccl_tuner.hpp"
#include "topology/topology.hpp"

#include <vector>

namespace spansim::netsim {

/// @brief A communicator as NCCL lays it out.
struct NcclLayout {
  NcclComm comm; ///< what NCCL's tuner reads
  /// @brief The group's GPUs per node (nodes in the order of their first rank; GPUs in rank order).
  std::vector<std::vector<int>> by_node;
  /// @brief Per node and NIC used: the group GPUs behind that NIC, in local order. Rings and trees enter and leave
  /// a node by these NICs, one ring (and one pair of trees) per NIC.
  std::vector<std::vector<std::vector<int>>> nic_members;
  /// @brief Whether every node holds the same number of the group's GPUs behind the same NICs (NCCL's rings and
  /// trees per NIC need it; otherwise one ring in rank order).
  bool regular           = true;
  bool nics_shared       = false; ///< several of the group's GPUs share a NIC
  double nvls_efficiency = 1;     ///< the share of NVLink a multimem reduction reaches (NCCL's nvlsEfficiency)
  /// @brief Bytes/s one warp of NCCL's NVLS all-reduce kernels copies (the slowest of the group's nodes; 0: none).
  double nvls_warp_rate = 0;
  bool sharp            = false; ///< the fabric reduces in its switches and CollNet is enabled
  int nic_ports         = 1;     ///< ports fused into each NIC device
};

/// @brief Lays out a group (GPUs in rank order) as NCCL's graph search would, under `settings` (release, NVLS and
/// CollNet enabled). @throws UsageError for NVLS or CollNet forced where the site has none.
NcclLayout nccl_layout(const topology::Topology& topology, const std::vector<int>& gpus, const NcclSettings& settings);

} // namespace spansim::netsim
