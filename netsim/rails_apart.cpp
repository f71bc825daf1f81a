// ECMP with the rails apart. Under per-flow hashing no rail can stand for the others (each collides on its own), and
// simulating every rail together is 8 times the flows of one with events that rarely coincide. When every group
// that leaves a node stays on one rail (rail-optimized pods, TP filling the node, TP rank r on rail r), the rails
// meet only on the links they share (spines' uplinks, long links): each rail is simulated alone, with its own
// hashing, on the whole site with each shared link direction scaled to the rail's share of its bytes (of its flows
// while the rail's own are there, from a first run, when all-to-alls cross nodes), and the step is the slowest
// rail's. The shares are exact when the rails' flows on a link run together (max-min gives a
// link's flows equal rates, so a rail with k of its K flows gets k/K); they are not when the rails drift apart in
// time, and a step that waits at each op for its slowest rail (a different rail at different ops) is longer than
// its slowest rail alone. bench/README.md measures the error against the exact simulation.
#include "netsim/step_lowering.hpp"

#include "common/error.hpp"
#include "common/process.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <set>

namespace spansim::netsim::detail {

namespace {

/// @brief Why the rails of a step do not separate before lowering it ("" when they may).
std::string static_refusal(const topology::Topology& topology, const workload::StepGraph& graph,
                           const placement::Placement& placement)
{
  const int gpn = topology.node_gpus();
  if (!topology.rail_optimized())
    return "the pods are not rail-optimized";
  if (gpn < 2)
    return "a node has a single GPU";
  if (graph.job.parallelism.tp != gpn)
    return "TP (" + std::to_string(graph.job.parallelism.tp) + ") does not fill a node of " + std::to_string(gpn) +
           " GPUs";
  for (int r = 0; r < placement.ranks(); ++r)
    if (topology.locate(placement.gpu(r)).local != placement.coordinates(r).tp)
      return "TP rank " + std::to_string(placement.coordinates(r).tp) + " of rank " + std::to_string(r) +
             " is not on rail " + std::to_string(placement.coordinates(r).tp);
  // Every group that leaves a node stays on one rail (an expert group over TP x DP would not; the lowered transfers
  // are checked too, but all-to-alls timed in isolation are not among them).
  std::set<std::pair<std::size_t, std::uint32_t>> seen;
  for (std::size_t s = 0; s < graph.stages.size(); ++s)
    for (const auto& op : graph.stages[s].ops)
      if (op.kind == workload::OpKind::collective && op.group.size > 1 && seen.insert({s, op.group.key()}).second)
        for (const auto& g : placement.groups(static_cast<int>(s), op.group)) {
          const auto first = topology.locate(g.front());
          bool spans = false, one_rail = true;
          for (int gpu : g) {
            const auto at = topology.locate(gpu);
            spans         = spans || at.node != first.node;
            one_rail      = one_rail && at.local == first.local;
          }
          if (spans && !one_rail)
            return "a group of stage " + std::to_string(s) + " (GPUs " + std::to_string(g.front()) + ", ...) spans " +
                   "nodes and rails";
        }
  return {};
}

/// @brief Why the rails stay together, as results say it. @throws UsageError when `ecmp_mode` asked for them apart.
std::string refusal(bool asked, const std::string& why)
{
  if (asked)
    throw UsageError("multipath.ecmp_mode \"rails-apart\": " + why +
                     " (allowed: \"exact\", or \"auto\", which then runs exactly)");
  return why + ": every rail's flows run together";
}

/// @brief Whether an all-to-all of the step (an MoE dispatch or combine) has a group that spans nodes: there a rail's
/// share of a long link's bytes over the step is far from its share while its all-to-all runs (bench/README.md).
bool all_to_all_between_nodes(const topology::Topology& topology, const workload::StepGraph& graph,
                              const placement::Placement& placement)
{
  std::set<std::pair<std::size_t, std::uint32_t>> seen; // (stage, group key): the same groups
  for (std::size_t s = 0; s < graph.stages.size(); ++s)
    for (const auto& op : graph.stages[s].ops)
      if (op.kind == workload::OpKind::collective && op.collective == CollectiveOp::all_to_all && op.group.size > 1 &&
          seen.insert({s, op.group.key()}).second)
        for (const auto& g : placement.groups(static_cast<int>(s), op.group))
          for (int gpu : g)
            if (topology.locate(gpu).node != topology.locate(g.front()).node)
              return true;
  return false;
}

/// @brief A transfer of rail `rail`'s lowering that leaves its node off the rail ("" when none does).
std::string cross_rail_transfer(const topology::Topology& topology, const FlowGraph& graph, int rail)
{
  for (const auto& op : graph.ops()) {
    if (op.kind != Op::Kind::transfer || op.src == op.dst)
      continue;
    const auto a = topology.locate(op.src), b = topology.locate(op.dst);
    if (a.node != b.node && (a.local != rail || b.local != rail))
      return "GPUs " + std::to_string(op.src) + " (rail " + std::to_string(a.local) + ") and " +
             std::to_string(op.dst) + " (rail " + std::to_string(b.local) + ") exchange data between nodes";
  }
  return {};
}

/// @brief Per link direction, each rail's share of the bytes the rails put on it; 1 on NVLink (each rail's run has
/// the node-local groups) and where a rail puts nothing.
void set_link_factors(const topology::Topology& topology, std::vector<RailApart>& rails)
{
  const auto& links = topology.links();
  for (auto& rail : rails)
    rail.link_factor.assign(2 * links.size(), 1.0);
  for (std::size_t k = 0; k < 2 * links.size(); ++k) {
    if (links[k / 2].tier == topology::Tier::nvlink)
      continue;
    double total = 0;
    for (const auto& rail : rails)
      total += rail.link_bytes[k];
    for (auto& rail : rails)
      if (rail.link_bytes[k] > 0)
        rail.link_factor[k] = rail.link_bytes[k] / total;
  }
}

/// @brief A transfer's stay on a link direction the rails share, from a rail's timing run.
struct Span {
  std::uint32_t hop;     ///< 2 * link + (forward ? 0 : 1)
  std::uint32_t padding; ///< zero, so that the bytes sent back are all written
  double start, end;
};

/// @brief Replaces each rail's byte share of the link directions the rails share by its share of the flows there
/// while its own flows are there: every rail runs once (analytical engine, the byte shares), each transfer's stay on
/// each shared direction is taken from that run, and max-min's equal shares per flow give rail r, at each instant its
/// flows are on a direction, c_r / C of it (c_r its flows, C all rails'); the factor is that fraction averaged over
/// the time rail r's flows are there. Rails that run in step (the same program, the same ops at the same times)
/// then see the others' traffic of the same op, not of the whole step. Collectives timed in isolation are delays
/// in the graph: their bytes keep counting in the byte shares of directions no flow of the rail crosses.
void resolve_shares_in_time(const topology::Topology& topology, const workload::StepGraph& graph,
                            const placement::Placement& placement, const StepOptions& options,
                            std::vector<RailApart>& rails)
{
  const std::size_t hops = 2 * topology.links().size();
  std::vector<int> shared(hops, -1); // hop -> index among the shared directions
  int count = 0;
  for (std::size_t k = 0; k < hops; ++k) {
    if (topology.links()[k / 2].tier == topology::Tier::nvlink)
      continue;
    int users = 0;
    for (const auto& rail : rails)
      users += rail.link_bytes[k] > 0 ? 1 : 0;
    if (users > 1)
      shared[k] = count++;
  }
  if (count == 0)
    return;
  const auto out = process::parallel_map(rails.size(), options.rail_workers, [&](std::size_t r) {
    const auto lowered = lower_step(topology, graph, placement, options, static_cast<int>(r));
    const auto timed =
        run(topology.with_directions_scaled(rails[r].link_factor), lowered.graph, Fidelity::analytical, options.engine);
    std::string spans;
    const auto& ops = lowered.graph.ops();
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& op = ops[i];
      const auto& t  = timed.ops[i];
      if (op.kind != Op::Kind::transfer || op.bytes <= 0 || op.src == op.dst || !(t.end > t.start))
        continue;
      for (const auto& h : topology.route(op.src, op.dst, op.qp)) {
        const std::size_t k = 2 * static_cast<std::size_t>(h.link) + (h.forward ? 0 : 1);
        if (shared[k] < 0)
          continue;
        const Span span{static_cast<std::uint32_t>(k), 0, t.start, t.end};
        spans.append(reinterpret_cast<const char*>(&span), sizeof span);
      }
    }
    return spans;
  });
  struct Event {
    double at;
    int rail, delta;
  };
  std::vector<std::vector<Event>> events(static_cast<std::size_t>(count));
  for (std::size_t r = 0; r < rails.size(); ++r) {
    const auto& bytes = out[r];
    if (bytes.size() % sizeof(Span) != 0)
      throw SimulationError("a rail's timing process returned a truncated result");
    for (std::size_t at = 0; at < bytes.size(); at += sizeof(Span)) {
      Span span;
      std::memcpy(&span, bytes.data() + at, sizeof span);
      if (span.hop >= hops || shared[span.hop] < 0)
        throw SimulationError("a rail's timing process returned a link its rails do not share");
      auto& e = events[static_cast<std::size_t>(shared[span.hop])];
      e.push_back({span.start, static_cast<int>(r), 1});
      e.push_back({span.end, static_cast<int>(r), -1});
    }
  }
  std::vector<int> flows(rails.size());
  std::vector<double> share_time(rails.size()), present(rails.size());
  for (std::size_t k = 0; k < hops; ++k) {
    if (shared[k] < 0)
      continue;
    auto& e = events[static_cast<std::size_t>(shared[k])];
    std::sort(e.begin(), e.end(), [](const Event& a, const Event& b) {
      return a.at != b.at ? a.at < b.at : a.delta < b.delta; // ends before starts at the same instant
    });
    std::fill(flows.begin(), flows.end(), 0);
    std::fill(share_time.begin(), share_time.end(), 0.0);
    std::fill(present.begin(), present.end(), 0.0);
    int total = 0;
    for (std::size_t i = 0; i < e.size(); ++i) {
      if (i > 0 && total > 0 && e[i].at > e[i - 1].at) {
        const double dt = e[i].at - e[i - 1].at;
        for (std::size_t r = 0; r < rails.size(); ++r)
          if (flows[r] > 0) {
            share_time[r] += dt * flows[r] / total;
            present[r] += dt;
          }
      }
      flows[static_cast<std::size_t>(e[i].rail)] += e[i].delta;
      total += e[i].delta;
    }
    for (std::size_t r = 0; r < rails.size(); ++r)
      if (present[r] > 0)
        rails[r].link_factor[k] = share_time[r] / present[r];
    std::vector<Event>().swap(e);
  }
}

std::string encode(const RunResult& r)
{
  const std::string settings = r.settings.dump();
  const std::uint64_t length = settings.size();
  std::string out(sizeof(double) + sizeof length, '\0');
  std::memcpy(out.data(), &r.makespan, sizeof(double));
  std::memcpy(out.data() + sizeof(double), &length, sizeof length);
  out += settings;
  out.append(reinterpret_cast<const char*>(r.ops.data()), r.ops.size() * sizeof(OpTiming));
  return out;
}

constexpr std::size_t kHead = sizeof(double) + sizeof(std::uint64_t); ///< makespan, settings' length

/// @brief The length of an encoded run's settings, checked against the bytes there.
std::uint64_t settings_length(const std::string& bytes)
{
  std::uint64_t length = 0;
  if (bytes.size() >= kHead)
    std::memcpy(&length, bytes.data() + sizeof(double), sizeof length);
  if (bytes.size() < kHead || bytes.size() - kHead < length)
    throw SimulationError("a rail's simulation process returned a truncated result");
  return length;
}

/// @brief The settings of an encoded run (its op timings left unread).
nlohmann::json settings_of(const std::string& bytes)
{
  return nlohmann::json::parse(bytes.substr(kHead, settings_length(bytes)));
}

RunResult decode(const std::string& bytes, std::size_t ops)
{
  RunResult r;
  const std::uint64_t length = settings_length(bytes);
  constexpr std::size_t head = kHead;
  std::memcpy(&r.makespan, bytes.data(), sizeof(double));
  if (bytes.size() != head + length + ops * sizeof(OpTiming))
    throw SimulationError("a rail's simulation process returned a truncated result");
  r.settings = settings_of(bytes);
  r.ops.resize(ops);
  std::memcpy(r.ops.data(), bytes.data() + head + length, ops * sizeof(OpTiming));
  return r;
}

} // namespace

std::string rails_apart_decision(const topology::Topology& topology, const workload::StepGraph& graph,
                                 const placement::Placement& placement, const StepOptions& options)
{
  const auto& multipath = topology.spec().multipath;
  const bool asked      = multipath.ecmp_mode == topology::EcmpMode::rails_apart;
  auto refuse           = [&](const std::string& why) { return refusal(asked, why); };
  if (!multipath.ecmp)
    return "no ECMP";
  if (multipath.ecmp_mode == topology::EcmpMode::exact)
    return "ecmp_mode exact: every rail's flows run together";
  if (options.collapse_communication)
    return "the optimizer's collapsed scoring times each op alone";
  if (!options.rails_apart)
    return "several jobs share the network: every rail's flows run together";
  if (options.fidelity != Fidelity::analytical && options.fidelity != Fidelity::flow)
    return refuse("rails apart runs at analytical and flow fidelity only");
  if (!asked && graph.job.gpus <= topology::kExactEcmpGpus)
    return "ecmp_mode auto: " + std::to_string(graph.job.gpus) + " GPUs (up to " +
           std::to_string(topology::kExactEcmpGpus) + " run exactly)";
  if (auto why = static_refusal(topology, graph, placement); !why.empty())
    return refuse("the rails do not separate: " + why);
  if (!asked && graph.job.gpus <= topology::kExactEcmpAllToAllGpus &&
      all_to_all_between_nodes(topology, graph, placement))
    return "ecmp_mode auto: all-to-alls between nodes on " + std::to_string(graph.job.gpus) + " GPUs (up to " +
           std::to_string(topology::kExactEcmpAllToAllGpus) +
           " run exactly; above, the rails apart with time-resolved shares: -19% to +4.6% against every rail "
           "together on the cases measured, bench/README.md)";
  return {};
}

void prepare_rails_apart(const topology::Topology& topology, const workload::StepGraph& graph,
                         const placement::Placement& placement, const StepOptions& options, PreparedStep& prepared)
{
  if (!topology.spec().multipath.ecmp)
    return;
  auto exact = [&](const std::string& why) { prepared.ecmp = {{"mode", "exact"}, {"exact", true}, {"why", why}}; };
  if (auto why = rails_apart_decision(topology, graph, placement, options); !why.empty())
    return exact(why);
  const bool asked = topology.spec().multipath.ecmp_mode == topology::EcmpMode::rails_apart;
  auto refuse      = [&](const std::string& why) { exact(refusal(asked, why)); };
  const int rails  = topology.node_gpus();
  // Each rail lowered in a worker of its own (a rail of a 131K-GPU step is millions of transfers: the rails are not
  // kept side by side), which hands back the bytes its routes put on every link direction.
  const auto out = process::parallel_map(static_cast<std::size_t>(rails), options.rail_workers, [&](std::size_t r) {
    const auto lowered = lower_step(topology, graph, placement, options, static_cast<int>(r));
    if (auto why = cross_rail_transfer(topology, lowered.graph, static_cast<int>(r)); !why.empty())
      return "E" + why;
    auto bytes = link_bytes(topology, lowered.graph);
    for (std::size_t k = 0; k < lowered.isolated_link_bytes.size() && k < bytes.size(); ++k)
      bytes[k] += lowered.isolated_link_bytes[k];
    return "B" + std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size() * sizeof(double));
  });
  std::vector<RailApart> apart(static_cast<std::size_t>(rails));
  const std::size_t hops = 2 * topology.links().size();
  for (int r = 0; r < rails; ++r) {
    const auto& o = out[static_cast<std::size_t>(r)];
    if (!o.empty() && o[0] == 'E')
      return refuse("the rails do not separate: " + o.substr(1));
    if (o.size() != 1 + hops * sizeof(double))
      throw SimulationError("a rail's lowering process returned a truncated result");
    auto& bytes = apart[static_cast<std::size_t>(r)].link_bytes;
    bytes.resize(hops);
    std::memcpy(bytes.data(), o.data() + 1, hops * sizeof(double));
  }
  set_link_factors(topology, apart);
  const bool all_to_all = all_to_all_between_nodes(topology, graph, placement);
  const bool in_time    = all_to_all && options.time_resolved_shares;
  if (in_time)
    resolve_shares_in_time(topology, graph, placement, options, apart);
  prepared.apart = std::move(apart);
  prepared.ecmp  = {
       {"mode", "rails apart"},
       {"exact", false},
       {"rails", rails},
       {"shares", in_time ? "time-resolved" : "bytes"},
       {"how", in_time ? "each rail simulated alone with its own hashing, each link direction the rails share scaled to "
                         "the rail's share of the flows there while its own are there (from a first run of every rail); "
                         "the step is the slowest rail's"
                       : "each rail simulated alone with its own hashing, each link direction the rails share scaled to "
                         "the rail's share of its bytes; the step is the slowest rail's"},
       {"error", in_time      ? "all-to-alls between nodes, time-resolved shares: -19% to +4.6% against every rail "
                                "together on the cases measured (bench/README.md)"
                 : all_to_all ? "all-to-alls between nodes, byte shares: up to +51% against every rail together on the "
                                "cases measured (bench/README.md)"
                              : "within 0.25% of every rail together on the dense cases measured (bench/README.md)"}};
}

RunResult run_rails_apart(const topology::Topology& topology, PreparedStep& prepared, const workload::StepGraph& graph,
                          const placement::Placement& placement, const StepOptions& options)
{
  const auto& rails = prepared.apart;
  // Each rail lowered again in its worker (from `graph`, whose compute may have been lengthened since) and run.
  // At flow fidelity a rail past own_solver_above transfers runs on spansim's max-min engine, which computes SimGrid's
  // model under these settings; the run says so.
  auto run_rail = [&](std::size_t r, Fidelity fidelity) {
    const auto lowered = lower_step(topology, graph, placement, options, static_cast<int>(r));
    const auto scaled  = topology.with_directions_scaled(rails[r].link_factor);
    // Ranking a rail the own solver would run at flow fidelity gives that run: it is kept, not run again.
    if (fidelity == Fidelity::analytical && options.fidelity == Fidelity::flow &&
        own_solver_runs(scaled, lowered.graph, Fidelity::flow, options))
      fidelity = Fidelity::flow;
    return run_max_min(scaled, lowered.graph, fidelity, options);
  };
  std::vector<double> steps(rails.size(), 0);
  std::vector<std::string> runs(rails.size()); // each rail's run at options.fidelity, encoded ("": not run)
  auto run_at_fidelity = [&](const std::vector<std::size_t>& which) {
    auto out = process::parallel_map(which.size(), options.rail_workers,
                                     [&](std::size_t i) { return encode(run_rail(which[i], options.fidelity)); });
    for (std::size_t i = 0; i < which.size(); ++i) {
      if (out[i].size() < sizeof(double) + sizeof(std::uint64_t))
        throw SimulationError("a rail's simulation process returned a truncated result");
      std::memcpy(&steps[which[i]], out[i].data(), sizeof(double));
      runs[which[i]] = std::move(out[i]);
    }
  };
  std::vector<std::size_t> every(rails.size());
  std::iota(every.begin(), every.end(), std::size_t{0});
  // At flow fidelity on the analytical engine's model the rails are ranked by that engine (a fraction of SimGrid's
  // time) and only those near the slowest run through SimGrid: the others cannot give the step.
  bool ranked = options.fidelity == Fidelity::flow && !options.flow_every_rail &&
                options.engine.simgrid.analytical_model() && rails.size() > 1;
  if (ranked) {
    const auto out = process::parallel_map(rails.size(), options.rail_workers, [&](std::size_t r) {
      const auto result = run_rail(r, Fidelity::analytical);
      if (result.settings.contains("max_min_engine"))
        return "F" + encode(result); // the rail's run at flow fidelity
      return "A" + std::string(reinterpret_cast<const char*>(&result.makespan), sizeof result.makespan);
    });
    for (std::size_t r = 0; r < rails.size(); ++r) {
      const auto& o = out[r];
      if (!o.empty() && o[0] == 'F' && o.size() >= 1 + sizeof(double)) {
        runs[r] = o.substr(1);
        std::memcpy(&steps[r], runs[r].data(), sizeof(double));
      } else if (o.size() == 1 + sizeof(double) && o[0] == 'A') {
        std::memcpy(&steps[r], o.data() + 1, sizeof(double));
      } else {
        throw SimulationError("a rail's simulation process returned a truncated result");
      }
      ranked = ranked && std::isfinite(steps[r]);
    }
  }
  auto near_slowest = [&](double slowest) {
    std::vector<std::size_t> near;
    for (std::size_t r = 0; r < rails.size(); ++r)
      if (runs[r].empty() && steps[r] >= slowest * (1 - kFlowRailMargin))
        near.push_back(r);
    return near;
  };
  run_at_fidelity(ranked ? near_slowest(*std::max_element(steps.begin(), steps.end())) : every);
  if (ranked) {
    // A rail left out must stay below SimGrid's slowest by the margin (the engines agree to 1e-6 on the same
    // model); one that does not (looser precisions, say) runs through SimGrid too.
    double flow_slowest = 0;
    for (std::size_t r = 0; r < rails.size(); ++r)
      if (!runs[r].empty())
        flow_slowest = std::max(flow_slowest, steps[r]);
    if (const auto more = near_slowest(flow_slowest); !more.empty())
      run_at_fidelity(more);
  }
  std::vector<std::size_t> at_fidelity;
  int slowest = -1;
  for (std::size_t r = 0; r < rails.size(); ++r)
    if (!runs[r].empty()) {
      at_fidelity.push_back(r);
      if (slowest < 0 || steps[r] > steps[static_cast<std::size_t>(slowest)])
        slowest = static_cast<int>(r);
    }
  // The slowest rail lowered here too, the same way, for its results to be read back.
  prepared.slowest = slowest;
  prepared.lowered = lower_step(topology, graph, placement, options, slowest);
  RunResult result = decode(runs[static_cast<std::size_t>(slowest)], prepared.lowered.graph.ops().size());
  // Bytes: the slowest rail's on every link (read_back adds its isolated all-to-alls and node-local mirrors); the
  // others' off NVLink, where each rail's run repeats the node-local groups.
  result.link_bytes = rails[slowest].link_bytes;
  for (std::size_t k = 0; k < prepared.lowered.isolated_link_bytes.size() && k < result.link_bytes.size(); ++k)
    result.link_bytes[k] -= prepared.lowered.isolated_link_bytes[k];
  const auto& links = topology.links();
  for (std::size_t r = 0; r < rails.size(); ++r)
    if (static_cast<int>(r) != slowest)
      for (std::size_t l = 0; l < links.size(); ++l)
        if (links[l].tier != topology::Tier::nvlink)
          for (int d = 0; d < 2; ++d)
            result.link_bytes[2 * l + d] += rails[r].link_bytes[2 * l + d];
  if (options.fidelity == Fidelity::flow)
    prepared.ecmp["own_solver_above"] = options.own_solver_above;
  prepared.ecmp["slowest_rail"] = slowest;
  prepared.ecmp["rail_steps_s"] = steps;
  prepared.ecmp.erase("rail_engines");
  if (options.fidelity == Fidelity::flow) {
    // Per rail: the engine whose run gave its step.
    nlohmann::json engines = nlohmann::json::array();
    for (std::size_t r = 0; r < rails.size(); ++r) {
      const auto settings = runs[r].empty() ? nlohmann::json() : settings_of(runs[r]);
      engines.push_back(settings.contains("max_min_engine") ? settings["max_min_engine"]
                                                            : nlohmann::json("analytical (ranked below the slowest)"));
    }
    prepared.ecmp["rail_engines"] = std::move(engines);
  }
  prepared.ecmp.erase("flow_rails");
  prepared.ecmp.erase("flow");
  if (ranked) {
    prepared.ecmp["flow_rails"] = at_fidelity;
    char margin[32];
    std::snprintf(margin, sizeof margin, "%g%%", 100 * kFlowRailMargin);
    prepared.ecmp["flow"] = "the analytical engine (SimGrid's model with these settings) ran every rail; those "
                            "within " +
                            std::string(margin) +
                            " of the slowest (flow_rails) ran again at flow fidelity (SimGrid, or spansim's max-min "
                            "past own_solver_above transfers: rail_engines), the others' steps are the analytical "
                            "engine's";
  }
  return result;
}

} // namespace spansim::netsim::detail
