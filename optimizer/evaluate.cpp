// Evaluating one point of the search (optimizer/evaluate.hpp).
#include "optimizer/evaluate.hpp"

#include "common/error.hpp"
#include "common/process.hpp"

#include <new>
#include <optional>

namespace spansim::optimizer {

using workload::Dim;

int buildings_used(const OptimizeSpec& spec, const topology::Topology& topo)
{
  if (!spec.buildings.empty())
    return static_cast<int>(spec.buildings.size());
  return topo.buildings_needed(spec.base.gpus, spec.gpus_per_node);
}

namespace {

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

netsim::StepOptions step_options(const OptimizeSpec& spec, const Point& p, netsim::Fidelity fidelity, bool collapse)
{
  netsim::StepOptions o;
  o.nccl                   = spec.nccl;
  o.fidelity               = fidelity;
  o.collapse_communication = collapse;
  o.flows_per_pair         = p.flows_per_pair;
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
  placement::PlacementSpec where{p.order, spec.buildings};
  where.gpus_per_node = spec.gpus_per_node;
  b.place.emplace(topo, job, where, spec::Location{spec.file, "$.search.order"});
  // On a heterogeneous site each stage is costed on its building's GPU type.
  b.graph = placement::build_stage_graph(job, topo, *b.place, spec::Location{spec.file, "$.search.order"});
  return b;
}

// A point that runs out of memory, or whose simulation fails, fails alone: the search records why and goes on
// with the others (a search of hours must not end on one point a 2-core machine cannot hold).
template <class Evaluate>
Outcome guarded(Evaluate&& evaluate)
{
  Outcome o;
  try {
    return evaluate();
  } catch (const std::bad_alloc&) {
    o.failure = "out of memory (std::bad_alloc) within the worker's limit (worker_memory)";
  } catch (const SimulationError& e) {
    o.failure = e.what();
  }
  return o;
}

} // namespace

// Bounds a point (compute and bubble with free communication), or names why it cannot run.
Outcome bound_point(const OptimizeSpec& spec, const topology::Topology& topo, const Point& p)
{
  return guarded([&]() -> Outcome {
    try {
      auto b = build(spec, topo, p);
      return {"", "", workload::compute_makespan(b.graph), 0, {}};
    } catch (const InfeasibleError& e) {
      return {e.reason(), "", 0, 0, {}};
    }
  });
}

// Scores a point with the collapsed analytical step, or names why it cannot run.
Outcome score_point(const OptimizeSpec& spec, const topology::Topology& topo, const Point& p)
{
  return guarded([&]() -> Outcome {
    try {
      std::optional<topology::Topology> own;
      const auto& site = site_of(spec, topo, p, own);
      auto b           = build(spec, site, p);
      Outcome o;
      o.lower_bound = workload::compute_makespan(b.graph);
      auto r =
          netsim::simulate_step(site, b.graph, *b.place, step_options(spec, p, netsim::Fidelity::analytical, true));
      o.score   = r.step_time;
      o.metrics = metrics_of(r, site, false);
      add_outer_sync(p, site, b.graph, *b.place, netsim::Fidelity::analytical, o.metrics, o.score);
      return o;
    } catch (const InfeasibleError& e) {
      return {e.reason(), "", 0, 0, {}};
    } catch (const UsageError& e) {
      return {std::string("collectives: ") + e.what(), "", 0, 0, {}};
    }
  });
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

Outcome refine_point(const OptimizeSpec& spec, const topology::Topology& topo, const Point& p)
{
  return guarded([&] {
    std::optional<topology::Topology> own;
    if (spec.refine_multipath)
      own.emplace(topology_of(spec, p, true));
    const auto& site = own ? *own : site_of(spec, topo, p, own);
    auto b           = build(spec, site, p);
    auto r           = netsim::simulate_step(site, b.graph, *b.place, step_options(spec, p, spec.refine, false));
    Outcome o;
    o.score   = r.step_time;
    o.metrics = metrics_of(r, site, true);
    add_outer_sync(p, site, b.graph, *b.place, spec.refine, o.metrics, o.score);
    return o;
  });
}

process::MapOptions worker_options(const OptimizeSpec& spec, int workers)
{
  process::MapOptions o;
  if (workers <= 0)
    workers = process::available_cores();
  o.memory_limit = spec.worker_memory > 0 ? spec.worker_memory : process::physical_memory() / workers;
  o.on_lost      = [](std::size_t, const std::string& why) {
    Outcome failed;
    failed.failure = why;
    return encode(failed);
  };
  return o;
}

std::string evaluate_point(const OptimizeSpec& spec, const topology::Topology& topo, Work work, const Point& point)
{
  return encode(work == Work::score ? score_point(spec, topo, point) : refine_point(spec, topo, point));
}

} // namespace spansim::optimizer
