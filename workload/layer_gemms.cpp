// The shapes of a layer's GEMMs on one rank (attention projections, MLP or experts, router), as the cost model
// prices them; what they cost is the cost model's (workload/cost_model.cpp).
#include "workload/cost_model.hpp"

#include <cmath>

namespace spansim::workload::detail {

namespace {

// layer_gemms' module for the routed experts' GEMMs, which go to their own list.
constexpr int kRoutedExperts = -2;

} // namespace

std::vector<GemmShape> layer_gemms(const Context& c, int layer, std::vector<GemmShape>& routed,
                                   std::vector<int>& module_of)
{
  const ModelSpec& m = c.m;
  const double t = c.tokens, h = m.hidden, tp = c.tp;
  // A norm's output: the rank's sequence-parallel shard, quantized before its all-gather.
  const double normed = t / c.sp;
  // Bytes an element of the low-precision copies the layer keeps (0: none). The attention output is kept only where it
  // is not recomputed: selective recompute of the core attention re-runs it in BF16 for the backward.
  const ActivationCache& cache = c.job.activation_cache;
  const double o_copy          = cache.attention_output != KeptFormat::bf16 && !c.job.recomputes_core_attention()
                                     ? kept_bytes(cache.attention_output)
                                     : 0;
  const double act_copy = cache.mlp_activation_input != KeptFormat::bf16 ? kept_bytes(cache.mlp_activation_input) : 0;
  std::vector<GemmShape> g;
  // Each of the layer's GEMMs (not the routed experts') with the recompute module that re-runs it (-1: none).
  auto push = [&](const GemmShape& s, int module = -1) {
    g.push_back(s);
    module_of.push_back(module);
  };
  const int up_proj = static_cast<int>(RecomputeModule::mla_up_proj);
  if (m.attention == AttentionKind::mla) {
    // Every projection split by tp, as the parameter and FLOP counts assume.
    const auto& a   = m.mla;
    const double qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    if (a.q_lora_rank > 0) {
      push({.m = t, .n = a.q_lora_rank / tp, .k = h, .cast_rows = normed, .cast_fused = true});
      push({.m = t, .n = m.heads * qk / tp, .k = double(a.q_lora_rank)}, up_proj);
    } else {
      push({.m = t, .n = m.heads * qk / tp, .k = h, .cast_rows = normed, .cast_fused = true});
    }
    push({.m = t, .n = (a.kv_lora_rank + a.qk_rope_head_dim) / tp, .k = h, .cast_rows = normed, .cast_fused = true});
    push({.m = t, .n = m.heads * double(a.qk_nope_head_dim + a.v_head_dim) / tp, .k = double(a.kv_lora_rank)}, up_proj);
    push({.m = t, .n = h, .k = m.heads * double(a.v_head_dim) / tp, .cached_a = o_copy});
  } else {
    // Fused QKV: the rank's query heads and its K/V heads (replicated when kv_heads < tp).
    const double kv = std::ceil(double(m.kv_heads) / tp);
    push({.m = t, .n = (m.heads / tp + 2 * kv) * m.head_dim, .k = h, .cast_rows = normed, .cast_fused = true});
    push({.m = t, .n = h, .k = m.heads / tp * m.head_dim, .cached_a = o_copy});
  }
  // An MLP of width f split `split` ways: gate and up fused into one GEMM (gated) or fc1 (plain), then down / fc2;
  // the routed experts' go to `routed`, the others to the layer's GEMMs with the module that re-runs them.
  const double in_mats = m.mlp == MlpKind::gated ? 2 : 1;
  auto mlp = [&](double f, double tokens, int groups, double split, double cast_rows, bool fused, int module,
                 bool dispatched = false) {
    const GemmShape in{.m          = tokens,
                       .n          = in_mats * f / split,
                       .k          = h,
                       .groups     = groups,
                       .cast_rows  = cast_rows,
                       .cast_fused = fused,
                       .dispatched = dispatched,
                       .cached_c   = act_copy};
    const GemmShape out{.m = tokens, .n = h, .k = f / split, .groups = groups};
    if (module == kRoutedExperts) {
      routed.push_back(in);
      routed.push_back(out);
    } else {
      push(in, module);
      push(out, module);
    }
  };
  if (m.is_moe_layer(layer)) {
    // Router over the rank's sequence-parallel share of the tokens; the routed experts as one grouped GEMM over
    // the rank's experts (split etp ways), each receiving its uniform share of the tokens the rank computes.
    push({.m = t / tp, .n = double(m.moe.experts), .k = h}, static_cast<int>(RecomputeModule::moe));
    // The busiest expert GPU sets the pace of the layer (its all-to-alls wait for it).
    const int local = m.moe.experts / c.ep;
    // An FP8 dispatch quantizes the rank's tokens once, before their top-k copies leave.
    const double own = c.job.dispatch.precision == Precision::fp8 ? t / c.sp / local : -1;
    mlp(m.moe.expert_ffn, expert_tokens(c) * c.load.busiest[static_cast<std::size_t>(layer)] / local, local, c.etp, own,
        false, kRoutedExperts, own >= 0);
    if (m.moe.shared_experts > 0)
      mlp(double(m.moe.shared_experts) * m.moe.expert_ffn, t, 1, tp, normed, true,
          static_cast<int>(RecomputeModule::shared_experts));
  } else {
    mlp(m.ffn, t, 1, tp, normed, true, static_cast<int>(RecomputeModule::mlp));
  }
  return g;
}

} // namespace spansim::workload::detail
