// Stage programs: the compute order a pipeline schedule gives each stage, and the op program every rank of the
// stage runs (compute, per-layer collectives, data-parallel gathers and reductions, pipeline sends and receives).
#include "common/error.hpp"
#include "common/units.hpp"
#include "workload/cost_model.hpp"
#include "workload/schedule.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

namespace spansim::workload {

using namespace detail; // NOLINT: the cost model's types are this file's vocabulary

namespace {

// `deps` followed by `more`: an op's dependencies gathered from several sources.
std::vector<int> with(std::vector<int> deps, const std::vector<int>& more)
{
  deps.insert(deps.end(), more.begin(), more.end());
  return deps;
}

/// @brief The tags of the embedding-gradient exchange (kEmbeddingGradTag - sending stage), clear of the pipeline's
/// and DualPipe's.
constexpr std::int64_t kEmbeddingGradTag = std::numeric_limits<std::int32_t>::min();

/// @brief One side (a send or a receive) of a gradient exchange between two stages of a pipeline group, paired by
/// `tag`; callers set what else differs (its dimension, chunk, overlap).
Op gradient_exchange(OpKind kind, int peer, std::int64_t tag, double bytes, std::vector<int> deps)
{
  return Op{.kind       = kind,
            .purpose    = Purpose::grad_reduce,
            .group      = Group{Axis::pp, 2},
            .bytes      = bytes,
            .count      = 1,
            .peer_stage = peer,
            .tag        = tag,
            .deps       = std::move(deps)};
}

class StageBuilder {
public:
  StageBuilder(const Context& c, const std::vector<ChunkCost>& costs, int stage)
      : c_(c), costs_(costs), stage_(stage), pipe_(c.job)
  {
  }

  StageProgram build();

private:
  int push(Op op)
  {
    prog_.ops.push_back(std::move(op));
    return static_cast<int>(prog_.ops.size()) - 1;
  }
  const ChunkCost& cost(int v) const { return costs_[pipe_.model_chunk(stage_, v)]; }
  /// A pipeline message's tag: a send and its receive share it (pass, direction, model chunk, micro-batch).
  std::int64_t tag(bool forward, int direction, int g, int mb) const
  {
    return ((std::int64_t(forward ? 0 : 1) * 2 + direction) * c_.chunks + g) * c_.mbs + mb;
  }
  /// A run of consecutive layers of the model, and how many of them are MoE layers.
  struct Layers {
    int first_layer = 0;
    int layers      = 0;
    int moe_layers  = 0;
  };
  Layers span(int first, int count) const
  {
    Layers out{first, count, 0};
    for (int l = first; l < first + count; ++l)
      out.moe_layers += c_.m.is_moe_layer(l) ? 1 : 0;
    return out;
  }
  /// Tensor-parallel (and expert-TP) and context-parallel collectives of one pass over chunk v (or the layers of
  /// `range` only), chained after `after`; returns the chain's end.
  std::vector<int> tensor_collectives(int v, int mb, std::vector<int> after, bool backward,
                                      const std::optional<std::vector<int>>& compute_start   = std::nullopt,
                                      const std::optional<std::vector<int>>& attention_start = std::nullopt);
  /// `compute_start`: the deps of the compute op these collectives follow; with TP overlap (and a start given) the
  /// TP all-gathers and reduce-scatters start with that compute instead of after it. `attention_start`: the deps
  /// of the attention kernels' op, under which a ring CP's K/V exchange runs (else under the whole compute).
  std::vector<int> tensor_collectives(int v, int mb, std::vector<int> after, bool backward, Layers range,
                                      const std::optional<std::vector<int>>& compute_start   = std::nullopt,
                                      const std::optional<std::vector<int>>& attention_start = std::nullopt);
  /// The context-parallel collectives of one pass over `layers` layers, by the job's CP variant, after `after` (or,
  /// a ring's, beside the compute that starts after `overlap_start`); returns their end.
  std::vector<int> context_collectives(int v, int mb, std::vector<int> after, bool backward, int layers,
                                       const std::optional<std::vector<int>>& overlap_start);
  /// The expert dispatch and combine of one pass over chunk v after `after`; `overlapped`: they run under the
  /// compute of an overlapped pair. Returns their end (`after` when the chunk has none).
  std::vector<int> expert_collectives(int v, int mb, std::vector<int> after, bool overlapped, bool backward);
  /// One dispatch or combine (`p`) over the MoE layers of `range`; in a backward pass (its gradients go the same ways
  /// in BF16).
  std::vector<int> expert_collective(int v, int mb, std::vector<int> after, bool overlapped, Purpose p, Layers range,
                                     bool backward);
  /// An overlapped pair as Megatron-LM's combined 1F1B runs it (ep_overlap): the forward's layer i with the
  /// backward's layer L - 1 - i, each layer pair in four slots (pre-dispatch compute, the routed experts' input and
  /// weight gradients, their forward, the pre-dispatch backward) with the four all-to-alls between them. Returns the
  /// chain's end.
  std::vector<int> megatron_pair(const Unit& f, const Unit& b, const std::vector<int>& chain);
  /// A forward and a backward pass as one of DualPipe's overlapped cells (dualpipe.py's _forward_backward_chunk): it
  /// starts once both passes' inputs are in, the two compute in turn while the expert all-to-alls of both run under
  /// them (DeepSeek-V3 arranges a pair's components so that they are hidden, arXiv 2412.19437 section 3.2.1), and
  /// both outputs leave when the cell ends. Returns the cell's end.
  std::vector<int> dualpipe_pair(const Unit& f, const Unit& b, const std::vector<int>& chain);
  /// The parameter all-gathers (FSDP/HSDP) of chunk v: the ones its compute waits for, and the ones that overlap
  /// it and must end before it is done.
  struct Gathers {
    std::vector<int> before;
    std::vector<int> during;
  };
  Gathers gather_params(int v, int mb);
  /// Gradient reduction for chunk v: the units reduced while the backward runs start with it (`start`: its
  /// dependencies), the rest after `after`.
  void reduce_grads(int v, int mb, const std::vector<int>& start, const std::vector<int>& after);
  /// The share of chunk v's parameters in its first unit (its first layer and embedding or output layer), which
  /// waits on compute when data parallelism overlaps unit by unit; 1 when it does not.
  double lead_share(int v) const;
  /// What a forward (from the previous chunk) or backward (from the next one) waits for: a pipeline receive, or
  /// the producing unit's end when that chunk is on this stage (DualPipeV's turn); nothing at the pipeline's end.
  std::vector<int> input(const Unit& u);
  /// Hands a forward's activations or a backward's gradients to the next (previous) chunk after `after`: a
  /// pipeline send, or kept for a unit of this stage.
  void output(const Unit& u, const std::vector<int>& after);
  /// A send or receive of unit u's activations or gradients with `peer_stage`, paired by `tag`.
  int transfer(const Unit& u, OpKind kind, int peer_stage, std::int64_t tag, std::vector<int> deps);
  /// On the stages of the embedding group (Pipeline::embedding_group), the exchange of the embedding's gradients
  /// after `after`; returns its receive (-1 elsewhere).
  int sync_embedding_grads(const std::vector<int>& after);

  /// Runs one unit after `chain`: its compute, then its collectives; returns the end of both.
  std::vector<int> run(const Unit& u, const std::vector<int>& chain);
  /// Recomputes backward unit u's activations after `deps`, with the forward collectives the recompute repeats;
  /// returns its end. In a pair (`paired`) a full recompute's expert all-to-alls are left to the caller, which runs
  /// them beside the pair's compute as it runs the pair's own.
  std::vector<int> recompute(const Unit& u, const std::vector<int>& deps, bool paired = false);
  /// DualPipe's full-recompute expert all-to-alls of backward unit u, beside the pair from `start` as the pair's own
  /// run (its backward waits for neither: optimistic); the end to join the pair's (empty when there are none).
  std::vector<int> recompute_experts(const Unit& u, const std::vector<int>& start);
  /// Whether context parallelism passes K/V around a ring under the attention kernels (ring, a2a+p2p).
  bool ring_cp() const
  {
    const auto k = c_.job.parallelism.cp_comm;
    return c_.cp > 1 && (k == CpComm::ring || k == CpComm::a2a_p2p);
  }
  /// A compute op of unit u.
  int compute(OpKind kind, const Unit& u, double model_flops, double hardware_flops, double seconds, double hbm,
              const OpEffects& effects, std::vector<int> deps)
  {
    return push(Op{.kind           = kind,
                   .chunk          = u.chunk,
                   .micro_batch    = u.micro_batch,
                   .model_flops    = model_flops,
                   .hardware_flops = hardware_flops,
                   .seconds        = seconds,
                   .hbm_bytes      = hbm,
                   .effects        = effects,
                   .group          = {},
                   .deps           = std::move(deps)});
  }

  /// @brief One collective of a stage program: what it is, on which group, how large, how often.
  struct Call {
    CollectiveOp op;
    Dim dim;
    Purpose purpose;
    Group group;
    double bytes;
    int count;
    bool overlappable = false;
    double imbalance  = 1;
    int sms           = 0;
  };
  /// Adds a collective of chunk v and micro-batch mb (-1: not tied to one) after `deps`; returns its op.
  int collective(const Call& call, int v, int mb, std::vector<int> deps)
  {
    return push(Op{.kind         = OpKind::collective,
                   .collective   = call.op,
                   .dim          = call.dim,
                   .purpose      = call.purpose,
                   .chunk        = v,
                   .micro_batch  = mb,
                   .group        = call.group,
                   .bytes        = call.bytes,
                   .count        = call.count,
                   .overlappable = call.overlappable,
                   .imbalance    = call.imbalance,
                   .sms          = call.sms,
                   .deps         = std::move(deps)});
  }

  const Context& c_;
  const std::vector<ChunkCost>& costs_;
  int stage_;
  Pipeline pipe_;
  StageProgram prog_;
  std::vector<int> gathered_;      // non-resharding FSDP: all-gather op of each chunk, -1 before its first use
  std::vector<int> backward_done_; // backward passes done per chunk
  std::vector<int> reductions_;
  /// Ends of units handed to a chunk of this stage (DualPipeV's turn): (forward, model chunk, micro-batch).
  std::map<std::tuple<bool, int, int>, std::vector<int>> handed_;
};

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

std::vector<int> StageBuilder::input(const Unit& u)
{
  const bool forward = u.pass == Pass::forward;
  const auto from    = forward ? pipe_.previous(stage_, u.chunk) : pipe_.next(stage_, u.chunk);
  if (!from)
    return {};
  const int g = pipe_.model_chunk(from->stage, from->local), d = pipe_.direction(u.chunk);
  if (from->stage == stage_)
    return handed_.at({forward, g, u.micro_batch});
  return {transfer(u, OpKind::recv, from->stage, tag(forward, d, g, u.micro_batch), {})};
}

void StageBuilder::output(const Unit& u, const std::vector<int>& after)
{
  const bool forward = u.pass == Pass::forward;
  const auto to      = forward ? pipe_.next(stage_, u.chunk) : pipe_.previous(stage_, u.chunk);
  if (!to)
    return;
  const int g = pipe_.model_chunk(stage_, u.chunk);
  if (to->stage == stage_)
    handed_[{forward, g, u.micro_batch}] = after;
  else
    transfer(u, OpKind::send, to->stage, tag(forward, pipe_.direction(u.chunk), g, u.micro_batch), after);
}

std::vector<int> StageBuilder::run(const Unit& u, const std::vector<int>& chain)
{
  const ChunkCost& ch = cost(u.chunk);
  if (u.pass == Pass::weight) {
    // The weight gradients of an earlier backward_input: compute only, then the chunk's gradient reduction.
    const std::vector<int> w{compute(OpKind::weight_grad, u, ch.wgrad_flops, ch.wgrad_flops, ch.wgrad_seconds,
                                     ch.wgrad_hbm, ch.wgrad_effects, chain)};
    reduce_grads(u.chunk, u.micro_batch, chain, w);
    return w;
  }
  const Gathers gathers = gather_params(u.chunk, u.micro_batch);
  std::vector<int> deps = gathers.before;
  if (u.pass == Pass::forward) {
    deps = with(deps, input(u));
    // A ring CP's exchange runs under the attention kernels: the chunk's compute as two ops, the attention last
    // (the same time in all; the exchange starts where the attention does).
    const double attention = ring_cp() ? ch.attention_fwd_seconds : 0;
    const double a_flops   = ring_cp() ? ch.sum.attention_flops : 0;
    int f = compute(OpKind::forward, u, ch.fwd_flops - a_flops, ch.fwd_flops - a_flops, ch.fwd_seconds - attention,
                    ch.fwd_hbm, ch.fwd_effects, with(deps, chain));
    std::optional<std::vector<int>> attention_start;
    if (ring_cp()) {
      attention_start = std::vector<int>{f};
      f               = compute(OpKind::forward, u, a_flops, a_flops, attention, 0, OpEffects{}, {f});
    }
    auto end = tensor_collectives(u.chunk, u.micro_batch, with({f}, gathers.during), false, with(deps, chain),
                                  attention_start);
    end      = expert_collectives(u.chunk, u.micro_batch, end, false, false);
    output(u, end);
    return end;
  }
  std::vector<int> before = chain;
  // Recompute needs no gradient: it runs before the receive so that it can hide the wait.
  if (c_.job.recompute != Recompute::none)
    before = recompute(u, with(deps, chain));
  deps                         = with(deps, input(u));
  const std::vector<int> start = with(deps, before);
  // A whole backward, or its input-gradient part (the weight gradients follow in a weight pass).
  const bool whole          = u.pass == Pass::backward;
  const double weight_flops = whole ? 0 : ch.wgrad_flops;
  OpEffects effects         = ch.bwd_effects;
  if (!whole) {
    effects.sustained_clock -= ch.wgrad_effects.sustained_clock;
    effects.kernel_gaps -= ch.wgrad_effects.kernel_gaps;
  }
  const double attention = ring_cp() ? ch.attention_bwd_seconds : 0;
  const double a_flops   = ring_cp() ? 2 * ch.sum.attention_flops : 0;
  int b =
      compute(OpKind::backward, u, 2 * ch.fwd_flops - weight_flops - a_flops, 2 * ch.fwd_flops - weight_flops - a_flops,
              ch.bwd_seconds - (whole ? 0 : ch.wgrad_seconds) - attention, ch.bwd_hbm - (whole ? 0 : ch.wgrad_hbm),
              effects, start);
  std::optional<std::vector<int>> attention_start;
  if (ring_cp()) {
    attention_start = std::vector<int>{b};
    b               = compute(OpKind::backward, u, a_flops, a_flops, attention, 0, OpEffects{}, {b});
  }
  auto end = tensor_collectives(u.chunk, u.micro_batch, with({b}, gathers.during), true, start, attention_start);
  end      = expert_collectives(u.chunk, u.micro_batch, end, false, true);
  output(u, end);
  if (whole)
    reduce_grads(u.chunk, u.micro_batch, start, end);
  return end;
}

std::vector<int> StageBuilder::recompute(const Unit& u, const std::vector<int>& deps, bool paired)
{
  const ChunkCost& ch  = cost(u.chunk);
  std::vector<int> end = {compute(OpKind::recompute, u, 0, ch.recompute_flops, ch.recompute_seconds, ch.recompute_hbm,
                                  ch.recompute_effects, deps)};
  if (c_.job.recompute == Recompute::full) {
    end = tensor_collectives(u.chunk, u.micro_batch, end, false, deps);
    if (!paired)
      end = expert_collectives(u.chunk, u.micro_batch, end, false, false);
  } else if (c_.cp > 1) {
    // Selective recompute re-runs the core attention, and with it context parallelism's exchange: Megatron
    // checkpoints Transformer Engine's whole context-parallel attention function, which gathers K/V (or passes
    // them around its ring, under the recomputed attention) or runs Ulysses' all-to-alls again.
    end = context_collectives(u.chunk, u.micro_batch, end, false, ch.layers, deps);
  }
  return end;
}

std::vector<int> StageBuilder::recompute_experts(const Unit& u, const std::vector<int>& start)
{
  if (c_.job.recompute != Recompute::full)
    return {};
  auto end = expert_collectives(u.chunk, u.micro_batch, start, true, false);
  return end == start ? std::vector<int>{} : end;
}

std::vector<int> StageBuilder::megatron_pair(const Unit& fu, const Unit& bu, const std::vector<int>& chain)
{
  const ChunkCost& cf = cost(fu.chunk);
  const ChunkCost& cb = cost(bu.chunk);
  // The forward's inputs, then the backward's (recompute first, as for a single backward).
  const Gathers gf        = gather_params(fu.chunk, fu.micro_batch);
  std::vector<int> f_deps = with(gf.before, input(fu));
  const Gathers gb        = gather_params(bu.chunk, bu.micro_batch);
  std::vector<int> b_deps = gb.before, before = chain;
  // Selective recompute only: the all-to-all overlap refuses full recompute (job.cpp), as Megatron does.
  if (c_.job.recompute != Recompute::none)
    before = recompute(bu, with(b_deps, chain), true);
  b_deps                       = with(b_deps, input(bu));
  const std::vector<int> start = with(b_deps, before);

  // Each piece of a pass carries its share (by time) of the pass's FLOPs, HBM bytes and effects.
  struct Pass {
    const Unit& unit;
    double flops, seconds, hbm;
    const OpEffects& effects;
  };
  const Pass fwd{fu, cf.fwd_flops, cf.fwd_seconds, cf.fwd_hbm, cf.fwd_effects};
  const Pass bwd{bu, 2 * cb.fwd_flops, cb.bwd_seconds, cb.bwd_hbm, cb.bwd_effects};
  auto piece = [&](OpKind kind, const Pass& p, double seconds, std::vector<int> deps) {
    const double share = p.seconds > 0 ? seconds / p.seconds : 0;
    OpEffects fx       = p.effects;
    for (double* part :
         {&fx.sustained_clock, &fx.kernel_gaps, &fx.attention_by_length, &fx.grad_clipping, &fx.sm_contention})
      *part *= share;
    return compute(kind, p.unit, p.flops * share, p.flops * share, seconds, p.hbm * share, fx, std::move(deps));
  };
  // Per layer: the routed experts' part of each pass per MoE layer, the rest spread evenly over the chunk's layers.
  const double f_pre = (cf.fwd_seconds - cf.sum.routed_fwd_seconds) / cf.layers;
  const double f_mlp = cf.moe_layers > 0 ? cf.sum.routed_fwd_seconds / cf.moe_layers : 0;
  const double b_pre = (cb.bwd_seconds - cb.wgrad_seconds - cb.sum.routed_dgrad_seconds) / cb.layers;
  const double w_pre = (cb.wgrad_seconds - cb.sum.routed_wgrad_seconds) / cb.layers;
  const double b_mlp = cb.moe_layers > 0 ? cb.sum.routed_dgrad_seconds / cb.moe_layers : 0;
  const double w_mlp = cb.moe_layers > 0 ? cb.sum.routed_wgrad_seconds / cb.moe_layers : 0;

  // Megatron's order (TransformerLayerSchedulePlan::run): the compute stream runs Af, Mb, Mw, Mf, Ab, Aw and the
  // communication stream Cb, Df, Db, Cf, each waiting for what it needs of the other (Megatron's events).
  std::vector<int> f_prev = with(f_deps, chain), b_prev = start;
  int last_compute = -1;
  const int pairs  = std::max(cf.layers, cb.layers);
  for (int j = 0; j < pairs; ++j) {
    const int fl            = j < cf.layers ? cf.first_layer + j : -1;
    const int bl            = j < cb.layers ? cb.first_layer + cb.layers - 1 - j : -1;
    const bool f_moe        = fl >= 0 && c_.m.is_moe_layer(fl) && c_.ep > 1;
    const bool b_moe        = bl >= 0 && c_.m.is_moe_layer(bl) && c_.ep > 1;
    std::vector<int> cb_end = b_prev;
    if (b_moe) // the combine's backward: the gradients of the experts' outputs go back to them
      cb_end = expert_collective(bu.chunk, bu.micro_batch, b_prev, true, Purpose::ep_dispatch, span(bl, 1), true);
    std::vector<int> f_out;
    if (fl >= 0) {
      last_compute = piece(OpKind::forward, fwd, f_pre, f_prev);
      f_out        = tensor_collectives(fu.chunk, fu.micro_batch, {last_compute}, false, span(fl, 1));
    }
    int mb_op = -1;
    if (b_moe) {
      mb_op        = piece(OpKind::backward, bwd, b_mlp, cb_end);
      last_compute = piece(OpKind::weight_grad, bwd, w_mlp, {});
    }
    std::vector<int> db_end = b_moe ? std::vector<int>{mb_op} : cb_end;
    if (f_moe) {
      const auto df =
          expert_collective(fu.chunk, fu.micro_batch, f_out, true, Purpose::ep_dispatch, span(fl, 1), false);
      if (b_moe)
        db_end = expert_collective(bu.chunk, bu.micro_batch, {mb_op}, true, Purpose::ep_combine, span(bl, 1), true);
      last_compute = piece(OpKind::forward, fwd, f_mlp, df);
      f_out =
          expert_collective(fu.chunk, fu.micro_batch, {last_compute}, true, Purpose::ep_combine, span(fl, 1), false);
    } else if (b_moe) {
      db_end = expert_collective(bu.chunk, bu.micro_batch, {mb_op}, true, Purpose::ep_combine, span(bl, 1), true);
    }
    if (fl >= 0)
      f_prev = f_out;
    if (bl >= 0) {
      const int ab = piece(OpKind::backward, bwd, b_pre, db_end);
      b_prev       = tensor_collectives(bu.chunk, bu.micro_batch, {ab}, true, span(bl, 1));
      last_compute = piece(OpKind::weight_grad, bwd, w_pre, {});
    }
  }
  f_prev = with(f_prev, gf.during);
  b_prev = with(b_prev, gb.during);
  output(fu, f_prev);
  output(bu, b_prev);
  reduce_grads(bu.chunk, bu.micro_batch, start, with(b_prev, {last_compute}));
  return with(with(f_prev, b_prev), {last_compute});
}

std::vector<int> StageBuilder::dualpipe_pair(const Unit& fu, const Unit& bu, const std::vector<int>& chain)
{
  const ChunkCost& cf    = cost(fu.chunk);
  const ChunkCost& cb    = cost(bu.chunk);
  const Gathers gf       = gather_params(fu.chunk, fu.micro_batch);
  const Gathers gb       = gather_params(bu.chunk, bu.micro_batch);
  std::vector<int> start = with(with(chain, gf.before), gb.before);
  start                  = with(start, input(fu));
  if (c_.job.recompute != Recompute::none)
    start = with(start, recompute(bu, start, true));
  start = with(start, input(bu));
  const int f =
      compute(OpKind::forward, fu, cf.fwd_flops, cf.fwd_flops, cf.fwd_seconds, cf.fwd_hbm, cf.fwd_effects, start);
  const auto f_end     = tensor_collectives(fu.chunk, fu.micro_batch, with({f}, gf.during), false);
  const int b          = compute(OpKind::backward, bu, 2 * cb.fwd_flops, 2 * cb.fwd_flops, cb.bwd_seconds, cb.bwd_hbm,
                                 cb.bwd_effects, f_end);
  std::vector<int> end = tensor_collectives(bu.chunk, bu.micro_batch, with({b}, gb.during), true);
  // The pair's all-to-alls run beside its compute, after `start`; a chunk without any hands `start` back, which the
  // end must not take in again (it already follows it: the end would double with every pair).
  for (const auto& experts : {expert_collectives(fu.chunk, fu.micro_batch, start, true, false),
                              expert_collectives(bu.chunk, bu.micro_batch, start, true, true)})
    if (experts != start)
      end = with(end, experts);
  end = with(end, recompute_experts(bu, start));
  output(fu, end);
  output(bu, end);
  reduce_grads(bu.chunk, bu.micro_batch, start, end);
  return end;
}

StageProgram StageBuilder::build()
{
  prog_.stage = stage_;
  gathered_.assign(c_.v, -1);
  backward_done_.assign(c_.v, 0);
  std::vector<int> chain; // the end of the previous unit: compute is serialized with its exposed collectives
  const auto units = schedule_units(c_.job, stage_);
  for (std::size_t i = 0; i < units.size(); ++i) {
    if (!units[i].paired || i + 1 >= units.size()) {
      chain = run(units[i], chain);
      continue;
    }
    if (c_.job.schedule.ep_overlap) {
      chain = megatron_pair(units[i], units[i + 1], chain);
      ++i;
      continue;
    }
    chain = dualpipe_pair(units[i], units[i + 1], chain);
    ++i;
  }

  // Optimizer step over the local shard, once every gradient is reduced.
  auto statics = stage_statics(c_, costs_, stage_);
  prog_.params = statics.dense_params + statics.expert_params;
  prog_.memory = statics.memory;
  for (int v = 0; v < c_.v; ++v)
    prog_.chunk_layers.push_back(cost(v).layers);
  statics.optimizer.deps = reductions_;
  statics.optimizer.deps.insert(statics.optimizer.deps.end(), chain.begin(), chain.end());
  if (const int received = sync_embedding_grads(statics.optimizer.deps); received >= 0)
    statics.optimizer.deps.push_back(received);
  push(std::move(statics.optimizer));
  return std::move(prog_);
}

} // namespace

namespace detail {

double lead_share(const Context& c, const ChunkCost& ch)
{
  const double total = ch.sum.params + ch.extra_params;
  if (!c.job.effects.dp_overlap_by_unit || ch.layers < 2 || total <= 0)
    return 1;
  return std::min(1.0, (ch.params_max_layer + ch.extra_params) / total);
}

double tp_activation_bytes(const Context& c)
{
  return c.tokens * c.m.hidden * kBf16;
}

double tp_gather_bytes(const Context& c)
{
  // Transformer Engine quantizes a column-parallel GEMM's local rows and all-gathers the quantized copy
  // (module/linear.py: input_quantizer, then gather_along_first_dim; distributed.py routes delayed and current FP8,
  // block-wise, MXFP8 and NVFP4 to quantized all-gathers, their scales beside the data, current scaling's amax
  // reduced over the TP group first); so did TE 1.x (cast_to_fp8 before the gather).
  return c.tokens * c.m.hidden * quantized_bytes(c.job.precision, c.job.fp8_recipe);
}

double cp_kv_heads(const Context& c, int a2a)
{
  // Ulysses needs a K/V head per rank of its group: fewer are replicated up to the group's size.
  return std::max(std::ceil(double(c.m.kv_heads) / c.tp), double(a2a));
}

std::pair<double, double> cp_a2a_bytes(const Context& c, int a2a)
{
  const ModelSpec& m  = c.m;
  const double heads  = double(m.heads) / c.tp;
  const double kv     = m.attention == AttentionKind::mla ? heads : cp_kv_heads(c, a2a);
  const double tokens = c.tokens; // the rank's share of the sequence, micro-batch included
  return {kBf16 * tokens * (heads * qk_dim(m) + kv * (qk_dim(m) + v_dim(m))), kBf16 * tokens * heads * v_dim(m)};
}

double cp_ring_kv_bytes(const Context& c, int a2a)
{
  return cp_kv_bytes(c) * cp_kv_heads(c, a2a) / cp_kv_heads(c, 1) / a2a;
}

double cp_kv_bytes(const Context& c)
{
  // MLA too: Megatron up-projects the latent into per-head K and V before the core attention, which context
  // parallelism wraps (multi_latent_attention.py), so its heads are all K/V heads (kv_heads = heads) at qk_dim, v_dim.
  const ModelSpec& m    = c.m;
  const double kv_token = kBf16 * std::ceil(double(m.kv_heads) / c.tp) * (qk_dim(m) + v_dim(m));
  return kv_token * double(c.job.batch.micro_batch) * c.job.batch.sequence_length;
}

double cp_working_bytes(const Context& c)
{
  if (c.cp <= 1)
    return 0;
  const auto& par = c.job.parallelism;
  // A ring of n ranks (Transformer Engine's P2P attention, context_parallel.py): the forward keeps every chunk it
  // received until it ends (p2p_comm_buffers), n - 1 beyond the rank's own; the backward holds K/V and their
  // gradients, each double-buffered: three.
  auto ring    = [](double local_chunk, int n) { return std::max(n - 1, 3) * local_chunk; };
  auto ulysses = [&](int a) {
    const auto [qkv, out] = cp_a2a_bytes(c, a); // received as large as sent
    return qkv + out;
  };
  switch (par.cp_comm) {
  case CpComm::allgather: {
    // Backward gathers the whole sequence's K/V again and holds their gradients until the reduce-scatter (the
    // forward holds the gathered K/V only): twice the gathered buffer, less the rank's own K/V.
    const double kv = cp_kv_bytes(c);
    return 2 * kv - kv / c.cp;
  }
  case CpComm::ring:
    return ring(cp_kv_bytes(c) / c.cp, c.cp);
  case CpComm::a2a:
    return ulysses(c.cp);
  case CpComm::a2a_p2p: {
    // After the all-to-all a rank holds a times the tokens for 1/a of the heads; the ring passes those chunks.
    const int a = par.cp_a2a;
    return ulysses(a) + ring(cp_ring_kv_bytes(c, a) * a / c.cp, c.cp / a);
  }
  }
  return 0;
}

double token_bytes(const Context& c, bool dispatch)
{
  // FP8 dispatch (DeepEP's, DeepSeek-V3's): a byte per element and an fp32 scale per 128 elements.
  const bool fp8 = dispatch && c.job.dispatch.precision == Precision::fp8;
  return c.m.hidden * (fp8 ? quantized_bytes(Precision::fp8, Fp8Recipe::blockwise) : kBf16);
}

double ep_buffer_bytes(const Context& c, bool dispatch)
{
  return c.tokens / c.sp * c.m.moe.experts_per_token * token_bytes(c, dispatch);
}

double allgather_dispatch_bytes(const Context& c, bool dispatch)
{
  return double(c.etp) * c.ep * c.tokens / c.sp * token_bytes(c, dispatch);
}

double expert_tokens(const Context& c)
{
  return c.tokens / c.tp * c.m.moe.experts_per_token * c.etp;
}

double etp_buffer_bytes(const Context& c)
{
  return expert_tokens(c) * c.m.hidden * kBf16;
}

double pp_message_bytes(const Context& c)
{
  return c.tokens * c.m.hidden * kBf16 / c.sp;
}

GatherBytes param_gather_bytes(const Context& c, const ChunkCost& ch)
{
  // Megatron's fp8_param_gather keeps the FP8 layers' weights as FP8 tensors, so the distributed optimizer
  // all-gathers them in FP8 (Megatron-LM's MoE README: "50% parameter all-gather", "With FP8 primary weights").
  const double low    = c.job.low_precision_param_gather ? quantized_bytes(c.job.precision, c.job.fp8_recipe) : kBf16;
  const double linear = ch.sum.dense_linear_params;
  return {.dense  = kBf16 * (ch.sum.dense_params + ch.extra_params - linear) + low * linear,
          .expert = low * (ch.sum.params - ch.sum.dense_params)};
}

namespace {

// A chunk's weights as they are held between steps: BF16, or FP8 primary weights as Transformer Engine keeps them,
// the linear layers' data in both layouts (module/base.py quantizes a primary weight with rowwise and columnwise
// usage: the forward's copy and the backward's, Hopper's transpose or MXFP8's column-wise blocks), norms, router,
// embedding and output layer in BF16.
GatherBytes resident_weight_bytes(const Context& c, const ChunkCost& ch)
{
  GatherBytes held = param_gather_bytes(c, ch);
  if (c.job.low_precision_param_gather) {
    const double low = quantized_bytes(c.job.precision, c.job.fp8_recipe);
    held.dense += low * ch.sum.dense_linear_params;
    held.expert *= 2;
  }
  return held;
}

// The low-precision copies that BF16 primary weights leave cached: Transformer Engine quantizes a weight on the first
// micro-batch and keeps the copy (both layouts) in the module's weight workspace for the others, as Megatron passes
// is_first_microbatch; every linear layer holds one between steps. None in BF16 or with FP8 primary weights.
double weight_cache_bytes(const Context& c, const ChunkCost& ch)
{
  if (c.job.precision == Precision::bf16 || c.job.low_precision_param_gather)
    return 0;
  const double linear = ch.sum.dense_linear_params + (ch.sum.params - ch.sum.dense_params);
  return 2 * quantized_bytes(c.job.precision, c.job.fp8_recipe) * linear;
}

} // namespace

StageStatics stage_statics(const Context& c, const std::vector<ChunkCost>& costs, int stage)
{
  const auto& par = c.job.parallelism;
  StageStatics out;
  double unit_max = 0, cached = 0;
  GatherBytes held;
  const Pipeline pipe(c.job);
  for (int v = 0; v < c.v; ++v) {
    const ChunkCost& ch = costs[pipe.model_chunk(stage, v)];
    out.dense_params += ch.sum.dense_params + ch.extra_params;
    out.expert_params += ch.sum.params - ch.sum.dense_params;
    const GatherBytes g = param_gather_bytes(c, ch);
    out.gather.dense += g.dense;
    out.gather.expert += g.expert;
    const GatherBytes r = resident_weight_bytes(c, ch);
    held.dense += r.dense;
    held.expert += r.expert;
    cached += weight_cache_bytes(c, ch);
    // FSDP unshards one wrapped unit at a time (a transformer layer; the embedding and the output layer are units
    // of their own) and prefetches the next.
    unit_max = std::max({unit_max, ch.params_max_layer, ch.extra_params});
  }
  const double params    = out.dense_params + out.expert_params;
  const int dense_shard  = par.dp_mode == DataParallelMode::ddp    ? 1
                           : par.dp_mode == DataParallelMode::hsdp ? c.cp * par.hsdp_shard
                                                                   : c.cp * c.dp;
  const int expert_shard = par.dp_mode == DataParallelMode::ddp ? 1 : par.edp();
  const double local     = out.dense_params / dense_shard + out.expert_params / expert_shard;
  Op& opt                = out.optimizer;
  opt.kind               = OpKind::optimizer;
  const double mem_rate  = c.job.gpu.hbm_bandwidth * c.job.gpu.elementwise_efficiency;
  opt.hbm_bytes          = kOptimizerTrafficPerParam * local;
  // Gradients reduced in BF16 are cast up into the fp32 main gradients the step reads (Megatron's optimizer,
  // _copy_model_grads_to_main_grads: `.float()` of the buffer's shard, a copy where the buffer is BF16 and a view
  // where it is fp32): one more read of the buffer and a write of fp32.
  if (c.job.gradient_reduce_bytes < kFp32)
    opt.hbm_bytes += (c.job.gradient_reduce_bytes + kFp32) * local;
  opt.seconds = opt.hbm_bytes / mem_rate;
  if (c.job.effects.grad_clipping) {
    // Gradient clipping by global norm (Megatron, FSDP): every local fp32 gradient read once for the norm; the
    // scaling folds into the Adam step that follows. Its reduction across ranks is a few bytes.
    const double clip         = kFp32 * local;
    opt.effects.grad_clipping = clip / mem_rate;
    opt.hbm_bytes += clip;
    opt.seconds += opt.effects.grad_clipping;
  }

  // Memory: weights (resident_weight_bytes), gradients in the buffer's dtype, which is the reduce dtype (Megatron's
  // param_and_grad_buffer.py), and Adam state; then activations at the schedule's peak.
  MemoryEstimate& mem     = out.memory;
  mem.optimizer           = kOptimizerBytesPerParam * local;
  const double grad_bytes = c.job.gradient_reduce_bytes;
  if (par.dp_mode != DataParallelMode::ddp && par.reshard_after_forward) {
    // Sharded at rest; the unit being computed and the one prefetched are whole, and one unit's gradients.
    const double dense_rate  = out.dense_params > 0 ? held.dense / out.dense_params : kBf16;
    const double expert_rate = out.expert_params > 0 ? held.expert / out.expert_params : kBf16;
    mem.weights = dense_rate * out.dense_params / dense_shard + expert_rate * out.expert_params / expert_shard +
                  std::max(dense_rate, expert_rate) * 2 * unit_max;
    mem.gradients = grad_bytes * (local + unit_max);
  } else {
    // Whole weights and their cached low-precision copies (PyTorch FSDP's resharding casts per use instead).
    mem.weights   = held.dense + held.expert + cached;
    mem.gradients = grad_bytes * params;
  }
  // One layer's working set: its activations, and what context parallelism holds around its attention.
  double live = 0, peak = 0, working = 0;
  const double cp_working = cp_working_bytes(c);
  // A micro-batch's activations live from its forward to its backward; a split backward keeps the inputs of the
  // weight gradients until its weight pass, so they count until then.
  for (const Unit& u : schedule_units(c.job, stage)) {
    const ChunkCost& ch = costs[pipe.model_chunk(stage, u.chunk)];
    working             = std::max(working, ch.act_max_layer + cp_working);
    const double sign   = u.pass == Pass::forward ? 1 : u.pass == Pass::backward_input ? 0 : -1;
    live += sign * stored_activations(c, ch);
    peak = std::max(peak, live);
  }
  mem.activations = peak + working;
  return out;
}

void check_memory(const JobSpec& job, int stage, const MemoryEstimate& m)
{
  if (m.total() <= job.gpu.hbm_capacity)
    return;
  using units::format_size;
  throw InfeasibleError(std::string(name_of(JobIssue::memory)), job.file, job.json_path,
                        "the job does not fit in GPU memory: pipeline stage " + std::to_string(stage) + " needs " +
                            format_size(m.total()) + " per GPU (weights " + format_size(m.weights) + ", gradients " +
                            format_size(m.gradients) + ", optimizer state " + format_size(m.optimizer) +
                            ", activations " + format_size(m.activations) + ") but " + job.gpu.name + " has " +
                            format_size(job.gpu.hbm_capacity) +
                            " of HBM; raise tp/pp/dp sharding, recompute more or shrink the micro-batch");
}

} // namespace detail

StepGraph build_step_graph(const JobSpec& job, const BuildOptions& options)
{
  if (job.dlrm)
    return build_dlrm_graph(job, options);
  const Context c(job);
  const auto costs = chunk_costs(c);
  StepGraph graph;
  graph.job           = job;
  graph.micro_batches = c.mbs;
  for (int p = 0; p < c.pp; ++p)
    graph.stages.push_back(StageBuilder(c, costs, p).build());
  if (options.check_memory)
    for (const auto& st : graph.stages)
      check_memory(job, st.stage, st.memory);
  return graph;
}

} // namespace spansim::workload
