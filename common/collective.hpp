#pragma once
/// @file
/// @brief The collective operations, named once, and the one formula for the bytes they put on the wire: shared
/// by the workload (bytes per dimension), placement (bytes across boundaries) and netsim (lowering, bus bandwidth).
///
/// Sizes follow nccl-tests: `bytes` is the per-rank buffer for all-reduce, broadcast and reduce; the total (all
/// ranks') buffer for all-gather and reduce-scatter; each rank's whole send buffer for all-to-all; the message for
/// send/recv.

#include "common/names.hpp"

namespace spansim {

/// @brief A collective (or point-to-point) communication operation.
enum class CollectiveOp { all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, reduce, send_recv };
constexpr std::array<std::string_view, 7> enum_names(CollectiveOp)
{
  return {"allreduce", "reducescatter", "allgather", "alltoall", "broadcast", "reduce", "sendrecv"};
}
/// @brief Spellings also accepted when parsing.
constexpr std::array<std::pair<CollectiveOp, std::string_view>, 5> enum_aliases(CollectiveOp)
{
  return {{{CollectiveOp::all_reduce, "all_reduce"},
           {CollectiveOp::reduce_scatter, "reduce_scatter"},
           {CollectiveOp::all_gather, "all_gather"},
           {CollectiveOp::all_to_all, "all_to_all"},
           {CollectiveOp::send_recv, "send_recv"}}};
}

/// @brief nccl-tests' bus bandwidth factor: busbw = algbw * factor. It is also the bytes each rank sends per byte
/// of the collective's size under the bandwidth-optimal (ring, pairwise) algorithms: 2(K-1)/K for all-reduce,
/// (K-1)/K for all-gather, reduce-scatter and all-to-all, 1 for broadcast, reduce and send/recv.
constexpr double bus_bandwidth_factor(CollectiveOp op, int ranks)
{
  const double k = ranks;
  if (ranks < 2 && op != CollectiveOp::send_recv)
    return 0;
  switch (op) {
  case CollectiveOp::all_reduce:
    return 2 * (k - 1) / k;
  case CollectiveOp::reduce_scatter:
  case CollectiveOp::all_gather:
  case CollectiveOp::all_to_all:
    return (k - 1) / k;
  case CollectiveOp::broadcast:
  case CollectiveOp::reduce:
  case CollectiveOp::send_recv:
    return 1;
  }
  return 1;
}

/// @brief Bytes one rank sends for one collective of `bytes` (nccl-tests size) among `ranks` ranks, under the
/// bandwidth-optimal algorithms: bus_bandwidth_factor x bytes, computed as steps x bytes / K (a ring all-reduce's
/// 2(K-1) steps of S/K each), which is also what a ring's edge carries when the collective is lowered to flows.
constexpr double wire_bytes_per_rank(CollectiveOp op, int ranks, double bytes)
{
  const double k = ranks;
  if (ranks < 2 && op != CollectiveOp::send_recv)
    return 0;
  switch (op) {
  case CollectiveOp::all_reduce:
    return 2 * (k - 1) * bytes / k;
  case CollectiveOp::reduce_scatter:
  case CollectiveOp::all_gather:
  case CollectiveOp::all_to_all:
    return (k - 1) * bytes / k;
  case CollectiveOp::broadcast:
  case CollectiveOp::reduce:
  case CollectiveOp::send_recv:
    return bytes;
  }
  return bytes;
}

} // namespace spansim
