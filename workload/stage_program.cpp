// Stage programs: the compute order a pipeline schedule gives each stage, and the op program every rank of the
// stage runs (compute, per-layer collectives, data-parallel gathers and reductions, pipeline sends and receives).
#include "common/error.hpp"
#include "common/units.hpp"
#include "workload/cost_model.hpp"

#include <algorithm>

namespace spansim::workload {

using namespace detail; // NOLINT: the cost model's types are this file's vocabulary

namespace {

struct Unit {
  bool forward;
  int chunk;
  int micro_batch;
};

// Compute order of one pipeline stage. Interleaved 1F1B follows Megatron-LM, with Llama 3's tunable number of
// consecutive micro-batches per chunk (`group`, Megatron's microbatch_group_size_per_vp_stage).
std::vector<Unit> schedule_units(const JobSpec& job, int stage)
{
  const int pp = job.parallelism.pp;
  const int m  = job.micro_batches();
  std::vector<Unit> u;
  switch (job.schedule.kind) {
  case ScheduleKind::gpipe:
    for (int i = 0; i < m; ++i)
      u.push_back({true, 0, i});
    for (int i = 0; i < m; ++i)
      u.push_back({false, 0, i});
    break;
  case ScheduleKind::one_f_one_b: {
    const int warmup = std::min(pp - stage - 1, m);
    for (int i = 0; i < warmup; ++i)
      u.push_back({true, 0, i});
    for (int i = 0; i < m - warmup; ++i) {
      u.push_back({true, 0, warmup + i});
      u.push_back({false, 0, i});
    }
    for (int i = m - warmup; i < m; ++i)
      u.push_back({false, 0, i});
    break;
  }
  case ScheduleKind::interleaved_1f1b: {
    const int v      = job.schedule.virtual_stages;
    const int n      = job.schedule.microbatch_group;
    const int total  = m * v;
    auto fwd         = [&](int k) { return Unit{true, (k / n) % v, (k / (n * v)) * n + k % n}; };
    auto bwd         = [&](int k) { return Unit{false, v - 1 - (k / n) % v, (k / (n * v)) * n + k % n}; };
    const int warmup = std::min((pp - stage - 1) * 2 + (v - 1) * n, total);
    for (int k = 0; k < warmup; ++k)
      u.push_back(fwd(k));
    for (int k = 0; k < total - warmup; ++k) {
      u.push_back(fwd(warmup + k));
      u.push_back(bwd(k));
    }
    for (int k = total - warmup; k < total; ++k)
      u.push_back(bwd(k));
    break;
  }
  }
  return u;
}

class StageBuilder {
public:
  StageBuilder(const Context& c, const std::vector<ChunkCost>& costs, int stage) : c_(c), costs_(costs), stage_(stage)
  {
  }

  StageProgram build();

private:
  int push(Op op)
  {
    prog_.ops.push_back(std::move(op));
    return static_cast<int>(prog_.ops.size()) - 1;
  }
  int global_chunk(int v) const { return v * c_.pp + stage_; }
  std::int64_t tag(bool forward, int g, int mb) const
  {
    return (std::int64_t(forward ? 0 : 1) * c_.chunks + g) * c_.mbs + mb;
  }
  /// Exposed per-layer collectives of one pass over chunk v, chained after `after`; returns the chain's end (the
  /// ops the next one waits for).
  std::vector<int> layer_collectives(int v, int mb, std::vector<int> after, bool backward);
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
  /// The pipeline receive feeding a forward (from the previous chunk) or a backward (from the next one).
  int receive(const Unit& u, int g);
  /// The pipeline send of a forward's activations or a backward's gradients, after `after`.
  void send(const Unit& u, int g, const std::vector<int>& after);
  /// A send or receive of unit u's activations or gradients with `peer_stage`, paired by `tag`.
  int transfer(const Unit& u, OpKind kind, int peer_stage, std::int64_t tag, std::vector<int> deps);

  /// @brief One collective of a stage program: what it is, on which group, how large, how often.
  struct Call {
    CollectiveOp op;
    Dim dim;
    Purpose purpose;
    Group group;
    double bytes;
    int count;
    bool overlappable = false;
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
                   .deps         = std::move(deps)});
  }

  const Context& c_;
  const std::vector<ChunkCost>& costs_;
  int stage_;
  StageProgram prog_;
  std::vector<int> gathered_;      // non-resharding FSDP: all-gather op of each chunk, -1 before its first use
  std::vector<int> backward_done_; // backward passes done per chunk
  std::vector<int> reductions_;
};

std::vector<int> StageBuilder::layer_collectives(int v, int mb, std::vector<int> after, bool backward)
{
  const ChunkCost& ch  = costs_[global_chunk(v)];
  std::vector<int> end = std::move(after);
  const double act     = tp_activation_bytes(c_);
  if (c_.tp > 1) {
    const Group g{Axis::tp, c_.tp};
    // Megatron tensor parallelism: two collectives per pass per layer in the attention and MLP blocks; with
    // sequence parallelism each all-reduce becomes a reduce-scatter plus an all-gather.
    const bool sp = c_.job.parallelism.sequence_parallel;
    for (CollectiveOp kind : sp ? std::vector{CollectiveOp::all_gather, CollectiveOp::reduce_scatter}
                                : std::vector{CollectiveOp::all_reduce})
      end = {collective({kind, Dim::tp, Purpose::tp_activations, g, act, 2 * ch.layers}, v, mb, end)};
  }
  if (c_.cp > 1) {
    // All-gather based context parallelism (Llama 3): K/V of the whole sequence gathered before attention; in
    // backward gathered again and their gradients reduce-scattered. MLA gathers its compressed latent.
    const double kv = cp_kv_bytes(c_);
    const Group g{Axis::cp, c_.cp};
    end = {collective({CollectiveOp::all_gather, Dim::cp, Purpose::cp_kv, g, kv, ch.layers}, v, mb, end)};
    if (backward)
      end = {collective({CollectiveOp::reduce_scatter, Dim::cp, Purpose::cp_kv_grads, g, kv, ch.layers}, v, mb, end)};
  }
  if (c_.ep > 1 && ch.moe_layers > 0) {
    // One dispatch and one combine per MoE layer and pass, carrying the top-k copies of the rank's tokens.
    const double buf = ep_buffer_bytes(c_);
    for (Purpose p : {Purpose::ep_dispatch, Purpose::ep_combine})
      end = {
          collective({CollectiveOp::all_to_all, Dim::ep, p, Group{Axis::ep, c_.ep}, buf, ch.moe_layers}, v, mb, end)};
  }
  return end;
}

double StageBuilder::lead_share(int v) const
{
  return detail::lead_share(c_, costs_[global_chunk(v)]);
}

StageBuilder::Gathers StageBuilder::gather_params(int v, int mb)
{
  const auto& par = c_.job.parallelism;
  if (par.dp_mode == DataParallelMode::ddp)
    return {};
  if (!par.reshard_after_forward && gathered_[v] >= 0)
    return {{gathered_[v]}, {}};
  const ChunkCost& ch     = costs_[global_chunk(v)];
  const double dense      = ch.sum.dense_params + ch.extra_params;
  const double expert     = ch.sum.params - ch.sum.dense_params;
  const bool hsdp         = par.dp_mode == DataParallelMode::hsdp;
  const int shard         = hsdp ? c_.cp * par.hsdp_shard : c_.cp * c_.dp;
  const int edp           = c_.cp * c_.dp / c_.ep;
  const int mb_tag        = par.reshard_after_forward ? mb : -1;
  const AxisSet data_axis = hsdp ? Axis::dp_shard : Axis::dp;
  const Group dense_group{c_.cp > 1 ? AxisSet(Axis::cp) | data_axis : data_axis, shard};
  const Group expert_group{Axis::edp, edp};
  // The first unit is gathered before the compute starts; the next ones are prefetched while it runs.
  const double lead = lead_share(v);
  Gathers out;
  auto gather = [&](std::vector<int>& ids, Group g, double params) {
    if (g.size > 1 && params > 0)
      ids.push_back(collective({CollectiveOp::all_gather, Dim::dp, Purpose::param_gather, g, kBf16 * params, 1, true},
                               v, mb_tag, {}));
  };
  gather(out.before, dense_group, lead * dense);
  gather(out.before, expert_group, lead * expert);
  if (lead < 1) {
    gather(out.during, dense_group, (1 - lead) * dense);
    gather(out.during, expert_group, (1 - lead) * expert);
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
  if (!per_micro_batch && backward_done_[v] < c_.mbs)
    return;
  const ChunkCost& ch = costs_[global_chunk(v)];
  const double dense  = ch.sum.dense_params + ch.extra_params;
  const double expert = ch.sum.params - ch.sum.dense_params;
  const double gb     = c_.job.gradient_reduce_bytes;
  const int edp       = c_.cp * c_.dp / c_.ep;
  const int mb_tag    = per_micro_batch ? mb : -1;
  auto reduce         = [&](CollectiveOp kind, Group g, double bytes, const std::vector<int>& deps) {
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
    reduce_share(1 - lead, start);
  reduce_share(lead, after);
}

int StageBuilder::transfer(const Unit& u, OpKind kind, int peer_stage, std::int64_t tag, std::vector<int> deps)
{
  const double msg = pp_message_bytes(c_);
  return push(Op{.kind         = kind,
                 .dim          = Dim::pp,
                 .purpose      = u.forward ? Purpose::pp_activations : Purpose::pp_gradients,
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

int StageBuilder::receive(const Unit& u, int g)
{
  const int from = u.forward ? (stage_ - 1 + c_.pp) % c_.pp : (stage_ + 1) % c_.pp;
  return transfer(u, OpKind::recv, from, u.forward ? tag(true, g - 1, u.micro_batch) : tag(false, g + 1, u.micro_batch),
                  {});
}

void StageBuilder::send(const Unit& u, int g, const std::vector<int>& after)
{
  const int to = u.forward ? (stage_ + 1) % c_.pp : (stage_ - 1 + c_.pp) % c_.pp;
  transfer(u, OpKind::send, to, tag(u.forward, g, u.micro_batch), after);
}

StageProgram StageBuilder::build()
{
  prog_.stage = stage_;
  gathered_.assign(c_.v, -1);
  backward_done_.assign(c_.v, 0);
  std::vector<int> chain; // the end of the previous unit: compute is serialized with its exposed collectives
  auto with = [](std::vector<int> deps, const std::vector<int>& more) {
    deps.insert(deps.end(), more.begin(), more.end());
    return deps;
  };
  for (const Unit& u : schedule_units(c_.job, stage_)) {
    const int g           = global_chunk(u.chunk);
    const ChunkCost& ch   = costs_[g];
    const Gathers gathers = gather_params(u.chunk, u.micro_batch);
    std::vector<int> deps = gathers.before;
    if (u.forward) {
      if (g > 0)
        deps.push_back(receive(u, g));
      const int f = push(Op{.kind           = OpKind::forward,
                            .chunk          = u.chunk,
                            .micro_batch    = u.micro_batch,
                            .model_flops    = ch.fwd_flops,
                            .hardware_flops = ch.fwd_flops,
                            .seconds        = ch.fwd_seconds,
                            .hbm_bytes      = ch.fwd_hbm,
                            .effects        = ch.fwd_effects,
                            .group          = {},
                            .deps           = with(deps, chain)});
      chain       = layer_collectives(u.chunk, u.micro_batch, with({f}, gathers.during), false);
      if (g < c_.chunks - 1)
        send(u, g, chain);
      continue;
    }
    if (c_.job.recompute != Recompute::none) {
      // Recompute needs no gradient: it runs before the receive so that it can hide the wait.
      chain = {push(Op{.kind           = OpKind::recompute,
                       .chunk          = u.chunk,
                       .micro_batch    = u.micro_batch,
                       .hardware_flops = ch.recompute_flops,
                       .seconds        = ch.recompute_seconds,
                       .hbm_bytes      = ch.recompute_hbm,
                       .effects        = ch.recompute_effects,
                       .group          = {},
                       .deps           = with(deps, chain)})};
      if (c_.job.recompute == Recompute::full)
        chain = layer_collectives(u.chunk, u.micro_batch, chain, false);
    }
    if (g < c_.chunks - 1)
      deps.push_back(receive(u, g));
    const std::vector<int> start = with(deps, chain);
    const int b                  = push(Op{.kind           = OpKind::backward,
                                           .chunk          = u.chunk,
                                           .micro_batch    = u.micro_batch,
                                           .model_flops    = 2 * ch.fwd_flops,
                                           .hardware_flops = 2 * ch.fwd_flops,
                                           .seconds        = ch.bwd_seconds,
                                           .hbm_bytes      = ch.bwd_hbm,
                                           .effects        = ch.bwd_effects,
                                           .group          = {},
                                           .deps           = start});
    chain                        = layer_collectives(u.chunk, u.micro_batch, with({b}, gathers.during), true);
    if (g > 0)
      send(u, g, chain);
    reduce_grads(u.chunk, u.micro_batch, start, chain);
  }

  // Optimizer step over the local shard, once every gradient is reduced.
  auto statics = stage_statics(c_, costs_, stage_);
  prog_.params = statics.dense_params + statics.expert_params;
  prog_.memory = statics.memory;
  for (int v = 0; v < c_.v; ++v)
    prog_.chunk_layers.push_back(costs_[global_chunk(v)].layers);
  statics.optimizer.deps = with(reductions_, chain);
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

double cp_kv_bytes(const Context& c)
{
  const ModelSpec& m    = c.m;
  const double kv_token = m.attention == AttentionKind::mla
                              ? kBf16 * (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim)
                              : kBf16 * std::ceil(double(m.kv_heads) / c.tp) * (qk_dim(m) + v_dim(m));
  return kv_token * double(c.job.batch.micro_batch) * c.job.batch.sequence_length;
}

double ep_buffer_bytes(const Context& c)
{
  return c.tokens / c.sp * c.m.moe.experts_per_token * c.m.hidden * kBf16;
}

double pp_message_bytes(const Context& c)
{
  return c.tokens * c.m.hidden * kBf16 / c.sp;
}

StageStatics stage_statics(const Context& c, const std::vector<ChunkCost>& costs, int stage)
{
  const auto& par = c.job.parallelism;
  StageStatics out;
  double unit_max = 0;
  for (int v = 0; v < c.v; ++v) {
    const ChunkCost& ch = costs[v * c.pp + stage];
    out.dense_params += ch.sum.dense_params + ch.extra_params;
    out.expert_params += ch.sum.params - ch.sum.dense_params;
    // FSDP unshards one wrapped unit at a time (a transformer layer; the embedding and the output layer are units
    // of their own) and prefetches the next.
    unit_max = std::max({unit_max, ch.params_max_layer, ch.extra_params});
  }
  const double params    = out.dense_params + out.expert_params;
  const int dense_shard  = par.dp_mode == DataParallelMode::ddp    ? 1
                           : par.dp_mode == DataParallelMode::hsdp ? c.cp * par.hsdp_shard
                                                                   : c.cp * c.dp;
  const int expert_shard = par.dp_mode == DataParallelMode::ddp ? 1 : c.cp * c.dp / c.ep;
  const double local     = out.dense_params / dense_shard + out.expert_params / expert_shard;
  Op& opt                = out.optimizer;
  opt.kind               = OpKind::optimizer;
  const double mem_rate  = c.job.gpu.hbm_bandwidth * c.job.gpu.elementwise_efficiency;
  opt.hbm_bytes          = kOptimizerTrafficPerParam * local;
  opt.seconds            = opt.hbm_bytes / mem_rate;
  if (c.job.effects.grad_clipping) {
    // Gradient clipping by global norm (Megatron, FSDP): every local fp32 gradient read once for the norm; the
    // scaling folds into the Adam step that follows. Its reduction across ranks is a few bytes.
    const double clip         = kFp32 * local;
    opt.effects.grad_clipping = clip / mem_rate;
    opt.hbm_bytes += clip;
    opt.seconds += opt.effects.grad_clipping;
  }

  // Memory: weights, gradients (fp32 accumulation) and Adam state, then activations at the schedule's peak.
  MemoryEstimate& mem = out.memory;
  mem.optimizer       = kOptimizerBytesPerParam * local;
  if (par.dp_mode != DataParallelMode::ddp && par.reshard_after_forward) {
    // Sharded at rest; the unit being computed and the one prefetched are whole, and one unit's gradients.
    mem.weights   = kBf16 * (local + 2 * unit_max);
    mem.gradients = kFp32 * (local + unit_max);
  } else {
    mem.weights   = kBf16 * params;
    mem.gradients = kFp32 * params;
  }
  double live = 0, peak = 0, working = 0;
  for (const Unit& u : schedule_units(c.job, stage)) {
    const ChunkCost& ch = costs[u.chunk * c.pp + stage];
    working             = std::max(working, ch.act_max_layer);
    live += (u.forward ? 1 : -1) * stored_activations(c, ch);
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
