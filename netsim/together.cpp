// Several jobs on one network: their lowered steps joined into one flow graph and run once.
#include "netsim/together.hpp"

#include "common/error.hpp"
#include "netsim/step_lowering.hpp"

#include <algorithm>

namespace spansim::netsim {

namespace {

// The ops nothing waits for: a step has ended when they have.
std::vector<int> sinks(const FlowGraph& graph)
{
  std::vector<char> waited(graph.ops().size(), 0);
  for (const auto& op : graph.ops())
    for (int d : op.deps)
      waited[d] = 1;
  std::vector<int> out;
  for (std::size_t i = 0; i < waited.size(); ++i)
    if (!waited[i])
      out.push_back(static_cast<int>(i));
  return out;
}

} // namespace

bool rails_alike(const topology::Topology& topology, const std::vector<JobOnNetwork>& jobs)
{
  for (const auto& job : jobs)
    if (detail::symmetric_rails(topology, *job.graph, *job.placement) != topology.node_gpus())
      return false;
  return true;
}

TogetherResult simulate_together(const topology::Topology& topology, const std::vector<JobOnNetwork>& jobs,
                                 const TogetherOptions& options)
{
  if (jobs.empty())
    throw UsageError("simulate_together: no jobs");
  if (options.fidelity == Fidelity::hybrid)
    throw UsageError("jobs on a shared network run at analytical, flow or packet fidelity (hybrid corrects one "
                     "job's collectives)");
  std::vector<int> owner(static_cast<std::size_t>(topology.gpu_count()), -1);
  // Packet level keeps every flow of a group over whole nodes (netsim/step.cpp).
  const bool turned = options.fidelity != Fidelity::packet;
  bool rails_alike  = options.rail_symmetry;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const auto& p = *jobs[j].placement;
    if (jobs[j].steps < 1)
      throw UsageError("simulate_together: a job runs at least one step");
    for (int r = 0; r < p.ranks(); ++r) {
      int& o = owner[static_cast<std::size_t>(p.gpu(r))];
      if (o >= 0)
        throw UsageError("jobs " + std::to_string(o) + " and " + std::to_string(j) + " both use GPU " +
                         topology.vertex_name(p.gpu(r)));
      o = static_cast<int>(j);
    }
    rails_alike = rails_alike && detail::symmetric_rails(topology, *jobs[j].graph, p, turned) == topology.node_gpus();
  }

  std::vector<detail::PreparedStep> prepared;
  auto prepare = [&] {
    prepared.clear();
    for (const auto& job : jobs) {
      StepOptions o     = job.options;
      o.fidelity        = options.fidelity;
      o.engine          = options.engine;
      o.rail_symmetry   = rails_alike;
      o.rails_apart     = false; // the jobs' lowerings are joined into one graph
      o.choose_per_step = false;
      prepared.push_back(detail::prepare_step(topology, *job.graph, *job.placement, o));
    }
  };
  prepare();
  // One rail stands for all only if it does in every job (a job's calls may differ from rail to rail when lowered).
  if (rails_alike && std::any_of(prepared.begin(), prepared.end(), [](const auto& p) { return !p.one_rail; })) {
    rails_alike = false;
    prepare();
  }
  const topology::Topology& simulated = prepared.front().simulated(topology);

  // Step k of a job waits for its step k - 1 to end (a zero delay after the step's last ops).
  FlowGraph merged;
  std::vector<std::vector<int>> bases(jobs.size()), barriers(jobs.size());
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const auto& graph = prepared[j].lowered.graph;
    const auto last   = sinks(graph);
    for (int k = 0; k < jobs[j].steps; ++k) {
      const int base = merged.append(graph, k == 0 ? std::vector<int>{} : std::vector<int>{barriers[j].back()});
      std::vector<int> ends;
      for (int s : last)
        ends.push_back(base + s);
      bases[j].push_back(base);
      barriers[j].push_back(merged.add_delay(0, std::move(ends)));
    }
  }
  auto run_result = run(simulated, merged, options.fidelity, options.engine);

  TogetherResult out;
  out.makespan = run_result.makespan;
  out.flow_ops = merged.ops().size();
  out.rails    = prepared.front().rails;
  out.engine   = run_result.settings;
  out.engine["jobs_together"] =
      std::to_string(jobs.size()) + " jobs, each step after its previous one; no SM-contention rerun";
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const auto& graph = prepared[j].lowered.graph;
    const auto bytes  = link_bytes(simulated, graph);
    JobTogether part;
    part.all_to_all_isolated = prepared[j].lowered.all_to_all_isolated;
    for (int k = 0; k < jobs[j].steps; ++k) {
      const double start = k == 0 ? 0.0 : part.step_ends.back();
      part.step_ends.push_back(run_result.ops[barriers[j][k]].end);
      RunResult slice;
      slice.makespan   = part.step_ends.back() - start;
      slice.settings   = run_result.settings;
      slice.link_bytes = bytes;
      slice.ops.resize(graph.ops().size());
      for (std::size_t i = 0; i < graph.ops().size(); ++i) {
        const auto& t = run_result.ops[static_cast<std::size_t>(bases[j][k]) + i];
        slice.ops[i]  = {t.start - start, t.end - start};
      }
      auto r = detail::read_back(topology, prepared[j], *jobs[j].graph, *jobs[j].placement, std::move(slice));
      r.transfers.clear();
      r.transfers.shrink_to_fit();
      part.steps.push_back(std::move(r));
    }
    out.jobs.push_back(std::move(part));
  }
  return out;
}

} // namespace spansim::netsim
