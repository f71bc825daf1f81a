// A job's costs without its op programs: what the optimizer's screen prices a million points with.
#include "workload/cost_model.hpp"
#include "workload/schedule.hpp"

#include <algorithm>

namespace spansim::workload {

JobCosts job_costs(const JobSpec& job, const BuildOptions& options)
{
  const detail::Context c(job);
  const auto costs = detail::chunk_costs(c);
  JobCosts out;
  out.micro_batches = c.mbs;
  // With sequence parallelism an all-gather (quantized in a low precision) and a reduce-scatter (BF16) per block:
  // priced as two collectives of their mean buffer.
  out.tp_bytes = job.parallelism.sequence_parallel ? (detail::tp_gather_bytes(c) + detail::tp_activation_bytes(c)) / 2
                                                   : detail::tp_activation_bytes(c);
  // Context parallelism as the stage programs lower it (context_collectives): a2a+p2p's ring passes the K/V of its
  // share of the heads among cp / cp_a2a ranks, its all-to-alls run among cp_a2a.
  const auto cp_comm  = job.parallelism.cp_comm;
  out.cp_a2a          = cp_comm == CpComm::a2a ? c.cp : cp_comm == CpComm::a2a_p2p ? job.parallelism.cp_a2a : 1;
  out.cp_bytes        = cp_comm == CpComm::a2a_p2p ? detail::cp_ring_kv_bytes(c, out.cp_a2a) : detail::cp_kv_bytes(c);
  const auto ulysses  = detail::cp_a2a_bytes(c, std::max(out.cp_a2a, 1));
  out.cp_a2a_bytes    = out.cp_a2a > 1 ? ulysses.first + ulysses.second : 0;
  out.ep_bytes        = detail::ep_buffer_bytes(c);
  out.ep_gather_bytes = detail::allgather_dispatch_bytes(c, true);
  out.pp_bytes        = detail::pp_message_bytes(c);
  const detail::Pipeline pipe(job);
  for (int p = 0; p < c.pp; ++p) {
    StageCosts s;
    s.lead_share = 0;
    for (int v = 0; v < c.v; ++v) {
      const auto& ch = costs[pipe.model_chunk(p, v)];
      s.forward += ch.fwd_seconds;
      s.backward += ch.bwd_seconds;
      s.wgrad += ch.wgrad_seconds;
      s.recompute += ch.recompute_seconds;
      s.layers += ch.layers;
      s.moe_layers += ch.moe_layers;
      s.lead_share = std::max(s.lead_share, detail::lead_share(c, ch));
    }
    const auto statics    = detail::stage_statics(c, costs, p);
    s.optimizer           = statics.optimizer.seconds;
    s.dense_params        = statics.dense_params;
    s.expert_params       = statics.expert_params;
    s.dense_gather_bytes  = statics.gather.dense;
    s.expert_gather_bytes = statics.gather.expert;
    s.memory              = statics.memory;
    if (options.check_memory)
      detail::check_memory(job, p, s.memory);
    out.stages.push_back(s);
  }
  return out;
}

} // namespace spansim::workload
