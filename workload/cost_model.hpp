#pragma once
/// @file
/// @brief Internal to workload: the cost model (per-layer and per-chunk compute, HBM traffic and memory on one
/// rank), shared by the stage programs (workload/stage_program.cpp) and the summaries.

#include "workload/workload.hpp"

#include <array>
#include <vector>

namespace spansim::workload::detail {

inline constexpr double kBf16 = 2; // bytes per activation and weight element
inline constexpr double kFp32 = 4;
// Adam with mixed precision: fp32 master weights, first and second moments.
inline constexpr double kOptimizerBytesPerParam = 12;
// Adam step traffic per parameter of the local shard: read master, m, v and the fp32 gradient (16 bytes), write
// master, m, v (12) and the bf16 working copy (2).
inline constexpr double kOptimizerTrafficPerParam = 30;
// The flash-attention backward runs five matmuls of the forward's size (it recomputes the scores) against the
// forward's two: the FlashAttention papers count its FLOPs as 2.5 times the forward's, and time their rates so.
inline constexpr double kFlashBackwardFlopRatio = 2.5;

/// @brief One value per GEMM precision (a rate, a ceiling, a size), named so that none is taken for another.
struct PerPrecision {
  double bf16  = 0;
  double fp8   = 0;
  double mxfp8 = 0;
  double nvfp4 = 0;

  /// @brief The value for `p`.
  constexpr double of(Precision p) const
  {
    return p == Precision::fp8 ? fp8 : p == Precision::mxfp8 ? mxfp8 : p == Precision::nvfp4 ? nvfp4 : bf16;
  }
};

/// @brief Bytes per GEMM input element in `p`, block scales included: BF16 2, FP8 1, MXFP8 1 + 1/32 (an E8M0
/// scale per 32), NVFP4 1/2 + 1/16 (an E4M3 scale per 16).
constexpr double input_bytes(Precision p)
{
  return PerPrecision{.bf16 = kBf16, .fp8 = 1, .mxfp8 = 1 + 1.0 / 32, .nvfp4 = 0.5 + 1.0 / 16}.of(p);
}

/// @brief Block scales of block-wise FP8 (DeepSeek-V3's recipe, DeepEP's FP8 dispatch): an FP32 scale per 128
/// elements.
inline constexpr double kBlockScaleBytes = 4.0 / 128;

/// @brief Bytes an element of an activation kept in `f` for the backward: BF16, or the low-precision copy with its
/// scale per 128 elements (FP8 1 byte, E5M6 12 bits).
constexpr double kept_bytes(KeptFormat f)
{
  return f == KeptFormat::fp8 ? 1 + kBlockScaleBytes : f == KeptFormat::e5m6 ? 1.5 + kBlockScaleBytes : kBf16;
}

/// @brief Bytes per element of a tensor quantized in `p` under FP8 recipe `r`, with every scale that travels beside
/// it: input_bytes(), and block-wise FP8's FP32 scales (per-tensor scales are a few bytes per tensor).
constexpr double quantized_bytes(Precision p, Fp8Recipe r)
{
  return input_bytes(p) + (p == Precision::fp8 && r == Fp8Recipe::blockwise ? kBlockScaleBytes : 0);
}

/// @brief HBM bytes one quantization of a BF16 tensor moves per element (0 in BF16). Transformer Engine casts
/// with a transpose: it reads the tensor (2 bytes) and writes a row-wise copy for the forward or input-gradient
/// GEMM and a column-wise copy for the weight-gradient GEMM. Current per-tensor scaling reads the tensor once more
/// first for its amax, and so does NVFP4 for its per-tensor scale.
constexpr double quantize_bytes(Precision p, Fp8Recipe r)
{
  switch (p) {
  case Precision::fp8:
    return kBf16 + 2 * quantized_bytes(p, r) + (r == Fp8Recipe::current ? kBf16 : 0);
  case Precision::mxfp8:
    return kBf16 + 2 * input_bytes(p);
  case Precision::nvfp4:
    return kBf16 + 2 * input_bytes(p) + kBf16;
  case Precision::bf16:
    break;
  }
  return 0;
}

/// @brief One recompute module's share of a layer: the forward work it re-runs before the backward and the
/// activations it no longer keeps.
struct RecomputedModule {
  double gemm_seconds      = 0; ///< its GEMMs' forward, with their activations' casts (no kernel gaps)
  double quantize_seconds  = 0; ///< of gemm_seconds: the casts
  double grouped_seconds   = 0; ///< of gemm_seconds: the routed experts' GEMM kernels
  double gemm_bytes        = 0;
  double flops             = 0;
  double elementwise_bytes = 0; ///< its norm, activation, RoPE or permute kernels' traffic
  double norm_bytes        = 0; ///< of elementwise_bytes: the norms'
  double permute_bytes     = 0; ///< of elementwise_bytes: the MoE token permute and unpermute
  int kernels              = 0; ///< kernels it launches again
  double freed             = 0; ///< activation bytes per micro-batch it no longer keeps
};

// Per-rank cost of one layer for one micro-batch, forward pass.
struct LayerCost {
  double matmul_flops        = 0;
  double attention_flops     = 0;
  double gemm_fwd_seconds    = 0; ///< the layer's GEMMs, forward
  double gemm_bwd_seconds    = 0; ///< their input-gradient (dgrad) and weight-gradient (wgrad) GEMMs
  double gemm_fwd_bytes      = 0;
  double gemm_bwd_bytes      = 0;
  double gemm_wgrad_seconds  = 0; ///< of gemm_bwd_seconds: the weight-gradient GEMMs (a zero-bubble schedule's W)
  double gemm_wgrad_bytes    = 0;
  double clock_wgrad_seconds = 0; ///< of clock_bwd_seconds: the weight-gradient GEMMs' share
  double params              = 0; ///< parameters held by the rank
  double dense_params        = 0; ///< of which replicated across ep
  double dense_linear_params = 0; ///< of dense_params: the linear layers' weights (not norms or the router)
  double elementwise_bytes   = 0;
  double norm_bytes          = 0;
  double selective_bytes     = 0; ///< element-wise traffic of the selective recompute
  /// @brief What each of Megatron's recompute modules (RecomputeModule order) re-runs and frees.
  std::array<RecomputedModule, enum_names(RecomputeModule{}).size()> modules{};
  double act_none      = 0; ///< activations kept for backward without recompute
  double act_selective = 0;
  double act_full      = 0;
  // Unfused attention (its GEMMs and the score matrix's softmax and dropout in HBM), per pass; zero when fused.
  double unfused_fwd_seconds = 0;
  double unfused_bwd_seconds = 0;
  double unfused_fwd_bytes   = 0;
  double unfused_bwd_bytes   = 0;
  double unfused_flops       = 0; ///< executed by the forward: the whole score matrix, masked or not
  double scores_bytes        = 0; ///< unfused: the softmax output, dropout mask and output kept for backward
  double unfused_fwd_clock   = 0; ///< of clock_fwd_seconds: the unfused forward GEMMs' share
  double clock_fwd_seconds   = 0; ///< of gemm_fwd_seconds: what the sustained clock adds
  double clock_bwd_seconds   = 0;
  int kernels_fwd            = 0; ///< kernels launched by the forward pass (GEMMs, attention, element-wise)
  int kernels_bwd            = 0;
  int kernels_wgrad          = 0; ///< of kernels_bwd: the weight-gradient GEMMs
  /// @brief Of the GEMM seconds above, with their kernel gaps: the routed experts' forward, input-gradient and
  /// weight-gradient GEMMs (what runs between a MoE layer's dispatch and combine).
  double routed_fwd_seconds   = 0;
  double routed_dgrad_seconds = 0;
  double routed_wgrad_seconds = 0;
  /// @brief Of the GEMM seconds above, the kernel classes: quantization (forward, backward), the routed experts'
  /// forward and input-gradient GEMM kernels, and their weight-gradient ones (no quantization, no gaps).
  double quantize_fwd_seconds = 0;
  double quantize_bwd_seconds = 0;
  double routed_gemm_seconds  = 0;
  double routed_wgrad_gemm    = 0;
  double routed_fwd_gemm      = 0; ///< of routed_gemm_seconds: the forward's
  /// @brief MoE token permute and unpermute, HBM bytes per pass (memory-bound, their own kernels).
  double permute_fwd_bytes = 0;
  double permute_bwd_bytes = 0;
  bool moe                 = false;
};

struct Context {
  const JobSpec& job;
  const ModelSpec& m;
  int tp, cp, pp, dp, ep, etp;
  int v;           ///< model chunks each stage holds (virtual stages; DualPipe and DualPipeV: 2)
  int mbs;         ///< micro-batches per step
  int chunks;      ///< model chunks: pp x v (DualPipe holds each of its pp twice: pp)
  double sp;       ///< divisor of the sequence-parallel regions: tp with sequence parallelism, else 1
  double tokens;   ///< tokens per rank per micro-batch
  double clock;    ///< sustained compute rate over the measured best (1: the effect off or no profile)
  double gap;      ///< seconds of GPU idle per kernel launched (0: off)
  double moe_host; ///< host seconds per MoE layer and micro-batch, forward and backward, ep_overlap's included (0: off)
  ExpertLoad load; ///< what the busiest expert GPU computes per layer (empty for a dense model)
  /// @brief Of the GPU's SMs, the share a GEMM library that partitions them statically runs on: DeepGEMM beside a
  /// dispatcher that names its SMs (DeepEP's) leaves them those; 1 otherwise.
  double gemm_sm_share = 1;

  explicit Context(const JobSpec& j)
      : job(j), m(j.model), tp(j.parallelism.tp), cp(j.parallelism.cp), pp(j.parallelism.pp), dp(j.parallelism.dp),
        ep(j.parallelism.ep), etp(j.parallelism.etp), v(j.schedule.virtual_stages), mbs(j.micro_batches()),
        chunks(j.schedule.kind == ScheduleKind::dualpipe ? pp : pp * v),
        sp(j.parallelism.sequence_parallel ? j.parallelism.tp : 1),
        tokens(double(j.batch.micro_batch) * j.batch.sequence_length / j.parallelism.cp),
        clock(j.effects.sustained_clock ? j.calibration.clock_fraction : 1.0),
        gap(j.effects.kernel_gaps ? j.calibration.kernel_gap : 0.0),
        moe_host(j.effects.kernel_gaps
                     ? j.calibration.moe_host + (j.schedule.ep_overlap ? j.calibration.moe_host_overlap : 0.0)
                     : 0.0),
        load(expert_load(j)), gemm_sm_share(reserved_sms(j) > 0 ? 1 - double(reserved_sms(j)) / j.gpu.gemm.sms : 1.0)
  {
  }
};

/// @brief Kernels launched per layer and pass besides the GEMMs (sources and counts in workload/README.md):
/// attention, and the element-wise kernels (two norms, two residual adds, rotary, the activation).
inline constexpr int kAttentionKernelsForward  = 1;
inline constexpr int kAttentionKernelsBackward = 2;
inline constexpr int kElementwiseKernels       = 6;
/// @brief MoE layers add the router's softmax and top-k, and the token permute and unpermute.
inline constexpr int kMoeKernels = 4;

struct ChunkCost {
  int first_layer = 0;
  int layers      = 0;
  int moe_layers  = 0;
  LayerCost sum;               ///< over the chunk's layers
  double act_max_layer    = 0; ///< largest one-layer activation set (working set during backward)
  double params_max_layer = 0; ///< parameters of its largest layer, per rank (an FSDP unit)
  double logits_bytes     = 0; ///< last chunk: logits and fp32 loss inputs per micro-batch
  double extra_params     = 0; ///< embedding / output layer / final norm, per rank
  double fwd_seconds = 0, bwd_seconds = 0, recompute_seconds = 0;
  /// @brief Of fwd_seconds and bwd_seconds: the attention kernels' (what ring context parallelism overlaps).
  double attention_fwd_seconds = 0, attention_bwd_seconds = 0;
  double fwd_hbm = 0, bwd_hbm = 0, recompute_hbm = 0;
  double fwd_flops = 0, recompute_flops = 0;
  OpEffects fwd_effects, bwd_effects, recompute_effects; ///< of the seconds above: what each effect adds
  KernelTimes kernels;                                   ///< fwd, bwd and recompute seconds by kernel class
  KernelTimes recomputed; ///< kernels.recompute by the class of what it re-runs (its own recompute 0)
  /// @brief Of the backward: the weight-gradient GEMMs alone (a zero-bubble schedule's W), their HBM bytes, FLOPs and
  /// effects; the rest is the input-gradient pass (B).
  double wgrad_seconds = 0, wgrad_hbm = 0, wgrad_flops = 0;
  OpEffects wgrad_effects;
};

// Parameters of one transformer layer, split by how parallelism shares them.
struct LayerParams {
  double attention  = 0;
  double norms      = 0;
  double mlp_dense  = 0; ///< Dense MLP, or the shared experts and router of a MoE layer: replicated across ep.
  double router     = 0; ///< Of mlp_dense: the router's weights (kept in BF16 or FP32 in a low-precision run).
  double experts    = 0; ///< Routed experts: split across ep.
  double active     = 0; ///< Parameters a token goes through (attention + norms + active MLP).
  double matmul     = 0; ///< Active parameters used in matrix products.
  double ffn_active = 0; ///< Intermediate MLP width a token goes through (sum over its experts).
  bool operator==(const LayerParams&) const = default;
};
/// @brief Parameters of layer `layer` (0-based) of `m`.
LayerParams layer_params(const ModelSpec& m, int layer);
/// @brief What one multi-token prediction module holds beyond its transformer layer (Megatron's
/// MultiTokenPredictionLayer): eh_proj, a 2h -> h linear, and three norms (enorm, hnorm and the final one).
struct MtpModuleParams {
  double eh_proj = 0;
  double norms   = 0;
};
/// @brief The parameters of one MTP module of `m` beyond its transformer layer.
inline MtpModuleParams mtp_module_params(const ModelSpec& m)
{
  const double h = m.hidden;
  return {2 * h * h, 3 * h};
}
/// @brief Attention score (query-key) and value head widths.
double qk_dim(const ModelSpec& m);
double v_dim(const ModelSpec& m);

/// @brief The cost of every model chunk (pp x v of them, chunk g = v x pp + stage) on one rank.
std::vector<ChunkCost> chunk_costs(const Context& c);
/// @brief Adds Megatron's pre-FlashAttention attention of one layer to `k`: its GEMMs, the softmax and dropout over
/// the score matrix in HBM, and what it keeps for the backward (`attention` "unfused").
void unfused_attention(const Context& c, LayerCost& k);
/// @brief Activations a chunk keeps per micro-batch under the job's recompute policy.
double stored_activations(const Context& c, const ChunkCost& ch);
/// @brief A layer's activation widths on one rank, in BF16 elements a token.
struct LayerWidths {
  double q        = 0; ///< the rank's query heads
  double kv       = 0; ///< its key and value heads
  double o_kept   = 0; ///< the attention output as kept (a low-precision copy holds its share of BF16's bytes)
  double act_fn   = 0; ///< the MLP's intermediates per width of its FFN (gated: gate, up, product)
  double mlp_kept = 0; ///< the same as kept (the activation's input may be kept in a low precision)
};
/// @brief Fills `k.modules` beyond their GEMMs (layer_cost adds those): each recompute module's element-wise
/// work and the activations it frees.
void recomputed_modules(const Context& c, const LayerParams& p, const LayerWidths& w, LayerCost& k);
/// @brief A chunk's forward by kernel class (what a full recompute re-runs): its seconds without the effects that
/// have no class (the sustained clock is in the GEMMs' and attention's seconds already).
KernelTimes forward_kernels(double attn_fwd, double mem_rate, const ChunkCost& ch);
/// @brief A chunk's recompute under the job's policy (its seconds, bytes, FLOPs and effects), once its forward is
/// costed, and the same seconds by kernel class (`recomputed`). `attention_unclocked`: the attention forward keeps
/// no sustained-clock share (measured or unfused).
void add_recompute(const Context& c, double attn_fwd, double mem_rate, bool attention_unclocked, ChunkCost& ch);

/// @brief The share of a chunk's parameters in its first unit (its first layer and embedding or output layer), which
/// waits on compute when data parallelism overlaps unit by unit; 1 when it does not.
double lead_share(const Context& c, const ChunkCost& ch);
/// @brief Buffer of one tensor-parallel collective: the micro-batch's full (gathered) activation.
double tp_activation_bytes(const Context& c);
/// @brief Buffer of one sequence-parallel all-gather: in a low precision Transformer Engine quantizes a GEMM's input
/// on its own rows and gathers the quantized copy (the reduce-scatters stay in BF16).
double tp_gather_bytes(const Context& c);
/// @brief Buffer of one context-parallel K/V all-gather (MLA: its per-head K and V, up-projected before the core
/// attention).
double cp_kv_bytes(const Context& c);
/// @brief K/V heads per tensor-parallel rank as an all-to-all group of `a2a` ranks splits them (replicated up to
/// one per rank).
double cp_kv_heads(const Context& c, int a2a);
/// @brief The K/V a2a+p2p's ring gathers per layer and pass: the sequence's K/V of one all-to-all group's share of
/// the heads (`a2a` ranks each, replicated up to one per rank).
double cp_ring_kv_bytes(const Context& c, int a2a);
/// @brief Ulysses' all-to-all buffers on one rank, per layer and pass: Q, K and V of its tokens over its
/// tensor-parallel heads, and the attention output.
std::pair<double, double> cp_a2a_bytes(const Context& c, int a2a);
/// @brief What context parallelism holds on one rank while a layer's attention runs, beyond the rank's own Q, K
/// and V: gathered K/V and their gradients, a ring's buffers in flight, or Ulysses' receive buffers (0 without CP).
double cp_working_bytes(const Context& c);
/// @brief Bytes of one token on the wire in a dispatch (the job's dispatch precision) or a combine (BF16).
double token_bytes(const Context& c, bool dispatch);
/// @brief The forward GEMMs of one layer and micro-batch on one rank. Tokens are the GEMMs' M: with sequence
/// parallelism the all-gathered sequence, as tensor parallelism splits the weights' output (column-parallel) or input
/// (row-parallel) features by tp. The routed experts' GEMMs go to `routed`; `module_of` gets, for each returned
/// GEMM, the recompute module that re-runs it (-1: none).
std::vector<GemmShape> layer_gemms(const Context& c, int layer, std::vector<GemmShape>& routed,
                                   std::vector<int>& module_of);
/// @brief Buffer of one expert-parallel dispatch or combine: the top-k copies of the rank's tokens.
double ep_buffer_bytes(const Context& c, bool dispatch = true);
/// @brief The all-gather dispatcher's buffer (nccl-tests size: the gathered total): the tokens of the etp x ep ranks
/// of the expert model-parallel group.
double allgather_dispatch_bytes(const Context& c, bool dispatch);
/// @brief Tokens one rank's experts compute per micro-batch and MoE layer (all its local experts together): the
/// top-k copies of the rank's tensor-parallel share of the tokens, gathered over the expert-TP group.
double expert_tokens(const Context& c);
/// @brief Buffer of one expert-tensor-parallel all-gather (or reduce-scatter) of a MoE layer: the tokens the rank's
/// experts compute, gathered over etp ranks.
double etp_buffer_bytes(const Context& c);
/// @brief One pipeline message: the sequence-parallel shard of a micro-batch's activation (or its gradient).
double pp_message_bytes(const Context& c);

/// @brief Bytes of one data-parallel all-gather of parameters, before sharding: those replicated across EP and the
/// routed experts'.
struct GatherBytes {
  double dense  = 0;
  double expert = 0;
};
/// @brief A chunk's parameter all-gather: BF16, or with Megatron's FP8 parameter gather the linear layers' weights
/// in the compute format (scales beside them) and the rest (norms, router, embedding, output layer) in BF16.
GatherBytes param_gather_bytes(const Context& c, const ChunkCost& ch);

/// @brief What one pipeline stage holds and does once per step, whatever its schedule: its parameters, the
/// optimizer step over its local shard, and its memory estimate at the schedule's peak.
struct StageStatics {
  double dense_params  = 0; ///< per GPU, before data-parallel sharding (embedding and output layer included)
  double expert_params = 0;
  GatherBytes gather; ///< one all-gather of the stage's parameters, before sharding
  Op optimizer;       ///< the optimizer op (seconds, HBM bytes, effects); no dependencies
  MemoryEstimate memory;
};
StageStatics stage_statics(const Context& c, const std::vector<ChunkCost>& costs, int stage);
/// @brief Refuses a stage whose memory estimate exceeds the GPU's HBM. @throws InfeasibleError ("memory").
void check_memory(const JobSpec& job, int stage, const MemoryEstimate& memory);

} // namespace spansim::workload::detail
