// The analytical engine: an event-driven fluid model without SimGrid. Every flow in its bytes phase shares the
// directed links with every other by max-min fairness (progressive filling). Rates change only at events (ops
// start, route latencies end, flows end), and then only for the flows an event can move: those at or above the
// lowest fill level it disturbs, connected to the links whose flows changed. Cost per event: O(those flows x
// hops x log, plus the lists of their links); routes are computed once per transfer.
#include "common/error.hpp"
#include "netsim/netsim.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <unordered_map>

namespace spansim::netsim {

namespace {

/// @brief Routes of the transfers that move bytes, in CSR form: the resources of op i are
/// resource[first[i] .. first[i + 1]). Resources are the directed links the graph uses, numbered in order of
/// first use, so that scratch space is sized by the graph rather than the topology. Computed once, for the rates
/// and link_bytes.
struct Routes {
  std::vector<int> first;
  std::vector<int> resource;
  std::vector<double> latency;
  std::vector<int> global;       ///< per resource: its directed link, 2 * link + (forward ? 0 : 1); -1: a window
  std::vector<double> bandwidth; ///< per resource, bytes/s
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
  std::vector<int> number(2 * topology.links().size(), -1);
  // A collective repeats its pairs (a ring's every step), so each (source, destination, QP) is routed once.
  struct Known {
    int first, count;
    double latency, round_trip;
  };
  std::unordered_map<std::uint64_t, Known> known;
  std::vector<int> known_resources;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const auto& op = ops[i];
    if (moves_bytes(op)) {
      const auto key = (static_cast<std::uint64_t>(op.src) << 40) ^ (static_cast<std::uint64_t>(op.dst) << 16) ^
                       static_cast<std::uint64_t>(op.qp);
      auto it = known.find(key);
      if (it == known.end()) {
        auto route = topology.route(op.src, op.dst, op.qp);
        Known k{static_cast<int>(known_resources.size()), static_cast<int>(route.size()), topology.route_latency(route),
                topology.round_trip(op.src, op.dst, op.qp)};
        for (const auto& h : route) {
          const int directed = 2 * h.link + (h.forward ? 0 : 1);
          if (number[directed] < 0) {
            number[directed] = static_cast<int>(r.global.size());
            r.global.push_back(directed);
            r.bandwidth.push_back(topology.hop_bandwidth(h.link, h.forward));
          }
          known_resources.push_back(number[directed]);
        }
        it = known.emplace(key, k).first;
      }
      const Known& k = it->second;
      r.resource.insert(r.resource.end(), known_resources.begin() + k.first,
                        known_resources.begin() + k.first + k.count);
      // A window caps the flow as a link of its own would, of capacity window / round trip.
      const double w           = topology.effective_window(op.window);
      const double window_rate = w > 0 && k.round_trip > 0 ? w / k.round_trip : std::numeric_limits<double>::infinity();
      const double cap         = std::min(window_rate, op.rate > 0 ? op.rate : std::numeric_limits<double>::infinity());
      if (std::isfinite(cap)) {
        r.resource.push_back(static_cast<int>(r.global.size()));
        r.global.push_back(-1);
        r.bandwidth.push_back(cap);
      }
      r.latency[i] = k.latency;
    }
    r.first[i + 1] = static_cast<int>(r.resource.size());
  }
  return r;
}

/// @brief Events closer than this fraction of the current time (and at least this many seconds, as SimGrid's
/// surf/precision) are taken as one.
constexpr double kTimePrecision = 1e-9;

/// @brief The flows in their bytes phase and their max-min fair rates. Rates change only at events (a flow
/// starts or ends). Progressive filling raises every unfixed flow's rate together and fixes a link's flows when
/// the link fills, so an event changes nothing below the lowest level at which it changes a link's filling:
/// an ended flow's rate (its links filled at or above it), or for a new flow the level at which its links now
/// fill, given the others' rates. Flows below that level keep their rates and are constants on their links; the
/// rest are re-solved, and of them only those connected to the changed links through each other: max-min
/// shares of separate components do not depend on each other. The bytes a flow has left are brought up to date
/// only when its rate changes, and its end is predicted anew.
class Fluid {
public:
  Fluid(const Routes& routes, std::size_t ops, bool incremental)
      : routes_(routes), incremental_(incremental), on_(routes.global.size()), remaining_(routes.global.size()),
        fixed_(routes.global.size(), 0), rate_sum_(routes.global.size(), 0), max_rate_(routes.global.size(), 0),
        below_max_(routes.global.size(), 0), unfixed_(routes.global.size()), position_(routes.global.size(), 0),
        resource_seen_(routes.global.size(), 0), slot_of_(ops, -1)
  {
  }

  /// @brief Starts the bytes phase of transfer `op` of `bytes` at `now`; its rate is set by the next reshare().
  void add(int op, double bytes, double now)
  {
    int s;
    if (free_.empty()) {
      s = static_cast<int>(op_.size());
      op_.push_back(op);
      left_.push_back(bytes);
      since_.push_back(now);
      rate_.push_back(0);
      share_.push_back(0);
      version_.push_back(0);
      unfixed_flow_.push_back(0);
      fresh_.push_back(1);
    } else {
      s = free_.back();
      free_.pop_back();
      op_[s]    = op;
      left_[s]  = bytes;
      since_[s] = now;
      rate_[s]  = 0;
      fresh_[s] = 1;
    }
    slot_of_[op] = s;
    added_.push_back(op);
    ++in_flight_;
    for (int k = routes_.first[op]; k < routes_.first[op + 1]; ++k) {
      on_[routes_.resource[k]].push_back(op);
      touch(routes_.resource[k]);
    }
  }

  /// @brief When the next flow ends (infinity if none will).
  double next_end()
  {
    while (!ends_.empty() && !current(ends_.front()))
      pop_end();
    return ends_.empty() ? std::numeric_limits<double>::infinity() : ends_.front().time;
  }

  /// @brief Ends the flows predicted to end by `horizon`; `ended` receives their ops, earliest first.
  void end_until(double horizon, std::vector<int>& ended)
  {
    ended.clear();
    while (!ends_.empty() && ends_.front().time <= horizon) {
      const End e = ends_.front();
      pop_end();
      if (!current(e))
        continue;
      const int s = slot_of_[e.op];
      level_      = std::min(level_, rate_[s]);
      for (int k = routes_.first[e.op]; k < routes_.first[e.op + 1]; ++k)
        rate_sum_[routes_.resource[k]] -= rate_[s];
      slot_of_[e.op] = -1;
      op_[s]         = -1;
      free_.push_back(s);
      --in_flight_;
      for (int k = routes_.first[e.op]; k < routes_.first[e.op + 1]; ++k)
        touch(routes_.resource[k]);
      ended.push_back(e.op);
    }
  }

  /// @brief Recomputes the rates of the flows sharing links, directly or through other flows, with the flows
  /// added or ended since the last call.
  void reshare(double now)
  {
    if (incremental_)
      lower_level_to_new_flows();
    // The margin keeps flows whose share equals the level up to rounding among those re-solved.
    threshold_ = incremental_ ? level_ * (1 - 1e-9) : 0;
    component();
    fill();
    // Each link reached gets its rate sum and maximum anew: the flows below the threshold plus the new shares.
    for (int r : seeds_) {
      rate_sum_[r] = fixed_[r];
      max_rate_[r] = below_max_[r];
    }
    for (int op : flows_)
      for (int k = routes_.first[op]; k < routes_.first[op + 1]; ++k) {
        const int r = routes_.resource[k];
        rate_sum_[r] += share_[slot_of_[op]];
        max_rate_[r] = std::max(max_rate_[r], share_[slot_of_[op]]);
      }
    for (int op : flows_) {
      const int s = slot_of_[op];
      fresh_[s]   = 0;
      if (share_[s] == rate_[s])
        continue;
      left_[s]  = std::max(0.0, left_[s] - rate_[s] * (now - since_[s]));
      since_[s] = now;
      rate_[s]  = share_[s];
      ++version_[s];
      if (rate_[s] > 0)
        push_end({now + left_[s] / rate_[s], op, version_[s]});
    }
    for (int r : seeds_) {
      resource_seen_[r] = 0;
      fixed_[r]         = 0;
    }
    seeds_.clear();
    added_.clear();
    level_ = std::numeric_limits<double>::infinity();
    // Predictions that a new rate made stale are dropped when the heap holds twice as many as flows in flight.
    if (ends_.size() > 2 * in_flight_ + 1024) {
      ends_.clear();
      for (std::size_t s = 0; s < op_.size(); ++s)
        if (op_[s] >= 0 && rate_[s] > 0)
          ends_.push_back({since_[s] + left_[s] / rate_[s], op_[s], version_[s]});
      std::make_heap(ends_.begin(), ends_.end(), later);
    }
  }

  std::size_t in_flight() const { return in_flight_; }

private:
  /// @brief A predicted end, valid while the flow's rate is the one it was predicted with.
  struct End {
    double time;
    int op;
    unsigned version;
  };
  static bool later(const End& a, const End& b) { return a.time > b.time || (a.time == b.time && a.op > b.op); }

  // The level at which each link of the new flows fills with them, the other flows at their rates: on one link,
  // water-filling over its flows' rates in increasing order.
  void lower_level_to_new_flows()
  {
    for (int op : added_)
      for (int k = routes_.first[op]; k < routes_.first[op + 1]; ++k) {
        const int r = routes_.resource[k];
        if (resource_seen_[r] == 2)
          continue;
        resource_seen_[r] = 2; // every link of a new flow is already a seed (seen == 1)
        rates_.clear();
        int fresh = 0;
        for_each_in_flight(r, [&](int, int s) {
          if (fresh_[s])
            ++fresh;
          else
            rates_.push_back(rate_[s]);
        });
        level_ = std::min(level_, fill_level(routes_.bandwidth[r], fresh));
      }
  }

  // The level t at which a link of `capacity` fills when `fresh` flows rise with t and the others (rates_)
  // rise with it up to their rates: sum of min(t, rate) + fresh t = capacity. Selection by halves, in linear
  // expected time: a link may carry thousands of flows, and each event that adds a flow to it asks.
  double fill_level(double capacity, int fresh)
  {
    double below      = 0; // rates known to be under the level
    std::size_t above = static_cast<std::size_t>(fresh);
    auto lo           = rates_.begin();
    auto hi           = rates_.end();
    while (lo != hi) {
      auto mid = lo + (hi - lo) / 2;
      std::nth_element(lo, mid, hi);
      const double pivot = *mid;
      double low_sum     = 0;
      for (auto it = lo; it != mid; ++it)
        low_sum += *it;
      if (below + low_sum + static_cast<double>(above + (hi - mid)) * pivot >= capacity) {
        above += static_cast<std::size_t>(hi - mid); // the level is at most the pivot
        hi = mid;
      } else {
        below += low_sum + pivot;
        lo = mid + 1;
      }
    }
    return std::max(0.0, capacity - below) / static_cast<double>(above);
  }

  // Breadth-first over links and flows from the links whose flows changed, through the flows at or above the
  // threshold: seeds_ ends up holding the links reached, flows_ the flows to re-solve, fixed_ per link the rates
  // of the flows below it. Ended flows leave the lists here, so that a link's list then holds exactly its flows
  // in flight.
  void component()
  {
    flows_.clear();
    for (int op : added_)
      include(op);
    for (std::size_t q = 0; q < seeds_.size(); ++q) {
      const int r = seeds_[q];
      // Every flow on the link is below the threshold or new (and included above): its list is not read.
      if (max_rate_[r] < threshold_) {
        fixed_[r]     = rate_sum_[r];
        below_max_[r] = max_rate_[r];
        continue;
      }
      below_max_[r] = 0;
      for_each_in_flight(r, [&](int op, int s) {
        if (unfixed_flow_[s])
          return;
        if (rate_[s] < threshold_) {
          fixed_[r] += rate_[s];
          below_max_[r] = std::max(below_max_[r], rate_[s]);
          return;
        }
        include(op);
      });
    }
  }

  // Calls visit(op, slot) for each flow in flight on link r, dropping the ended flows from the link's list.
  template <class Visit>
  void for_each_in_flight(int r, Visit visit)
  {
    auto& on         = on_[r];
    std::size_t kept = 0;
    for (int op : on) {
      const int s = slot_of_[op];
      if (s < 0)
        continue;
      on[kept++] = op;
      visit(op, s);
    }
    on.resize(kept);
  }

  void include(int op)
  {
    ++to_fix_;
    unfixed_flow_[slot_of_[op]] = 1;
    flows_.push_back(op);
    for (int k = routes_.first[op]; k < routes_.first[op + 1]; ++k)
      touch(routes_.resource[k]);
  }

  // Progressive filling of the component into share_: the link with the smallest fair share fixes its flows at
  // it, which leaves the others more, until every flow is fixed.
  void fill()
  {
    for (int r : seeds_) {
      remaining_[r] = std::max(0.0, routes_.bandwidth[r] - fixed_[r]);
      unfixed_[r]   = 0;
    }
    for (int op : flows_)
      for (int k = routes_.first[op]; k < routes_.first[op + 1]; ++k)
        ++unfixed_[routes_.resource[k]];
    // Each link's flows being re-solved, in CSR form: a link's list also holds the flows kept below the level,
    // thousands of them on a long link.
    member_first_.assign(seeds_.size() + 1, 0);
    for (std::size_t i = 0; i < seeds_.size(); ++i) {
      position_[seeds_[i]] = static_cast<int>(i);
      member_first_[i + 1] = member_first_[i] + unfixed_[seeds_[i]];
    }
    members_.resize(static_cast<std::size_t>(member_first_.back()));
    member_fill_.assign(member_first_.begin(), member_first_.end() - 1);
    for (int op : flows_)
      for (int k = routes_.first[op]; k < routes_.first[op + 1]; ++k)
        members_[member_fill_[position_[routes_.resource[k]]]++] = op;
    // A flow alone on every link it uses gets the smallest of what they have left, which is the share the
    // filling would fix it at; it is fixed here and its links stay out of the heap (most NVLink flows of a
    // collective are alone, so the heap shrinks to the links that are shared).
    for (int op : flows_) {
      bool alone   = true;
      double share = std::numeric_limits<double>::infinity();
      for (int k = routes_.first[op]; alone && k < routes_.first[op + 1]; ++k) {
        alone = unfixed_[routes_.resource[k]] == 1;
        share = std::min(share, remaining_[routes_.resource[k]]);
      }
      if (alone)
        fix(op, share);
    }
    if (to_fix_ == 0)
      return;
    heap_.clear();
    for (int r : seeds_)
      if (unfixed_[r] > 0)
        heap_.emplace_back(remaining_[r] / unfixed_[r], r);
    std::make_heap(heap_.begin(), heap_.end(), std::greater<>());
    // Links left in the heap once every flow is fixed have nothing to give.
    while (!heap_.empty() && to_fix_ > 0) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
      auto [share, r] = heap_.back();
      heap_.pop_back();
      if (unfixed_[r] == 0)
        continue;
      // A link's share only grows as flows are fixed elsewhere (each at a share no larger than its own), so
      // its one entry is a lower bound: when it comes up and no longer matches, it goes back with the share
      // it has now. A link gets a new entry when it comes up, not each time one of its flows is fixed.
      const double current = remaining_[r] / unfixed_[r];
      if (current != share) {
        heap_.emplace_back(current, r);
        std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
        continue;
      }
      const int p = position_[r];
      for (int m = member_first_[p]; m < member_first_[p + 1]; ++m)
        if (unfixed_flow_[slot_of_[members_[m]]])
          fix(members_[m], share);
    }
  }

  void fix(int op, double share)
  {
    const int s      = slot_of_[op];
    unfixed_flow_[s] = 0;
    share_[s]        = share;
    --to_fix_;
    for (int k = routes_.first[op]; k < routes_.first[op + 1]; ++k) {
      const int r   = routes_.resource[k];
      remaining_[r] = std::max(0.0, remaining_[r] - share);
      --unfixed_[r];
    }
  }

  bool current(const End& e) const { return slot_of_[e.op] >= 0 && version_[slot_of_[e.op]] == e.version; }
  void push_end(End e)
  {
    ends_.push_back(e);
    std::push_heap(ends_.begin(), ends_.end(), later);
  }
  void pop_end()
  {
    std::pop_heap(ends_.begin(), ends_.end(), later);
    ends_.pop_back();
  }
  void touch(int resource)
  {
    if (!resource_seen_[resource]) {
      resource_seen_[resource] = 1;
      seeds_.push_back(resource);
    }
  }

  const Routes& routes_;
  bool incremental_;
  std::vector<std::vector<int>> on_; ///< per resource: ops in flight on it (and ended ones not yet dropped)
  std::vector<double> remaining_;    ///< per resource, while filling: capacity not yet given to fixed flows
  std::vector<double> fixed_;        ///< per resource reached: the rates of its flows below the threshold
  std::vector<double> rate_sum_;     ///< per resource: the rates of its flows in flight
  std::vector<double> max_rate_;     ///< per resource: at least the largest rate of its flows in flight
  std::vector<double> below_max_;    ///< per resource reached: the largest rate below the threshold
  std::vector<int> unfixed_;         ///< per resource, while filling: its flows not yet fixed
  std::vector<int> position_;        ///< per resource reached: its index in seeds_
  std::vector<int> member_first_, member_fill_, members_; ///< per resource reached: its flows being re-solved
  std::vector<char> resource_seen_; ///< 1: a seed or reached; 2: its fill level for new flows taken
  std::vector<int> seeds_;          ///< resources whose flows changed, then the component reached from them
  std::vector<int> slot_of_;        ///< per op: its slot while in flight, else -1
  // Per slot: the op (-1 if free), bytes left at `since_`, rate since then, the share just computed, version
  // of its predicted end, whether it is in the component and not yet fixed.
  std::vector<int> op_;
  std::vector<double> left_, since_, rate_, share_;
  std::vector<unsigned> version_;
  std::vector<char> unfixed_flow_;
  std::vector<char> fresh_; ///< per slot: added since the last reshare (no rate yet)
  std::vector<int> added_;  ///< ops added since the last reshare
  /// Lowest fill level the changes since the last reshare disturb, and the threshold derived from it.
  double level_       = std::numeric_limits<double>::infinity();
  double threshold_   = 0;
  std::size_t to_fix_ = 0;    ///< flows included and not yet fixed
  std::vector<double> rates_; ///< scratch
  std::vector<int> free_;
  std::vector<int> flows_;
  std::vector<std::pair<double, int>> heap_; ///< (fair share, resource)
  std::vector<End> ends_;
  std::size_t in_flight_ = 0;
};

} // namespace

std::vector<double> link_bytes(const topology::Topology& topology, const FlowGraph& graph)
{
  std::vector<double> bytes(2 * topology.links().size(), 0);
  for (const auto& op : graph.ops())
    if (op.kind == Op::Kind::transfer && op.bytes > 0 && op.src != op.dst)
      for (const auto& h : topology.route(op.src, op.dst, op.qp))
        bytes[2 * h.link + (h.forward ? 0 : 1)] += op.bytes;
  return bytes;
}

RunResult run_analytical(const topology::Topology& topology, const FlowGraph& graph, const AnalyticalSettings& settings)
{
  const auto& ops = graph.ops();
  const auto n    = ops.size();
  RunResult result;
  result.ops.resize(n);
  std::vector<int> remaining(n);
  std::vector<int> dependents_first(n + 1, 0); // CSR, as in Routes
  std::vector<double> ready_at(n, 0);
  using Timed     = std::pair<double, int>;
  using TimeQueue = std::priority_queue<Timed, std::vector<Timed>, std::greater<>>;
  TimeQueue ready;
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
  Fluid fluid(routes, n, settings.incremental);

  auto end_op = [&](int i, double end) {
    result.ops[i].end = end;
    result.makespan   = std::max(result.makespan, end);
    for (int k = dependents_first[i]; k < dependents_first[i + 1]; ++k) {
      const int d = dependents[k];
      ready_at[d] = std::max(ready_at[d], end);
      if (--remaining[d] == 0)
        ready.emplace(ready_at[d], d);
    }
  };

  // As in SimGrid's CM02 model, a flow waits out its route latency first and then shares the links with every
  // flow in its bytes phase until its last byte.
  TimeQueue latency_over;
  std::vector<int> ended;
  constexpr double inf = std::numeric_limits<double>::infinity();
  for (;;) {
    const double now = std::min({ready.empty() ? inf : ready.top().first,
                                 latency_over.empty() ? inf : latency_over.top().first, fluid.next_end()});
    if (now == inf)
      break;
    // Events this close together are one: flows that end within rounding of each other end together.
    const double horizon = now + kTimePrecision * std::max(now, 1.0);
    fluid.end_until(horizon, ended);
    for (int i : ended)
      end_op(i, now);
    while (!ready.empty() && ready.top().first <= horizon) {
      const auto [at, i] = ready.top();
      ready.pop();
      const auto& op      = ops[i];
      result.ops[i].start = at;
      if (moves_bytes(op))
        latency_over.emplace(at + routes.latency[i], i);
      else
        end_op(i, at + (op.kind == Op::Kind::delay ? op.duration : 0));
    }
    while (!latency_over.empty() && latency_over.top().first <= horizon) {
      const auto& moving = ops[latency_over.top().second];
      fluid.add(latency_over.top().second, moving.bytes * moving.stretch, now);
      latency_over.pop();
    }
    fluid.reshare(now);
  }
  if (fluid.in_flight() > 0)
    throw SimulationError("analytical engine: " + std::to_string(fluid.in_flight()) +
                          " flows can never end (a link of their route has no bandwidth)");
  result.settings = {{"engine", "analytical"},
                     {"model", "max-min fair shares among all flows in flight, recomputed per event on the links "
                               "that changed; route latency before the bytes, as CM02"}};
  // The same sums, in the same order, as link_bytes(): the routes are already known.
  result.link_bytes.assign(2 * topology.links().size(), 0);
  for (std::size_t i = 0; i < n; ++i)
    for (int k = routes.first[i]; k < routes.first[i + 1]; ++k)
      if (routes.global[routes.resource[k]] >= 0)
        result.link_bytes[routes.global[routes.resource[k]]] += ops[i].bytes;
  return result;
}

} // namespace spansim::netsim
