// Activation recomputation: what each of Megatron's recompute modules re-runs and frees, a chunk's recompute
// under the job's policy, and the activations a chunk keeps.
#include "workload/cost_model.hpp"

namespace spansim::workload::detail {

// What Megatron's recompute modules re-run beyond their GEMMs (layer_cost adds those) and what they free, per the
// module list of TransformerConfig.recompute_modules: "layernorm" and "mla_up_proj" discard their outputs (the two
// norm outputs; the per-head Q, K and V with their RoPE) and "moe_act" the routed experts' activation output;
// "core_attn", "mlp", "shared_experts" and "moe" checkpoint their inputs and free what they hold inside (the
// attention output; the MLP's intermediates; the MoE layer's token copies and intermediates). The core attention's
// forward itself is a chunk's (chunk_costs), and a recomputed MoE layer's all-to-alls are the stage program's.
void recomputed_modules(const Context& c, const LayerParams& p, const LayerWidths& w, LayerCost& k)
{
  const ModelSpec& m  = c.m;
  const double t      = c.tokens * kBf16; // bytes per element of one token's activations
  const double act_fn = w.act_fn;
  const double kept   = w.mlp_kept / w.act_fn; // of the MLP intermediates' BF16 bytes, what they hold as kept
  const double expert = k.moe ? act_fn * m.moe.expert_ffn / c.tp : 0;
  auto mod            = [&](RecomputeModule r) -> RecomputedModule& { return k.modules[static_cast<std::size_t>(r)]; };
  mod(RecomputeModule::core_attn).freed = t * w.o_kept;
  auto& norms                           = mod(RecomputeModule::layernorm);
  norms.elementwise_bytes               = t * 4 * m.hidden / c.sp; // input_layernorm and pre_mlp_layernorm
  norms.norm_bytes                      = norms.elementwise_bytes;
  norms.kernels += 2;
  norms.freed = t * 2 * m.hidden / c.sp;
  if (m.attention == AttentionKind::mla) {
    auto& up = mod(RecomputeModule::mla_up_proj);
    // RoPE and the concatenation of its part into the per-head Q and K (each q_rank wide), read and written.
    up.elementwise_bytes += t * 4 * w.q;
    up.kernels += 1;
    up.freed = t * (w.q + w.kv);
  }
  auto activation = [&](RecomputeModule r, double width, double freed) {
    auto& a = mod(r);
    a.elementwise_bytes += t * width;
    a.kernels += 1;
    a.freed = t * freed;
  };
  if (!k.moe)
    activation(RecomputeModule::mlp, act_fn * p.ffn_active / c.tp, w.mlp_kept * p.ffn_active / c.tp);
  else {
    // The activation's output is one of act_fn widths (the product of a gated MLP, the GELU output of a plain one).
    activation(RecomputeModule::moe_act, m.moe.experts_per_token * expert, m.moe.experts_per_token * expert / act_fn);
    activation(RecomputeModule::shared_experts, m.moe.shared_experts * expert, m.moe.shared_experts * expert * kept);
    // The whole layer: the router's softmax and top-k, the permute and unpermute, the experts' activations; it
    // frees the token copies the rank's experts compute and every expert's intermediates.
    auto& layer = mod(RecomputeModule::moe);
    layer.elementwise_bytes += k.permute_fwd_bytes + t * (m.moe.experts_per_token + m.moe.shared_experts) * expert;
    layer.permute_bytes += k.permute_fwd_bytes;
    layer.kernels += kMoeKernels + 1;
    layer.freed = t * (w.mlp_kept * p.ffn_active / c.tp + expert_tokens(c) / c.tokens * m.hidden);
  }
}

namespace {

// Selective recompute of the listed modules: the core attention's forward (with its context-parallel exchange,
// stage_program) and each module's GEMMs and element-wise kernels again; the GEMMs' sustained-clock share is not
// kept apart (in the seconds, not named as an effect).
void recompute_modules(const Context& c, double attn_fwd, double mem_rate, bool attention_unclocked, ChunkCost& ch)
{
  double gemm = 0, bytes = 0, flops = 0, elementwise = 0;
  int kernels     = 0;
  KernelTimes& by = ch.recomputed;
  for (const RecomputeModule r : c.job.recompute_modules) {
    const RecomputedModule& m = ch.sum.modules[static_cast<std::size_t>(r)];
    gemm += m.gemm_seconds;
    bytes += m.gemm_bytes + m.elementwise_bytes;
    flops += m.flops;
    elementwise += m.elementwise_bytes;
    kernels += m.kernels;
    by.quantize += m.quantize_seconds;
    by.grouped_gemm += m.grouped_seconds;
    by.gemm += m.gemm_seconds - m.quantize_seconds - m.grouped_seconds;
    by.norms += m.norm_bytes / mem_rate;
    by.permute += m.permute_bytes / mem_rate;
    by.elementwise += (m.elementwise_bytes - m.norm_bytes - m.permute_bytes) / mem_rate;
  }
  double attention = 0;
  if (c.job.recomputes(RecomputeModule::core_attn)) {
    const bool unfused = c.job.attention == AttentionKernel::unfused;
    attention          = attn_fwd;
    kernels += static_cast<int>(ch.layers * (unfused ? 4.0 : kAttentionKernelsForward));
    bytes += ch.sum.unfused_fwd_bytes;
    flops += ch.sum.attention_flops;
    ch.recompute_effects.sustained_clock =
        unfused ? ch.sum.unfused_fwd_clock : (attention_unclocked ? 0 : attn_fwd * (1 - c.clock));
    ch.recompute_effects.attention_by_length = ch.fwd_effects.attention_by_length;
  }
  ch.recompute_effects.kernel_gaps = kernels * c.gap;
  ch.recompute_seconds             = attention + gemm + elementwise / mem_rate + ch.recompute_effects.kernel_gaps;
  by.attention                     = attention;
  by.kernel_gaps                   = ch.recompute_effects.kernel_gaps;
  ch.recompute_hbm                 = bytes;
  ch.recompute_flops               = flops;
}

} // namespace

KernelTimes forward_kernels(double attn_fwd, double mem_rate, const ChunkCost& ch)
{
  const LayerCost& sum = ch.sum;
  KernelTimes k;
  k.quantize     = sum.quantize_fwd_seconds;
  k.grouped_gemm = sum.routed_fwd_gemm;
  k.gemm         = sum.gemm_fwd_seconds - sum.quantize_fwd_seconds - sum.routed_fwd_gemm;
  k.attention    = attn_fwd;
  k.permute      = sum.permute_fwd_bytes / mem_rate;
  k.norms        = sum.norm_bytes / mem_rate;
  k.elementwise  = (sum.elementwise_bytes - sum.norm_bytes) / mem_rate;
  k.kernel_gaps  = ch.fwd_effects.kernel_gaps;
  return k;
}

void add_recompute(const Context& c, double attn_fwd, double mem_rate, bool attention_unclocked, ChunkCost& ch)
{
  const bool unfused = c.job.attention == AttentionKernel::unfused;
  switch (c.job.recompute) {
  case Recompute::none:
    break;
  case Recompute::selective: {
    if (!c.job.recompute_modules.empty()) {
      recompute_modules(c, attn_fwd, mem_rate, attention_unclocked, ch);
      break;
    }
    // spansim's own: the flash-attention forward and three element-wise kernels (norms and the activation) per
    // layer.
    const double kernels = ch.layers * ((unfused ? 4.0 : kAttentionKernelsForward) + 3.0);
    ch.recompute_effects.sustained_clock =
        unfused ? ch.sum.unfused_fwd_clock : (attention_unclocked ? 0 : attn_fwd * (1 - c.clock));
    ch.recompute_effects.attention_by_length = ch.fwd_effects.attention_by_length;
    ch.recompute_effects.kernel_gaps         = kernels * c.gap;
    ch.recompute_seconds      = attn_fwd + ch.sum.selective_bytes / mem_rate + ch.recompute_effects.kernel_gaps;
    ch.recompute_hbm          = ch.sum.selective_bytes + ch.sum.unfused_fwd_bytes;
    ch.recompute_flops        = ch.sum.attention_flops;
    ch.recomputed.attention   = attn_fwd;
    ch.recomputed.norms       = ch.sum.norm_bytes / mem_rate;
    ch.recomputed.elementwise = (ch.sum.selective_bytes - ch.sum.norm_bytes) / mem_rate;
    ch.recomputed.kernel_gaps = ch.recompute_effects.kernel_gaps;
    break;
  }
  case Recompute::full:
    ch.recompute_seconds = ch.fwd_seconds;
    ch.recompute_hbm     = ch.fwd_hbm;
    ch.recompute_flops   = ch.fwd_flops;
    ch.recompute_effects = ch.fwd_effects;
    ch.recomputed        = forward_kernels(attn_fwd, mem_rate, ch);
    break;
  }
}

double stored_activations(const Context& c, const ChunkCost& ch)
{
  double per = c.job.recompute == Recompute::none        ? ch.sum.act_none
               : c.job.recompute == Recompute::selective ? ch.sum.act_selective
                                                         : ch.sum.act_full;
  if (c.job.recompute == Recompute::selective && !c.job.recompute_modules.empty()) {
    per = ch.sum.act_none;
    for (const RecomputeModule r : c.job.recompute_modules)
      per -= ch.sum.modules[static_cast<std::size_t>(r)].freed;
  }
  return per + ch.logits_bytes;
}

} // namespace spansim::workload::detail
