// Running a placed training step: lower it to flows, run the flows at the chosen fidelity, and read back the
// op timings, the bytes per link (rails and node-local groups a representative stood for added back) and the
// stage breakdowns.
#include "netsim/hybrid.hpp"
#include "netsim/step_lowering.hpp"
#include "netsim/symmetry.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace spansim::netsim {

using workload::Dim;
using workload::is_compute;
using workload::OpKind;

double StageBreakdown::part(Part p) const
{
  return p == Part::compute  ? compute
         : p == Part::bubble ? bubble
         : p == Part::idle   ? idle
                             : exposed[static_cast<Dim>(static_cast<int>(p) - static_cast<int>(Part::exposed_tp))];
}

double StageBreakdown::exposed_total() const
{
  double t = 0;
  for (double e : exposed)
    t += e;
  return t;
}

namespace {

bool is_p2p(OpKind k)
{
  return k == OpKind::send || k == OpKind::recv;
}

/// @brief Runs the lowered graph, folded onto its base building when a building symmetry allows.
RunResult run_symmetric(const topology::Topology& simulated, const FlowGraph& graph, const StepOptions& options)
{
  if (options.building_symmetry && (options.fidelity == Fidelity::analytical || options.fidelity == Fidelity::flow))
    if (auto folded = detail::fold_graph(simulated, graph)) {
      auto result =
          detail::unfold_run(*folded, detail::run_max_min(folded->topology, folded->graph, options.fidelity, options));
      result.settings["building_symmetry"] = folded->description;
      return result;
    }
  auto result                          = detail::run_max_min(simulated, graph, options.fidelity, options);
  result.settings["building_symmetry"] = false;
  return result;
}

} // namespace

bool detail::own_solver_runs(const topology::Topology& topology, const FlowGraph& graph, Fidelity fidelity,
                             const StepOptions& options)
{
  return fidelity == Fidelity::flow && topology.spec().multipath.ecmp && options.own_solver_above > 0 &&
         options.engine.simgrid.analytical_model() && graph.transfer_count() > options.own_solver_above;
}

RunResult detail::run_max_min(const topology::Topology& topology, const FlowGraph& graph, Fidelity fidelity,
                              const StepOptions& options)
{
  if (own_solver_runs(topology, graph, fidelity, options)) {
    auto result                       = run(topology, graph, Fidelity::analytical, options.engine);
    result.settings["max_min_engine"] = "spansim max-min (" + std::to_string(graph.transfer_count()) +
                                        " transfers, above " + std::to_string(options.own_solver_above) + ")";
    return result;
  }
  auto result = run(topology, graph, fidelity, options.engine);
  if (fidelity == Fidelity::flow && topology.spec().multipath.ecmp)
    result.settings["max_min_engine"] = "simgrid";
  return result;
}

// Every rail carries the same traffic when the pods are rail-optimized and turning every node's used GPUs one place
// round (local l to l + 1 mod k) maps the step onto itself: rail r's traffic is then rail 0's moved over by r GPUs.
// Where groups of several GPUs a node sit at one offset of equal blocks of the used GPUs (two EP groups of 32 in a
// rack of 64, and the expert data-parallel groups joining their like members), turning each block one place round
// does: rails 0, p, 2p, ... are simulated and each stands for the p rails of its block.
int detail::symmetric_rails(const topology::Topology& topology, const workload::StepGraph& graph,
                            const placement::Placement& placement, bool turned)
{
  const int gpn = topology.node_gpus();
  // Under ECMP each rail's flows hash onto their own paths: one rail cannot stand for the others.
  if (!topology.rail_optimized() || gpn < 2 || topology.spec().multipath.ecmp)
    return 0;
  // A trace's own sub-groups need not repeat from rail to rail.
  for (const auto& stage : graph.stages)
    for (const auto& op : stage.ops)
      if (op.group.members)
        return 0;
  // TP filling each node with TP rank r on rail r: every other group keeps to one rail, and its images are there.
  bool tp_rails = graph.job.parallelism.tp == gpn;
  for (int r = 0; tp_rails && r < placement.ranks(); ++r)
    tp_rails = topology.locate(placement.gpu(r)).local == placement.coordinates(r).tp;
  if (tp_rails)
    return gpn;
  if (!turned)
    return 0;
  // Otherwise the turn is checked: k used GPUs on every node the job touches (spares beyond them idle), stages and
  // pipeline peers turned with them, and every group in one node, at one offset of the blocks with its turned image
  // a group too, or over all k GPUs of each node it touches (such a group's rings and trees are checked rail by
  // rail when lowered).
  const int k = placement.gpus_per_node() > 0 ? std::min(placement.gpus_per_node(), gpn) : gpn;
  if (k < 2)
    return 0;
  std::unordered_map<int, int> used; // node -> ranks on it
  for (int r = 0; r < placement.ranks(); ++r) {
    const auto at = topology.locate(placement.gpu(r));
    if (at.local >= k || topology.node_gpus_of(placement.gpu(r)) != gpn)
      return 0;
    ++used[at.node];
  }
  for (const auto& [node, n] : used)
    if (n != k)
      return 0;
  auto hash_of = [](std::vector<int> members) {
    std::sort(members.begin(), members.end());
    std::uint64_t h = 0x51ed;
    for (int m : members)
      h = (h ^ static_cast<std::uint64_t>(m)) * 0x100000001b3ULL;
    return h;
  };
  const int stages = static_cast<int>(graph.stages.size());
  // Whether turning each block of p used GPUs one place round maps the step onto itself.
  auto turns = [&](int p) {
    auto turn = [&](int gpu) {
      const int l = topology.locate(gpu).local;
      return gpu - l + l / p * p + (l % p + 1) % p;
    };
    for (int s = 0; s < stages; ++s) {
      const int next = (s + 1) % stages;
      for (int gpu : placement.stage_gpus(s)) {
        const int rank = placement.rank_of_gpu(turn(gpu));
        if (rank < 0 || placement.coordinates(rank).pp != placement.coordinates(placement.rank_of_gpu(gpu)).pp)
          return false;
        if (stages > 1) {
          const int peer = placement.peer_gpu(gpu, next);
          if (topology.locate(peer).local != topology.locate(gpu).local ||
              placement.peer_gpu(turn(gpu), next) != turn(peer))
            return false;
        }
      }
    }
    for (int s = 0; s < stages; ++s) {
      std::set<std::uint64_t> seen;
      for (const auto& op : graph.stages[s].ops) {
        if (op.kind != OpKind::collective || op.group.size < 2 || !seen.insert(op.group.key()).second)
          continue;
        const auto all = placement.groups(s, op.group);
        std::unordered_set<std::uint64_t> groups;
        for (const auto& members : all)
          groups.insert(hash_of(members));
        for (const auto& members : all) {
          std::unordered_map<int, int> per_node;
          bool one_offset = true;
          for (int gpu : members) {
            ++per_node[topology.locate(gpu).node];
            one_offset = one_offset && topology.locate(gpu).local % p == topology.locate(members.front()).local % p;
          }
          if (per_node.size() == 1)
            continue;
          if (one_offset) {
            std::vector<int> image;
            for (int gpu : members)
              image.push_back(turn(gpu));
            if (groups.count(hash_of(image)) == 0)
              return false;
            continue;
          }
          for (const auto& [node, n] : per_node)
            if (n != k)
              return false;
        }
      }
    }
    return true;
  };
  // The whole node first (one rail simulated), then blocks of fewer GPUs (more rails simulated).
  for (int p = k; p >= 2; --p)
    if (k % p == 0 && turns(p))
      return p;
  return 0;
}

namespace detail {

PreparedStep prepare_step(const topology::Topology& topology, const workload::StepGraph& graph,
                          const placement::Placement& placement, const StepOptions& options)
{
  if (options.flows_per_pair < 1 || options.flows_per_pair > 64)
    throw UsageError("flows per pair must be between 1 and 64");
  PreparedStep p;
  // Packet level keeps every flow of a group over whole nodes: merging channels into one flow changes its transport.
  // Hybrid runs its step at flow level, and measures each pattern's correction on the whole collective.
  const bool turned = options.fidelity != Fidelity::packet;
  if (const int rails = options.rail_symmetry ? symmetric_rails(topology, graph, placement, turned) : 0; rails > 0) {
    p.rails = rails;
    p.one_rail.emplace(topology.with_shared_links_divided(rails));
    p.lowered = lower_step(*p.one_rail, graph, placement, options, 0, rails);
    if (!p.lowered.rails_differ)
      return p;
    // A call's rails moved different bytes between nodes: every rail is lowered after all.
    p.rails = 1;
    p.one_rail.reset();
    p.lowered = LoweredStep();
  }
  prepare_rails_apart(topology, graph, placement, options, p);
  if (p.apart.empty())
    p.lowered = lower_step(topology, graph, placement, options, kAllRails);
  return p;
}

void retime_compute(PreparedStep& prepared, const workload::StepGraph& graph)
{
  if (!prepared.apart.empty())
    return; // the rails are lowered afresh from the graph at each run
  for (std::size_t s = 0; s < graph.stages.size(); ++s)
    for (std::size_t i = 0; i < graph.stages[s].ops.size(); ++i)
      if (is_compute(graph.stages[s].ops[i].kind))
        prepared.lowered.graph.set_duration(prepared.lowered.nodes[s][i].start, graph.stages[s].ops[i].seconds);
}

StepResult run_prepared(const topology::Topology& topology, PreparedStep& prepared, const workload::StepGraph& graph,
                        const placement::Placement& placement, const StepOptions& options)
{
  const topology::Topology& simulated = prepared.simulated(topology);
  auto& lowered                       = prepared.lowered;
  const auto& flow_graph              = lowered.graph;
  RunResult run_result;
  if (options.collapse_communication) {
    run_result = run_analytical(simulated, flow_graph);
  } else if (options.fidelity == Fidelity::hybrid) {
    // Flow level with each collective's transfers stretched by its pattern's packet-level correction; the bytes
    // are put back before anything reads them.
    if (!prepared.corrections) {
      auto measured        = detail::measure_corrections(topology, simulated, lowered, options.engine);
      prepared.corrections = {std::move(measured.span_factor), std::move(measured.report)};
    }
    const auto saved = detail::apply_corrections(lowered.graph, lowered, prepared.corrections->first);
    // The corrected step folds onto its base building where the corrections keep the buildings alike.
    auto flow_options     = options;
    flow_options.fidelity = Fidelity::flow;
    run_result            = run_symmetric(simulated, lowered.graph, flow_options);
    detail::restore_bytes(lowered.graph, saved);
    run_result.link_bytes         = link_bytes(simulated, lowered.graph);
    run_result.settings["hybrid"] = prepared.corrections->second;
  } else if (!prepared.apart.empty()) {
    run_result                               = run_rails_apart(topology, prepared, graph, placement, options);
    run_result.settings["building_symmetry"] = false;
  } else {
    run_result = run_symmetric(simulated, flow_graph, options);
  }
  if (!prepared.ecmp.is_null())
    run_result.settings["ecmp"] = prepared.ecmp;
  if (options.collapse_communication)
    run_result.settings = {{"engine", "analytical"}, {"mode", "collapsed communication (optimizer scoring)"}};
  run_result.settings["all_to_all"] = prepared.lowered.all_to_all_isolated
                                          ? "each timed in isolation (its groups together), placed as a delay"
                                          : "every flow";
  if (!options.compression.empty())
    run_result.settings["compression"] = options.compression.to_json();
  if (!options.dp_workers.empty())
    run_result.settings["data_parallel"] = "inside each DiLoCo worker (inner steps)";
  else if (options.dp_within_regions)
    run_result.settings["data_parallel"] = "inside each region (inner steps of cross-region synchronization)";
  return read_back(topology, prepared, graph, placement, std::move(run_result));
}

StepResult read_back(const topology::Topology& topology, const PreparedStep& prepared, const workload::StepGraph& graph,
                     const placement::Placement& placement, RunResult run_result)
{
  const bool rail_only   = prepared.one_rail.has_value();
  const int rails        = prepared.rails;
  const auto& lowered    = prepared.lowered;
  const auto& flow_graph = lowered.graph;
  if (rail_only) {
    const int gpn = topology.node_gpus();
    const int k   = placement.gpus_per_node() > 0 ? std::min(placement.gpus_per_node(), gpn) : gpn;
    std::string simulated;
    for (int l = 0; l < k; l += rails)
      simulated += (simulated.empty() ? "" : ", ") + std::to_string(l);
    run_result.settings["rail_symmetry"] =
        k <= rails ? std::to_string(rails) + " identical rails, rail 0 simulated"
                   : "blocks of " + std::to_string(rails) + " identical rails, rails " + simulated + " simulated";
  } else {
    run_result.settings["rail_symmetry"] = false;
  }

  StepResult r;
  // With the rails apart the transfers read back are the slowest rail's, standing for every rail's.
  r.rails      = prepared.apart.empty() ? rails : static_cast<int>(prepared.apart.size());
  r.auto_picks = lowered.auto_picks;
  r.flow_ops   = flow_graph.ops().size();
  r.engine     = run_result.settings;
  r.link_bytes = std::move(run_result.link_bytes);
  for (std::size_t k = 0; k < lowered.isolated_link_bytes.size() && k < r.link_bytes.size(); ++k)
    r.link_bytes[k] += lowered.isolated_link_bytes[k];
  if (rail_only) {
    // The rails of a block moved what its simulated rail moved over their own NICs and leaves; the shared links
    // carried every rail.
    std::set<std::pair<int, int>> leaves;
    for (int rank = 0; rank < placement.ranks(); ++rank) {
      const int gpu = placement.gpu(rank);
      if (topology.locate(gpu).local % rails != 0)
        continue;
      for (int k = 1; k < rails; ++k) {
        for (int dir = 0; dir < 2; ++dir)
          r.link_bytes[2 * topology.nic_link(gpu + k) + dir] += r.link_bytes[2 * topology.nic_link(gpu) + dir];
        leaves.insert({topology.locate(gpu).leaf, topology.locate(gpu + k).leaf});
      }
    }
    for (auto [from, to] : leaves)
      for (int dir = 0; dir < 2 && topology.leaf_uplink(from) >= 0 && topology.leaf_uplink(to) >= 0; ++dir)
        r.link_bytes[2 * topology.leaf_uplink(to) + dir] += r.link_bytes[2 * topology.leaf_uplink(from) + dir];
    for (std::size_t l = 0; l < topology.links().size(); ++l) {
      auto tier = topology.links()[l].tier;
      if (tier == topology::Tier::pod_aggregation || tier == topology::Tier::inter_building ||
          tier == topology::Tier::building_uplink || tier == topology::Tier::inter_region)
        for (int dir = 0; dir < 2; ++dir)
          r.link_bytes[2 * l + dir] *= rails;
    }
  }
  r.step_time        = run_result.makespan;
  const auto& timing = run_result.ops;
  for (std::size_t k = 0; k < flow_graph.ops().size(); ++k) {
    const auto& op = flow_graph.ops()[k];
    if (op.kind == Op::Kind::transfer && op.bytes > 0 && op.src != op.dst)
      r.transfers.push_back({op.src, op.dst, op.bytes, timing[k].start, timing[k].end, op.qp});
  }

  const auto& nodes = lowered.nodes;
  r.ops.resize(graph.stages.size());
  for (std::size_t s = 0; s < graph.stages.size(); ++s) {
    const auto& ops = graph.stages[s].ops;
    r.ops[s].resize(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& n = nodes[s][i];
      // A compute op is a delay node: it starts when it starts. Other ops start when their start barrier ends.
      double start = is_compute(ops[i].kind) ? timing[n.start].start : timing[n.start].end;
      r.ops[s][i]  = {start, timing[n.end].end, start};
    }
  }
  for (std::size_t s = 0; s < graph.stages.size(); ++s)
    for (std::size_t i = 0; i < graph.stages[s].ops.size(); ++i)
      if (is_p2p(graph.stages[s].ops[i].kind)) {
        auto [ps, pi]      = lowered.peer[s][i];
        r.ops[s][i].active = std::max(r.ops[s][i].start, r.ops[ps][pi].start);
      }

  detail::account_stages(graph, lowered, r);

  const auto& job     = graph.job;
  auto summary        = workload::summarize(graph);
  r.model_flops       = summary.model_flops;
  r.tokens_per_second = r.step_time > 0 && !job.trace_only ? job.tokens_per_step() / r.step_time : 0;
  r.tflops_per_gpu    = r.step_time > 0 ? r.model_flops / r.step_time / static_cast<double>(job.gpus) / 1e12 : 0;
  const double peak   = job.gpu.peak(job.precision);
  r.mfu               = peak > 0 ? r.tflops_per_gpu * 1e12 / peak : 0;
  r.peak_flops        = peak;
  if (!job.trace_only) // a trace without a model has no convention to count by
    r.flops = workload::model_flop_counts(job, r.model_flops);
  return r;
}

} // namespace detail

StepResult simulate_step_as_given(const topology::Topology& topology, const workload::StepGraph& graph,
                                  const placement::Placement& placement, const StepOptions& options)
{
  auto prepared = detail::prepare_step(topology, graph, placement, options);
  return detail::run_prepared(topology, prepared, graph, placement, options);
}

} // namespace spansim::netsim
