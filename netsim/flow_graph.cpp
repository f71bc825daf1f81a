#include "common/error.hpp"
#include "netsim/netsim.hpp"

#include <algorithm>

namespace spansim::netsim {

int FlowGraph::add(Op op)
{
  const int index = static_cast<int>(ops_.size());
  for (int d : op.deps)
    if (d < 0 || d >= index)
      throw UsageError("flow graph: op " + std::to_string(index) + " depends on op " + std::to_string(d) +
                       ", which is not an earlier op");
  ops_.push_back(std::move(op));
  return index;
}

int FlowGraph::add_transfer(int src, int dst, double bytes, std::vector<int> deps)
{
  if (bytes < 0)
    throw UsageError("flow graph: negative transfer size");
  Op op;
  op.kind  = Op::Kind::transfer;
  op.src   = src;
  op.dst   = dst;
  op.bytes = bytes;
  op.deps  = std::move(deps);
  return add(std::move(op));
}

int FlowGraph::add_delay(double seconds, std::vector<int> deps)
{
  if (seconds < 0)
    throw UsageError("flow graph: negative delay");
  Op op;
  op.kind     = Op::Kind::delay;
  op.duration = seconds;
  op.deps     = std::move(deps);
  return add(std::move(op));
}

std::size_t FlowGraph::transfer_count() const
{
  return static_cast<std::size_t>(
      std::count_if(ops_.begin(), ops_.end(), [](const Op& op) { return op.kind == Op::Kind::transfer; }));
}

double ring_allreduce_time(int ranks, double bytes, double bandwidth, double alpha)
{
  if (ranks < 2)
    return 0;
  const double k = ranks;
  return 2 * (k - 1) / k * bytes / bandwidth + 2 * (k - 1) * alpha;
}

int add_ring_allreduce(FlowGraph& graph, const topology::Topology& topology, const RingAllReduce& ring,
                       const std::vector<int>& deps)
{
  const int k = static_cast<int>(ring.gpus.size());
  if (k < 2)
    return graph.add_delay(0, deps);
  // Pipelined ring: every rank streams 2(K-1)/K * S to its successor over one long-lived flow. The flow pays
  // its path latency once; the other 2(K-1)-1 steps each wait for the slowest edge of the ring.
  const double per_flow = 2.0 * (k - 1) / k * ring.bytes;
  double alpha          = 0;
  std::vector<int> flows;
  flows.reserve(k);
  for (int i = 0; i < k; ++i) {
    int src = ring.gpus[i];
    int dst = ring.gpus[(i + 1) % k];
    alpha   = std::max(alpha, topology.route_latency(topology.route(src, dst)));
    flows.push_back(graph.add_transfer(src, dst, per_flow, deps));
  }
  return graph.add_delay((2.0 * (k - 1) - 1) * alpha, flows);
}

} // namespace spansim::netsim
