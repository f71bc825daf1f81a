// The analytical engine: waves of ops that become ready at the same instant share the network by max-min
// fairness (progressive filling on directed links); each flow then takes its route latency plus its bytes
// over its share. Cost: O(flows x hops x log) per wave, no events inside a wave.
#include "common/error.hpp"
#include "netsim/netsim.hpp"

#include <algorithm>
#include <limits>
#include <queue>

namespace spansim::netsim {

namespace {

/// @brief Max-min fair rates of flows over shared resources, by progressive filling.
std::vector<double> max_min_rates(const std::vector<std::vector<int>>& flow_resources,
                                  const std::vector<double>& capacity)
{
  const auto flows = flow_resources.size();
  std::vector<double> rate(flows, 0);
  std::vector<double> remaining(capacity);
  std::vector<int> unfixed(capacity.size(), 0);
  std::vector<std::vector<int>> users(capacity.size());
  for (std::size_t f = 0; f < flows; ++f)
    for (int r : flow_resources[f]) {
      unfixed[r]++;
      users[r].push_back(static_cast<int>(f));
    }
  using Entry = std::pair<double, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  for (std::size_t r = 0; r < capacity.size(); ++r)
    if (unfixed[r] > 0)
      heap.emplace(remaining[r] / unfixed[r], static_cast<int>(r));
  std::vector<bool> fixed(flows, false);
  while (!heap.empty()) {
    auto [share, r] = heap.top();
    heap.pop();
    // Shares only grow as flows are fixed elsewhere, so an entry that no longer matches is stale.
    if (unfixed[r] == 0 || share != remaining[r] / unfixed[r])
      continue;
    for (int f : users[r]) {
      if (fixed[f])
        continue;
      fixed[f] = true;
      rate[f]  = share;
      for (int other : flow_resources[f]) {
        remaining[other] = std::max(0.0, remaining[other] - share);
        if (--unfixed[other] > 0)
          heap.emplace(remaining[other] / unfixed[other], other);
      }
    }
  }
  return rate;
}

} // namespace

const char* to_string(Fidelity fidelity)
{
  switch (fidelity) {
    case Fidelity::analytical:
      return "analytical";
    case Fidelity::flow:
      return "flow";
    case Fidelity::packet:
      return "packet";
  }
  return "?";
}

Fidelity parse_fidelity(std::string_view name)
{
  for (auto f : {Fidelity::analytical, Fidelity::flow, Fidelity::packet})
    if (name == to_string(f))
      return f;
  throw UsageError("unknown fidelity \"" + std::string(name) + "\" (allowed: analytical, flow, packet)");
}

std::vector<double> link_bytes(const topology::Topology& topology, const FlowGraph& graph)
{
  std::vector<double> bytes(2 * topology.links().size(), 0);
  for (const auto& op : graph.ops())
    if (op.kind == Op::Kind::transfer && op.bytes > 0 && op.src != op.dst)
      for (const auto& h : topology.route(op.src, op.dst))
        bytes[2 * h.link + (h.forward ? 0 : 1)] += op.bytes;
  return bytes;
}

RunResult run_analytical(const topology::Topology& topology, const FlowGraph& graph)
{
  const auto& ops = graph.ops();
  const auto n    = ops.size();
  RunResult result;
  result.ops.resize(n);
  std::vector<int> remaining(n);
  std::vector<std::vector<int>> dependents(n);
  std::vector<double> ready_at(n, 0);
  using Ready = std::pair<double, int>;
  std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& op = ops[i];
    if (op.kind == Op::Kind::transfer && (op.src < 0 || op.dst < 0 || op.src >= topology.gpu_count() ||
                                          op.dst >= topology.gpu_count()))
      throw UsageError("flow graph: transfer between GPUs " + std::to_string(op.src) + " and " +
                       std::to_string(op.dst) + " outside the topology's " + std::to_string(topology.gpu_count()) +
                       " GPUs");
    remaining[i] = static_cast<int>(op.deps.size());
    for (int d : op.deps)
      dependents[d].push_back(static_cast<int>(i));
    if (remaining[i] == 0)
      ready.emplace(0.0, static_cast<int>(i));
  }
  const auto& links = topology.links();
  std::vector<double> capacity(2 * links.size());
  for (std::size_t l = 0; l < links.size(); ++l)
    capacity[2 * l] = capacity[2 * l + 1] = links[l].bandwidth;

  std::vector<int> wave;
  std::vector<int> transfers;
  std::vector<std::vector<int>> resources;
  std::vector<double> latency;
  while (!ready.empty()) {
    const double now = ready.top().first;
    wave.clear();
    while (!ready.empty() && ready.top().first == now) {
      wave.push_back(ready.top().second);
      ready.pop();
    }
    transfers.clear();
    resources.clear();
    latency.clear();
    for (int i : wave) {
      const auto& op        = ops[i];
      result.ops[i].start = now;
      if (op.kind == Op::Kind::transfer && op.bytes > 0 && op.src != op.dst) {
        auto route = topology.route(op.src, op.dst);
        std::vector<int> res;
        res.reserve(route.size());
        for (const auto& h : route)
          res.push_back(2 * h.link + (h.forward ? 0 : 1));
        transfers.push_back(i);
        resources.push_back(std::move(res));
        latency.push_back(topology.route_latency(route));
      } else {
        result.ops[i].end = now + (op.kind == Op::Kind::delay ? op.duration : 0);
      }
    }
    if (!transfers.empty()) {
      auto rates = max_min_rates(resources, capacity);
      for (std::size_t f = 0; f < transfers.size(); ++f)
        result.ops[transfers[f]].end = now + latency[f] + ops[transfers[f]].bytes / rates[f];
    }
    for (int i : wave) {
      result.makespan = std::max(result.makespan, result.ops[i].end);
      for (int d : dependents[i]) {
        ready_at[d] = std::max(ready_at[d], result.ops[i].end);
        if (--remaining[d] == 0)
          ready.emplace(ready_at[d], d);
      }
    }
  }
  result.settings   = {{"engine", "analytical"},
                       {"model", "max-min fair shares per wave of simultaneously ready ops, alpha-beta per flow"}};
  result.link_bytes = link_bytes(topology, graph);
  return result;
}

} // namespace spansim::netsim
