#pragma once
/// @file
/// @brief Collectives lowered to flows with dependencies, the way NCCL runs them (pipelined, long-lived flows).
///
/// Sizes follow nccl-tests: `bytes` is the per-rank buffer for all-reduce, broadcast and reduce; the total
/// (all ranks') buffer for all-gather and reduce-scatter; each rank's whole send buffer for all-to-all.

#include "common/collective.hpp"
#include "netsim/nccl.hpp"
#include "netsim/netsim.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spansim::netsim {

/// @brief How a collective is lowered to flows. `automatic`: as NCCL's tuner picks among its algorithms (ring, tree,
/// nvls, nvls-tree, collnet-direct, collnet-chain, pat), each laid out as NCCL lays it out; halving-doubling, direct
/// and hierarchical are spansim's own, only when asked for (names: "auto", "ring", ...).
enum class Algorithm {
  automatic,
  ring,
  tree,
  halving_doubling,
  direct,
  hierarchical,
  nvls,
  nvls_tree,
  collnet_direct,
  collnet_chain,
  pat
};
constexpr std::array<std::string_view, 11> enum_names(Algorithm)
{
  return {"auto", "ring",      "tree",           "halving-doubling", "direct", "hierarchical",
          "nvls", "nvls-tree", "collnet-direct", "collnet-chain",    "pat"};
}
/// @brief NCCL's name for an algorithm of its own (nullopt for spansim's: halving-doubling, direct, hierarchical).
std::optional<NcclAlgorithm> nccl_algorithm(Algorithm a);
/// @brief spansim's name for an algorithm of NCCL's.
Algorithm spansim_algorithm(NcclAlgorithm a);

/// @brief One collective call on a group of GPUs.
struct Collective {
  CollectiveOp op     = CollectiveOp::all_reduce;
  Algorithm algorithm = Algorithm::automatic;
  std::vector<int> gpus;  ///< the group, in rank order
  double bytes       = 0; ///< nccl-tests size (see the file comment)
  int root           = 0; ///< rank of the root for broadcast and reduce
  int flows_per_pair = 1; ///< flows per GPU pair (ECMP spreading); NCCL's channels are `nccl`'s
  /// @brief All-to-all with a size matrix: bytes from rank i to rank j (MoE dispatch/combine). Empty: uniform.
  std::vector<std::vector<double>> matrix;
  double stretch = 1; ///< every transfer moves its bytes as if this many times as many (netsim::Op::stretch)
  NcclSettings nccl;  ///< protocol, channels and buffers: the slot windows of every transfer
  /// @brief Per rank (aligned with `gpus`; empty: none): the bytes/s each send of that rank may use (its share of
  /// an uplink; a ring sends once per rank): Op::rate of its transfers.
  std::vector<double> send_rate;
  /// @brief Under rail symmetry (`rails` > 0), for a group over several rails: the rail simulated, with every
  /// `rails`-th after it (rail r stands for the rails r+1 .. r+rails-1 of its block). Transfers between nodes leaving
  /// another rail are left out (the simulated ones stand for them), those inside a node all kept, identical pairs of
  /// one part merged into one flow; Lowered::rails_differ says when a rail's transfers between nodes differ from
  /// those of the simulated rail of its block. -1: every transfer.
  int rail  = -1;
  int rails = 0;
};

/// @brief What bounds a call, estimated when it is lowered (alone on its links): the latency of its chain of
/// dependent steps, its connections' slot windows over their round trip, or the links' bandwidth.
enum class Bound { latency, window, bandwidth };
constexpr std::array<std::string_view, 3> enum_names(Bound)
{
  return {"latency", "window", "bandwidth"};
}

/// @brief What a lowering produced.
struct Lowered {
  int end_op          = 0;                    ///< the op that ends when the collective has ended
  Algorithm algorithm = Algorithm::automatic; ///< the algorithm used (resolved when `automatic`)
  std::size_t flows   = 0;                    ///< transfers added
  NcclCall nccl;                              ///< the protocol, channels and window of its slowest part
  Bound bound     = Bound::bandwidth;         ///< what bounds that part
  double estimate = 0;                        ///< that part's time alone on its links, seconds
  int nodes       = 0;                        ///< nodes the group spans (0: not laid out by NCCL's rules)
  int nics        = 1;                        ///< NICs per node its rings and trees leave by
  /// @brief With Collective::rail: the transfers between nodes differ in number or bytes from rail to rail.
  bool rails_differ = false;
};

/// @brief Adds a collective to `graph`, starting after `deps`.
/// @throws UsageError for an algorithm that does not apply (named, with the allowed ones).
Lowered add_collective(FlowGraph& graph, const topology::Topology& topology, const Collective& collective,
                       const std::vector<int>& deps);

/// @brief The algorithms `op` accepts, `automatic` aside.
std::vector<Algorithm> algorithms_for(CollectiveOp op);
/// @brief Whether `algorithm` can lower `collective` on `topology`: the op accepts it and the group has the shape
/// it needs (a power of two for halving-doubling; the same local GPUs on every node, and the same number of nodes
/// in every building, over several nodes, for hierarchical).
bool applicable(const topology::Topology& topology, const Collective& collective, Algorithm algorithm);

/// @brief The algorithm the default policy picks for one call: see choose_algorithm.
Algorithm default_algorithm(const topology::Topology& topology, const Collective& collective);

/// @brief The algorithm NCCL's tuner picks for `concurrent` collectives (the same op on different groups, issued
/// together, laid out alike): the first group as NCCL lays it out, under the collectives' NCCL settings (release,
/// NCCL_ALGO, NCCL_PROTO, NVLS, CollNet); all-to-all and send/recv are direct.
Algorithm choose_algorithm(const topology::Topology& topology, const std::vector<Collective>& concurrent);

} // namespace spansim::netsim
