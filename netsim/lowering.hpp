#pragma once
/// @file
/// @brief Internal to netsim: one collective call lowered to flows with dependencies (netsim/lowering.cpp for the
/// flows and spansim's own algorithms, netsim/nccl_lowering.cpp for NCCL's).

#include "netsim/collectives.hpp"
#include "netsim/nccl_layout.hpp"

#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace spansim::netsim::detail {

bool is_power_of_two(std::size_t k);

/// @brief A group split by node and by site, when it is regular: every node holds the same local GPU indices of
/// the group, and every site the same number of the group's nodes. Sites are regions when the group spans several
/// (NeMo's multi-data-center scheme), else buildings.
struct Hierarchy {
  int per_node  = 0;                     // L
  int nodes     = 0;                     // N
  int buildings = 0;                     // B (sites)
  std::vector<std::vector<int>> by_node; // by_node[n][l], nodes in first-appearance order
  std::vector<int> building_of_node;
};
/// @brief Whether `gpus` is regular; fills `h` when it is.
bool regular_hierarchy(const topology::Topology& t, const std::vector<int>& gpus, Hierarchy& h);

/// @brief The lowering of one call: its transfers, its NCCL call plan, and what bounds it.
class Lowering {
public:
  Lowering(FlowGraph& graph, const topology::Topology& topology, const Collective& c);

  std::size_t flows() const { return flows_; }
  /// @brief With Collective::rail: whether the transfers between nodes differed in number or bytes by rail.
  bool rails_differ() const;
  /// @brief The call, bound and estimate of the slowest part lowered so far.
  const NcclCall& call() const { return call_; }
  Bound bound() const { return bound_; }
  double estimate() const { return estimate_; }

  /// @brief One logical transfer, spread over the flows that stand for its channels; `window` is what all of its
  /// connections may have in flight together (0: none), `rate` what they may carry together (0: no cap).
  void transfer(int src, int dst, double bytes, const std::vector<int>& deps, std::vector<int>& out, double window = 0,
                double rate = 0);
  int barrier(const std::vector<int>& deps) { return graph_.add_delay(0, deps); }

  /// @brief NCCL's plan for a part on `layout` run as `algorithm`: the tuner's protocol (or the settings'), its
  /// channels, steps and windows, its latency and kernel cap.
  NcclCall plan(CollectiveOp op, const NcclLayout& layout, double bytes, NcclAlgorithm algorithm) const;

  /// @brief Pipelined flows over `pairs` (the edges of rings, chains or trees), each carrying `volume` of payload as
  /// `call` puts it on the wire and under its slot window, all starting together; then a delay for the part of
  /// the chain of dependent steps (`chain`, seconds; at least the call's own latency) that the flows do not already
  /// pay. `bytes` is the call's size (nccl-tests), which the call's kernel cap bounds.
  int pipelined(const std::vector<std::pair<int, int>>& pairs, double volume, double chain, const NcclCall& call,
                const std::vector<int>& deps, int channels_per_edge = 0, double bytes = 0);

  // spansim's algorithms (lowering.cpp).
  int ring(CollectiveOp op, const std::vector<int>& gpus, double bytes, const std::vector<int>& deps);
  int chain(CollectiveOp op, const std::vector<int>& gpus, int root, double bytes, const std::vector<int>& deps);
  int tree(CollectiveOp op, const std::vector<int>& gpus, int root, double bytes, const std::vector<int>& deps);
  int halving_doubling(CollectiveOp op, const std::vector<int>& gpus, double bytes, const std::vector<int>& deps);
  int direct(CollectiveOp op, const Collective& c, const std::vector<int>& deps);
  /// @brief One send of a group of sends and receives (NCCL's point-to-point): `pxn` sends between nodes as PXN does.
  struct P2pSend {
    int src = 0, dst = 0;
    double bytes = 0, window = 0;
    bool pxn = true;
  };
  /// @brief The sends of one NCCL call of point-to-point operations over `ranks` ranks, all starting together, then
  /// the call's latency that their flows do not pay (netsim/README.md, "Send/recv and all-to-all").
  int p2p_group(const std::vector<P2pSend>& sends, const P2pComm& comm, const std::vector<int>& deps);
  int hierarchical(const Hierarchy& h, double bytes, const std::vector<int>& deps);

  // NCCL's algorithms as NCCL lays them out (nccl_lowering.cpp).
  /// @brief Rings, one per NIC the group's nodes leave by, each carrying its share; rail-local between nodes.
  int nccl_ring(CollectiveOp op, const NcclLayout& layout, double bytes, const NcclCall& call,
                const std::vector<int>& deps);
  /// @brief Double binary trees over the nodes, one pair per NIC (its head GPUs), chains inside each node.
  int nccl_tree(const NcclLayout& layout, double bytes, const NcclCall& call, const std::vector<int>& deps);
  /// @brief NVLS inside each node (the NVSwitch reduces and multicasts), with NVLSTree's trees or CollNet's
  /// in-network reduction between nodes.
  int nvls(CollectiveOp op, const NcclLayout& layout, double bytes, const NcclCall& call, bool across_by_tree,
           const std::vector<int>& deps);
  /// @brief The share of the NVLink rate an NVLS call's data moves at inside a node: NCCL's nvlsEfficiency, or less
  /// where the channels' copy warps (the node's nvls_warp_rate) are slower.
  double nvls_share(CollectiveOp op, const NcclLayout& layout, const NcclCall& call, bool across_by_tree) const;
  /// @brief The wait of an NVLS all-reduce's store-and-forward stages as its pipeline fills and drains, after `end`.
  int pipeline_fill(CollectiveOp op, const NcclLayout& layout, double bytes, const NcclCall& call, bool across_by_tree,
                    int end);
  /// @brief CollNet: the node's data reduced to its heads, the switches reduce across nodes, the heads spread it.
  int collnet(const NcclLayout& layout, double bytes, const NcclCall& call, const std::vector<int>& deps);
  /// @brief A point-to-point transfer over the network as NCCL's PXN sends it: over NVLink to the local GPU on the
  /// destination's rail, then out of that GPU's NIC; direct when that GPU is not in the group (NCCL relays only
  /// through ranks of the communicator).
  void p2p(int src, int dst, double bytes, const std::vector<int>& deps, std::vector<int>& out, double window,
           double rate = 0);

private:
  /// @brief The cap on a transfer's rate from its sender's share of an uplink (Collective::send_rate); 0: none.
  double rate_of(int src, int dst) const;
  std::vector<double> latencies(const std::vector<std::pair<int, int>>& pairs) const;
  /// @brief The slowest path from the root of a heap-shaped tree to a leaf, over `pairs` (edge i of `edges` is
  /// pairs[i], whichever its direction): parents come before their children in heap order.
  double deepest(const std::vector<std::pair<int, int>>& edges, const std::vector<std::pair<int, int>>& pairs,
                 int k) const;
  void note(const NcclCall& call, double estimate, double chain, double at_window, double at_bandwidth);
  /// @brief NCCL's double binary tree over `heads` (one per node) and its mirror: their up and down edges appended
  /// to `pairs`; returns the slowest path up and down.
  double double_tree(const std::vector<int>& heads, std::vector<std::pair<int, int>>& pairs) const;

  FlowGraph& graph_;
  const topology::Topology& topology_;
  int flows_per_pair_;
  double stretch_ = 1;
  NcclSettings nccl_;
  std::unordered_map<int, double> send_rate_; ///< GPU -> bytes/s of all its sends in this collective
  std::unordered_set<int> members_;           ///< the group: PXN relays only through ranks of the communicator
  std::size_t flows_ = 0;
  int rail_          = -1; ///< Collective::rail
  int rails_         = 0;  ///< Collective::rails
  /// @brief With rail_: per rail (a node's GPU), the transfers between nodes leaving it and their bytes.
  std::vector<std::pair<std::size_t, double>> by_rail_;
  NcclCall call_;
  Bound bound_     = Bound::bandwidth;
  double estimate_ = -1;
};

/// @brief The edges (child, parent) of a heap-shaped binary tree over k positions, or of its mirror (positions
/// reversed), so that with both every position is interior in one tree and a leaf in the other (powers of two).
std::vector<std::pair<int, int>> tree_edges(int k, bool mirrored);
/// @brief The levels of a heap-shaped binary tree over k positions: the depth of its last, floor(log2 k).
int tree_levels(int k);
/// @brief Consecutive pairs of a ring over `gpus`.
std::vector<std::pair<int, int>> ring_pairs(const std::vector<int>& gpus);
/// @brief Latency of a chain of `steps` dependent steps over consecutive edges (cyclic: a ring from its worst start).
double chain_latency(const std::vector<double>& latency, double steps, bool cyclic);

} // namespace spansim::netsim::detail
