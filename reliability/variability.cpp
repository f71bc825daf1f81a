// Sampled steps: the simulated step's op timeline, replayed with slowdown factors.
//
// One simulation gives every op's duration in context (network contention included). Replaying the stage
// programs' dependency graph with those durations reproduces the step exactly; replaying it with each op's
// duration times a factor gives a sampled step, at a few milliseconds a sample instead of a simulation. The
// communication durations stay those of the simulated step: variability changes when ops start, and only
// second-order how they share links.
//
// A stage program stands for all its ranks. Ranks that meet at every op boundary (the TP and CP groups, and EP
// groups across them) are in lockstep: their op takes as long as the slowest of them, so the representative's op
// gets the largest of g draws, sampled in one draw from the extreme-value distribution. Data-parallel replicas
// meet only at the end of the step (gradient reduction): each sampled replay is one replica, and the step waits
// for the slowest of R, sampled from the normal fitted to the replica's step times.
#include "reliability/reliability.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace spansim::reliability {

using workload::OpKind;

namespace {

bool is_p2p(OpKind k)
{
  return k == OpKind::send || k == OpKind::recv;
}

// The step's ops as one dependency graph; a send and its receive are one node (one transfer).
struct Dag {
  struct Pred {
    int node;
    bool peer_side; ///< a dependency of the receive of a merged transfer (its lanes are the peer's)
  };
  std::vector<std::vector<int>> node_of; ///< [stage][op]
  std::vector<int> stage, op;            ///< of each node (a transfer: its send)
  std::vector<int> peer_stage, peer_op;  ///< a transfer's receive; -1 otherwise
  std::vector<double> duration;
  std::vector<int> first_pred;
  std::vector<Pred> preds;
  std::vector<int> order;
  std::size_t nodes() const { return stage.size(); }
};

Dag build_dag(const workload::StepGraph& graph, const netsim::StepResult& step)
{
  Dag d;
  const auto& stages = graph.stages;
  if (step.ops.size() != stages.size())
    throw SimulationError("the step's op timings do not match its graph");
  d.node_of.resize(stages.size());
  std::map<std::tuple<int, int, std::int64_t>, int> sends; // (from, to, tag) -> node
  for (std::size_t s = 0; s < stages.size(); ++s) {
    d.node_of[s].assign(stages[s].ops.size(), -1);
    for (std::size_t i = 0; i < stages[s].ops.size(); ++i) {
      const auto& op = stages[s].ops[i];
      if (op.kind == OpKind::recv)
        continue;
      const auto& t   = step.ops[s][i];
      d.node_of[s][i] = static_cast<int>(d.stage.size());
      d.stage.push_back(static_cast<int>(s));
      d.op.push_back(static_cast<int>(i));
      d.peer_stage.push_back(-1);
      d.peer_op.push_back(-1);
      d.duration.push_back(std::max(0.0, op.kind == OpKind::send ? t.end - t.active : t.end - t.start));
      if (op.kind == OpKind::send)
        sends[{static_cast<int>(s), op.peer_stage, op.tag}] = d.node_of[s][i];
    }
  }
  for (std::size_t s = 0; s < stages.size(); ++s)
    for (std::size_t i = 0; i < stages[s].ops.size(); ++i) {
      const auto& op = stages[s].ops[i];
      if (op.kind != OpKind::recv)
        continue;
      auto it = sends.find({op.peer_stage, static_cast<int>(s), op.tag});
      if (it == sends.end())
        throw SimulationError("a receive of stage " + std::to_string(s) + " has no send");
      d.node_of[s][i]          = it->second;
      d.peer_stage[it->second] = static_cast<int>(s);
      d.peer_op[it->second]    = static_cast<int>(i);
    }
  // Dependencies: an op's deps and the previous op of its stream; a transfer waits for both sides.
  const auto stream = workload::stream_predecessors(graph);
  std::vector<std::vector<Dag::Pred>> preds(d.nodes());
  auto add = [&](int node, int s, int i, bool peer_side) {
    const auto& op = stages[s].ops[i];
    for (int dep : op.deps)
      preds[node].push_back({d.node_of[s][dep], peer_side});
    if (stream[s][i] >= 0)
      preds[node].push_back({d.node_of[s][stream[s][i]], peer_side});
  };
  for (std::size_t n = 0; n < d.nodes(); ++n) {
    add(static_cast<int>(n), d.stage[n], d.op[n], false);
    if (d.peer_stage[n] >= 0)
      add(static_cast<int>(n), d.peer_stage[n], d.peer_op[n], true);
  }
  d.first_pred.assign(d.nodes() + 1, 0);
  for (std::size_t n = 0; n < d.nodes(); ++n)
    d.first_pred[n + 1] = d.first_pred[n] + static_cast<int>(preds[n].size());
  for (auto& p : preds)
    d.preds.insert(d.preds.end(), p.begin(), p.end());
  // Kahn's order.
  std::vector<int> missing(d.nodes());
  std::vector<std::vector<int>> succ(d.nodes());
  for (std::size_t n = 0; n < d.nodes(); ++n)
    for (int k = d.first_pred[n]; k < d.first_pred[n + 1]; ++k) {
      ++missing[n];
      succ[d.preds[k].node].push_back(static_cast<int>(n));
    }
  for (std::size_t n = 0; n < d.nodes(); ++n)
    if (missing[n] == 0)
      d.order.push_back(static_cast<int>(n));
  for (std::size_t k = 0; k < d.order.size(); ++k)
    for (int m : succ[d.order[k]])
      if (--missing[m] == 0)
        d.order.push_back(m);
  if (d.order.size() != d.nodes())
    throw SimulationError("the step's programs have a dependency cycle");
  return d;
}

int gcd(int a, int b)
{
  return b == 0 ? a : gcd(b, a % b);
}

// Persistent slowness: each GPU slow with the given probability, in GPU order, from its own stream of the seed.
std::vector<double> gpu_factors(const placement::Placement& placement, const VariabilitySpec& spec)
{
  int max_gpu = 0;
  for (int r = 0; r < placement.ranks(); ++r)
    max_gpu = std::max(max_gpu, placement.gpu(r));
  std::vector<double> f(static_cast<std::size_t>(max_gpu) + 1, 1.0);
  if (spec.slow_fraction <= 0 || spec.slowdown <= 1)
    return f;
  Random random(spec.seed ^ 0x5105u);
  for (auto& x : f)
    x = random.uniform() < spec.slow_fraction ? spec.slowdown : 1.0;
  return f;
}

double quantile_of_sorted(const std::vector<double>& v, double q)
{
  if (v.empty())
    return 0;
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto i     = static_cast<std::size_t>(pos);
  if (i + 1 >= v.size())
    return v.back();
  return v[i] + (pos - static_cast<double>(i)) * (v[i + 1] - v[i]);
}

void summarise(SampledSteps& out)
{
  auto sorted = out.step_times;
  std::sort(sorted.begin(), sorted.end());
  out.mean       = sorted.empty() ? 0 : std::accumulate(sorted.begin(), sorted.end(), 0.0) / sorted.size();
  out.p50        = quantile_of_sorted(sorted, 0.5);
  out.p90        = quantile_of_sorted(sorted, 0.9);
  out.p99        = quantile_of_sorted(sorted, 0.99);
  out.lost_share = out.deterministic > 0 ? out.mean / out.deterministic - 1 : 0;
}

int lockstep_size(const workload::JobSpec& job)
{
  const auto& p = job.parallelism;
  return p.tp * p.cp * (p.ep > 1 ? p.ep / gcd(p.ep, p.cp) : 1);
}

} // namespace

double replay_deterministic(const workload::StepGraph& graph, const netsim::StepResult& step)
{
  const Dag d = build_dag(graph, step);
  std::vector<double> end(d.nodes(), 0);
  double last = 0;
  for (int n : d.order) {
    double start = 0;
    for (int k = d.first_pred[n]; k < d.first_pred[n + 1]; ++k)
      start = std::max(start, end[d.preds[k].node]);
    end[n] = start + d.duration[n];
    last   = std::max(last, end[n]);
  }
  return last;
}

SampledSteps sample_steps(const workload::StepGraph& graph, const netsim::StepResult& step,
                          const placement::Placement& placement, const VariabilitySpec& spec,
                          const SampleOptions& options)
{
  const Dag d = build_dag(graph, step);
  SampledSteps out;
  out.deterministic  = step.step_time;
  const auto& stages = graph.stages;
  const int pp       = static_cast<int>(stages.size());
  out.lockstep_group = lockstep_size(graph.job);
  const int ranks    = placement.ranks() / std::max(1, pp);
  out.replicas       = std::max(1, ranks / out.lockstep_group);
  const auto gpu_f   = gpu_factors(placement, spec);
  out.stage_factor.assign(pp, 1.0);
  for (int s = 0; s < pp; ++s)
    for (int g : placement.stage_gpus(s))
      out.stage_factor[s] = std::max(out.stage_factor[s], gpu_f[g]);
  out.attribution.stage_compute.assign(pp, 0.0);

  Random random(spec.seed);
  std::vector<double> end(d.nodes()), added(d.nodes());
  std::vector<int> via(d.nodes());
  std::vector<double> replica_times;
  const double lockstep = out.lockstep_group;
  for (int k = 0; k < options.steps; ++k) {
    if (options.progress && k % 50 == 0)
      options.progress("sampling steps", static_cast<std::size_t>(k), static_cast<std::size_t>(options.steps));
    double last   = 0;
    int last_node = -1;
    for (int n : d.order) {
      double start = 0;
      int from     = -1;
      for (int p = d.first_pred[n]; p < d.first_pred[n + 1]; ++p)
        if (end[d.preds[p].node] >= start) {
          start = end[d.preds[p].node];
          from  = d.preds[p].node;
        }
      const auto& op = stages[d.stage[n]].ops[d.op[n]];
      double factor  = 1;
      if (workload::is_compute(op.kind))
        factor = out.stage_factor[d.stage[n]] * spec.compute.max_of(lockstep, random.uniform());
      else
        factor = spec.communication.max_of(1, random.uniform());
      added[n] = d.duration[n] * (factor - 1);
      end[n]   = start + d.duration[n] * factor;
      via[n]   = from;
      if (end[n] >= last) {
        last      = end[n];
        last_node = n;
      }
    }
    replica_times.push_back(last);
    // What the critical path gained, by stage and by dimension.
    for (int n = last_node; n >= 0; n = via[n]) {
      const auto& op = stages[d.stage[n]].ops[d.op[n]];
      if (workload::is_compute(op.kind))
        out.attribution.stage_compute[d.stage[n]] += added[n];
      else if (op.dim)
        out.attribution.communication[static_cast<std::size_t>(*op.dim)] += added[n];
      else if (is_p2p(op.kind))
        out.attribution.communication[static_cast<std::size_t>(workload::Dim::pp)] += added[n];
    }
  }
  if (options.progress)
    options.progress("sampling steps", static_cast<std::size_t>(options.steps),
                     static_cast<std::size_t>(options.steps));
  for (auto& x : out.attribution.stage_compute)
    x /= std::max(1, options.steps);
  for (auto& x : out.attribution.communication)
    x /= std::max(1, options.steps);

  // The wait for the slowest replica: the largest of R draws of the replica's (normal) step time.
  const double n    = static_cast<double>(replica_times.size());
  const double mean = n > 0 ? std::accumulate(replica_times.begin(), replica_times.end(), 0.0) / n : 0;
  double var        = 0;
  for (double x : replica_times)
    var += (x - mean) * (x - mean);
  const double sd = n > 1 ? std::sqrt(var / (n - 1)) : 0;
  if (out.replicas > 1 && sd > 0) {
    Random sync(spec.seed ^ 0x5eedu);
    for (double& x : replica_times) {
      const double tail = -std::expm1(std::log(sync.uniform()) / out.replicas);
      x                 = mean + sd * normal_upper_quantile(tail);
    }
    out.attribution.replica_sync = std::accumulate(replica_times.begin(), replica_times.end(), 0.0) / n - mean;
  }
  out.step_times = std::move(replica_times);
  summarise(out);
  return out;
}

SampledSteps sample_steps_per_rank(const workload::StepGraph& graph, const netsim::StepResult& step,
                                   const placement::Placement& placement, const VariabilitySpec& spec,
                                   const SampleOptions& options)
{
  const Dag d        = build_dag(graph, step);
  const auto& stages = graph.stages;
  const int pp       = static_cast<int>(stages.size());
  SampledSteps out;
  out.deterministic  = step.step_time;
  out.lockstep_group = 1;
  out.replicas       = 1;
  const auto gpu_f   = gpu_factors(placement, spec);
  out.stage_factor.assign(pp, 1.0);
  out.attribution.stage_compute.assign(pp, 0.0);

  // Lanes: the GPUs of each stage; a node's ends per lane of its stage (a transfer: the sender's lanes, the
  // receiver's lane found through the peer map).
  std::vector<std::vector<int>> lanes(pp);
  std::map<int, int> lane_of; // GPU -> lane in its stage
  for (int s = 0; s < pp; ++s) {
    lanes[s] = placement.stage_gpus(s);
    for (std::size_t l = 0; l < lanes[s].size(); ++l)
      lane_of[lanes[s][l]] = static_cast<int>(l);
  }
  // Per node: groups as lane lists (collectives), peer lanes (transfers).
  std::vector<std::vector<std::vector<int>>> groups(d.nodes());
  std::vector<std::vector<int>> peer_lane(d.nodes()), sender_lane(d.nodes()); // and its inverse
  for (std::size_t n = 0; n < d.nodes(); ++n) {
    const auto& op = stages[d.stage[n]].ops[d.op[n]];
    if (op.kind == OpKind::collective) {
      for (const auto& g : placement.groups(d.stage[n], op.group)) {
        std::vector<int> members;
        for (int gpu : g)
          members.push_back(lane_of.at(gpu));
        groups[n].push_back(std::move(members));
      }
    } else if (op.kind == OpKind::send) {
      for (int gpu : lanes[d.stage[n]])
        peer_lane[n].push_back(lane_of.at(placement.peer_gpu(gpu, d.peer_stage[n])));
      sender_lane[n].assign(lanes[d.peer_stage[n]].size(), -1);
      for (std::size_t k = 0; k < peer_lane[n].size(); ++k)
        sender_lane[n][peer_lane[n][k]] = static_cast<int>(k);
    }
  }
  Random random(spec.seed);
  std::vector<std::vector<double>> end(d.nodes());
  for (std::size_t n = 0; n < d.nodes(); ++n)
    end[n].assign(lanes[d.stage[n]].size(), 0);
  // The end of node `p` as seen by lane `l` of `stage` (a transfer's receive side is indexed by the receiver).
  auto pred_end = [&](const Dag::Pred& p, int l, int stage) {
    if (d.stage[p.node] == stage)
      return end[p.node][l];
    // A transfer seen from its receiving stage: the sender lane whose peer is l.
    const int k = sender_lane[p.node][l];
    return k < 0 ? 0.0 : end[p.node][k];
  };
  std::vector<double> ready;
  for (int k = 0; k < options.steps; ++k) {
    double last = 0;
    for (int n : d.order) {
      const int s    = d.stage[n];
      const auto& op = stages[s].ops[d.op[n]];
      const auto nl  = lanes[s].size();
      ready.assign(nl, 0);
      for (std::size_t l = 0; l < nl; ++l)
        for (int p = d.first_pred[n]; p < d.first_pred[n + 1]; ++p) {
          if (d.preds[p].peer_side)
            continue;
          ready[l] = std::max(ready[l], pred_end(d.preds[p], static_cast<int>(l), s));
        }
      if (workload::is_compute(op.kind)) {
        for (std::size_t l = 0; l < nl; ++l)
          end[n][l] = ready[l] + d.duration[n] * gpu_f[lanes[s][l]] * spec.compute.max_of(1, random.uniform());
      } else if (op.kind == OpKind::collective) {
        for (const auto& g : groups[n]) {
          double start = 0;
          for (int l : g)
            start = std::max(start, ready[l]);
          const double e = start + d.duration[n] * spec.communication.max_of(1, random.uniform());
          for (int l : g)
            end[n][l] = e;
        }
        if (groups[n].empty())
          for (std::size_t l = 0; l < nl; ++l)
            end[n][l] = ready[l] + d.duration[n];
      } else { // a transfer: the sender lane and its peer lane meet
        const int ps = d.peer_stage[n];
        for (std::size_t l = 0; l < nl; ++l) {
          double start = ready[l];
          const int pl = peer_lane[n][l];
          for (int p = d.first_pred[n]; p < d.first_pred[n + 1]; ++p)
            if (d.preds[p].peer_side)
              start = std::max(start, pred_end(d.preds[p], pl, ps));
          end[n][l] = start + d.duration[n] * spec.communication.max_of(1, random.uniform());
        }
      }
      for (double e : end[n])
        last = std::max(last, e);
    }
    out.step_times.push_back(last);
  }
  summarise(out);
  return out;
}

SampledSteps sample_steps(const SimulatedStep& step, const VariabilitySpec& spec, const SampleOptions& options)
{
  if (!spec.degrades_links())
    return sample_steps(step.graph, step.result, step.placement, spec, options);
  // Persistent degradation changes how flows share links: simulate the step again on the degraded links.
  const auto& links = step.topology.links();
  std::vector<double> factors(links.size(), 1.0);
  Random random(spec.seed ^ 0x11f7u);
  int degraded = 0;
  for (std::size_t k = 0; k < links.size(); ++k)
    if (links[k].tier != topology::Tier::nvlink && random.uniform() < spec.degraded_fraction) {
      factors[k] = spec.degraded_bandwidth;
      ++degraded;
    }
  if (options.progress)
    options.progress("simulating the step on " + std::to_string(degraded) + " degraded links", 0, 1);
  const topology::Topology topo = step.topology.with_links_scaled(factors);
  const placement::Placement placement(topo, step.graph.job, step.placement_spec);
  auto o             = step.options;
  o.rail_symmetry    = false;
  const auto run     = netsim::simulate_step(topo, step.graph, placement, o);
  auto out           = sample_steps(step.graph, run, placement, spec, options);
  out.degraded_links = degraded;
  out.degraded_step  = run.step_time;
  out.deterministic  = step.result.step_time;
  out.lost_share     = out.deterministic > 0 ? out.mean / out.deterministic - 1 : 0;
  return out;
}

nlohmann::json SampledSteps::to_json() const
{
  nlohmann::json dims = nlohmann::json::object();
  for (workload::Dim dim : workload::kDims)
    dims[std::string(name_of(dim))] = attribution.communication[static_cast<std::size_t>(dim)];
  return {{"steps", step_times.size()},
          {"deterministic_s", deterministic},
          {"mean_s", mean},
          {"p50_s", p50},
          {"p90_s", p90},
          {"p99_s", p99},
          {"lost_share", lost_share},
          {"lockstep_group", lockstep_group},
          {"degraded_links", degraded_links},
          {"degraded_step_s", degraded_links > 0 ? nlohmann::json(degraded_step) : nlohmann::json(nullptr)},
          {"replicas", replicas},
          {"stage_slowdown", stage_factor},
          {"attribution",
           {{"stage_compute_s", attribution.stage_compute},
            {"communication_s", dims},
            {"replica_sync_s", attribution.replica_sync}}}};
}

} // namespace spansim::reliability
