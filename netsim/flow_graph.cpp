#include "common/collective.hpp"
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

int FlowGraph::add_transfer(int src, int dst, double bytes, std::vector<int> deps, TransferTraits traits)
{
  if (bytes < 0)
    throw UsageError("flow graph: negative transfer size");
  if (!(traits.window >= 0) || !(traits.rate >= 0))
    throw UsageError("flow graph: negative transfer window or rate");
  Op op;
  op.kind    = Op::Kind::transfer;
  op.src     = src;
  op.dst     = dst;
  op.bytes   = bytes;
  op.deps    = std::move(deps);
  op.stretch = traits.stretch;
  op.window  = traits.window;
  op.rate    = traits.rate;
  if (qps_ <= 1 || src == dst || bytes <= 0)
    return add(std::move(op));
  // Queue pairs: equal shares, each its own flow; what waits for the transfer waits for all of them. They split
  // one connection's window as they split its bytes.
  op.bytes = bytes / qps_;
  op.window /= qps_;
  op.rate /= qps_;
  std::vector<int> parts;
  for (int q = 0; q < qps_; ++q) {
    op.qp = q;
    parts.push_back(add(op));
  }
  return add_delay(0, std::move(parts));
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

int FlowGraph::append(const FlowGraph& other, const std::vector<int>& after)
{
  const int base = static_cast<int>(ops_.size());
  for (int d : after)
    if (d < 0 || d >= base)
      throw UsageError("flow graph: appended ops wait for op " + std::to_string(d) + ", which is not an earlier op");
  ops_.reserve(ops_.size() + other.ops_.size());
  for (const auto& op : other.ops_) {
    Op copy = op;
    for (int& d : copy.deps)
      d += base;
    if (copy.deps.empty())
      copy.deps = after;
    ops_.push_back(std::move(copy));
  }
  return base;
}

std::size_t FlowGraph::transfer_count() const
{
  return static_cast<std::size_t>(
      std::count_if(ops_.begin(), ops_.end(), [](const Op& op) { return op.kind == Op::Kind::transfer; }));
}

RunResult run(const topology::Topology& topology, const FlowGraph& graph, Fidelity fidelity,
              const EngineOptions& options)
{
  switch (fidelity) {
  case Fidelity::analytical:
    return run_analytical(topology, graph);
  case Fidelity::flow:
    return run_flow(topology, graph, options.simgrid);
  case Fidelity::packet:
    return run_packet(topology, graph, options.packet);
  case Fidelity::hybrid:
    throw UsageError("hybrid fidelity corrects the collectives of a training step (spansim run); a flow graph runs "
                     "at analytical, flow or packet fidelity");
  }
  throw UsageError("unknown fidelity");
}

std::array<double, topology::kTierCount> tier_bytes(const topology::Topology& topology,
                                                    const std::vector<double>& link_bytes)
{
  std::array<double, topology::kTierCount> out{};
  for (std::size_t l = 0; l < topology.links().size() && 2 * l + 1 < link_bytes.size(); ++l)
    out[static_cast<std::size_t>(topology.links()[l].tier)] += link_bytes[2 * l] + link_bytes[2 * l + 1];
  return out;
}

BoundaryBytes boundary_bytes(const topology::Topology& topology, const std::vector<double>& link_bytes)
{
  using topology::Tier;
  const auto t = tier_bytes(topology, link_bytes);
  auto at      = [&](Tier tier) { return t[static_cast<std::size_t>(tier)]; };
  return {at(Tier::inter_building) + at(Tier::building_uplink), at(Tier::inter_region)};
}

} // namespace spansim::netsim
