// Buffer sizes of a job's collectives and pipeline messages, and what a stage holds once per step: its parameters,
// the optimizer step and its memory estimate.
#include "common/error.hpp"
#include "common/units.hpp"
#include "workload/cost_model.hpp"
#include "workload/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace spansim::workload {

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

} // namespace spansim::workload
