// Stage programs: the compute order a pipeline schedule gives each stage, and the op program every rank of the
// stage runs (compute, per-layer collectives, data-parallel gathers and reductions, pipeline sends and receives).
#include "common/error.hpp"
#include "workload/stage_builder.hpp"

#include <algorithm>

namespace spansim::workload {

namespace detail {

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
  } else if (c_.job.recomputes(RecomputeModule::moe) && !paired) {
    // The recomputed MoE layers dispatch and combine again (job.cpp refuses "moe" on the paired schedules).
    end = expert_collectives(u.chunk, u.micro_batch, end, false, false);
  }
  if (c_.cp > 1 && c_.job.recomputes_core_attention()) {
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
  for (int v = 0; v < c_.v; ++v) {
    prog_.chunk_layers.push_back(cost(v).layers);
    prog_.kernels += cost(v).kernels;
    prog_.recomputed += cost(v).recomputed;
  }
  statics.optimizer.deps = reductions_;
  statics.optimizer.deps.insert(statics.optimizer.deps.end(), chain.begin(), chain.end());
  if (const int received = sync_embedding_grads(statics.optimizer.deps); received >= 0)
    statics.optimizer.deps.push_back(received);
  push(std::move(statics.optimizer));
  return std::move(prog_);
}

} // namespace detail

StepGraph build_step_graph(const JobSpec& job, const BuildOptions& options)
{
  if (job.dlrm)
    return build_dlrm_graph(job, options);
  const detail::Context c(job);
  const auto costs = detail::chunk_costs(c);
  StepGraph graph;
  graph.job           = job;
  graph.micro_batches = c.mbs;
  for (int p = 0; p < c.pp; ++p)
    graph.stages.push_back(detail::StageBuilder(c, costs, p).build());
  if (options.check_memory)
    for (const auto& st : graph.stages)
      detail::check_memory(job, st.stage, st.memory);
  return graph;
}

} // namespace spansim::workload
