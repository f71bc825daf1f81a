// Stage programs, communication: the collectives of a model chunk's layers (tensor, context and expert
// parallelism), the data-parallel parameter gathers and gradient reductions, and pipeline transfers.
#include "workload/stage_builder.hpp"

#include <algorithm>

namespace spansim::workload::detail {

std::vector<int> StageBuilder::tensor_collectives(int v, int mb, std::vector<int> after, bool backward,
                                                  const std::optional<std::vector<int>>& compute_start,
                                                  const std::optional<std::vector<int>>& attention_start)
{
  const ChunkCost& ch = cost(v);
  return tensor_collectives(v, mb, std::move(after), backward, span(ch.first_layer, ch.layers), compute_start,
                            attention_start);
}

std::vector<int> StageBuilder::tensor_collectives(int v, int mb, std::vector<int> after, bool backward, Layers range,
                                                  const std::optional<std::vector<int>>& compute_start,
                                                  const std::optional<std::vector<int>>& attention_start)
{
  const Layers ch      = range;
  std::vector<int> end = std::move(after);
  const double act     = tp_activation_bytes(c_);
  const bool sp        = c_.job.parallelism.sequence_parallel;
  if (c_.tp > 1) {
    const Group g{Axis::tp, c_.tp};
    // Megatron tensor parallelism: a collective before and one after the attention block, and the same around a
    // dense MLP (or a MoE layer's shared experts); with sequence parallelism an all-gather before and a
    // reduce-scatter after, else all-reduces. Routed experts go through the expert-TP group below.
    const int mlps  = ch.layers - ch.moe_layers + (c_.m.moe.shared_experts > 0 ? ch.moe_layers : 0);
    const int count = sp ? ch.layers + mlps : 2 * ch.layers;
    // Overlapped (userbuffers), they run beside the compute that follows compute_start, and what comes next
    // waits for both.
    const bool overlap      = c_.job.parallelism.tp_overlap && compute_start.has_value();
    std::vector<int> tp_end = overlap ? *compute_start : end;
    for (CollectiveOp kind : sp ? std::vector{CollectiveOp::all_gather, CollectiveOp::reduce_scatter}
                                : std::vector{CollectiveOp::all_reduce}) {
      const double bytes = kind == CollectiveOp::all_gather ? tp_gather_bytes(c_) : act;
      tp_end = {collective({kind, Dim::tp, Purpose::tp_activations, g, bytes, count, overlap}, v, mb, tp_end)};
    }
    if (overlap)
      end.insert(end.end(), tp_end.begin(), tp_end.end());
    else
      end = tp_end;
  }
  if (c_.etp > 1 && sp && ch.moe_layers > 0 && c_.job.dispatch.dispatcher != Dispatcher::allgather) {
    // Expert tensor parallelism (Megatron's alltoall and flex dispatchers): the dispatched tokens all-gathered over
    // the etp ranks after the dispatch, the experts' outputs reduce-scattered before the combine.
    const Group g{Axis::etp, c_.etp};
    for (CollectiveOp kind : {CollectiveOp::all_gather, CollectiveOp::reduce_scatter})
      end = {collective({kind, Dim::tp, Purpose::tp_activations, g, etp_buffer_bytes(c_), ch.moe_layers}, v, mb, end)};
  }
  if (c_.cp > 1)
    end = context_collectives(v, mb, end, backward, ch.layers, attention_start ? attention_start : compute_start);
  return end;
}

std::vector<int> StageBuilder::context_collectives(int v, int mb, std::vector<int> after, bool backward, int layers,
                                                   const std::optional<std::vector<int>>& overlap_start)
{
  const auto& par      = c_.job.parallelism;
  std::vector<int> end = std::move(after);
  const Purpose pass   = backward ? Purpose::cp_kv_grads : Purpose::cp_kv;
  // Ulysses: before attention an all-to-all turns the rank's tokens x all its heads into all tokens x its share
  // of the heads (Q, K and V), after it one turns the output back; the backward runs the same two on gradients.
  auto ulysses = [&](Group g) {
    const auto [qkv, out] = cp_a2a_bytes(c_, g.size);
    end                   = {collective({CollectiveOp::all_to_all, Dim::cp, pass, g, qkv, layers}, v, mb, end)};
    end                   = {collective({CollectiveOp::all_to_all, Dim::cp, pass, g, out, layers}, v, mb, end)};
  };
  // K/V of the whole sequence (of the group's heads) gathered; in backward gathered again and their gradients
  // reduce-scattered. A ring passes the same chunks around, each step under one block's attention: overlapped with
  // the attention kernels when a start is given. MLA gathers per-head K and V.
  auto gather = [&](Group g, double kv) {
    const bool ring      = par.cp_comm != CpComm::allgather && overlap_start.has_value();
    std::vector<int> ids = ring ? *overlap_start : end;
    ids = {collective({CollectiveOp::all_gather, Dim::cp, Purpose::cp_kv, g, kv, layers, ring}, v, mb, ids)};
    if (backward)
      ids = {
          collective({CollectiveOp::reduce_scatter, Dim::cp, Purpose::cp_kv_grads, g, kv, layers, ring}, v, mb, ids)};
    if (ring)
      end.insert(end.end(), ids.begin(), ids.end());
    else
      end = ids;
  };
  switch (par.cp_comm) {
  case CpComm::allgather:
  case CpComm::ring:
    gather(Group{Axis::cp, c_.cp}, cp_kv_bytes(c_));
    break;
  case CpComm::a2a:
    ulysses(Group{Axis::cp, c_.cp});
    break;
  case CpComm::a2a_p2p: {
    // The ring first on the CP stream, so that it runs under the attention; the all-to-alls after it.
    const int a = par.cp_a2a;
    gather(Group{Axis::cp_p2p, c_.cp / a}, cp_ring_kv_bytes(c_, a));
    ulysses(Group{Axis::cp_a2a, a});
    break;
  }
  }
  return end;
}

std::vector<int> StageBuilder::expert_collectives(int v, int mb, std::vector<int> after, bool overlapped, bool backward)
{
  const ChunkCost& ch  = cost(v);
  std::vector<int> end = std::move(after);
  for (Purpose p : {Purpose::ep_dispatch, Purpose::ep_combine})
    end = expert_collective(v, mb, end, overlapped, p, span(ch.first_layer, ch.layers), backward);
  return end;
}

std::vector<int> StageBuilder::expert_collective(int v, int mb, std::vector<int> after, bool overlapped, Purpose p,
                                                 Layers range, bool backward)
{
  const Layers ch = range;
  if (c_.ep <= 1 || ch.moe_layers == 0)
    return after;
  // One dispatch and one combine per MoE layer and pass. The busiest member (the routing's imbalance) receives the
  // most in the dispatch and sends the most in the combine: the mean over the layers.
  double imbalance = 0;
  for (int l = ch.first_layer; l < ch.first_layer + ch.layers; ++l)
    imbalance += c_.load.busiest[static_cast<std::size_t>(l)];
  imbalance /= ch.moe_layers;
  const auto& d       = c_.job.dispatch;
  const bool dispatch = p == Purpose::ep_dispatch;
  Call call{.op           = CollectiveOp::all_to_all,
            .dim          = Dim::ep,
            .purpose      = p,
            .group        = Group{Axis::ep, c_.ep},
            .bytes        = ep_buffer_bytes(c_, dispatch && !backward),
            .count        = ch.moe_layers,
            .overlappable = overlapped,
            .imbalance    = imbalance,
            .sms          = d.sms > 0                            ? d.sms
                            : d.dispatcher == Dispatcher::deepep ? kDeepEpSms
                                                                 : 0};
  if (d.dispatcher == Dispatcher::allgather) {
    // Every rank of the expert model-parallel group (etp x ep) gathers their tokens; the combine reduce-scatters.
    call.op    = dispatch ? CollectiveOp::all_gather : CollectiveOp::reduce_scatter;
    call.group = Group{c_.etp > 1 ? Axis::etp | Axis::ep : AxisSet(Axis::ep), c_.etp * c_.ep};
    call.bytes = allgather_dispatch_bytes(c_, dispatch && !backward);
  }
  return {collective(call, v, mb, std::move(after))};
}

double StageBuilder::lead_share(int v) const
{
  return detail::lead_share(c_, cost(v));
}

StageBuilder::Gathers StageBuilder::gather_params(int v, int mb)
{
  const auto& par = c_.job.parallelism;
  if (par.dp_mode == DataParallelMode::ddp)
    return {};
  if (!par.reshard_after_forward && gathered_[v] >= 0)
    return {{gathered_[v]}, {}};
  const GatherBytes bytes = param_gather_bytes(c_, cost(v));
  const bool hsdp         = par.dp_mode == DataParallelMode::hsdp;
  const int shard         = hsdp ? c_.cp * par.hsdp_shard : c_.cp * c_.dp;
  const int edp           = c_.job.parallelism.edp();
  const int mb_tag        = par.reshard_after_forward ? mb : -1;
  const AxisSet data_axis = hsdp ? Axis::dp_shard : Axis::dp;
  const Group dense_group{c_.cp > 1 ? AxisSet(Axis::cp) | data_axis : data_axis, shard};
  const Group expert_group{Axis::edp, edp};
  // The first unit is gathered before the compute starts; the next ones are prefetched while it runs.
  const double lead = lead_share(v);
  Gathers out;
  auto gather = [&](std::vector<int>& ids, Group g, double b) {
    if (g.size > 1 && b > 0)
      ids.push_back(
          collective({CollectiveOp::all_gather, Dim::dp, Purpose::param_gather, g, b, 1, true}, v, mb_tag, {}));
  };
  gather(out.before, dense_group, lead * bytes.dense);
  gather(out.before, expert_group, lead * bytes.expert);
  if (lead < 1) {
    gather(out.during, dense_group, (1 - lead) * bytes.dense);
    gather(out.during, expert_group, (1 - lead) * bytes.expert);
  }
  if (!par.reshard_after_forward) {
    // The data-parallel stream runs in order: its last gather ending means the chunk is whole.
    const auto& last = out.during.empty() ? out.before : out.during;
    gathered_[v]     = last.empty() ? -1 : last.back();
  }
  return out;
}

void StageBuilder::reduce_grads(int v, int mb, const std::vector<int>& start, const std::vector<int>& after)
{
  const auto& par = c_.job.parallelism;
  ++backward_done_[v];
  const bool per_micro_batch = par.dp_mode != DataParallelMode::ddp && par.reshard_after_forward;
  // DualPipe runs half the micro-batches through each of a stage's chunks.
  const int passes = c_.job.schedule.kind == ScheduleKind::dualpipe ? c_.mbs / 2 : c_.mbs;
  if (!per_micro_batch && backward_done_[v] < passes)
    return;
  const ChunkCost& ch          = cost(v);
  const double dense           = ch.sum.dense_params + ch.extra_params;
  const double expert          = ch.sum.params - ch.sum.dense_params;
  const double gb              = c_.job.gradient_reduce_bytes;
  const int edp                = c_.job.parallelism.edp();
  const int mb_tag             = per_micro_batch ? mb : -1;
  std::vector<int> ready_start = start, ready_after = after;
  if (c_.job.schedule.kind == ScheduleKind::dualpipe) {
    // DualPipe holds each model chunk on two stages: each copy's gradients go to the other, then both reduce the sum.
    const int twin = pipe_.twin_stage(stage_), g = pipe_.model_chunk(stage_, v);
    const double bytes   = gb * (dense + expert);
    const auto grad_sync = [&](OpKind kind, int from, std::vector<int> deps) {
      Op op    = gradient_exchange(kind, twin, -1 - (std::int64_t(from) * c_.chunks + g), bytes, std::move(deps));
      op.dim   = Dim::dp;
      op.chunk = v;
      op.overlappable = true;
      return push(std::move(op));
    };
    grad_sync(OpKind::send, stage_, after);
    const int received = grad_sync(OpKind::recv, twin, {});
    ready_start        = {received};
    ready_after        = {received};
  }
  auto reduce = [&](CollectiveOp kind, Group g, double bytes, const std::vector<int>& deps) {
    if (g.size <= 1 || bytes <= 0)
      return deps;
    const int id = collective({kind, Dim::dp, Purpose::grad_reduce, g, bytes, 1, true}, v, mb_tag, deps);
    reductions_.push_back(id);
    return std::vector<int>{id};
  };
  auto with_cp      = [&](Axis a) { return c_.cp > 1 ? Axis::cp | a : AxisSet(a); };
  auto reduce_share = [&](double share, const std::vector<int>& deps) {
    switch (par.dp_mode) {
    case DataParallelMode::ddp:
      reduce(CollectiveOp::all_reduce, Group{with_cp(Axis::dp), c_.cp * c_.dp}, share * gb * dense, deps);
      reduce(CollectiveOp::all_reduce, Group{Axis::edp, edp}, share * gb * expert, deps);
      break;
    case DataParallelMode::fsdp:
      reduce(CollectiveOp::reduce_scatter, Group{with_cp(Axis::dp), c_.cp * c_.dp}, share * gb * dense, deps);
      reduce(CollectiveOp::reduce_scatter, Group{Axis::edp, edp}, share * gb * expert, deps);
      break;
    case DataParallelMode::hsdp: {
      const int shard = c_.cp * par.hsdp_shard;
      const auto rs =
          reduce(CollectiveOp::reduce_scatter, Group{with_cp(Axis::dp_shard), shard}, share * gb * dense, deps);
      reduce(CollectiveOp::all_reduce, Group{Axis::dp_replicate, c_.dp / par.hsdp_shard}, share * gb * dense / shard,
             rs);
      reduce(CollectiveOp::reduce_scatter, Group{Axis::edp, edp}, share * gb * expert, deps);
      break;
    }
    }
  };
  // Backward runs from the last layer to the first: every unit but the first is reduced while it runs (a bucket
  // starts once its layer's gradients are complete; starting with the backward is early by one layer).
  const double lead = lead_share(v);
  if (lead < 1)
    reduce_share(1 - lead, ready_start);
  reduce_share(lead, ready_after);
}

int StageBuilder::sync_embedding_grads(const std::vector<int>& after)
{
  const auto group = pipe_.embedding_group(c_.job.model);
  if (group.empty() || (stage_ != group[0] && stage_ != group[1]))
    return -1;
  // Megatron's finalize_model_grads: once the data-parallel reductions are done, the embedding's gradient (its rank's
  // vocab / tp rows, in the gradient buffer's type) is all-reduced over the group, before the optimizer step and
  // with nothing to hide it. Between two ranks that is each sending the other its whole gradient (a ring's two
  // halves, one after the other, take as long).
  const int peer      = stage_ == group[0] ? group[1] : group[0];
  const double bytes  = c_.job.gradient_reduce_bytes * double(c_.m.vocab) * c_.m.hidden / c_.tp;
  const auto exchange = [&](OpKind kind, int from, std::vector<int> deps) {
    Op op  = gradient_exchange(kind, peer, kEmbeddingGradTag - from, bytes, std::move(deps));
    op.dim = Dim::pp;
    return push(std::move(op));
  };
  exchange(OpKind::send, stage_, after);
  return exchange(OpKind::recv, peer, {});
}

int StageBuilder::transfer(const Unit& u, OpKind kind, int peer_stage, std::int64_t tag, std::vector<int> deps)
{
  const bool forward = u.pass == Pass::forward;
  const double msg   = pp_message_bytes(c_);
  return push(Op{.kind         = kind,
                 .dim          = Dim::pp,
                 .purpose      = forward ? Purpose::pp_activations : Purpose::pp_gradients,
                 .chunk        = u.chunk,
                 .micro_batch  = u.micro_batch,
                 .group        = Group{Axis::pp, c_.pp},
                 .bytes        = msg,
                 .count        = 1,
                 .peer_stage   = peer_stage,
                 .tag          = tag,
                 .overlappable = true,
                 .deps         = std::move(deps)});
}

} // namespace spansim::workload::detail
