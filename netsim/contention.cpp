// SM contention: NCCL runs each collective's channels as CUDA blocks on SMs of their own, so compute that overlaps
// communication runs on the SMs left. The step is simulated once, each compute op's overlap with its stage's
// overlapped communication (data-parallel gathers and reductions, pipeline transfers) is measured, the op is
// lengthened by what it loses, and the step is simulated again: one fixed-point iteration.
#include "netsim/contention.hpp"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <tuple>

namespace spansim::netsim {

bool contention_applies(const workload::StepGraph& graph)
{
  const auto& gpu = graph.job.gpu;
  if (!graph.job.effects.sm_contention || gpu.gemm.sms < 2)
    return false;
  if (gpu.comm_sms > 0 && gpu.gemm.sms > gpu.comm_sms)
    return true;
  // A GPU file without NCCL's share still lets ops that name their own SMs (a MoE dispatcher's) take them.
  for (const auto& stage : graph.stages)
    for (const auto& op : stage.ops)
      if (!workload::is_compute(op.kind) && op.overlappable && op.sms > 0)
        return true;
  return false;
}

std::vector<std::vector<double>> contention_seconds(const workload::StepGraph& graph, const StepResult& first)
{
  const auto& gpu  = graph.job.gpu;
  const double sms = gpu.gemm.sms;
  std::vector<std::vector<double>> extra(graph.stages.size());
  if (!contention_applies(graph))
    return extra;
  for (std::size_t s = 0; s < graph.stages.size(); ++s) {
    const auto& ops = graph.stages[s].ops;
    // The SMs overlapped communication takes over time: at each moment the largest take among the ops running (an
    // op's own, e.g. a MoE dispatcher's, or NCCL's comm_sms), as a list of (from, to, SMs) segments.
    std::vector<std::pair<double, int>> edges; // (time, +op index + 1 at its start, -(index + 1) at its end)
    for (std::size_t i = 0; i < ops.size(); ++i)
      if (!workload::is_compute(ops[i].kind) && ops[i].overlappable) {
        const auto& t = first.ops[s][i];
        if (t.end > t.active) {
          edges.emplace_back(t.active, static_cast<int>(i) + 1);
          edges.emplace_back(t.end, -static_cast<int>(i) - 1);
        }
      }
    std::sort(edges.begin(), edges.end());
    std::multiset<double> running;
    std::vector<std::tuple<double, double, double>> taken; // (from, to, SMs), disjoint, sorted
    for (std::size_t e = 0; e < edges.size(); ++e) {
      const auto [at, id] = edges[e];
      const auto& op      = ops[static_cast<std::size_t>(std::abs(id) - 1)];
      const double take   = std::min(sms - 1, double(op.sms > 0 ? op.sms : gpu.comm_sms));
      // An op with no SMs named (NCCL's share unknown for this GPU) takes none.
      if (take > 0 && id > 0)
        running.insert(take);
      else if (take > 0)
        running.erase(running.find(take));
      const double next = e + 1 < edges.size() ? edges[e + 1].first : at;
      if (next > at && !running.empty())
        taken.emplace_back(at, next, *running.rbegin());
    }
    extra[s].assign(ops.size(), 0);
    // Compute that already runs on fewer SMs (DeepGEMM beside DeepEP) loses only what communication takes beyond
    // the SMs it leaves.
    const double reserved = workload::reserved_sms(graph.job);
    for (std::size_t i = 0; i < ops.size(); ++i)
      if (workload::is_compute(ops[i].kind) && !ops[i].host) {
        // Work done during the overlap at full rate takes sms / (sms - taken) as long on the SMs left.
        const auto& t = first.ops[s][i];
        auto it       = std::lower_bound(taken.begin(), taken.end(), t.start,
                                         [](const auto& seg, double x) { return std::get<1>(seg) <= x; });
        for (; it != taken.end() && std::get<0>(*it) < t.end; ++it) {
          const auto [from, to, take] = *it;
          const double held           = std::max(take, reserved);
          extra[s][i] +=
              std::max(0.0, std::min(t.end, to) - std::max(t.start, from)) * (held - reserved) / (sms - held);
        }
      }
  }
  return extra;
}

} // namespace spansim::netsim
