// The search: enumerate the space, build every point as a typed job, bound and score the feasible ones in worker
// processes, name the production default and the best single change from it, and re-simulate the best at the
// refine fidelity.
#include "common/error.hpp"
#include "common/process.hpp"
#include "common/units.hpp"
#include "optimizer/optimizer.hpp"
#include "optimizer/screen.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

namespace spansim::optimizer {

using workload::Dim;

namespace {

// Dimensions of degree 1 do not change where ranks go: orders that differ only there are one placement.
std::vector<Dim> effective_order(const Point& p)
{
  std::vector<Dim> out;
  for (Dim d : p.order)
    if ((d == Dim::tp ? p.tp : d == Dim::cp ? p.cp : d == Dim::pp ? p.pp : p.dp) > 1)
      out.push_back(d);
  return out;
}

int buildings_used(const OptimizeSpec& spec, const topology::Topology& topo)
{
  if (!spec.buildings.empty())
    return static_cast<int>(spec.buildings.size());
  return topo.buildings_needed(spec.base.gpus);
}

// A point's network knobs change the site it runs on: the topology with its window, queue pairs and long-link
// capacities (the spec's own when they are the spec's).
const topology::Topology& site_of(const OptimizeSpec& spec, const topology::Topology& topo, const Point& p,
                                  std::optional<topology::Topology>& own)
{
  if (p.qps == spec.topology.multipath.qps && p.inter_building <= 0 && p.inter_region <= 0) {
    if (p.window == topo.spec().window)
      return topo;
    own.emplace(topo.with_window(p.window));
    return *own;
  }
  own.emplace(topology_of(spec, p));
  return *own;
}

/// @brief `auto`'s choices remembered across the points a process simulates (the site and groups decide them).
using Choices = std::shared_ptr<netsim::AlgorithmCache>;

netsim::StepOptions step_options(const Point& p, netsim::Fidelity fidelity, bool collapse, const Choices& choices)
{
  netsim::StepOptions o;
  o.algorithm_cache        = choices;
  o.fidelity               = fidelity;
  o.collapse_communication = collapse;
  o.channels               = p.channels;
  o.algorithms[Dim::dp]    = p.dp_algorithm;
  o.compression            = p.compression;
  o.dp_within_regions      = p.diloco.has_value();
  o.rail_workers           = 1; // the search's workers already fill the cores (ECMP's rails apart)
  return o;
}

// With DiLoCo, a point's step is the mean over an outer step: the inner step plus its share of the outer sync.
void add_outer_sync(const Point& p, const topology::Topology& site, const workload::StepGraph& graph,
                    const placement::Placement& place, netsim::Fidelity fidelity, Metrics& m, double& step)
{
  if (!p.diloco)
    return;
  sync::OuterSyncParams params;
  params.fidelity  = fidelity;
  const auto outer = sync::simulate_outer_sync(site, graph, place, *p.diloco, params);
  const auto mean  = sync::average(*p.diloco, {step, 0, graph.job.tokens_per_step()}, outer);
  m.inner_step     = step;
  m.outer_sync     = outer.seconds;
  step             = mean.mean_step;
  const double k   = m.step_time > 0 ? mean.mean_step / m.step_time : 1;
  m.step_time      = mean.mean_step;
  m.mfu /= k;
  m.tflops_per_gpu /= k;
  if (m.bytes_across_regions)
    m.bytes_across_regions = *m.bytes_across_regions + mean.bytes_across_regions_per_step;
  if (m.bytes_across_buildings)
    m.bytes_across_buildings =
        *m.bytes_across_buildings + outer.bytes_across_buildings * p.diloco->fragments / p.diloco->every;
}

Metrics metrics_of(const netsim::StepResult& r, const topology::Topology& topo, bool with_links)
{
  Metrics m;
  m.step_time      = r.step_time;
  m.mfu            = r.mfu;
  m.tflops_per_gpu = r.tflops_per_gpu;
  const double n   = static_cast<double>(r.stages.size());
  for (Dim d : workload::kDims)
    for (const auto& s : r.stages)
      m.exposed[d] += s.exposed[d] / n;
  for (const auto& s : r.stages)
    m.bubble += s.bubble / n;
  if (r.engine.contains("collectives_chosen_per_step"))
    for (const auto& [dim, algo] : r.engine["collectives_chosen_per_step"].items())
      m.collectives_chosen[dim] = algo.get<std::string>();
  if (with_links) {
    const auto across        = netsim::boundary_bytes(topo, r.link_bytes);
    m.bytes_across_buildings = across.buildings;
    m.bytes_across_regions   = across.regions;
  }
  return m;
}

/// @brief A point built and checked: its graph and placement.
struct Built {
  workload::StepGraph graph;
  std::optional<placement::Placement> place;
};

Built build(const OptimizeSpec& spec, const topology::Topology& topo, const Point& p)
{
  const auto job = job_of(spec, p, buildings_used(spec, topo));
  Built b{{}, std::nullopt};
  b.place.emplace(topo, job, placement::PlacementSpec{p.order, spec.buildings},
                  spec::Location{spec.file, "$.search.order"});
  // On a heterogeneous site each stage is costed on its building's GPU type.
  b.graph = placement::build_stage_graph(job, topo, *b.place, spec::Location{spec.file, "$.search.order"});
  return b;
}

// What a worker hands back for a point: infeasible (with the reason code), or bounded, scored, refined. Encoded as
// plain bytes: the search builds no JSON per point.
struct Outcome {
  std::string reason; ///< empty: feasible
  double lower_bound = 0;
  double score       = 0;
  Metrics metrics;
};

class Bytes {
public:
  void put(double v) { data_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void put(const std::string& s)
  {
    put(static_cast<double>(s.size()));
    data_ += s;
  }
  std::string take() { return std::move(data_); }

private:
  std::string data_;
};

class Reader {
public:
  explicit Reader(const std::string& data) : data_(data) {}
  double number()
  {
    double v = 0;
    if (pos_ + sizeof v > data_.size())
      throw SimulationError("a search worker's record is truncated");
    std::memcpy(&v, data_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string text()
  {
    const auto n = static_cast<std::size_t>(number());
    if (pos_ + n > data_.size())
      throw SimulationError("a search worker's record is truncated");
    std::string s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  bool done() const { return pos_ >= data_.size(); }

private:
  const std::string& data_;
  std::size_t pos_ = 0;
};

std::string encode(const Outcome& o)
{
  Bytes b;
  b.put(o.reason);
  b.put(o.lower_bound);
  b.put(o.score);
  const auto& m = o.metrics;
  for (double v : {m.step_time, m.mfu, m.tflops_per_gpu, m.bubble})
    b.put(v);
  for (double v : m.exposed)
    b.put(v);
  b.put(m.bytes_across_buildings ? 1.0 : 0.0);
  b.put(m.bytes_across_buildings.value_or(0));
  b.put(m.bytes_across_regions.value_or(0));
  b.put(m.inner_step ? 1.0 : 0.0);
  b.put(m.inner_step.value_or(0));
  b.put(m.outer_sync.value_or(0));
  b.put(static_cast<double>(m.collectives_chosen.size()));
  for (const auto& [dim, algo] : m.collectives_chosen) {
    b.put(dim);
    b.put(algo);
  }
  return b.take();
}

Outcome decode(const std::string& data)
{
  Reader r(data);
  Outcome o;
  o.reason      = r.text();
  o.lower_bound = r.number();
  o.score       = r.number();
  auto& m       = o.metrics;
  for (double* v : {&m.step_time, &m.mfu, &m.tflops_per_gpu, &m.bubble})
    *v = r.number();
  for (double& v : m.exposed)
    v = r.number();
  const bool links = r.number() > 0;
  const double b = r.number(), g = r.number();
  if (links) {
    m.bytes_across_buildings = b;
    m.bytes_across_regions   = g;
  }
  const bool outer   = r.number() > 0;
  const double inner = r.number(), sync_s = r.number();
  if (outer) {
    m.inner_step = inner;
    m.outer_sync = sync_s;
  }
  const auto chosen = static_cast<std::size_t>(r.number());
  for (std::size_t i = 0; i < chosen; ++i) {
    auto dim                  = r.text();
    m.collectives_chosen[dim] = r.text();
  }
  return o;
}

// Bounds a point (compute and bubble with free communication), or names why it cannot run.
Outcome bound_point(const OptimizeSpec& spec, const topology::Topology& topo, const Point& p)
{
  try {
    auto b = build(spec, topo, p);
    return {"", workload::compute_makespan(b.graph), 0, {}};
  } catch (const InfeasibleError& e) {
    return {e.reason(), 0, 0, {}};
  }
}

// Scores a point with the collapsed analytical step, or names why it cannot run.
Outcome score_point(const OptimizeSpec& spec, const topology::Topology& topo, const Point& p, const Choices& choices)
{
  try {
    std::optional<topology::Topology> own;
    const auto& site = site_of(spec, topo, p, own);
    auto b           = build(spec, site, p);
    Outcome o;
    o.lower_bound = workload::compute_makespan(b.graph);
    auto r =
        netsim::simulate_step(site, b.graph, *b.place, step_options(p, netsim::Fidelity::analytical, true, choices));
    o.score   = r.step_time;
    o.metrics = metrics_of(r, site, false);
    add_outer_sync(p, site, b.graph, *b.place, netsim::Fidelity::analytical, o.metrics, o.score);
    return o;
  } catch (const InfeasibleError& e) {
    return {e.reason(), 0, 0, {}};
  } catch (const UsageError& e) {
    return {std::string("collectives: ") + e.what(), 0, 0, {}};
  }
}

// ETTR of a re-simulated point under the spec's reliability block. Replica recovery needs replicas (HSDP or DDP);
// an FSDP point recovers synchronously.
void goodput(const OptimizeSpec& spec, const topology::Topology& topo, Evaluation& e)
{
  auto r = *spec.reliability;
  if (r.recovery == reliability::Recovery::replica && e.point.data_parallel == workload::DataParallelMode::fsdp)
    r.recovery = reliability::Recovery::synchronous;
  auto b           = build(spec, topo, e.point);
  const auto shape = reliability::run_shape(b.graph.job, topo, *b.place, r, *e.refined);
  const auto costs = reliability::costs(r, shape);
  reliability::Horizon h;
  h.days     = r.horizon_days;
  h.trials   = 50;
  e.ettr     = reliability::simulate_run(r, shape, costs, h).ettr;
  e.recovery = std::string(name_of(r.recovery));
}

Outcome refine_point(const OptimizeSpec& spec, const topology::Topology& topo, const Point& p, const Choices& choices)
{
  std::optional<topology::Topology> own;
  if (spec.refine_multipath)
    own.emplace(topology_of(spec, p, true));
  const auto& site = own ? *own : site_of(spec, topo, p, own);
  auto b           = build(spec, site, p);
  auto r           = netsim::simulate_step(site, b.graph, *b.place, step_options(p, spec.refine, false, choices));
  Outcome o;
  o.score   = r.step_time;
  o.metrics = metrics_of(r, site, true);
  add_outer_sync(p, site, b.graph, *b.place, spec.refine, o.metrics, o.score);
  return o;
}

void copy_network(const Point& from, Point& to)
{
  to.window         = from.window;
  to.qps            = from.qps;
  to.compression    = from.compression;
  to.diloco         = from.diloco;
  to.inter_building = from.inter_building;
  to.inter_region   = from.inter_region;
}

std::vector<Point> enumerate(const OptimizeSpec& spec, std::map<std::string, std::size_t>& pruned)
{
  const auto& s       = spec.space;
  const auto variants = network_variants(s);
  const auto experts  = expert_variants(s);
  std::vector<Point> points;
  std::set<std::string> seen;
  for (int tp : s.tp)
    for (int cp : s.cp)
      for (int pp : s.pp)
        for (int ep : s.ep)
          for (auto dpm : s.data_parallel)
            for (bool reshard : s.reshard_after_forward)
              for (int mb : s.micro_batch)
                for (auto sched : s.schedule)
                  for (int v : s.virtual_stages)
                    for (const auto& order : s.order)
                      for (auto rc : s.recompute)
                        for (auto algo : s.dp_algorithm)
                          for (const auto& ex : experts)
                            for (int ch : s.channels)
                              for (const auto& net : variants) {
                                if (ex.ep_overlap && sched != workload::ScheduleKind::one_f_one_b &&
                                    sched != workload::ScheduleKind::interleaved_1f1b)
                                  continue; // DualPipe overlaps its pairs anyway; the others have none
                                const std::int64_t model_ranks = std::int64_t(tp) * cp * pp;
                                if (spec.base.gpus % model_ranks != 0) {
                                  pruned["gpus not divisible by tp x cp x pp"]++;
                                  continue;
                                }
                                Point p;
                                p.tp                    = tp;
                                p.cp                    = cp;
                                p.pp                    = pp;
                                p.dp                    = static_cast<int>(spec.base.gpus / model_ranks);
                                p.ep                    = ep;
                                p.data_parallel         = dpm;
                                p.reshard_after_forward = dpm != workload::DataParallelMode::ddp && reshard;
                                p.micro_batch           = mb;
                                p.schedule              = sched;
                                p.virtual_stages        = sched == workload::ScheduleKind::interleaved_1f1b ? v : 1;
                                p.order                 = order;
                                p.recompute             = rc;
                                p.dp_algorithm          = algo;
                                p.channels              = ch;
                                copy_expert(ex, p);
                                if (p.etp == p.tp)
                                  p.etp = 0; // Megatron's default: one point
                                if (p.dispatcher != workload::Dispatcher::deepep)
                                  p.node_limit = 0; // a node limit only changes DeepEP's deduplicated bytes
                                copy_network(net, p);
                                // Knobs that do not apply collapse onto one point.
                                Point key = p;
                                key.order = effective_order(p);
                                if (seen.insert(key.label()).second)
                                  points.push_back(p);
                              }
  return points;
}

// Tier 1: every combination of the space screened in closed form, in worker processes over blocks of indices; the
// best points (by estimate, then index: deterministic) are kept for tier 2, in that order.
std::vector<Point> screen_space(const OptimizeSpec& spec, const topology::Topology& topo, int workers,
                                OptimizeResult& result, const Progress& progress)
{
  const auto started = std::chrono::steady_clock::now();
  const IndexedSpace space(spec);
  Screen screen(space, topo);
  result.screened                = space.size();
  constexpr std::uint64_t kBlock = 8192;
  const auto blocks              = static_cast<std::size_t>((space.size() + kBlock - 1) / kBlock);
  const std::size_t cap          = spec.screen.keep_max;
  const std::string phase        = "screening (closed form)";
  // A block's record: points, indivisible, feasible, reasons (name, count), then its best (index, estimate).
  auto screen_block = [&](std::size_t block) {
    const std::uint64_t first = block * kBlock, last = std::min(space.size(), first + kBlock);
    std::map<std::string, std::size_t> reasons;
    std::vector<std::pair<double, std::uint64_t>> best;
    double points = 0, indivisible = 0, feasible = 0;
    std::string reason;
    for (std::uint64_t i = first; i < last; ++i) {
      const auto at = space.decode(i);
      if (!space.divisible(at)) {
        ++indivisible;
        continue;
      }
      if (!space.canonical(at))
        continue;
      ++points;
      reason.clear();
      const double t = screen.estimate(at, reason);
      if (!reason.empty()) {
        reasons[reason]++;
        continue;
      }
      ++feasible;
      best.emplace_back(t, i);
    }
    const std::size_t kept = std::min(cap, best.size());
    std::partial_sort(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(kept), best.end());
    Bytes b;
    b.put(points);
    b.put(indivisible);
    b.put(feasible);
    b.put(static_cast<double>(reasons.size()));
    for (const auto& [name, n] : reasons) {
      b.put(name);
      b.put(static_cast<double>(n));
    }
    b.put(static_cast<double>(kept));
    for (std::size_t k = 0; k < kept; ++k) {
      b.put(static_cast<double>(best[k].second));
      b.put(best[k].first);
    }
    return b.take();
  };
  double best_so_far = 0;
  auto on_done       = [&](std::size_t done, const std::string& record) {
    if (!progress)
      return;
    Reader r(record);
    for (int k = 0; k < 3; ++k)
      r.number();
    const auto reasons = static_cast<std::size_t>(r.number());
    for (std::size_t k = 0; k < reasons; ++k) {
      r.text();
      r.number();
    }
    if (r.number() > 0) {
      r.number();
      const double t = r.number();
      best_so_far    = best_so_far == 0 ? t : std::min(best_so_far, t);
    }
    progress(phase, std::min<std::uint64_t>(space.size(), done * kBlock), space.size(), best_so_far);
  };
  if (progress)
    progress(phase, 0, space.size(), 0);
  const auto records = process::parallel_map(blocks, workers, screen_block, on_done);
  std::vector<std::pair<double, std::uint64_t>> best;
  std::size_t points = 0, feasible = 0;
  for (const auto& record : records) {
    Reader r(record);
    points += static_cast<std::size_t>(r.number());
    const auto indivisible = static_cast<std::size_t>(r.number());
    points += indivisible; // counted among the points, as the plain enumeration does
    if (indivisible > 0)
      result.pruned["gpus not divisible by tp x cp x pp"] += indivisible;
    feasible += static_cast<std::size_t>(r.number());
    const auto reasons = static_cast<std::size_t>(r.number());
    for (std::size_t k = 0; k < reasons; ++k) {
      auto name = r.text();
      result.pruned[name] += static_cast<std::size_t>(r.number());
    }
    const auto kept = static_cast<std::size_t>(r.number());
    for (std::size_t k = 0; k < kept; ++k) {
      const auto index = static_cast<std::uint64_t>(r.number());
      best.emplace_back(r.number(), index);
    }
  }
  const auto keep        = std::clamp<std::size_t>(static_cast<std::size_t>(std::ceil(spec.screen.keep * feasible)),
                                            std::min(spec.screen.keep_min, feasible), spec.screen.keep_max);
  const std::size_t kept = std::min(keep, best.size());
  std::partial_sort(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(kept), best.end());
  std::vector<Point> out;
  for (std::size_t k = 0; k < kept; ++k)
    out.push_back(space.point(space.decode(best[k].second)));
  result.screen_kept    = kept;
  result.screen_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  result.points         = points;
  result.feasible       = feasible;
  return out;
}

/// @brief One knob of the baseline moved to another value of the space.
struct Change {
  std::string description; ///< e.g. "schedule = interleaved-1f1b (v4)"
  Point point;
  SearchDimension dimension = SearchDimension::placement;
};

std::vector<Change> single_changes(const OptimizeSpec& spec, const Point& b)
{
  const auto& s = spec.space;
  std::vector<Change> changes;
  using enum SearchDimension;
  auto degree = [&](const char* knob, int v, int Point::*field) {
    Point p                  = b;
    const std::int64_t total = std::int64_t(b.tp) * b.cp * b.pp * b.dp;
    p.*field                 = v;
    const std::int64_t model = std::int64_t(p.tp) * p.cp * p.pp;
    if (total % model != 0)
      return; // the GPU budget does not divide
    p.dp = static_cast<int>(total / model);
    changes.push_back({std::string(knob) + " = " + std::to_string(v), p, placement});
  };
  for (int v : s.tp)
    if (v != b.tp)
      degree("tp", v, &Point::tp);
  for (int v : s.pp)
    if (v != b.pp)
      degree("pp", v, &Point::pp);
  for (int v : s.cp)
    if (v != b.cp)
      degree("cp", v, &Point::cp);
  auto add = [&](SearchDimension dim, const std::string& description, auto edit) {
    Point p = b;
    edit(p);
    changes.push_back({description, p, dim});
  };
  for (auto v : s.data_parallel)
    if (v != b.data_parallel)
      add(placement, "data_parallel = " + std::string(name_of(v)), [&](Point& p) { p.data_parallel = v; });
  for (int v : s.micro_batch)
    if (v != b.micro_batch)
      add(scheduling, "micro_batch = " + std::to_string(v), [&](Point& p) { p.micro_batch = v; });
  for (auto v : s.schedule)
    for (int vs : s.virtual_stages) {
      const bool interleaved = v == workload::ScheduleKind::interleaved_1f1b;
      if (v != b.schedule && (interleaved || vs == s.virtual_stages.front()))
        add(scheduling, "schedule = " + std::string(name_of(v)) + (interleaved ? " (v" + std::to_string(vs) + ")" : ""),
            [&](Point& p) {
              p.schedule       = v;
              p.virtual_stages = interleaved ? vs : 1;
            });
    }
  for (const auto& v : s.order) {
    Point p = b;
    p.order = v;
    if (effective_order(p) != effective_order(b)) {
      std::string text;
      for (Dim d : v)
        text += (text.empty() ? "" : ",") + std::string(name_of(d));
      changes.push_back({"order = [" + text + "]", p, placement});
    }
  }
  for (auto v : s.recompute)
    if (v != b.recompute)
      add(scheduling, "recompute = " + std::string(name_of(v)), [&](Point& p) { p.recompute = v; });
  for (auto v : s.dp_algorithm)
    if (v != b.dp_algorithm)
      add(network, "dp_algorithm = " + std::string(name_of(v)), [&](Point& p) { p.dp_algorithm = v; });
  for (int v : s.etp)
    if (v != b.etp && !(v == b.tp && b.etp == 0))
      add(placement, "etp = " + (v > 0 ? std::to_string(v) : std::string("tp")), [&](Point& p) { p.etp = v; });
  for (auto v : s.dispatcher)
    if (v != b.dispatcher)
      add(network, "dispatcher = " + std::string(name_of(v)), [&](Point& p) {
        p.dispatcher = v;
        p.node_limit = v == workload::Dispatcher::deepep ? s.node_limit.front() : 0;
      });
  for (int v : s.node_limit)
    if (v != b.node_limit && v > 0 && !(b.dispatcher != workload::Dispatcher::deepep && v == s.node_limit.front()))
      add(network, "dispatcher = deepep, at most " + std::to_string(v) + " nodes per token", [&](Point& p) {
        p.dispatcher = workload::Dispatcher::deepep;
        p.node_limit = v;
      });
  for (bool v : s.ep_overlap)
    if (v != b.ep_overlap)
      add(scheduling, std::string("ep_overlap = ") + (v ? "true" : "false"), [&](Point& p) { p.ep_overlap = v; });
  for (int v : s.channels)
    if (v != b.channels)
      add(network, "channels = " + std::to_string(v), [&](Point& p) { p.channels = v; });
  for (double v : s.window)
    if (v != b.window)
      add(network, "window = " + (v > 0 ? units::format_size(v) : std::string("none")),
          [&](Point& p) { p.window = v; });
  for (int v : s.qps)
    if (v != b.qps)
      add(network, "qps = " + std::to_string(v), [&](Point& p) { p.qps = v; });
  for (const auto& v : s.compression)
    if (v != b.compression)
      add(network, "compression = " + v.label(), [&](Point& p) { p.compression = v; });
  for (const auto& v : s.diloco)
    if (v != b.diloco)
      add(network, "diloco = " + (v ? v->label() : std::string("none")), [&](Point& p) { p.diloco = v; });
  // Capacity is bought, not configured: a change to it explains what more (or less) of it buys.
  for (double v : s.inter_building)
    if (v != b.inter_building)
      add(network, "inter_building = " + (v > 0 ? units::format_bandwidth(v) : std::string("as built")),
          [&](Point& p) { p.inter_building = v; });
  for (double v : s.inter_region)
    if (v != b.inter_region)
      add(network, "inter_region = " + (v > 0 ? units::format_bandwidth(v) : std::string("as built")),
          [&](Point& p) { p.inter_region = v; });
  return changes;
}

double best_score(const std::vector<Evaluation>& scored)
{
  double best = 0;
  for (const auto& e : scored)
    if (best == 0 || e.score < best)
      best = e.score;
  return best;
}

// The network-layer knobs of the production default: as built (no compression, every step synchronous, the
// topology's queue pairs, window and capacity) where the space holds that value, else the first value listed.
Point production_network(const OptimizeSpec& spec)
{
  const auto& s = spec.space;
  auto pick     = [](const auto& values, const auto& preferred) {
    return std::find(values.begin(), values.end(), preferred) != values.end() ? preferred : values.front();
  };
  Point p;
  p.window         = pick(s.window, spec.topology.window);
  p.qps            = pick(s.qps, spec.topology.multipath.qps);
  p.compression    = pick(s.compression, netsim::CompressionSpec{});
  p.diloco         = pick(s.diloco, std::optional<sync::DilocoSpec>{});
  p.inter_building = pick(s.inter_building, 0.0);
  p.inter_region   = pick(s.inter_region, 0.0);
  // A MoE job's production default: Megatron's alltoall dispatcher without overlap, expert TP as TP.
  p.etp        = pick(s.etp, 0);
  p.dispatcher = pick(s.dispatcher, workload::Dispatcher::alltoall);
  p.node_limit = pick(s.node_limit, 0);
  p.ep_overlap = pick(s.ep_overlap, false);
  if (p.dispatcher != workload::Dispatcher::deepep)
    p.node_limit = 0;
  return p;
}

// Orders the capacity choices by cost, marks the Pareto front (faster than every cheaper choice) and answers the
// spec's two questions.
void capacity_front(const OptimizeSpec& spec, OptimizeResult& result)
{
  auto& c = result.capacity;
  std::stable_sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.cost < b.cost || (a.cost == b.cost && a.best.effective_step() < b.best.effective_step());
  });
  double fastest_so_far = std::numeric_limits<double>::infinity(), fastest = fastest_so_far;
  for (auto& p : c) {
    p.on_front     = p.best.effective_step() < fastest_so_far;
    fastest_so_far = std::min(fastest_so_far, p.best.effective_step());
    fastest        = std::min(fastest, p.best.effective_step());
  }
  for (std::size_t k = 0; k < c.size(); ++k) {
    if (!result.cheapest_within && c[k].best.effective_step() <= fastest * (1 + spec.capacity.within))
      result.cheapest_within = k;
    if (spec.capacity.budget && c[k].cost <= *spec.capacity.budget &&
        (!result.best_in_budget || c[k].best.effective_step() < c[*result.best_in_budget].best.effective_step()))
      result.best_in_budget = k;
  }
}

} // namespace

OptimizeResult optimize(const OptimizeSpec& spec, const Progress& progress)
{
  const auto started = std::chrono::steady_clock::now();
  topology::Topology topo(spec.topology);
  const int workers  = spec.workers > 0 ? spec.workers : process::available_cores();
  const auto choices = std::make_shared<netsim::AlgorithmCache>(); // each worker process fills its own copy
  OptimizeResult result;
  const bool tiered = IndexedSpace(spec).size() > spec.screen.above;
  auto points       = tiered ? screen_space(spec, topo, workers, result, progress) : enumerate(spec, result.pruned);
  if (!tiered) {
    result.points = points.size();
    for (const auto& [reason, n] : result.pruned)
      result.points += n;
  }

  // Bounds first (cheap), then scores in batches in order of bound, skipping what cannot enter the best K.
  auto bounds = process::parallel_map(points.size(), workers,
                                      [&](std::size_t i) { return encode(bound_point(spec, topo, points[i])); });
  std::vector<Evaluation> feasible;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto o = decode(bounds[i]);
    if (!o.reason.empty()) {
      result.pruned[o.reason]++;
      if (tiered)
        result.feasible--;
      continue;
    }
    Evaluation e;
    e.point       = points[i];
    e.lower_bound = o.lower_bound;
    feasible.push_back(e);
  }
  if (!tiered)
    result.feasible = feasible.size();
  std::stable_sort(feasible.begin(), feasible.end(),
                   [](const Evaluation& a, const Evaluation& b) { return a.lower_bound < b.lower_bound; });
  std::vector<Evaluation> scored;
  const std::size_t batch = static_cast<std::size_t>(std::max(4 * workers, spec.top_k));
  if (progress)
    progress("scoring (analytical)", 0, feasible.size(), 0); // the phase's rate counts from here
  for (std::size_t start = 0; start < feasible.size(); start += batch) {
    double kth = std::numeric_limits<double>::infinity();
    if (static_cast<int>(scored.size()) >= spec.top_k) {
      std::vector<double> scores;
      for (const auto& e : scored)
        scores.push_back(e.score);
      std::nth_element(scores.begin(), scores.begin() + spec.top_k - 1, scores.end());
      kth = scores[spec.top_k - 1];
    }
    std::vector<std::size_t> todo;
    for (std::size_t i = start; i < std::min(feasible.size(), start + batch); ++i)
      if (feasible[i].lower_bound < kth)
        todo.push_back(i);
      else
        result.bound_pruned++;
    auto out = process::parallel_map(todo.size(), workers, [&](std::size_t k) {
      return encode(score_point(spec, topo, feasible[todo[k]].point, choices));
    });
    for (std::size_t k = 0; k < todo.size(); ++k) {
      const auto o = decode(out[k]);
      if (!o.reason.empty()) {
        result.pruned[o.reason]++;
        result.feasible--;
        continue;
      }
      Evaluation e = feasible[todo[k]];
      e.score      = o.score;
      e.metrics    = o.metrics;
      scored.push_back(e);
    }
    if (progress)
      progress("scoring (analytical)", std::min(feasible.size(), start + batch), feasible.size(), best_score(scored));
  }
  result.scored          = scored.size();
  result.scoring_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (scored.empty()) {
    std::string reasons;
    for (const auto& [reason, n] : result.pruned)
      reasons += (reasons.empty() ? "" : ", ") + reason + " " + std::to_string(n);
    throw SpecError(spec.file, "$.search", "no feasible configuration in the search space (pruned: " + reasons + ")");
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const Evaluation& a, const Evaluation& b) { return a.score < b.score; });

  // The production default: order [tp, cp, pp, dp] (DP across the boundary), 1F1B, the network as built (no
  // compression, every step synchronous); the best such point scored.
  const std::vector<Dim> production(workload::kProductionOrder.begin(), workload::kProductionOrder.end());
  const Point network = production_network(spec);
  auto is_default     = [&](const Point& p) {
    Point default_order = p;
    default_order.order = production;
    Point own_network   = p;
    copy_network(network, own_network);
    copy_expert(network, own_network);
    if (own_network.etp == own_network.tp)
      own_network.etp = 0;
    return effective_order(p) == effective_order(default_order) && p.schedule == workload::ScheduleKind::one_f_one_b &&
           p.dp_algorithm == netsim::Algorithm::automatic && own_network == p;
  };
  std::optional<Evaluation> baseline;
  for (const auto& e : scored)
    if (is_default(e.point) && !baseline)
      baseline = e;
  if (!baseline) {
    Point p          = scored.front().point;
    p.order          = production;
    p.schedule       = workload::ScheduleKind::one_f_one_b;
    p.virtual_stages = 1;
    p.dp_algorithm   = netsim::Algorithm::automatic;
    copy_network(network, p);
    copy_expert(network, p);
    auto o = score_point(spec, topo, p, choices);
    if (!o.reason.empty()) {
      // DP across the boundary may be impossible (a site of two GPU generations): 1F1B on the best point's order.
      p.order = scored.front().point.order;
      o       = score_point(spec, topo, p, choices);
    }
    if (!o.reason.empty())
      throw UsageError("the production default (1F1B, order [tp, cp, pp, dp] or the best point's) of the best "
                       "point is infeasible: " +
                       o.reason);
    baseline = Evaluation{p, o.lower_bound, o.score, std::nullopt, o.metrics, std::nullopt, {}};
  }

  // The best single change from it: one knob at a time, over the values of the space. Per dimension the two best
  // by score are re-simulated (the collapsed score misses contention on a saturated long haul), and the best
  // single change overall is the best of those.
  const auto changes = single_changes(spec, baseline->point);
  auto change_scores = process::parallel_map(changes.size(), workers, [&](std::size_t i) {
    return encode(score_point(spec, topo, changes[i].point, choices));
  });
  std::map<SearchDimension, std::vector<std::pair<std::string, Evaluation>>> per_dimension;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    const auto o = decode(change_scores[i]);
    if (!o.reason.empty())
      continue;
    per_dimension[changes[i].dimension].push_back(
        {changes[i].description,
         Evaluation{changes[i].point, o.lower_bound, o.score, std::nullopt, o.metrics, std::nullopt, {}}});
  }
  constexpr std::size_t kRefinedPerDimension = 2;
  for (auto& [dim, list] : per_dimension) {
    std::stable_sort(list.begin(), list.end(),
                     [](const auto& a, const auto& b) { return a.second.score < b.second.score; });
    if (list.size() > kRefinedPerDimension)
      list.resize(kRefinedPerDimension);
  }

  // The capacity front: every structure (a point but for its capacity) that scored best or second best at some
  // capacity, evaluated at every capacity, so that each capacity's best is chosen at the refine fidelity among the
  // same candidates (more capacity can then never look slower for want of a candidate).
  std::vector<Evaluation> capacity_runs;
  std::size_t capacity_choices = 0;
  if (spec.space.inter_building.size() > 1 || spec.space.inter_region.size() > 1) {
    std::vector<Point> structures;
    auto structure_of = [](Point p) {
      p.inter_building = 0;
      p.inter_region   = 0;
      return p;
    };
    for (double ib : spec.space.inter_building)
      for (double ir : spec.space.inter_region) {
        std::vector<const Evaluation*> at;
        for (const auto& e : scored)
          if (e.point.inter_building == ib && e.point.inter_region == ir)
            at.push_back(&e);
        std::stable_sort(at.begin(), at.end(), [](auto* a, auto* b) { return a->score < b->score; });
        for (std::size_t k = 0; k < std::min<std::size_t>(2, at.size()); ++k) {
          const Point s = structure_of(at[k]->point);
          if (std::find(structures.begin(), structures.end(), s) == structures.end())
            structures.push_back(s);
        }
      }
    if (structures.empty())
      structures.push_back(structure_of(scored.front().point));
    for (double ib : spec.space.inter_building)
      for (double ir : spec.space.inter_region) {
        ++capacity_choices;
        for (const auto& s : structures) {
          Evaluation e;
          e.point                = s;
          e.point.inter_building = ib;
          e.point.inter_region   = ir;
          capacity_runs.push_back(e);
        }
      }
  }

  // Re-simulate the best K, the baseline, the changes and the capacity candidates at the refine fidelity.
  std::vector<Evaluation> refine(scored.begin(), scored.begin() + std::min<std::size_t>(scored.size(), spec.top_k));
  const std::size_t ranked_count = refine.size();
  refine.push_back(*baseline);
  for (const auto& [dim, list] : per_dimension)
    for (const auto& change : list)
      refine.push_back(change.second);
  refine.insert(refine.end(), capacity_runs.begin(), capacity_runs.end());
  const std::string phase = "re-simulating the best (" + std::string(name_of(spec.refine)) + ")";
  if (progress)
    progress(phase, 0, refine.size(), 0);
  // Each distinct point once (a capacity candidate is often one of the best K).
  std::map<std::string, std::size_t> first_of;
  std::vector<std::size_t> distinct;
  for (std::size_t i = 0; i < refine.size(); ++i)
    if (first_of.emplace(refine[i].point.label(), i).second)
      distinct.push_back(i);
  auto refined = process::parallel_map(distinct.size(), workers, [&](std::size_t k) {
    return encode(refine_point(spec, topo, refine[distinct[k]].point, choices));
  });
  for (std::size_t k = 0; k < distinct.size(); ++k) {
    auto& e      = refine[distinct[k]];
    const auto o = decode(refined[k]);
    e.refined    = o.score;
    e.metrics    = o.metrics;
    if (spec.reliability)
      goodput(spec, topo, e);
  }
  for (std::size_t i = 0; i < refine.size(); ++i) {
    const auto& first  = refine[first_of.at(refine[i].point.label())];
    refine[i].refined  = first.refined;
    refine[i].metrics  = first.metrics;
    refine[i].ettr     = first.ettr;
    refine[i].recovery = first.recovery;
  }
  if (progress)
    progress(
        phase, refine.size(), refine.size(),
        *std::min_element(refine.begin(), refine.begin() + ranked_count, [](const Evaluation& a, const Evaluation& b) {
           return *a.refined < *b.refined;
         })->refined);
  auto faster = [&](const Evaluation& a, const Evaluation& b) {
    return spec.time_to_train ? a.effective_step() < b.effective_step() : *a.refined < *b.refined;
  };
  std::size_t next = ranked_count + 1;
  for (const auto& [dim, list] : per_dimension) {
    std::optional<OptimizeResult::DimensionChange> best;
    for (const auto& change : list) {
      const auto& e = refine[next++];
      if (!best || faster(e, best->evaluation))
        best = OptimizeResult::DimensionChange{dim, change.first, e};
    }
    result.by_dimension.push_back(*best);
    if (result.single_change.empty() || faster(best->evaluation, result.best_single_change)) {
      result.single_change      = best->change;
      result.best_single_change = best->evaluation;
    }
  }
  for (std::size_t c = 0; c < capacity_choices; ++c) {
    const std::size_t per = capacity_runs.size() / capacity_choices;
    std::optional<Evaluation> best;
    for (std::size_t k = 0; k < per; ++k) {
      const auto& e = refine[next++];
      if (!best || faster(e, *best))
        best = e;
    }
    for (std::size_t k = 0; k < ranked_count; ++k) // the best K re-simulated at this capacity count too
      if (refine[k].point.inter_building == best->point.inter_building &&
          refine[k].point.inter_region == best->point.inter_region && faster(refine[k], *best))
        best = refine[k];
    OptimizeResult::CapacityPoint point;
    point.inter_building = best->point.inter_building;
    point.inter_region   = best->point.inter_region;
    const topology::Topology site(topology_of(spec, best->point));
    point.cost = capacity_cost(spec, site);
    point.best = *best;
    result.capacity.push_back(point);
  }
  capacity_front(spec, result);
  result.baseline = refine[ranked_count];
  refine.resize(ranked_count);
  std::stable_sort(refine.begin(), refine.end(), [&](const Evaluation& a, const Evaluation& b) {
    return spec.time_to_train ? a.effective_step() < b.effective_step() : *a.refined < *b.refined;
  });
  result.ranked       = refine;
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

} // namespace spansim::optimizer
