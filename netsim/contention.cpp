// SM contention: NCCL runs each collective's channels as CUDA blocks on SMs of their own, so compute that overlaps
// communication runs on the SMs left. The step is simulated once, each compute op's overlap with its stage's
// overlapped communication (data-parallel gathers and reductions, pipeline transfers) is measured, the op is
// lengthened by what it loses, and the step is simulated again: one fixed-point iteration.
#include "netsim/contention.hpp"

#include <algorithm>

namespace spansim::netsim {

using workload::OpKind;

namespace {

// Seconds of [start, end) covered by the sorted, disjoint intervals in `busy`.
double covered(const std::vector<std::pair<double, double>>& busy, double start, double end)
{
  double total = 0;
  auto it      = std::lower_bound(busy.begin(), busy.end(), std::pair{start, start},
                                  [](const auto& a, const auto& b) { return a.second < b.first; });
  for (; it != busy.end() && it->first < end; ++it)
    total += std::max(0.0, std::min(end, it->second) - std::max(start, it->first));
  return total;
}

} // namespace

bool contention_applies(const workload::StepGraph& graph)
{
  const auto& gpu = graph.job.gpu;
  return graph.job.effects.sm_contention && gpu.comm_sms > 0 && gpu.gemm.sms > gpu.comm_sms;
}

std::vector<std::vector<double>> contention_seconds(const workload::StepGraph& graph, const StepResult& first)
{
  const auto& gpu  = graph.job.gpu;
  const double sms = gpu.gemm.sms, comm = gpu.comm_sms;
  std::vector<std::vector<double>> extra(graph.stages.size());
  if (!contention_applies(graph))
    return extra;
  for (std::size_t s = 0; s < graph.stages.size(); ++s) {
    const auto& ops = graph.stages[s].ops;
    std::vector<std::pair<double, double>> busy;
    for (std::size_t i = 0; i < ops.size(); ++i)
      if (!workload::is_compute(ops[i].kind) && ops[i].overlappable) {
        const auto& t = first.ops[s][i];
        if (t.end > t.active)
          busy.emplace_back(t.active, t.end);
      }
    std::sort(busy.begin(), busy.end());
    std::vector<std::pair<double, double>> merged;
    for (const auto& b : busy)
      if (!merged.empty() && b.first <= merged.back().second)
        merged.back().second = std::max(merged.back().second, b.second);
      else
        merged.push_back(b);
    extra[s].assign(ops.size(), 0);
    for (std::size_t i = 0; i < ops.size(); ++i)
      if (workload::is_compute(ops[i].kind)) {
        // Work done during the overlap at full rate takes sms / (sms - comm) as long on the SMs left.
        const auto& t = first.ops[s][i];
        extra[s][i]   = covered(merged, t.start, t.end) * comm / (sms - comm);
      }
  }
  return extra;
}

} // namespace spansim::netsim
