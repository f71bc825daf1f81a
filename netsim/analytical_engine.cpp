// The analytical engine: waves of ops that become ready at the same instant share the network by max-min
// fairness (progressive filling on directed links); each flow then takes its route latency plus its bytes
// over its share. Cost: O(flows x hops x log) per wave (only the links a wave uses are touched), no events
// inside a wave; routes are computed once per transfer.
#include "common/error.hpp"
#include "netsim/netsim.hpp"

#include <algorithm>
#include <limits>
#include <queue>

namespace spansim::netsim {

namespace {

/// @brief Routes of the transfers that move bytes, as directed resources (2 * link + backward), in CSR form:
/// the resources of op i are resource[first[i] .. first[i + 1]). Computed once, for the rates and link_bytes.
struct Routes {
  std::vector<int> first;
  std::vector<int> resource;
  std::vector<double> latency;
};

bool moves_bytes(const Op& op)
{
  return op.kind == Op::Kind::transfer && op.bytes > 0 && op.src != op.dst;
}

Routes routes_of(const topology::Topology& topology, const std::vector<Op>& ops)
{
  Routes r;
  r.first.assign(ops.size() + 1, 0);
  r.latency.assign(ops.size(), 0);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (moves_bytes(ops[i])) {
      auto route = topology.route(ops[i].src, ops[i].dst);
      for (const auto& h : route)
        r.resource.push_back(2 * h.link + (h.forward ? 0 : 1));
      r.latency[i] = topology.route_latency(route);
    }
    r.first[i + 1] = static_cast<int>(r.resource.size());
  }
  return r;
}

/// @brief Max-min fair rates by progressive filling, with scratch space reused across waves. Only the
/// resources a wave uses are touched, so a wave costs O(its flows x hops x log), not O(links).
class MaxMin {
public:
  MaxMin(const topology::Topology& topology, const Routes& routes)
      : links_(topology.links()), routes_(routes), local_(2 * links_.size(), -1)
  {
  }

  /// @brief Rates of the transfer ops `flows`, in that order.
  const std::vector<double>& rates(const std::vector<int>& flows)
  {
    // Local numbering of the wave's resources, in order of first use; users in flow order.
    used_.clear();
    count_.clear();
    for (int op : flows)
      for (int k = routes_.first[op]; k < routes_.first[op + 1]; ++k) {
        int r = routes_.resource[k];
        if (local_[r] < 0) {
          local_[r] = static_cast<int>(used_.size());
          used_.push_back(r);
          count_.push_back(0);
        }
        ++count_[local_[r]];
      }
    const auto m = used_.size();
    users_first_.assign(m + 1, 0);
    for (std::size_t l = 0; l < m; ++l)
      users_first_[l + 1] = users_first_[l] + count_[l];
    users_.resize(users_first_[m]);
    fill_.assign(users_first_.begin(), users_first_.end() - 1);
    for (std::size_t f = 0; f < flows.size(); ++f)
      for (int k = routes_.first[flows[f]]; k < routes_.first[flows[f] + 1]; ++k)
        users_[fill_[local_[routes_.resource[k]]]++] = static_cast<int>(f);
    remaining_.resize(m);
    for (std::size_t l = 0; l < m; ++l)
      remaining_[l] = links_[used_[l] / 2].bandwidth;
    unfixed_ = count_;
    rate_.assign(flows.size(), 0);
    fixed_.assign(flows.size(), 0);
    touched_.assign(m, 0);

    // A flow alone on every link it uses gets the smallest of their capacities, which is the share the
    // filling below would fix it at; it is fixed here and its links stay out of the heap (most NVLink
    // flows of a collective are alone, so the heap shrinks to the links that are shared).
    for (std::size_t f = 0; f < flows.size(); ++f) {
      bool alone   = true;
      double share = std::numeric_limits<double>::infinity();
      for (int k = routes_.first[flows[f]]; alone && k < routes_.first[flows[f] + 1]; ++k) {
        const int l = local_[routes_.resource[k]];
        alone       = count_[l] == 1;
        share       = std::min(share, remaining_[l]);
      }
      if (!alone)
        continue;
      fixed_[f] = 1;
      rate_[f]  = share;
      for (int k = routes_.first[flows[f]]; k < routes_.first[flows[f] + 1]; ++k)
        unfixed_[local_[routes_.resource[k]]] = 0;
    }

    // Entries carry the global resource id, so that ties between equal shares break as they always have.
    heap_.clear();
    for (std::size_t l = 0; l < m; ++l)
      if (unfixed_[l] > 0)
        heap_.emplace_back(remaining_[l] / unfixed_[l], used_[l]);
    std::make_heap(heap_.begin(), heap_.end(), std::greater<>());
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
      auto [share, r] = heap_.back();
      heap_.pop_back();
      const int l = local_[r];
      // Shares only grow as flows are fixed elsewhere, so an entry that no longer matches is stale.
      if (unfixed_[l] == 0 || share != remaining_[l] / unfixed_[l])
        continue;
      for (int u = users_first_[l]; u < users_first_[l + 1]; ++u) {
        const int f = users_[u];
        if (fixed_[f])
          continue;
        fixed_[f] = 1;
        rate_[f]  = share;
        for (int k = routes_.first[flows[f]]; k < routes_.first[flows[f] + 1]; ++k) {
          const int other   = local_[routes_.resource[k]];
          remaining_[other] = std::max(0.0, remaining_[other] - share);
          --unfixed_[other];
          if (!touched_[other]) {
            touched_[other] = 1;
            touched_list_.push_back(other);
          }
        }
      }
      // One entry per resource whose share changed, with its final value: the entries a push per change
      // would add in between are stale before the next pop anyway.
      for (int other : touched_list_) {
        touched_[other] = 0;
        if (unfixed_[other] > 0) {
          heap_.emplace_back(remaining_[other] / unfixed_[other], used_[other]);
          std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
        }
      }
      touched_list_.clear();
    }
    for (int r : used_)
      local_[r] = -1;
    return rate_;
  }

private:
  const std::vector<topology::Link>& links_;
  const Routes& routes_;
  std::vector<int> local_; ///< per global resource: its index in this wave, or -1
  std::vector<int> used_;  ///< per local resource: the global one
  std::vector<int> count_, unfixed_, users_first_, users_, fill_;
  std::vector<double> remaining_, rate_;
  std::vector<char> fixed_, touched_;
  std::vector<int> touched_list_;
  std::vector<std::pair<double, int>> heap_;
};

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
  std::vector<int> dependents_first(n + 1, 0); // CSR, as in Routes
  std::vector<double> ready_at(n, 0);
  using Ready = std::pair<double, int>;
  std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& op = ops[i];
    if (op.kind == Op::Kind::transfer &&
        (op.src < 0 || op.dst < 0 || op.src >= topology.gpu_count() || op.dst >= topology.gpu_count()))
      throw UsageError("flow graph: transfer between GPUs " + std::to_string(op.src) + " and " +
                       std::to_string(op.dst) + " outside the topology's " + std::to_string(topology.gpu_count()) +
                       " GPUs");
    remaining[i] = static_cast<int>(op.deps.size());
    for (int d : op.deps)
      ++dependents_first[d + 1];
    if (remaining[i] == 0)
      ready.emplace(0.0, static_cast<int>(i));
  }
  for (std::size_t i = 0; i < n; ++i)
    dependents_first[i + 1] += dependents_first[i];
  std::vector<int> dependents(dependents_first[n]);
  {
    std::vector<int> fill(dependents_first.begin(), dependents_first.end() - 1);
    for (std::size_t i = 0; i < n; ++i)
      for (int d : ops[i].deps)
        dependents[fill[d]++] = static_cast<int>(i);
  }
  const Routes routes = routes_of(topology, ops);
  MaxMin max_min(topology, routes);

  std::vector<int> wave;
  std::vector<int> transfers;
  while (!ready.empty()) {
    const double now = ready.top().first;
    wave.clear();
    while (!ready.empty() && ready.top().first == now) {
      wave.push_back(ready.top().second);
      ready.pop();
    }
    transfers.clear();
    for (int i : wave) {
      const auto& op      = ops[i];
      result.ops[i].start = now;
      if (moves_bytes(op))
        transfers.push_back(i);
      else
        result.ops[i].end = now + (op.kind == Op::Kind::delay ? op.duration : 0);
    }
    if (!transfers.empty()) {
      const auto& rates = max_min.rates(transfers);
      for (std::size_t f = 0; f < transfers.size(); ++f)
        result.ops[transfers[f]].end = now + routes.latency[transfers[f]] + ops[transfers[f]].bytes / rates[f];
    }
    for (int i : wave) {
      result.makespan = std::max(result.makespan, result.ops[i].end);
      for (int k = dependents_first[i]; k < dependents_first[i + 1]; ++k) {
        const int d = dependents[k];
        ready_at[d] = std::max(ready_at[d], result.ops[i].end);
        if (--remaining[d] == 0)
          ready.emplace(ready_at[d], d);
      }
    }
  }
  result.settings = {{"engine", "analytical"},
                     {"model", "max-min fair shares per wave of simultaneously ready ops, alpha-beta per flow"}};
  // The same sums, in the same order, as link_bytes(): the routes are already known.
  result.link_bytes.assign(2 * topology.links().size(), 0);
  for (std::size_t i = 0; i < n; ++i)
    for (int k = routes.first[i]; k < routes.first[i + 1]; ++k)
      result.link_bytes[routes.resource[k]] += ops[i].bytes;
  return result;
}

} // namespace spansim::netsim
