// Collectives lowered to flows: the public entry (add_collective), the algorithms each op accepts, and `auto`,
// which is NCCL's tuner on the group as NCCL lays it out (netsim/nccl_layout.hpp, nccl_tuner.hpp). The lowerings
// themselves are netsim/lowering.cpp (spansim's algorithms) and netsim/nccl_lowering.cpp (NCCL's).
#include "netsim/collectives.hpp"

#include "common/error.hpp"
#include "netsim/lowering.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

namespace spansim::netsim {

using detail::Hierarchy;
using detail::is_power_of_two;
using detail::Lowering;
using detail::regular_hierarchy;
using topology::Topology;

namespace {

void validate(const Topology& t, const Collective& c)
{
  const auto k = c.gpus.size();
  if (k < 2)
    throw UsageError("a collective needs at least 2 GPUs");
  std::set<int> seen;
  for (int g : c.gpus) {
    if (g < 0 || g >= t.gpu_count())
      throw UsageError("GPU " + std::to_string(g) + " is outside the topology (" + std::to_string(t.gpu_count()) +
                       " GPUs)");
    if (!seen.insert(g).second)
      throw UsageError("GPU " + std::to_string(g) + " appears twice in the group");
  }
  if (!(c.bytes >= 0))
    throw UsageError("collective size must be non-negative");
  if (c.flows_per_pair < 1 || c.flows_per_pair > 64)
    throw UsageError("flows per pair must be between 1 and 64");
  if (c.root < 0 || c.root >= static_cast<int>(k))
    throw UsageError("root rank " + std::to_string(c.root) + " is outside the group of " + std::to_string(k));
  if (c.op == CollectiveOp::send_recv && k < 2)
    throw UsageError("sendrecv takes 2 GPUs or more (each sends to the next, as nccl-tests' sendrecv_perf)");
  if (!c.matrix.empty()) {
    if (c.op != CollectiveOp::all_to_all)
      throw UsageError("a size matrix is only for alltoall");
    if (c.matrix.size() != k)
      throw UsageError("the all-to-all matrix must be " + std::to_string(k) + " x " + std::to_string(k));
    for (const auto& row : c.matrix) {
      if (row.size() != k)
        throw UsageError("the all-to-all matrix must be " + std::to_string(k) + " x " + std::to_string(k));
      for (double v : row)
        if (!(v >= 0))
          throw UsageError("the all-to-all matrix holds a negative or invalid size");
    }
  }
}

} // namespace

std::vector<Algorithm> algorithms_for(CollectiveOp op)
{
  using A = Algorithm;
  switch (op) {
  case CollectiveOp::all_reduce:
    return {A::ring,   A::tree,        A::nvls, A::nvls_tree, A::collnet_direct, A::collnet_chain, A::halving_doubling,
            A::direct, A::hierarchical};
  case CollectiveOp::reduce_scatter:
  case CollectiveOp::all_gather:
    return {A::ring, A::nvls, A::collnet_direct, A::pat, A::halving_doubling, A::direct};
  case CollectiveOp::all_to_all:
  case CollectiveOp::send_recv:
    return {A::direct};
  case CollectiveOp::broadcast:
  case CollectiveOp::reduce:
    return {A::ring, A::tree, A::direct};
  }
  return {};
}

std::optional<NcclAlgorithm> nccl_algorithm(Algorithm a)
{
  switch (a) {
  case Algorithm::ring:
    return NcclAlgorithm::ring;
  case Algorithm::tree:
    return NcclAlgorithm::tree;
  case Algorithm::nvls:
    return NcclAlgorithm::nvls;
  case Algorithm::nvls_tree:
    return NcclAlgorithm::nvls_tree;
  case Algorithm::collnet_direct:
    return NcclAlgorithm::collnet_direct;
  case Algorithm::collnet_chain:
    return NcclAlgorithm::collnet_chain;
  case Algorithm::pat:
    return NcclAlgorithm::pat;
  default:
    return std::nullopt;
  }
}

Algorithm spansim_algorithm(NcclAlgorithm a)
{
  constexpr Algorithm by[] = {
      Algorithm::tree,      Algorithm::ring, Algorithm::collnet_direct, Algorithm::collnet_chain, Algorithm::nvls,
      Algorithm::nvls_tree, Algorithm::pat};
  return by[static_cast<int>(a)];
}

namespace {

// Whether NCCL models `a` for the call on this layout under some protocol (its support flags included).
bool nccl_applies(const NcclLayout& layout, const Collective& c, NcclAlgorithm a)
{
  // Broadcast and reduce run NCCL's ring; spansim's heap tree stands in for an explicit "tree".
  if (a == NcclAlgorithm::tree && (c.op == CollectiveOp::broadcast || c.op == CollectiveOp::reduce))
    return true;
  for (Protocol p : {Protocol::ll, Protocol::ll128, Protocol::simple})
    if (nccl_time(layout.comm, c.op, c.bytes, a, p) >= 0)
      return true;
  return false;
}

} // namespace

bool applicable(const Topology& topology, const Collective& c, Algorithm a)
{
  if (a == Algorithm::automatic)
    return true;
  auto allowed = algorithms_for(c.op);
  if (std::find(allowed.begin(), allowed.end(), a) == allowed.end())
    return false;
  if (a == Algorithm::halving_doubling)
    return is_power_of_two(c.gpus.size());
  if (a == Algorithm::hierarchical) {
    Hierarchy h;
    return regular_hierarchy(topology, c.gpus, h) && h.nodes > 1 && (h.per_node > 1 || h.buildings > 1);
  }
  if (auto n = nccl_algorithm(a); n && *n != NcclAlgorithm::ring)
    return nccl_applies(nccl_layout(topology, c.gpus, c.nccl), c, *n);
  return true;
}

Algorithm default_algorithm(const Topology& topology, const Collective& c)
{
  return choose_algorithm(topology, {c});
}

Algorithm choose_algorithm(const Topology& topology, const std::vector<Collective>& concurrent)
{
  if (concurrent.empty())
    throw UsageError("choose_algorithm: no collective given");
  const Collective& c = concurrent.front();
  for (const auto& x : concurrent)
    validate(topology, x);
  const auto candidates = algorithms_for(c.op);
  if (candidates.size() == 1)
    return candidates[0];
  // NCCL's tuner decides on the group alone (every concurrent group is laid out alike).
  const auto layout = nccl_layout(topology, c.gpus, c.nccl);
  return spansim_algorithm(nccl_pick(layout.comm, c.op, c.bytes, c.nccl.algorithms, c.nccl.protocol).algorithm);
}

Lowered add_collective(FlowGraph& graph, const Topology& topology, const Collective& c, const std::vector<int>& deps)
{
  validate(topology, c);
  const auto allowed = algorithms_for(c.op);
  std::string list;
  for (auto x : allowed)
    list += (list.empty() ? "" : ", ") + std::string(name_of(x));
  if (c.algorithm != Algorithm::automatic && std::find(allowed.begin(), allowed.end(), c.algorithm) == allowed.end())
    throw UsageError("algorithm " + std::string(name_of(c.algorithm)) + " does not apply to " +
                     std::string(name_of(c.op)) + " (allowed: " + list + ", auto)");
  Lowering low(graph, topology, c);
  Lowered out;
  const bool p2p_only = allowed.size() == 1; // all-to-all, send/recv: NCCL's p2p, no tuner
  std::optional<NcclLayout> layout;
  if (!p2p_only)
    layout = nccl_layout(topology, c.gpus, c.nccl);
  Algorithm a = c.algorithm;
  NcclPick pick;
  if (a == Algorithm::automatic && p2p_only) {
    a = Algorithm::direct;
  } else if (a == Algorithm::automatic) {
    pick = nccl_pick(layout->comm, c.op, c.bytes, c.nccl.algorithms, c.nccl.protocol);
    a    = spansim_algorithm(pick.algorithm);
  } else if (auto n = nccl_algorithm(a); n && !nccl_applies(*layout, c, *n)) {
    throw UsageError("algorithm " + std::string(name_of(a)) + " does not apply to this " + std::string(name_of(c.op)) +
                     " of " + std::to_string(c.gpus.size()) + " GPUs over " + std::to_string(layout->comm.nodes) +
                     " node(s) (NVLS needs an NVSwitch that reduces and NCCL's NVLS enabled, with more than 2 GPUs "
                     "per node (2 or more from NCCL 2.28) and, across nodes, SHARP or NVLSTree; CollNet needs SHARP, "
                     "CollNet enabled and 2 "
                     "nodes or more; PAT one GPU per node from NCCL 2.23)");
  }
  const auto nccl_of = nccl_algorithm(a);
  const bool tuned   = nccl_of && !(a == Algorithm::tree && c.op != CollectiveOp::all_reduce);
  NcclCall call;
  if (tuned)
    call = low.plan(c.op, *layout, c.bytes, *nccl_of);
  int end = 0;
  switch (a) {
  case Algorithm::ring:
    end = (c.op == CollectiveOp::broadcast || c.op == CollectiveOp::reduce)
              ? low.chain(c.op, c.gpus, c.root, c.bytes, deps)
              : low.nccl_ring(c.op, *layout, c.bytes, call, deps);
    break;
  case Algorithm::pat:
    end = low.nccl_ring(c.op, *layout, c.bytes, call, deps);
    break;
  case Algorithm::tree:
    end = c.op == CollectiveOp::all_reduce ? low.nccl_tree(*layout, c.bytes, call, deps)
                                           : low.tree(c.op, c.gpus, c.root, c.bytes, deps);
    break;
  case Algorithm::nvls:
  case Algorithm::nvls_tree:
    end = low.nvls(c.op, *layout, c.bytes, call, a == Algorithm::nvls_tree, deps);
    break;
  case Algorithm::collnet_direct:
  case Algorithm::collnet_chain:
    end = c.op == CollectiveOp::all_reduce ? low.collnet(*layout, c.bytes, call, deps)
                                           : low.nccl_ring(c.op, *layout, c.bytes, call, deps);
    break;
  case Algorithm::halving_doubling:
    if (!is_power_of_two(c.gpus.size()))
      throw UsageError("halving-doubling needs a power-of-two group; this one has " + std::to_string(c.gpus.size()) +
                       " GPUs");
    end = low.halving_doubling(c.op, c.gpus, c.bytes, deps);
    break;
  case Algorithm::direct:
    end = low.direct(c.op, c, deps);
    break;
  case Algorithm::hierarchical: {
    Hierarchy h;
    if (!regular_hierarchy(topology, c.gpus, h))
      throw UsageError("hierarchical all-reduce needs a regular group: the same local GPUs on every node and "
                       "the same number of nodes in every building");
    end = low.hierarchical(h, c.bytes, deps);
    break;
  }
  case Algorithm::automatic:
    break;
  }
  out.end_op    = end;
  out.algorithm = a;
  out.flows     = low.flows();
  out.nccl      = low.call();
  out.bound     = low.bound();
  out.estimate  = std::max(0.0, low.estimate());
  out.nodes     = layout ? layout->comm.nodes : 0;
  out.nics      = layout && layout->regular ? static_cast<int>(layout->nic_members.front().size()) : 1;
  // spansim's own step-by-step algorithms chain transfers rank by rank: one rail cannot stand for the others there.
  const bool stepwise = a == Algorithm::halving_doubling || a == Algorithm::hierarchical ||
                        (a == Algorithm::ring && (c.op == CollectiveOp::broadcast || c.op == CollectiveOp::reduce)) ||
                        (a == Algorithm::tree && c.op != CollectiveOp::all_reduce);
  out.rails_differ = low.rails_differ() || (c.rail >= 0 && c.rails > 0 && stepwise);
  return out;
}

} // namespace spansim::netsim
