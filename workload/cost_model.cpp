// The cost model: GEMMs (workload/layer_gemms.cpp lists a layer's) costed by shape (measured ceilings, tile and wave
// quantization, a byte floor), attention at a kernel library's measured rates, element-wise work at HBM speed; per
// layer, per model chunk, and the memory a chunk keeps.
#include "workload/cost_model.hpp"
#include "workload/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace spansim::workload {

namespace detail {

namespace {

// Forward GEMM C = A B of shape (M, N, K): the backward computes dA = dC B^T, a GEMM (M, K, N), and
// dB = A^T dC, a GEMM (N, K, M) whose reduction runs over the tokens and whose C is the gradient buffer
// accumulated across micro-batches (Megatron's gradient-accumulation fusion: read and written by the GEMM), in the
// job's gradient dtype (fp32, or bf16 where gradients are reduced in bf16: wgrad_gemm_accum_fp16).
GemmShape dgrad(const GemmShape& f)
{
  return {.m = f.m, .n = f.k, .k = f.n, .groups = f.groups};
}
GemmShape wgrad(const GemmShape& f, double gradient_bytes)
{
  return {.m = f.n, .n = f.k, .k = f.m, .groups = f.groups, .accumulate_bytes = gradient_bytes};
}

// Adds the forward GEMMs, and their backward ones, to a layer's or chunk's cost; with a sustained clock below 1 the
// difference to the measured clock is kept apart (what the effect adds). In a low precision each GEMM first
// quantizes its activation input (forward) and its output gradient (backward), memory-bound passes of one kernel
// each (two with current scaling), and its weights once per step (Megatron casts them on the first micro-batch).
template <class Cost>
void add_gemms(const Context& c, const std::vector<GemmShape>& gemms, Cost& k, bool bf16 = false)
{
  const GemmFormat format   = c.job.gpu.runs_as(bf16 ? Precision::bf16 : c.job.precision, c.job.fp8_recipe);
  const Precision precision = format.precision;
  const double grad_bytes   = c.job.gradient_reduce_bytes;
  // A measured time, where the user's table covers the shape, replaces the model's (at the clocks it was
  // measured at: no sustained-clock term); the model still gives the HBM traffic.
  const auto& measured = c.job.gpu.measured;
  // DeepGEMM runs FP8 block-scaled GEMMs at its published rates, each group's rows padded to its block, on the SMs
  // the dispatch kernels leave it (DeepSeek gives DeepEP 20 of 132: every GEMM of its trace runs 112 blocks).
  // Its published rate, at the GEMM's rows per group and depth, is the full-wave rate the tile and wave model then
  // quantizes over those SMs (a narrow projection fills fewer of them).
  const bool deepgemm = c.job.gemm_library == GemmLibrary::deepgemm && precision == Precision::fp8;
  const auto& dg      = c.job.gpu.gemm.deepgemm;
  std::optional<GpuSpec> library;
  if (deepgemm) {
    library           = c.job.gpu;
    library->gemm.sms = static_cast<int>(std::lround(c.job.gpu.gemm.sms * c.gemm_sm_share));
  }
  auto seconds = [&](const GemmShape& s, double clock, double rows, double k, double fraction) {
    if (library) {
      library->gemm.ceiling_fp8 = library->gemm.ceiling_fp8_blockwise = dg.rate(rows, k) * fraction * c.gemm_sm_share;
      GemmShape padded                                                = s;
      (s.m == rows ? padded.m : s.k == rows ? padded.k : padded.n)    = dg.padded(rows);
      return gemm_cost(*library, precision, padded, clock, format.recipe);
    }
    GemmCost cost = gemm_cost(c.job.gpu, precision, s, clock, format.recipe);
    if (auto t = measured.gemm_seconds(precision, s.m, s.n, s.k))
      cost.seconds = *t * s.groups;
    return cost;
  };
  const double q        = quantize_bytes(precision, format.recipe);
  const double mem_rate = c.job.gpu.quantize_rate(precision, format.recipe);
  // Current FP8 scaling and NVFP4's per-tensor scale read the tensor once more, in a kernel of its own.
  const int casts =
      (precision == Precision::fp8 && format.recipe == Fp8Recipe::current) || precision == Precision::nvfp4 ? 2 : 1;
  // Bytes an element of one low-precision copy with its scales.
  const double qb = quantized_bytes(precision, format.recipe);
  // Transformer Engine's split quantize launched a cast per expert but for delayed scaling (its multi-tensor
  // cast-transpose) and NVFP4 (a fused split): 1 where each cast is one launch for all of a GEMM's groups.
  const bool fused_split =
      (precision == Precision::fp8 && format.recipe == Fp8Recipe::delayed) || precision == Precision::nvfp4;
  const bool per_expert = c.job.expert_quantize == ExpertQuantize::per_expert && !fused_split;
  // A norm that quantizes its own output writes the low-precision copies with their scales only (current scaling
  // still reads the output again for its amax).
  const double fused_q = q > 0 ? 2 * qb + (casts == 2 ? kBf16 : 0) : 0;
  // Memory-bound casts: their bytes in the forward and the backward at the cast rate, and their launches.
  auto add_casts = [&](double fwd, double bwd, int launches_fwd, int launches_bwd) {
    k.gemm_fwd_seconds += fwd / mem_rate;
    k.quantize_fwd_seconds += fwd / mem_rate;
    k.gemm_fwd_bytes += fwd;
    k.gemm_bwd_seconds += bwd / mem_rate;
    k.quantize_bwd_seconds += bwd / mem_rate;
    k.gemm_bwd_bytes += bwd;
    k.kernels_fwd += launches_fwd;
    k.kernels_bwd += launches_bwd;
  };
  if (q > 0)
    for (const GemmShape& f : gemms) {
      // Before an FP8 dispatch the rank writes the row-wise copy only; the received rows are re-quantized
      // column-wise (read the row-wise copy, write the column-wise one), a launch of its own.
      const double rows = f.cast_rows < 0 ? f.m : f.cast_rows;
      const double a_q  = f.dispatched ? (q - qb) * rows + 2 * qb * f.m : (f.cast_fused ? fused_q : q) * rows;
      // A GEMM's casts, each over its groups; before an FP8 dispatch the rank casts its own tokens once, whatever
      // the experts they go to, and the per-expert split is the received rows' re-quantization.
      const int launches = per_expert ? f.groups : 1;
      const int input    = (f.cast_fused ? casts - 1 : casts) * (f.dispatched ? 1 : launches);
      add_casts(f.groups * (a_q * f.k + q * f.n * f.k / c.mbs), q * f.groups * f.m * f.n,
                input + (f.dispatched ? launches : 0), casts * launches);
      // A kept low-precision copy: BF16 read and the copy written in the forward, the reverse in the backward; one
      // launch over the whole tensor (the activation runs over every expert's rows at once).
      const double kept = f.groups * (f.cached_a > 0 ? (kBf16 + f.cached_a) * f.m * f.k : 0) +
                          f.groups * (f.cached_c > 0 ? (kBf16 + f.cached_c) * f.m * f.n : 0);
      const int casts_kept = (f.cached_a > 0 ? 1 : 0) + (f.cached_c > 0 ? 1 : 0);
      if (kept > 0)
        add_casts(kept, kept, casts_kept, casts_kept);
    }
  for (const GemmShape& f : gemms) {
    // A library's table is read at the forward's rows per group: the input gradient's depth is the forward's N,
    // and the weight gradient runs at its own fraction of the forward's rate.
    auto fwd_at   = [&](double clock) { return seconds(f, clock, f.m, f.k, 1); };
    auto dgrad_at = [&](double clock) { return seconds(dgrad(f), clock, f.m, f.n, 1); };
    auto wgrad_at = [&](double clock) { return seconds(wgrad(f, grad_bytes), clock, f.m, f.k, dg.wgrad_fraction); };
    const GemmCost fwd = fwd_at(c.clock);
    const GemmCost dgc = dgrad_at(c.clock);
    const GemmCost wg  = wgrad_at(c.clock);
    k.gemm_fwd_seconds += fwd.seconds;
    k.gemm_fwd_bytes += fwd.bytes;
    k.gemm_bwd_seconds += dgc.seconds + wg.seconds;
    k.gemm_bwd_bytes += dgc.bytes + wg.bytes;
    k.gemm_wgrad_seconds += wg.seconds;
    k.gemm_wgrad_bytes += wg.bytes;
    if (c.clock < 1) {
      k.clock_fwd_seconds += fwd.seconds - fwd_at(1).seconds;
      const double wg_full_clock = wgrad_at(1).seconds;
      k.clock_bwd_seconds += dgc.seconds + wg.seconds - dgrad_at(1).seconds - wg_full_clock;
      k.clock_wgrad_seconds += wg.seconds - wg_full_clock;
    }
    k.kernels_fwd += 1;
    k.kernels_bwd += 2;
    k.kernels_wgrad += 1;
  }
}

void add(LayerCost& a, const LayerCost& b);

LayerCost layer_cost(const Context& c, int layer)
{
  const ModelSpec& m = c.m;
  LayerCost k;
  const LayerParams p = layer_params(m, layer);
  const double h      = m.hidden;
  const double t      = c.tokens;
  k.moe               = m.is_moe_layer(layer);
  k.matmul_flops      = 2 * t * p.matmul / c.tp;
  // Causal attention: QK^T and PV over half the score matrix; context parallelism balances it over cp ranks.
  const double s        = c.job.batch.sequence_length;
  k.attention_flops     = double(c.job.batch.micro_batch) * m.heads * s * s * (qk_dim(m) + v_dim(m)) / c.cp / c.tp;
  k.dense_params        = (p.attention + p.norms + p.mlp_dense) / c.tp;
  k.dense_linear_params = (p.attention + p.mlp_dense - p.router) / c.tp;
  k.params              = k.dense_params + p.experts / (double(c.etp) * c.ep);
  std::vector<GemmShape> routed;
  std::vector<int> module_of;
  const std::vector<GemmShape> gemms = layer_gemms(c, layer, routed, module_of);
  add_gemms(c, gemms, k);
  // A recompute module's GEMMs run their forward again, with the casts of their activations (costed where the job
  // lists modules); the shared experts re-run with their MoE layer too.
  const bool modules = !c.job.recompute_modules.empty();
  auto rerun         = [&](const LayerCost& cost, const std::vector<GemmShape>& list, RecomputeModule module) {
    RecomputedModule& mod = k.modules[static_cast<std::size_t>(module)];
    mod.gemm_seconds += cost.gemm_fwd_seconds;
    mod.quantize_seconds += cost.quantize_fwd_seconds;
    mod.grouped_seconds += cost.routed_fwd_gemm;
    mod.gemm_bytes += cost.gemm_fwd_bytes;
    for (const GemmShape& g : list)
      mod.flops += 2 * g.m * g.n * g.k * g.groups;
    mod.kernels += cost.kernels_fwd;
  };
  for (std::size_t i = 0; modules && i < gemms.size(); ++i)
    if (module_of[i] >= 0) {
      const auto module = static_cast<RecomputeModule>(module_of[i]);
      LayerCost one;
      add_gemms(c, {gemms[i]}, one);
      rerun(one, {gemms[i]}, module);
      if (module == RecomputeModule::shared_experts)
        rerun(one, {gemms[i]}, RecomputeModule::moe);
    }
  if (!routed.empty()) {
    // The routed experts' GEMMs, kept apart too: a MoE layer's part after the dispatch (its "MLP" slot).
    LayerCost r;
    add_gemms(c, routed, r);
    r.routed_fwd_gemm = r.gemm_fwd_seconds - r.quantize_fwd_seconds;
    if (modules)
      rerun(r, routed, RecomputeModule::moe);
    k.routed_fwd_seconds   = r.gemm_fwd_seconds + r.kernels_fwd * c.gap;
    k.routed_wgrad_seconds = r.gemm_wgrad_seconds + r.kernels_wgrad * c.gap;
    k.routed_dgrad_seconds = r.gemm_bwd_seconds + r.kernels_bwd * c.gap - k.routed_wgrad_seconds;
    r.routed_wgrad_gemm    = r.gemm_wgrad_seconds;
    r.routed_gemm_seconds  = r.gemm_fwd_seconds + r.gemm_bwd_seconds - r.gemm_wgrad_seconds - r.quantize_fwd_seconds -
                            r.quantize_bwd_seconds;
    add(k, r);
    // Token permute and unpermute (Megatron's moe_utils permute/unpermute, DeepSeek's kernels alike): each reads and
    // writes the rank's top-k token copies, the permute at the dispatch's precision and the unpermute in BF16; the
    // backward moves the gradients, in BF16 both ways.
    k.permute_fwd_bytes = 2 * (ep_buffer_bytes(c, true) + ep_buffer_bytes(c, false));
    k.permute_bwd_bytes = 4 * ep_buffer_bytes(c, false);
  }
  const bool unfused = c.job.attention == AttentionKernel::unfused;
  if (unfused)
    unfused_attention(c, k);
  k.kernels_fwd += (unfused ? 0 : kAttentionKernelsForward) + kElementwiseKernels + (k.moe ? kMoeKernels : 0);
  k.kernels_bwd += (unfused ? 0 : kAttentionKernelsBackward) + 2 * kElementwiseKernels + (k.moe ? kMoeKernels : 0);
  if (m.qk_norm) { // a norm of the queries and one of the keys, each in a kernel of its own
    k.kernels_fwd += 2;
    k.kernels_bwd += 4;
  }

  const double q_rank  = double(m.heads) / c.tp * qk_dim(m);
  const double o_rank  = double(m.heads) / c.tp * v_dim(m);
  const double kv_rank = std::ceil(double(m.kv_heads) / c.tp) * (qk_dim(m) + v_dim(m));
  const double act_fn  = m.mlp == MlpKind::gated ? 3 : 2; // gated: gate, up, product; plain: fc1 out, GELU out
  // Two norms (read + write) and two residual adds (two reads, one write), rotary on q and k, the MLP activation.
  // MLA normalizes its two latents too (q_a_layernorm and kv_a_layernorm of DeepSeek-V3's model code).
  const double latents = m.attention == AttentionKind::mla ? (m.mla.q_lora_rank + m.mla.kv_lora_rank) / c.tp : 0;
  // QK-norm normalizes the rank's query and key heads (each head_dim wide).
  const double qk_normed = m.qk_norm ? (double(m.heads) / c.tp + std::ceil(double(m.kv_heads) / c.tp)) * m.head_dim : 0;
  k.norm_bytes           = t * kBf16 * (4 * h / c.sp + 2 * latents + 2 * qk_normed);
  k.elementwise_bytes =
      k.norm_bytes + t * kBf16 * (6 * h / c.sp + 2 * (q_rank + kv_rank) + act_fn * p.ffn_active / c.tp);

  double latent = 0;
  if (m.attention == AttentionKind::mla)
    latent = m.mla.q_lora_rank + m.mla.kv_lora_rank + m.mla.qk_rope_head_dim;
  // The token copies the rank's experts compute (gathered over etp), kept for their weight gradients.
  const double dispatched = k.moe ? expert_tokens(c) / t * h : 0;
  // Stored for backward (flash attention: no score matrix): norm inputs and outputs, Q, K, V (and with QK-norm their
  // inputs too), attention output, MLP intermediates, MoE token copies.
  // Activations kept in a low precision (activation_cache) hold that fraction of their BF16 bytes: the attention
  // output, and the activation's input among the MLP's intermediates (a gated MLP's gate and up).
  const ActivationCache& cache = c.job.activation_cache;
  const double o_kept          = o_rank * kept_bytes(cache.attention_output) / kBf16;
  const double in_widths       = act_fn - 1; // the activation's inputs: every intermediate but its output
  const double mlp_kept        = act_fn - in_widths + in_widths * kept_bytes(cache.mlp_activation_input) / kBf16;
  const double none =
      4 * h / c.sp + q_rank + kv_rank + qk_normed + o_kept + latent + mlp_kept * p.ffn_active / c.tp + dispatched;
  k.act_none = t * kBf16 * none + k.scores_bytes;
  // Selective recompute drops what is cheap to recompute and large to keep: the norm outputs, the attention
  // output (the flash-attention forward is rerun) and the MLP activation-function output.
  // MLA's per-head K and V are up-projected from the stored latent again (DeepSeek-V3 recomputes "MLA
  // up-projections" in back-propagation, arXiv 2412.19437 section 3.3.3).
  const double mla_kv = m.attention == AttentionKind::mla ? kv_rank : 0;
  k.act_selective     = t * kBf16 * (none - 2 * h / c.sp - o_kept - p.ffn_active / c.tp - mla_kv); // and no scores
  k.selective_bytes   = k.norm_bytes + t * kBf16 * 3 * p.ffn_active / c.tp;
  k.act_full          = t * kBf16 * h / c.sp;
  recomputed_modules(c, p, {.q = q_rank, .kv = kv_rank, .o_kept = o_kept, .act_fn = act_fn, .mlp_kept = mlp_kept}, k);
  return k;
}

// Layers of each of the pp * v model chunks: as even as possible, the shortfall taken alternately from the first
// and the last chunks, which also carry the embedding and the output layer (as Llama 3 405B does).
std::vector<int> chunk_layer_counts(int layers, int chunks)
{
  const int base = (layers + chunks - 1) / chunks;
  std::vector<int> n(chunks, base);
  int deficit = base * chunks - layers;
  for (int i = 0; deficit > 0; ++i, --deficit)
    --n[i % 2 == 0 ? i / 2 : chunks - 1 - i / 2];
  return n;
}

void add(LayerCost& a, const LayerCost& b)
{
  a.matmul_flops += b.matmul_flops;
  a.attention_flops += b.attention_flops;
  a.gemm_fwd_seconds += b.gemm_fwd_seconds;
  a.gemm_bwd_seconds += b.gemm_bwd_seconds;
  a.gemm_fwd_bytes += b.gemm_fwd_bytes;
  a.gemm_bwd_bytes += b.gemm_bwd_bytes;
  a.gemm_wgrad_seconds += b.gemm_wgrad_seconds;
  a.gemm_wgrad_bytes += b.gemm_wgrad_bytes;
  a.clock_wgrad_seconds += b.clock_wgrad_seconds;
  a.kernels_wgrad += b.kernels_wgrad;
  a.params += b.params;
  a.dense_params += b.dense_params;
  a.dense_linear_params += b.dense_linear_params;
  a.elementwise_bytes += b.elementwise_bytes;
  a.norm_bytes += b.norm_bytes;
  a.selective_bytes += b.selective_bytes;
  a.act_none += b.act_none;
  a.act_selective += b.act_selective;
  a.act_full += b.act_full;
  a.unfused_fwd_seconds += b.unfused_fwd_seconds;
  a.unfused_bwd_seconds += b.unfused_bwd_seconds;
  a.unfused_fwd_bytes += b.unfused_fwd_bytes;
  a.unfused_bwd_bytes += b.unfused_bwd_bytes;
  a.unfused_flops += b.unfused_flops;
  a.scores_bytes += b.scores_bytes;
  a.unfused_fwd_clock += b.unfused_fwd_clock;
  a.clock_fwd_seconds += b.clock_fwd_seconds;
  a.clock_bwd_seconds += b.clock_bwd_seconds;
  a.kernels_fwd += b.kernels_fwd;
  a.routed_fwd_seconds += b.routed_fwd_seconds;
  a.routed_dgrad_seconds += b.routed_dgrad_seconds;
  a.routed_wgrad_seconds += b.routed_wgrad_seconds;
  a.quantize_fwd_seconds += b.quantize_fwd_seconds;
  a.quantize_bwd_seconds += b.quantize_bwd_seconds;
  a.routed_gemm_seconds += b.routed_gemm_seconds;
  a.routed_wgrad_gemm += b.routed_wgrad_gemm;
  a.routed_fwd_gemm += b.routed_fwd_gemm;
  a.permute_fwd_bytes += b.permute_fwd_bytes;
  a.permute_bwd_bytes += b.permute_bwd_bytes;
  a.kernels_bwd += b.kernels_bwd;
  for (std::size_t i = 0; i < a.modules.size(); ++i) {
    RecomputedModule& x       = a.modules[i];
    const RecomputedModule& y = b.modules[i];
    x.gemm_seconds += y.gemm_seconds;
    x.quantize_seconds += y.quantize_seconds;
    x.grouped_seconds += y.grouped_seconds;
    x.gemm_bytes += y.gemm_bytes;
    x.flops += y.flops;
    x.elementwise_bytes += y.elementwise_bytes;
    x.norm_bytes += y.norm_bytes;
    x.permute_bytes += y.permute_bytes;
    x.kernels += y.kernels;
    x.freed += y.freed;
  }
}

} // namespace

namespace {

// The host floor of a chunk's MoE layers. Megatron issues a MoE layer from one host thread in many small framework
// ops (router, dispatcher preprocessing, permutation, Transformer Engine's grouped linear: one cuBLASLt call per
// local expert on four streams), and the dropless dispatchers block on a device-to-host copy of the token counts in
// every MoE layer's forward, so the host cannot run far ahead: where issuing a pass takes longer than the GPU's
// work in it, the GPU waits (Megatron-LM's MoE guide names this "CPU Overhead Bottleneck"). The forward issues a
// third of the layer's host time and the backward two thirds (input and weight gradients: two grouped GEMM calls
// against the forward's one). What the GPU waits counts as the kernel-gaps effect: it is host dispatch too.
void add_host_floor(const Context& c, ChunkCost& ch)
{
  if (!(c.moe_host > 0) || ch.moe_layers == 0)
    return;
  const double host_fwd = ch.moe_layers * c.moe_host / 3, host_bwd = 2 * host_fwd;
  const double wait_fwd = std::max(0.0, host_fwd - ch.fwd_seconds);
  const double wait_bwd = std::max(0.0, host_bwd - ch.bwd_seconds);
  ch.fwd_seconds += wait_fwd;
  ch.fwd_effects.kernel_gaps += wait_fwd;
  ch.bwd_seconds += wait_bwd;
  ch.bwd_effects.kernel_gaps += wait_bwd;
}

// What a multi-token prediction module adds around its transformer layer (Megatron's MultiTokenPredictionLayer):
// enorm on the embedding of the tokens shifted by one and hnorm on the previous depth's hidden states,
// concatenated (2h) into eh_proj, a column-parallel linear (2h -> h) in the job's precision, and a final norm
// before the shared output layer. The last chunk holds the module's parameters and, where it sits on another
// stage than the first chunk, a copy of the embedding (Megatron builds one per rank holding the embedding or an MTP
// module; DualPipe's first stage holds both chunks, so shares it, as DeepSeek-V3 says): Pipeline::embedding_group.
void add_mtp_modules(const Context& c, ChunkCost& ch)
{
  const double h = c.m.hidden, t = c.tokens, mtp = c.m.mtp_layers;
  const auto own = detail::mtp_module_params(c.m);
  add_gemms(c,
            std::vector<GemmShape>(c.m.mtp_layers, GemmShape{.m = t, .n = h / c.tp, .k = 2 * h, .cast_rows = t / c.sp}),
            ch.sum);
  ch.sum.matmul_flops += mtp * 2 * t * own.eh_proj / c.tp;
  // Three norms (read and write) and the concatenation (read and write 2h).
  ch.sum.elementwise_bytes += mtp * t * kBf16 * (3 * 2 * h + 2 * 2 * h) / c.sp;
  ch.sum.kernels_fwd += mtp * 4;
  ch.sum.kernels_bwd += mtp * 4;
  // Kept for the backward: the concatenated input of eh_proj.
  ch.sum.act_none += mtp * t * kBf16 * 2 * h / c.sp;
  ch.sum.act_selective += mtp * t * kBf16 * 2 * h / c.sp;
  const double module = own.eh_proj / c.tp + own.norms;
  ch.sum.params += mtp * module;
  ch.sum.dense_params += mtp * module;
  ch.sum.dense_linear_params += mtp * own.eh_proj / c.tp;
  if (!Pipeline(c.job).embedding_group(c.m).empty())
    ch.extra_params += double(c.m.vocab) * h / c.tp;
}

} // namespace

std::vector<ChunkCost> chunk_costs(const Context& c)
{
  // Layers given per stage are split as evenly as possible over the stage's chunks (chunk g = v x pp + stage).
  // A pipeline layout gives each chunk's layers itself.
  const auto& given = c.job.parallelism.stage_layers;
  auto counts       = c.job.parallelism.chunk_layers.empty() ? chunk_layer_counts(c.m.layers, c.chunks)
                                                             : c.job.parallelism.chunk_layers;
  if (!given.empty()) {
    const int pp = static_cast<int>(given.size()), v = c.chunks / pp;
    for (int g = 0; g < c.chunks; ++g)
      counts[g] = given[g % pp] / v + (g / pp < given[g % pp] % v ? 1 : 0);
  }
  // Megatron places the multi-token prediction modules in the last chunk, after its decoder layers (layer ids
  // layers, layers + 1, ...).
  counts.back() += c.m.mtp_layers;
  const GpuSpec& gpu    = c.job.gpu;
  const bool unfused    = c.job.attention == AttentionKernel::unfused;
  const double mem_rate = gpu.hbm_bandwidth * gpu.elementwise_efficiency;
  // Fused attention runs at the library's measured rate: at the reference length, or on its curve at the length
  // the kernel sees: each rank's queries, s / cp, against every key, where K/V are gathered or passed around a ring;
  // Ulysses' all-to-alls give each rank the whole sequence (of its share of the heads), and a2a+p2p's give it the
  // sequence of its all-to-all group, s x cp_a2a / cp.
  AttentionRates attn;
  if (!unfused)
    attn = gpu.attention[static_cast<std::size_t>(c.job.attention)];
  const auto cp_comm = c.job.parallelism.cp_comm;
  const int gathered = cp_comm == CpComm::a2a ? c.cp : cp_comm == CpComm::a2a_p2p ? c.job.parallelism.cp_a2a : 1;
  const double kernel_length = double(c.job.batch.sequence_length) * gathered / c.cp;
  const bool by_length       = c.job.effects.attention_by_length && !attn.sequences.empty();
  const double fwd_rate      = by_length ? attn.rate(kernel_length, false) : attn.forward;
  const double bwd_rate      = by_length ? attn.rate(kernel_length, true) : attn.backward;
  std::vector<ChunkCost> out(c.chunks);
  int layer = 0;
  // A layer's cost depends on it only through its parameters and whether it is a MoE layer: a layer like the
  // previous one costs what it did (a dense model's 126 layers are costed once).
  LayerCost previous;
  LayerParams previous_params;
  bool previous_moe    = false;
  double previous_load = 0;
  for (int g = 0; g < c.chunks; ++g) {
    ChunkCost& ch  = out[g];
    ch.first_layer = layer;
    ch.layers      = counts[g];
    for (int i = 0; i < counts[g]; ++i, ++layer) {
      const LayerParams params = layer_params(c.m, layer);
      const bool moe           = c.m.is_moe_layer(layer);
      const double load        = c.load.busiest.empty() ? 0 : c.load.busiest[static_cast<std::size_t>(layer)];
      if (layer == 0 || !(params == previous_params) || moe != previous_moe || load != previous_load) {
        previous        = layer_cost(c, layer);
        previous_params = params;
        previous_moe    = moe;
        previous_load   = load;
      }
      const LayerCost& k = previous;
      add(ch.sum, k);
      ch.moe_layers += k.moe ? 1 : 0;
      ch.act_max_layer    = std::max(ch.act_max_layer, k.act_none);
      ch.params_max_layer = std::max(ch.params_max_layer, k.params);
    }
    const double h    = c.m.hidden;
    double head_flops = 0;
    if (g == 0)
      ch.extra_params += double(c.m.vocab) * h / c.tp;
    if (g == c.chunks - 1) {
      // The output layer, and again for each multi-token prediction module (its logits, through the shared
      // weights). The input embedding is a lookup of T rows, not a GEMM.
      const double heads = 1.0 + c.m.mtp_layers;
      ch.extra_params += double(c.m.vocab) * h / c.tp + h / c.tp;
      head_flops      = heads * 2 * c.tokens * c.m.vocab * h / c.tp;
      ch.logits_bytes = heads * c.tokens * double(c.m.vocab) / c.tp * (kBf16 + kFp32);
      // In BF16 whatever the job's precision: Megatron's output layer is not a Transformer Engine module.
      for (int i = 0; i < c.m.mtp_layers + 1; ++i)
        add_gemms(c, {GemmShape{.m = c.tokens, .n = double(c.m.vocab) / c.tp, .k = h}}, ch.sum, true);
      if (c.m.mtp_layers > 0)
        add_mtp_modules(c, ch);
    }
    const double mm_flops = ch.sum.matmul_flops + head_flops;
    // Each GEMM is compute- or traffic-bound on its own; attention runs at the kernel library's measured rate
    // for each pass (at the sustained clock); element-wise ops are bandwidth-bound. Each kernel launched leaves
    // the GPU idle for the profile's gap.
    double attn_fwd = unfused ? ch.sum.unfused_fwd_seconds : ch.sum.attention_flops / (fwd_rate * c.clock);
    double attn_bwd =
        unfused ? ch.sum.unfused_bwd_seconds : kFlashBackwardFlopRatio * ch.sum.attention_flops / (bwd_rate * c.clock);
    const double ew_fwd = ch.sum.elementwise_bytes / mem_rate;
    // Measured attention (one sequence, the rank's heads) replaces the library's rates: a rank of a context-parallel
    // group does 1/cp of the sequence's causal work.
    const double heads = double(c.m.heads) / c.tp, per_layer = double(c.job.batch.micro_batch) / c.cp;
    const auto m_fwd =
        unfused ? std::nullopt : gpu.measured.attention_seconds(false, c.job.batch.sequence_length, heads, qk_dim(c.m));
    const auto m_bwd =
        unfused ? std::nullopt : gpu.measured.attention_seconds(true, c.job.batch.sequence_length, heads, qk_dim(c.m));
    const bool measured_attention = m_fwd && m_bwd;
    if (measured_attention) {
      attn_fwd = ch.layers * per_layer * *m_fwd;
      attn_bwd = ch.layers * per_layer * *m_bwd;
    }
    if (by_length && !measured_attention) {
      ch.fwd_effects.attention_by_length = attn_fwd - ch.sum.attention_flops / (attn.forward * c.clock);
      ch.bwd_effects.attention_by_length =
          attn_bwd - kFlashBackwardFlopRatio * ch.sum.attention_flops / (attn.backward * c.clock);
    }
    if (g == c.chunks - 1) {
      // Softmax and cross-entropy of each loss: the model's and its MTP modules'.
      ch.sum.kernels_fwd += 2 * (1 + c.m.mtp_layers);
      ch.sum.kernels_bwd += 2 * (1 + c.m.mtp_layers);
    }
    const bool attention_clocked   = !unfused && !measured_attention;
    ch.fwd_effects.sustained_clock = ch.sum.clock_fwd_seconds + (attention_clocked ? attn_fwd * (1 - c.clock) : 0);
    ch.bwd_effects.sustained_clock = ch.sum.clock_bwd_seconds + (attention_clocked ? attn_bwd * (1 - c.clock) : 0);
    ch.fwd_effects.kernel_gaps     = ch.sum.kernels_fwd * c.gap;
    ch.bwd_effects.kernel_gaps     = ch.sum.kernels_bwd * c.gap;
    ch.attention_fwd_seconds       = attn_fwd;
    ch.attention_bwd_seconds       = attn_bwd;
    const double permute_fwd       = ch.sum.permute_fwd_bytes / mem_rate;
    const double permute_bwd       = ch.sum.permute_bwd_bytes / mem_rate;
    ch.fwd_seconds = ch.sum.gemm_fwd_seconds + attn_fwd + ew_fwd + permute_fwd + ch.fwd_effects.kernel_gaps;
    ch.bwd_seconds = ch.sum.gemm_bwd_seconds + attn_bwd + 2 * ew_fwd + permute_bwd + ch.bwd_effects.kernel_gaps;
    add_host_floor(c, ch);
    ch.fwd_hbm = ch.sum.gemm_fwd_bytes + ch.sum.elementwise_bytes + ch.sum.unfused_fwd_bytes + ch.sum.permute_fwd_bytes;
    ch.bwd_hbm =
        ch.sum.gemm_bwd_bytes + 2 * ch.sum.elementwise_bytes + ch.sum.unfused_bwd_bytes + ch.sum.permute_bwd_bytes;
    ch.fwd_flops = mm_flops + ch.sum.attention_flops;
    // A weight-gradient GEMM does as many FLOPs as its forward GEMM.
    ch.wgrad_effects.sustained_clock = ch.sum.clock_wgrad_seconds;
    ch.wgrad_effects.kernel_gaps     = ch.sum.kernels_wgrad * c.gap;
    ch.wgrad_seconds                 = ch.sum.gemm_wgrad_seconds + ch.wgrad_effects.kernel_gaps;
    ch.wgrad_hbm                     = ch.sum.gemm_wgrad_bytes;
    ch.wgrad_flops                   = mm_flops;
    add_recompute(c, attn_fwd, mem_rate, unfused || !attention_clocked, ch);
    KernelTimes& kt = ch.kernels;
    const auto& sum = ch.sum;
    kt.quantize     = sum.quantize_fwd_seconds + sum.quantize_bwd_seconds;
    kt.grouped_gemm = sum.routed_gemm_seconds;
    kt.expert_wgrad = sum.routed_wgrad_gemm;
    kt.wgrad        = sum.gemm_wgrad_seconds - sum.routed_wgrad_gemm;
    kt.gemm      = sum.gemm_fwd_seconds + sum.gemm_bwd_seconds - kt.quantize - kt.grouped_gemm - sum.gemm_wgrad_seconds;
    kt.attention = attn_fwd + attn_bwd;
    kt.permute   = permute_fwd + permute_bwd;
    kt.norms     = 3 * sum.norm_bytes / mem_rate;
    kt.elementwise = 3 * ew_fwd - kt.norms;
    kt.recompute   = ch.recompute_seconds;
    kt.kernel_gaps = ch.fwd_effects.kernel_gaps + ch.bwd_effects.kernel_gaps;
  }
  return out;
}

} // namespace detail

} // namespace spansim::workload
