#pragma once
/// @file
/// @brief Collectives lowered to flows with dependencies, the way NCCL runs them (pipelined, long-lived flows).
///
/// Sizes follow nccl-tests: `bytes` is the per-rank buffer for all-reduce, broadcast and reduce; the total
/// (all ranks') buffer for all-gather and reduce-scatter; each rank's whole send buffer for all-to-all.

#include "common/collective.hpp"
#include "netsim/nccl.hpp"
#include "netsim/netsim.hpp"

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace spansim::netsim {

/// @brief How a collective is lowered to flows; `automatic` lets the policy choose (names: "auto", "ring", ...).
enum class Algorithm { automatic, ring, tree, halving_doubling, direct, hierarchical };
constexpr std::array<std::string_view, 6> enum_names(Algorithm)
{
  return {"auto", "ring", "tree", "halving-doubling", "direct", "hierarchical"};
}

/// @brief One collective call on a group of GPUs.
struct Collective {
  CollectiveOp op     = CollectiveOp::all_reduce;
  Algorithm algorithm = Algorithm::automatic;
  std::vector<int> gpus; ///< the group, in rank order
  double bytes = 0;      ///< nccl-tests size (see the file comment)
  int root     = 0;      ///< rank of the root for broadcast and reduce
  int channels = 1;      ///< flows per GPU pair (NCCL channels / ECMP spreading)
  /// @brief All-to-all with a size matrix: bytes from rank i to rank j (MoE dispatch/combine). Empty: uniform.
  std::vector<std::vector<double>> matrix;
  double stretch = 1; ///< every transfer moves its bytes as if this many times as many (netsim::Op::stretch)
  NcclSettings nccl;  ///< protocol, channels and buffers: the slot windows of every transfer
  /// @brief Per rank (aligned with `gpus`; empty: none): the bytes/s each send of that rank may use (its share of
  /// an uplink; a ring sends once per rank): Op::rate of its transfers.
  std::vector<double> send_rate;
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
  int end_op;                         ///< the op that ends when the collective has ended
  Algorithm algorithm;                ///< the algorithm used (resolved when `automatic`)
  std::size_t flows;                  ///< transfers added
  NcclCall nccl;                      ///< the protocol, channels and window of its slowest part
  Bound bound     = Bound::bandwidth; ///< what bounds that part
  double estimate = 0;                ///< that part's time alone on its links, seconds
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

/// @brief The algorithm under which `concurrent` collectives (the same op on different groups, issued together)
/// end first, each candidate's flows run together in the analytical engine, so links the groups share count.
/// Candidates: ring, double binary tree, halving-doubling (powers of two), hierarchical (regular groups over
/// several nodes or buildings); all-to-all and send/recv are direct. Like NCCL's tuning by size and shape, but
/// measured on the topology rather than read from a table.
Algorithm choose_algorithm(const topology::Topology& topology, const std::vector<Collective>& concurrent);

/// @brief A fingerprint of what choose_algorithm reads of a site: every link (ends, bandwidth, latency, tier) and
/// the routing settings (multipath, window), as two independent 64-bit hashes.
std::string site_fingerprint(const topology::Topology& topology);

/// @brief A memo of choose_algorithm, which is a function of the site and the collectives alone: a search that
/// simulates many points on one site times each set of candidates once. Keyed by the site's fingerprint, so one
/// memo may serve several sites. One per process (the optimizer's workers each fill their own).
class AlgorithmCache {
public:
  /// @brief choose_algorithm(topology, concurrent), remembered; `site` is site_fingerprint(topology).
  Algorithm choose(const topology::Topology& topology, const std::string& site,
                   const std::vector<Collective>& concurrent);
  std::size_t hits() const { return hits_; }
  std::size_t misses() const { return misses_; }

private:
  std::unordered_map<std::string, Algorithm> choices_;
  std::size_t hits_ = 0, misses_ = 0;
};

} // namespace spansim::netsim
