// Tuning: `auto` settled per step. The per-call policy picks each collective's algorithm with the op's own groups
// running together, but not the other stages' collectives on the same links, so its pick can be the slowest for
// the step. Where a dimension's groups span nodes, the whole step is run analytically (the flow engine's model)
// under the per-call policy and under each algorithm that applies to all of the dimension's calls, and the fastest
// wins; dimensions are settled in turn.
#include "netsim/contention.hpp"
#include "netsim/step_lowering.hpp"

#include <optional>
#include <set>

namespace spansim::netsim {

using workload::Dim;
using workload::OpKind;

namespace {

bool reduces_or_gathers(const workload::Op& op)
{
  return op.kind == OpKind::collective &&
         (op.collective == CollectiveOp::all_reduce || op.collective == CollectiveOp::all_gather ||
          op.collective == CollectiveOp::reduce_scatter);
}

// Dimensions whose collectives (all-reduce, all-gather, reduce-scatter) have a group spanning several nodes:
// there the algorithm decides what crosses the scale-out fabric and its boundaries.
workload::DimArray<bool> dimensions_across_nodes(const topology::Topology& topology, const workload::StepGraph& graph,
                                                 const placement::Placement& placement)
{
  workload::DimArray<bool> across{};
  std::set<std::pair<std::size_t, std::uint32_t>> seen;
  for (std::size_t s = 0; s < graph.stages.size(); ++s)
    for (const auto& op : graph.stages[s].ops) {
      if (!op.dim || across[*op.dim] || !reduces_or_gathers(op) || !seen.insert({s, op.group.key()}).second)
        continue;
      for (const auto& g : placement.groups(static_cast<int>(s), op.group))
        for (int gpu : g)
          if (topology.locate(gpu).node != topology.locate(g.front()).node)
            across[*op.dim] = true;
    }
  return across;
}

// Whether `algorithm` applies to every collective of dimension `d`, on every group it runs on, under the step's
// NCCL settings.
bool applies_to_dimension(const topology::Topology& topology, const workload::StepGraph& graph,
                          const placement::Placement& placement, Dim d, Algorithm algorithm, const NcclSettings& nccl)
{
  std::set<std::tuple<std::size_t, std::uint32_t, int>> seen;
  for (std::size_t s = 0; s < graph.stages.size(); ++s)
    for (const auto& op : graph.stages[s].ops) {
      if (op.kind != OpKind::collective || op.dim != d || op.group.size < 2 ||
          !seen.insert({s, op.group.key(), static_cast<int>(op.collective)}).second)
        continue;
      Collective c;
      c.op   = op.collective;
      c.nccl = nccl;
      for (const auto& gpus : placement.groups(static_cast<int>(s), op.group)) {
        c.gpus = gpus;
        if (!applicable(topology, c, algorithm))
          return false;
      }
    }
  return true;
}

/// @brief A step graph with its compute lengthened by SM contention, and the seconds added per stage.
struct Slowed {
  workload::StepGraph graph;
  std::vector<double> per_stage;
};

/// @brief The step graph with each compute op lengthened by what it lost to NCCL's SMs in `first`
/// (netsim/contention.cpp); nullopt when nothing was lost.
std::optional<Slowed> slowed_by_contention(const workload::StepGraph& graph, const StepResult& first)
{
  const auto extra = contention_seconds(graph, first);
  double total     = 0;
  for (const auto& stage : extra)
    for (double e : stage)
      total += e;
  if (!(total > 0))
    return std::nullopt;
  Slowed slowed{graph, std::vector<double>(graph.stages.size(), 0)};
  for (std::size_t s = 0; s < slowed.graph.stages.size(); ++s)
    for (std::size_t i = 0; i < slowed.graph.stages[s].ops.size(); ++i) {
      auto& op = slowed.graph.stages[s].ops[i];
      op.seconds += extra[s][i];
      op.effects.sm_contention += extra[s][i];
      slowed.per_stage[s] += extra[s][i];
    }
  return slowed;
}

/// @brief A run of the step without SM contention, whose overlaps set the contention.
struct FirstRun {
  StepResult result;
  /// @brief Whether it ran at the step's own fidelity (then it is the step when nothing is lost); otherwise it is
  /// the analytical engine's, standing in for the flow engine's.
  bool own_fidelity = true;
};

// Flow fidelity reads the overlaps off the analytical engine's run when SimGrid computes the same model (equal
// max-min shares, latency then bytes; tests/netsim/test_step.cpp checks both give the same contention), so SimGrid
// runs once, on the step with its compute lengthened, instead of twice.
bool analytical_first(const StepOptions& options)
{
  return options.fidelity == Fidelity::flow && options.engine.simgrid.analytical_model();
}

StepOptions at_analytical(StepOptions options)
{
  options.fidelity = Fidelity::analytical;
  return options;
}

// The step at its fidelity with each compute op lengthened by what it lost in `first`, run on the prepared lowering
// with its compute delays lengthened (only compute seconds differ). Without a first run (the effect cannot apply)
// the step runs as it is.
StepResult with_sm_contention(const topology::Topology& topology, const workload::StepGraph& graph,
                              const placement::Placement& placement, const StepOptions& options,
                              std::optional<FirstRun> first, detail::PreparedStep& prepared)
{
  auto slowed = first ? slowed_by_contention(graph, first->result) : std::nullopt;
  if (!slowed) {
    StepResult r              = first && first->own_fidelity ? std::move(first->result)
                                                             : detail::run_prepared(topology, prepared, graph, placement, options);
    r.engine["sm_contention"] = "none";
    return r;
  }
  detail::retime_compute(prepared, slowed->graph);
  StepResult r    = detail::run_prepared(topology, prepared, slowed->graph, placement, options);
  r.sm_contention = std::move(slowed->per_stage);
  r.engine["sm_contention"] =
      std::to_string(graph.job.gpu.comm_sms) + " of " + std::to_string(graph.job.gpu.gemm.sms) +
      " SMs to communication while it overlaps compute: " +
      (first->own_fidelity ? "compute lengthened after a first run, step run again"
                           : "compute lengthened by the overlaps of the analytical engine's run (the same model), "
                             "step run once at flow fidelity");
  return r;
}

} // namespace

StepResult simulate_step(const topology::Topology& topology, const workload::StepGraph& graph,
                         const placement::Placement& placement, const StepOptions& options)
{
  if (options.collapse_communication) // the optimizer's coarse scoring: one run, no SM contention
    return simulate_step_as_given(topology, graph, placement, options);
  if (!options.choose_per_step) {
    auto prepared = detail::prepare_step(topology, graph, placement, options);
    std::optional<FirstRun> first;
    if (!analytical_first(options))
      first = FirstRun{detail::run_prepared(topology, prepared, graph, placement, options), true};
    else if (contention_applies(graph))
      first = FirstRun{detail::run_prepared(topology, prepared, graph, placement, at_analytical(options)), false};
    auto r                        = with_sm_contention(topology, graph, placement, options, std::move(first), prepared);
    r.engine["collective_choice"] = "per call";
    return r;
  }
  StepOptions chosen     = options;
  chosen.choose_per_step = false;
  const auto across      = dimensions_across_nodes(topology, graph, placement);
  // With the rails apart under ECMP every trial would be a run per rail, and hashed rates rarely end together (a
  // halving-doubling trial of the 16K-GPU step took minutes): the algorithms are tried on the same site with ideal
  // routing (rail symmetry), and the chosen one then runs with ECMP.
  std::optional<topology::Topology> ideal;
  // Only a site built from a template as it stands: an imported graph routes "ideal" by lowest link ids, and faults or
  // degraded links are not in the spec.
  if (topology.spec().multipath.ecmp && !topology.spec().graph && !topology.altered() &&
      detail::rails_apart_decision(topology, graph, placement, options).empty()) {
    auto spec      = topology.spec();
    spec.multipath = {};
    ideal.emplace(std::move(spec));
  }
  const topology::Topology& trial_site = ideal ? *ideal : topology;
  nlohmann::json picks                 = nlohmann::json::object();
  std::optional<StepResult> best_trial; // the fastest analytical trial of the last dimension settled
  std::optional<detail::PreparedStep> best_prepared;
  for (Dim d : workload::kDims) {
    if (options.algorithms[d] != Algorithm::automatic || !across[d])
      continue;
    StepOptions trial = chosen;
    trial.fidelity    = Fidelity::analytical;
    Algorithm best    = Algorithm::automatic;
    best_trial.reset();
    best_prepared.reset();
    unsigned per_call = 0; // what the per-call policy picked in its trial
    for (auto a : {Algorithm::automatic, Algorithm::ring, Algorithm::hierarchical, Algorithm::halving_doubling,
                   Algorithm::tree}) {
      if (!applies_to_dimension(topology, graph, placement, d, a, options.nccl))
        continue; // e.g. tree for FSDP's all-gathers
      // One algorithm for every call is the per-call trial again when the per-call policy picked only it: the same
      // run, and a tie keeps the per-call policy.
      if (a != Algorithm::automatic && per_call == (1u << static_cast<unsigned>(a)))
        continue;
      trial.algorithms[d] = a;
      auto prepared       = detail::prepare_step(trial_site, graph, placement, trial);
      auto r              = detail::run_prepared(trial_site, prepared, graph, placement, trial);
      if (a == Algorithm::automatic)
        per_call = r.auto_picks[d];
      if (!best_trial || r.step_time < best_trial->step_time * (1 - 1e-9)) {
        best          = a;
        best_trial    = std::move(r);
        best_prepared = std::move(prepared);
      }
    }
    chosen.algorithms[d]           = best;
    picks[std::string(name_of(d))] = best == Algorithm::automatic ? "auto (per call)" : std::string(name_of(best));
  }
  // The winning trial is a run of the step without SM contention: at analytical fidelity it is the step's first run
  // and its lowering serves the second; at flow fidelity its overlaps stand in for SimGrid's (its lowering at
  // analytical fidelity times lone NVLink collectives as delays, with the same ends). Otherwise the step is lowered
  // again for the chosen fidelity.
  if (ideal) // the trials ran on another site: neither their lowering nor their overlaps are this step's
    best_trial.reset();
  const bool reuse = best_trial && options.fidelity == Fidelity::analytical;
  if (!reuse)
    best_prepared = detail::prepare_step(topology, graph, placement, chosen);
  std::optional<FirstRun> first;
  if (reuse)
    first = FirstRun{std::move(*best_trial), true};
  else if (!analytical_first(chosen))
    first = FirstRun{detail::run_prepared(topology, *best_prepared, graph, placement, chosen), true};
  else if (contention_applies(graph))
    first =
        FirstRun{best_trial ? std::move(*best_trial)
                            : detail::run_prepared(topology, *best_prepared, graph, placement, at_analytical(chosen)),
                 false};
  auto r = with_sm_contention(topology, graph, placement, chosen, std::move(first), *best_prepared);
  r.engine["collective_choice"] =
      ideal ? "per step, algorithms tried with ideal routing (ECMP's rails apart)" : "per step";
  if (!picks.empty())
    r.engine["collectives_chosen_per_step"] = picks;
  return r;
}

} // namespace spansim::netsim
