// Failures and recovery: checkpoint and restart costs from the job and the sites, the exponential-failure closed
// forms (ETTR, Young, Daly), and a seeded Monte Carlo of the training run.
//
// The Monte Carlo runs in wall-clock time. Failures arrive as Poisson processes (the sum of the components'
// rates, each unit's 1 / MTTF times the units the job uses). Synchronous recovery: every failure loses the work
// since the last complete checkpoint and restarts the job (launch, NCCL set-up, data loader, checkpoint read);
// failures during a checkpoint write or a restart count too. Replica recovery (FT-HSDP): a replica-scoped
// failure takes one data-parallel replica out until its own restart is done, the healthy ones pausing once
// (`replica.stall`) and training on at their share of the global batch; job-scoped failures still restart
// everything from the last checkpoint.
#include "common/error.hpp"
#include "common/units.hpp"
#include "reliability/reliability.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

namespace spansim::reliability {

using nlohmann::json;

double ettr_exact(double interval, double checkpoint, double restart, double mtbf)
{
  // Renewal argument: a segment of `interval` work plus its checkpoint completes after an expected
  // M e^{R/M} (e^{(tau+delta)/M} - 1) of wall time when failures (rate 1/M) also strike restarts.
  return interval / (mtbf * std::exp(restart / mtbf) * std::expm1((interval + checkpoint) / mtbf));
}

double daly_interval(double checkpoint, double mtbf)
{
  if (checkpoint >= 2 * mtbf)
    return mtbf;
  const double r = checkpoint / (2 * mtbf);
  return std::sqrt(2 * checkpoint * mtbf) * (1 + std::sqrt(r) / 3 + r / 9) - checkpoint;
}

double optimal_interval(double checkpoint, double restart, double mtbf)
{
  // ETTR is unimodal in the interval: golden-section search over log(interval).
  double lo = std::log(1e-6 * mtbf + 1e-9), hi = std::log(20 * mtbf);
  const double g = (std::sqrt(5.0) - 1) / 2;
  auto f         = [&](double x) { return ettr_exact(std::exp(x), checkpoint, restart, mtbf); };
  double a = hi - g * (hi - lo), b = lo + g * (hi - lo);
  double fa = f(a), fb = f(b);
  for (int i = 0; i < 200 && hi - lo > 1e-12; ++i) {
    if (fa < fb) {
      lo = a;
      a  = b;
      fa = fb;
      b  = lo + g * (hi - lo);
      fb = f(b);
    } else {
      hi = b;
      b  = a;
      fb = fa;
      a  = hi - g * (hi - lo);
      fa = f(a);
    }
  }
  return std::exp((lo + hi) / 2);
}

RunShape run_shape(const workload::JobSpec& job, const topology::Topology& topology,
                   const placement::Placement& placement, const ReliabilitySpec& spec, double mean_step_time)
{
  RunShape s;
  s.step_time       = mean_step_time;
  s.tokens_per_step = job.tokens_per_step();
  s.gpus            = static_cast<double>(job.gpus);
  {
    std::set<int> nodes; // nodes may differ in size between buildings
    for (int r = 0; r < placement.ranks(); ++r)
      nodes.insert(topology.locate(placement.gpu(r)).node);
    s.nodes = static_cast<double>(nodes.size());
  }
  if (placement.gpus_per_node() > 0 && placement.ranks() > 0)
    s.spare_gpus_per_node =
        std::max(0, topology.node_gpus_of(placement.gpu(0)) - placement.gpus_per_node()); // nodes alike in a building
  s.parameters     = workload::count_params(job.model).total;
  const auto& used = placement.buildings();
  s.buildings      = static_cast<double>(std::max<std::size_t>(1, used.size()));
  const auto& p    = job.parallelism;
  switch (p.dp_mode) {
  case workload::DataParallelMode::ddp:
    s.replicas = p.dp;
    break;
  case workload::DataParallelMode::hsdp:
    s.replicas = p.dp / std::max(1, p.hsdp_shard);
    break;
  case workload::DataParallelMode::fsdp:
    s.replicas = 1; // one model copy sharded over every data-parallel rank
    break;
  }
  if (spec.recovery == Recovery::replica && s.replicas < 2)
    spec.where.member("recovery")
        .fail("replica recovery needs data-parallel replicas: a job with data_parallel \"hsdp\" (replicas = dp / "
              "hsdp_shard_size) or \"ddp\"; this job (" +
              std::string(name_of(p.dp_mode)) + ") has " + std::to_string(static_cast<int>(s.replicas)) + " replica");
  if (!spec.storage_building.empty()) {
    int store = -1;
    std::string names;
    for (int b = 0; b < topology.building_count(); ++b) {
      names += (names.empty() ? "" : ", ") + topology.building_name(b);
      if (topology.building_name(b) == spec.storage_building)
        store = b;
    }
    if (store < 0)
      spec.where.member("checkpoint")
          .member("storage_building")
          .fail("unknown building \"" + spec.storage_building + "\" (the topology's: " + names + ")");
    // The job's GPUs split evenly over its buildings; those of the others cross to the store along their routes.
    // Links shared by several buildings' shares (the store's uplink, a link between regions) carry their sum;
    // the write takes as long as its busiest link needs.
    std::map<int, double> share; // link -> share of the checkpoint through it
    for (int b : used) {
      if (b == store)
        continue;
      for (int k : topology.building_path(b, store))
        share[k] += 1.0 / s.buildings;
    }
    for (const auto& [k, part] : share) {
      const double bw = topology.links()[k].bandwidth;
      if (!(bw > 0))
        spec.where.member("checkpoint")
            .member("storage_building")
            .fail("checkpoints to " + spec.storage_building + " cross link " + topology.link_name(k) +
                  ", which is failed");
      s.cross_building_seconds_per_byte = std::max(s.cross_building_seconds_per_byte, part / bw);
    }
  }
  return s;
}

double units_of(const Component& c, const RunShape& shape)
{
  switch (c.per) {
  case Component::Per::gpu:
    return shape.gpus;
  case Component::Per::node:
    return shape.nodes;
  case Component::Per::job:
    return 1;
  case Component::Per::building:
    return shape.buildings;
  }
  return 1;
}

Costs costs(const ReliabilitySpec& spec, const RunShape& shape)
{
  Costs c;
  for (const auto& comp : spec.components) {
    const double rate = units_of(comp, shape) / comp.mttf;
    c.failure_rate += rate;
    if (comp.replica_scoped)
      c.replica_rate += rate;
    if (comp.hardware)
      (comp.replica_scoped ? c.hardware_replica_rate : c.hardware_job_rate) += rate;
    if (comp.hardware && comp.per == Component::Per::gpu)
      (comp.replica_scoped ? c.hardware_gpu_replica_rate : c.hardware_gpu_job_rate) += rate;
  }
  c.checkpoint_bytes = spec.bytes_per_parameter * shape.parameters;
  const double io    = c.checkpoint_bytes * std::max(1 / spec.storage_bandwidth, shape.cross_building_seconds_per_byte);
  c.checkpoint_write = io;
  c.restart          = spec.launch + spec.nccl_init * shape.gpus / spec.nccl_init_gpus + spec.data_loader + io;
  // A restart succeeds only if no failure strikes during it (probability e^{-rate x restart}): past e^-30 the
  // run never trains, and the Monte Carlo would not end. Most likely an MTTF given per job instead of per unit.
  if (c.failure_rate * c.restart > 30)
    spec.where.member("failures")
        .fail("the job fails every " + units::format_time(1 / c.failure_rate) + " on average and a restart takes " +
              units::format_time(c.restart) + ": no restart would ever finish (check the MTTFs, which are per unit)");
  // Checkpoints guard against what restarts the job: every failure, or under replica recovery the job-scoped.
  const double job_rate = spec.recovery == Recovery::replica ? c.failure_rate - c.replica_rate : c.failure_rate;
  const double mtbf     = job_rate > 0 ? 1 / job_rate : INFINITY;
  c.young               = std::isfinite(mtbf) ? std::sqrt(2 * c.checkpoint_write * mtbf) : INFINITY;
  c.daly                = std::isfinite(mtbf) ? daly_interval(c.checkpoint_write, mtbf) : INFINITY;
  c.interval            = spec.interval > 0     ? spec.interval
                          : std::isfinite(mtbf) ? optimal_interval(c.checkpoint_write, c.restart, mtbf)
                                                : 30 * 86400.0;
  // A checkpoint is taken between steps: never more often than every step.
  c.interval = std::max(c.interval, shape.step_time);
  return c;
}

json Costs::to_json() const
{
  return {{"failures_per_day", failure_rate * 86400},
          {"replica_failures_per_day", replica_rate * 86400},
          {"mtbf_s", failure_rate > 0 ? 1 / failure_rate : 0},
          {"checkpoint_bytes", checkpoint_bytes},
          {"checkpoint_write_s", checkpoint_write},
          {"restart_s", restart},
          {"interval_s", interval},
          {"young_s", std::isfinite(young) ? young : 0},
          {"daly_s", std::isfinite(daly) ? daly : 0}};
}

namespace {

struct Trial {
  double wall = 0, work = 0, interruptions = 0, replica_failures = 0;
  double recompute = 0, restart = 0, checkpoint = 0, degraded = 0, stall = 0, spare_wait = 0, spares_used = 0;
  double gpu_spares_used = 0;
};

/// @brief What a hardware failure needs: nothing (software), a node, or a GPU (which a spare GPU of its node
/// replaces while the node has one).
enum class Needs { nothing, node, gpu };

// Hot spares: a pool of healthy nodes; a failed node goes to repair and comes back to the pool. With idle GPUs in
// the job's nodes, a failed GPU is first replaced by one of its own node's (the node drawn uniformly: the job's
// nodes hold equal shares of its GPUs), and goes to repair there.
class SparePool {
public:
  SparePool(const ReliabilitySpec& spec, const RunShape& shape)
      : modelled_(spec.spares_modelled), pool_(spec.spare_nodes), repair_(spec.repair)
  {
    if (shape.spare_gpus_per_node > 0)
      in_node_.assign(static_cast<std::size_t>(std::max(1.0, shape.nodes)),
                      static_cast<int>(shape.spare_gpus_per_node));
    node_repairs_.resize(in_node_.size());
  }
  bool gpu_spares() const { return !in_node_.empty(); }
  /// @brief A GPU of node `node` failed at `t`: 0 when a spare GPU of that node takes its place, else a node's wait.
  double replace_gpu(double t, std::size_t node, Trial& out)
  {
    if (!modelled_)
      return 0;
    auto& back = node_repairs_[node];
    for (auto it = back.begin(); it != back.end();)
      if (*it <= t) {
        ++in_node_[node];
        it = back.erase(it);
      } else {
        ++it;
      }
    if (in_node_[node] > 0) {
      --in_node_[node];
      back.push_back(t + repair_);
      ++out.spares_used;
      ++out.gpu_spares_used;
      return 0;
    }
    return replace(t, out);
  }
  std::size_t nodes() const { return in_node_.size(); }
  /// @brief A node failed at `t`: seconds until a healthy node takes its place.
  double replace(double t, Trial& out)
  {
    if (!modelled_)
      return 0;
    // Repaired nodes rejoin the pool.
    for (auto it = repairs_.begin(); it != repairs_.end();)
      if (*it <= t) {
        ++pool_;
        it = repairs_.erase(it);
      } else {
        ++it;
      }
    repairs_.push_back(t + repair_);
    if (pool_ > 0) {
      --pool_;
      ++out.spares_used;
      return 0;
    }
    // None at hand: the first node out of repair (this one, with an empty pool and none pending).
    auto first        = std::min_element(repairs_.begin(), repairs_.end());
    const double wait = *first - t;
    repairs_.erase(first);
    out.spare_wait += wait;
    return wait;
  }

private:
  bool modelled_;
  int pool_;
  double repair_;
  std::vector<double> repairs_;
  std::vector<int> in_node_;                      ///< spare GPUs at hand in each of the job's nodes
  std::vector<std::vector<double>> node_repairs_; ///< when each node's failed GPUs are back
};

Trial one_trial(const ReliabilitySpec& spec, const RunShape& shape, const Costs& c, double horizon_wall,
                double target_work, Random& random)
{
  Trial out;
  const bool replica    = spec.recovery == Recovery::replica;
  const double job_rate = replica ? c.failure_rate - c.replica_rate : c.failure_rate;
  const double rep_rate = replica ? c.replica_rate : 0;
  const double replicas = replica ? shape.replicas : 1;
  // A replica's own restart: its share of launch and NCCL set-up, the data loader and its state fetched.
  const double replica_restart = spec.launch + spec.nccl_init * (shape.gpus / replicas) / spec.nccl_init_gpus +
                                 spec.data_loader + c.checkpoint_write;
  auto next = [&](double rate) { return rate > 0 ? random.exponential(1 / rate) : INFINITY; };
  SparePool spares(spec, shape);
  // What a failure of a process of this rate needs (drawn in proportion to the rates): a node, or a GPU when spare
  // GPUs stand in the nodes. (Drawn only with spares modelled, and the GPU's share only with spare GPUs, so that runs
  // without them keep their random sequence.)
  auto hardware = [&](double hardware_rate, double gpu_rate, double rate) {
    if (!(spec.spares_modelled && rate > 0))
      return Needs::nothing;
    const double x = random.uniform();
    if (!(x < hardware_rate / rate))
      return Needs::nothing;
    return spares.gpu_spares() && x < gpu_rate / rate ? Needs::gpu : Needs::node;
  };
  // Seconds from `at` until a replacement is at hand.
  auto replace = [&](Needs needs, double at) {
    if (needs == Needs::nothing)
      return 0.0;
    if (needs == Needs::gpu) {
      const auto node = std::min(spares.nodes() - 1, static_cast<std::size_t>(random.uniform() * spares.nodes()));
      return spares.replace_gpu(at, node, out);
    }
    return spares.replace(at, out);
  };
  const double any_rate     = job_rate + rep_rate;
  const double any_hardware = c.hardware_job_rate + c.hardware_replica_rate;
  const double any_gpu      = c.hardware_gpu_job_rate + c.hardware_gpu_replica_rate;
  // Under synchronous recovery every failure restarts the job, replica-scoped hardware ones included.
  const double job_hardware = replica ? c.hardware_job_rate : any_hardware;
  const double job_gpu      = replica ? c.hardware_gpu_job_rate : any_gpu;
  double t = 0, work = 0, saved = 0;
  double checkpoint_at = c.interval;
  std::vector<double> returns; // when out replicas rejoin
  auto done = [&] { return (horizon_wall > 0 && t >= horizon_wall) || (target_work > 0 && work >= target_work); };
  // A job-wide restart after a failure (`needs_node`: a hardware one). It begins once a replacement node is at
  // hand (a repaired one, when the pool is empty) and is exposed: a failure during it starts it again. A failure
  // while the job waits for a node does not shorten the wait (a hardware one may lengthen it: another node to
  // replace).
  auto restart_job = [&](Needs needs) {
    ++out.interruptions;
    out.recompute += work - saved;
    work = saved;
    returns.clear();
    double ready = t + replace(needs, t);
    double end   = ready + c.restart;
    while (!(horizon_wall > 0 && t >= horizon_wall)) {
      const double f = next(any_rate);
      if (t + f >= end) {
        out.restart += end - t;
        t = end;
        break;
      }
      t += f;
      out.restart += f;
      ++out.interruptions;
      if (const Needs needs = hardware(any_hardware, any_gpu, any_rate); needs != Needs::nothing) {
        // Only the part of the new wait beyond what is already running is lost to it.
        const double wait     = replace(needs, t);
        const double extended = std::max(ready, t + wait);
        out.spare_wait -= wait - (extended - std::max(ready, t));
        ready = extended;
      }
      end = std::max(ready, t) + c.restart;
    }
    checkpoint_at = t + c.interval;
  };
  // The next event, by what it is rather than by comparing times (rounding must not pick the wrong one). An event
  // already due (a stall ran past it) happens now: time never runs backwards.
  enum class Event { failure, replica_failure, replica_back, checkpoint, horizon, trained };
  while (!done()) {
    const double healthy = replicas - static_cast<double>(returns.size());
    const double rate    = healthy / replicas;
    const double back    = returns.empty() ? INFINITY : *std::min_element(returns.begin(), returns.end());
    std::pair<double, Event> next_event{t + next(job_rate), Event::failure};
    auto consider = [&](double at, Event e) {
      if (at < next_event.first)
        next_event = {at, e};
    };
    consider(t + next(rep_rate * rate), Event::replica_failure);
    consider(back, Event::replica_back);
    consider(checkpoint_at, Event::checkpoint);
    if (horizon_wall > 0)
      consider(horizon_wall, Event::horizon);
    if (target_work > 0 && rate > 0)
      consider(t + (target_work - work) / rate, Event::trained);
    if (!std::isfinite(next_event.first))
      break;
    const double until = std::max(next_event.first, t);
    work += (until - t) * rate;
    out.degraded += (until - t) * (1 - rate);
    t                 = until;
    const Event event = next_event.second;
    if (event == Event::trained) {
      work = target_work;
      break;
    }
    if (event == Event::horizon)
      break;
    if (event == Event::failure) {
      restart_job(hardware(job_hardware, job_gpu, job_rate));
    } else if (event == Event::replica_failure) {
      ++out.interruptions;
      ++out.replica_failures;
      const double wait = replace(hardware(c.hardware_replica_rate, c.hardware_gpu_replica_rate, rep_rate), t);
      returns.push_back(t + wait + replica_restart);
      t += spec.replica_stall;
      out.stall += spec.replica_stall;
    } else if (event == Event::replica_back) {
      returns.erase(std::min_element(returns.begin(), returns.end()));
    } else { // a checkpoint, exposed to job failures
      const double f = next(job_rate);
      if (f < c.checkpoint_write) {
        t += f;
        out.checkpoint += f;
        restart_job(hardware(job_hardware, job_gpu, job_rate));
      } else {
        t += c.checkpoint_write;
        out.checkpoint += c.checkpoint_write;
        saved         = work;
        checkpoint_at = t + c.interval;
      }
    }
  }
  out.wall = t;
  out.work = work;
  return out;
}

} // namespace

RunOutcome simulate_run(const ReliabilitySpec& spec, const RunShape& shape, const Costs& costs, const Horizon& horizon)
{
  RunOutcome o;
  const double horizon_wall = horizon.days * 86400;
  const double target_work =
      horizon.tokens > 0 ? horizon.tokens / shape.tokens_per_step * shape.step_time : 0; // failure-free seconds
  Random random(spec.seed);
  std::vector<double> ettrs;
  const int trials = std::max(1, horizon.trials);
  for (int k = 0; k < trials; ++k) {
    const Trial t = one_trial(spec, shape, costs, horizon_wall, target_work, random);
    o.wall_seconds += t.wall;
    o.tokens += t.work / shape.step_time * shape.tokens_per_step;
    o.interruptions += t.interruptions;
    o.replica_failures += t.replica_failures;
    o.lost_recompute += t.recompute;
    o.lost_restart += t.restart;
    o.lost_checkpoint += t.checkpoint;
    o.lost_degraded += t.degraded;
    o.lost_stall += t.stall;
    o.lost_spare_wait += t.spare_wait;
    o.spares_used += t.spares_used;
    o.gpu_spares_used += t.gpu_spares_used;
    ettrs.push_back(t.wall > 0 ? t.work / t.wall : 0);
  }
  for (double* x :
       {&o.wall_seconds, &o.tokens, &o.interruptions, &o.replica_failures, &o.lost_recompute, &o.lost_restart,
        &o.lost_checkpoint, &o.lost_degraded, &o.lost_stall, &o.lost_spare_wait, &o.spares_used, &o.gpu_spares_used})
    *x /= trials;
  o.ettr     = std::accumulate(ettrs.begin(), ettrs.end(), 0.0) / trials;
  double var = 0;
  for (double e : ettrs)
    var += (e - o.ettr) * (e - o.ettr);
  o.ettr_stddev = trials > 1 ? std::sqrt(var / (trials - 1)) : 0;
  o.trials      = trials;
  // The closed form knows no waits for a repaired node.
  if (spec.recovery == Recovery::synchronous && costs.failure_rate > 0 && !spec.spares_modelled)
    o.ettr_closed_form = ettr_exact(costs.interval, costs.checkpoint_write, costs.restart, 1 / costs.failure_rate);
  return o;
}

json RunOutcome::to_json() const
{
  return {{"wall_s", wall_seconds},
          {"wall_days", wall_seconds / 86400},
          {"tokens", tokens},
          {"interruptions", interruptions},
          {"replica_failures", replica_failures},
          {"ettr", ettr},
          // One trial has no spread: a 0 would read as a certain figure.
          {"ettr_stddev", trials > 1 ? json(ettr_stddev) : json(nullptr)},
          {"trials", trials},
          {"ettr_closed_form", ettr_closed_form > 0 ? json(ettr_closed_form) : json(nullptr)},
          {"lost_s",
           {{"recompute", lost_recompute},
            {"restart", lost_restart},
            {"checkpoint", lost_checkpoint},
            {"degraded", lost_degraded},
            {"stall", lost_stall}}},
          {"spare_wait_s", lost_spare_wait},
          {"spares_used", spares_used},
          {"gpu_spares_used", gpu_spares_used}};
}

} // namespace spansim::reliability
