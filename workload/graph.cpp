// From a validated job to the training-step graph: per-layer costs, pipeline schedules, the op programs of the
// pipeline stages, the memory estimate and the summary.
#include "workload/workload.hpp"

#include "common/error.hpp"
#include "common/units.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace spansim::workload {

namespace {

constexpr double kBf16 = 2; // bytes per activation and weight element
constexpr double kFp32 = 4;
// Adam with mixed precision: fp32 master weights, first and second moments.
constexpr double kOptimizerBytesPerParam = 12;
// Adam step traffic per parameter of the local shard: read master, m, v and the fp32 gradient (16 bytes), write
// master, m, v (12) and the bf16 working copy (2).
constexpr double kOptimizerTrafficPerParam = 30;
// The flash-attention backward runs five matmuls of the forward's size (it recomputes the scores) against the
// forward's two: the FlashAttention papers count its FLOPs as 2.5 times the forward's, and time their rates so.
constexpr double kFlashBackwardFlopRatio = 2.5;

double gated_factor(MlpKind kind)
{
  return kind == MlpKind::gated ? 3 : 2;
}

// Parameters of one transformer layer, split by how parallelism shares them.
struct LayerParams {
  double attention  = 0;
  double norms      = 0;
  double mlp_dense  = 0; ///< Dense MLP, or the shared experts and router of a MoE layer: replicated across ep.
  double experts    = 0; ///< Routed experts: split across ep.
  double active     = 0; ///< Parameters a token goes through (attention + norms + active MLP).
  double matmul     = 0; ///< Active parameters used in matrix products.
  double ffn_active = 0; ///< Intermediate MLP width a token goes through (sum over its experts).
};

double attention_params(const ModelSpec& m)
{
  const double h = m.hidden;
  if (m.attention == AttentionKind::mla) {
    const auto& a   = m.mla;
    const double qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    double q        = a.q_lora_rank > 0 ? h * a.q_lora_rank + double(a.q_lora_rank) * m.heads * qk : h * m.heads * qk;
    double kv       = h * (a.kv_lora_rank + a.qk_rope_head_dim) +
                double(a.kv_lora_rank) * m.heads * (a.qk_nope_head_dim + a.v_head_dim);
    return q + kv + double(m.heads) * a.v_head_dim * h;
  }
  const double q  = double(m.heads) * m.head_dim;
  const double kv = double(m.kv_heads) * m.head_dim;
  return h * q + 2 * h * kv + q * h;
}

LayerParams layer_params(const ModelSpec& m, int layer)
{
  LayerParams p;
  const double h    = m.hidden;
  p.attention       = attention_params(m);
  p.norms           = 2 * h;
  const double g    = gated_factor(m.mlp);
  double mlp_active = 0;
  if (m.is_moe_layer(layer)) {
    const double expert = g * h * m.moe.expert_ffn;
    p.experts           = m.moe.experts * expert;
    p.mlp_dense         = m.moe.shared_experts * expert + h * m.moe.experts;
    mlp_active          = (m.moe.experts_per_token + m.moe.shared_experts) * expert + h * m.moe.experts;
    p.ffn_active        = double(m.moe.experts_per_token + m.moe.shared_experts) * m.moe.expert_ffn;
  } else {
    p.mlp_dense  = g * h * m.ffn;
    mlp_active   = p.mlp_dense;
    p.ffn_active = m.ffn;
  }
  p.active = p.attention + p.norms + mlp_active;
  p.matmul = p.attention + mlp_active;
  return p;
}

// Attention score and value head widths.
double qk_dim(const ModelSpec& m)
{
  return m.attention == AttentionKind::mla ? m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim : m.head_dim;
}
double v_dim(const ModelSpec& m)
{
  return m.attention == AttentionKind::mla ? m.mla.v_head_dim : m.head_dim;
}

// Per-rank cost of one layer for one micro-batch, forward pass.
struct LayerCost {
  double matmul_flops      = 0;
  double attention_flops   = 0;
  double gemm_fwd_seconds  = 0; ///< the layer's GEMMs, forward
  double gemm_bwd_seconds  = 0; ///< their input-gradient (dgrad) and weight-gradient (wgrad) GEMMs
  double gemm_fwd_bytes    = 0;
  double gemm_bwd_bytes    = 0;
  double params            = 0; ///< parameters held by the rank
  double dense_params      = 0; ///< of which replicated across ep
  double elementwise_bytes = 0;
  double norm_bytes        = 0;
  double selective_bytes   = 0; ///< element-wise traffic of the selective recompute
  double act_none          = 0; ///< activations kept for backward without recompute
  double act_selective     = 0;
  double act_full          = 0;
  bool moe                 = false;
};

struct Context {
  const JobSpec& job;
  const ModelSpec& m;
  int tp, cp, pp, dp, ep, v, mbs, chunks;
  double sp;     ///< divisor of the sequence-parallel regions: tp with sequence parallelism, else 1
  double tokens; ///< tokens per rank per micro-batch

  explicit Context(const JobSpec& j)
      : job(j), m(j.model), tp(j.parallelism.tp), cp(j.parallelism.cp), pp(j.parallelism.pp), dp(j.parallelism.dp),
        ep(j.parallelism.ep), v(j.schedule.virtual_stages), mbs(j.micro_batches()), chunks(pp * v),
        sp(j.parallelism.sequence_parallel ? j.parallelism.tp : 1),
        tokens(double(j.batch.micro_batch) * j.batch.sequence_length / j.parallelism.cp)
  {
  }
};

// The forward GEMMs of one layer and micro-batch on one rank. Tokens are the GEMMs' M: with sequence parallelism
// the all-gathered sequence (T), as tensor parallelism splits the weights' output (column-parallel) or input
// (row-parallel) features by tp.
std::vector<GemmShape> layer_gemms(const Context& c, int layer)
{
  const ModelSpec& m = c.m;
  const double t = c.tokens, h = m.hidden, tp = c.tp;
  std::vector<GemmShape> g;
  if (m.attention == AttentionKind::mla) {
    // Every projection split by tp, as the parameter and FLOP counts assume.
    const auto& a   = m.mla;
    const double qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    if (a.q_lora_rank > 0) {
      g.push_back({.m = t, .n = a.q_lora_rank / tp, .k = h});
      g.push_back({.m = t, .n = m.heads * qk / tp, .k = double(a.q_lora_rank)});
    } else {
      g.push_back({.m = t, .n = m.heads * qk / tp, .k = h});
    }
    g.push_back({.m = t, .n = (a.kv_lora_rank + a.qk_rope_head_dim) / tp, .k = h});
    g.push_back({.m = t, .n = m.heads * double(a.qk_nope_head_dim + a.v_head_dim) / tp, .k = double(a.kv_lora_rank)});
    g.push_back({.m = t, .n = h, .k = m.heads * double(a.v_head_dim) / tp});
  } else {
    // Fused QKV: the rank's query heads and its K/V heads (replicated when kv_heads < tp).
    const double kv = std::ceil(double(m.kv_heads) / tp);
    g.push_back({.m = t, .n = (m.heads / tp + 2 * kv) * m.head_dim, .k = h});
    g.push_back({.m = t, .n = h, .k = m.heads / tp * m.head_dim});
  }
  // An MLP of width f: gate and up fused into one GEMM (gated) or fc1 (plain), then down / fc2.
  const double in_mats = m.mlp == MlpKind::gated ? 2 : 1;
  auto mlp             = [&](double f, double tokens, int groups) {
    g.push_back({.m = tokens, .n = in_mats * f / tp, .k = h, .groups = groups});
    g.push_back({.m = tokens, .n = h, .k = f / tp, .groups = groups});
  };
  if (m.is_moe_layer(layer)) {
    // Router over the rank's sequence-parallel share of the tokens; the routed experts as one grouped GEMM over
    // the rank's experts, each receiving its uniform share of the top-k copies of the ep group's tokens.
    g.push_back({.m = t / tp, .n = double(m.moe.experts), .k = h});
    const int local = m.moe.experts / c.ep;
    mlp(m.moe.expert_ffn, t * m.moe.experts_per_token * c.ep / m.moe.experts, local);
    if (m.moe.shared_experts > 0)
      mlp(double(m.moe.shared_experts) * m.moe.expert_ffn, t, 1);
  } else {
    mlp(m.ffn, t, 1);
  }
  return g;
}

// Forward GEMM C = A B of shape (M, N, K): the backward computes dA = dC B^T, a GEMM (M, K, N), and
// dB = A^T dC, a GEMM (N, K, M) whose reduction runs over the tokens and whose C is the fp32 gradient
// accumulated across micro-batches (Megatron's gradient-accumulation fusion: read and written by the GEMM).
GemmShape dgrad(const GemmShape& f)
{
  return {.m = f.m, .n = f.k, .k = f.n, .groups = f.groups};
}
GemmShape wgrad(const GemmShape& f)
{
  return {.m = f.n, .n = f.k, .k = f.m, .groups = f.groups, .accumulate_fp32 = true};
}

template <class Cost>
void add_gemms(const Context& c, const std::vector<GemmShape>& gemms, Cost& k)
{
  for (const GemmShape& f : gemms) {
    const GemmCost fwd = gemm_cost(c.job.gpu, c.job.precision, f);
    const GemmCost dg  = gemm_cost(c.job.gpu, c.job.precision, dgrad(f));
    const GemmCost wg  = gemm_cost(c.job.gpu, c.job.precision, wgrad(f));
    k.gemm_fwd_seconds += fwd.seconds;
    k.gemm_fwd_bytes += fwd.bytes;
    k.gemm_bwd_seconds += dg.seconds + wg.seconds;
    k.gemm_bwd_bytes += dg.bytes + wg.bytes;
  }
}

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
  const double s    = c.job.batch.sequence_length;
  k.attention_flops = double(c.job.batch.micro_batch) * m.heads * s * s * (qk_dim(m) + v_dim(m)) / c.cp / c.tp;
  k.dense_params    = (p.attention + p.norms + p.mlp_dense) / c.tp;
  k.params          = k.dense_params + p.experts / (double(c.tp) * c.ep);
  add_gemms(c, layer_gemms(c, layer), k);

  const double q_rank  = double(m.heads) / c.tp * qk_dim(m);
  const double o_rank  = double(m.heads) / c.tp * v_dim(m);
  const double kv_rank = std::ceil(double(m.kv_heads) / c.tp) * (qk_dim(m) + v_dim(m));
  const double act_fn  = m.mlp == MlpKind::gated ? 3 : 2; // gated: gate, up, product; plain: fc1 out, GELU out
  // Two norms (read + write) and two residual adds (two reads, one write), rotary on q and k, the MLP activation.
  k.norm_bytes = t * kBf16 * 4 * h / c.sp;
  k.elementwise_bytes =
      k.norm_bytes + t * kBf16 * (6 * h / c.sp + 2 * (q_rank + kv_rank) + act_fn * p.ffn_active / c.tp);

  double latent = 0;
  if (m.attention == AttentionKind::mla)
    latent = m.mla.q_lora_rank + m.mla.kv_lora_rank + m.mla.qk_rope_head_dim;
  const double dispatched = k.moe ? h * m.moe.experts_per_token / c.sp : 0;
  // Stored for backward (flash attention: no score matrix): norm inputs and outputs, Q, K, V, attention output,
  // MLP intermediates, MoE token copies.
  const double none = 4 * h / c.sp + q_rank + kv_rank + o_rank + latent + act_fn * p.ffn_active / c.tp + dispatched;
  k.act_none        = t * kBf16 * none;
  // Selective recompute drops what is cheap to recompute and large to keep: the norm outputs, the attention
  // output (the flash-attention forward is rerun) and the MLP activation-function output.
  k.act_selective   = t * kBf16 * (none - 2 * h / c.sp - o_rank - p.ffn_active / c.tp);
  k.selective_bytes = k.norm_bytes + t * kBf16 * 3 * p.ffn_active / c.tp;
  k.act_full        = t * kBf16 * h / c.sp;
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

struct ChunkCost {
  int first_layer = 0;
  int layers      = 0;
  int moe_layers  = 0;
  LayerCost sum;            ///< over the chunk's layers
  double act_max_layer = 0; ///< largest one-layer activation set (working set during backward)
  double logits_bytes  = 0; ///< last chunk: logits and fp32 loss inputs per micro-batch
  double extra_params  = 0; ///< embedding / output layer / final norm, per rank
  double fwd_seconds = 0, bwd_seconds = 0, recompute_seconds = 0;
  double fwd_hbm = 0, bwd_hbm = 0, recompute_hbm = 0;
  double fwd_flops = 0, recompute_flops = 0;
};

void add(LayerCost& a, const LayerCost& b)
{
  a.matmul_flops += b.matmul_flops;
  a.attention_flops += b.attention_flops;
  a.gemm_fwd_seconds += b.gemm_fwd_seconds;
  a.gemm_bwd_seconds += b.gemm_bwd_seconds;
  a.gemm_fwd_bytes += b.gemm_fwd_bytes;
  a.gemm_bwd_bytes += b.gemm_bwd_bytes;
  a.params += b.params;
  a.dense_params += b.dense_params;
  a.elementwise_bytes += b.elementwise_bytes;
  a.norm_bytes += b.norm_bytes;
  a.selective_bytes += b.selective_bytes;
  a.act_none += b.act_none;
  a.act_selective += b.act_selective;
  a.act_full += b.act_full;
}

std::vector<ChunkCost> chunk_costs(const Context& c)
{
  const auto counts          = chunk_layer_counts(c.m.layers, c.chunks);
  const GpuSpec& gpu         = c.job.gpu;
  const AttentionRates& attn = gpu.attention[static_cast<std::size_t>(c.job.attention)];
  const double mem_rate      = gpu.hbm_bandwidth * gpu.elementwise_efficiency;
  std::vector<ChunkCost> out(c.chunks);
  int layer = 0;
  for (int g = 0; g < c.chunks; ++g) {
    ChunkCost& ch  = out[g];
    ch.first_layer = layer;
    ch.layers      = counts[g];
    for (int i = 0; i < counts[g]; ++i, ++layer) {
      LayerCost k = layer_cost(c, layer);
      add(ch.sum, k);
      ch.moe_layers += k.moe ? 1 : 0;
      ch.act_max_layer = std::max(ch.act_max_layer, k.act_none);
    }
    const double h    = c.m.hidden;
    double head_flops = 0;
    if (g == 0)
      ch.extra_params += double(c.m.vocab) * h / c.tp;
    if (g == c.chunks - 1) {
      ch.extra_params += double(c.m.vocab) * h / c.tp + h / c.tp;
      head_flops      = 2 * c.tokens * c.m.vocab * h / c.tp;
      ch.logits_bytes = c.tokens * double(c.m.vocab) / c.tp * (kBf16 + kFp32);
      // The output layer: the input embedding is a lookup of T rows, not a GEMM.
      add_gemms(c, {GemmShape{.m = c.tokens, .n = double(c.m.vocab) / c.tp, .k = h}}, ch.sum);
    }
    const double mm_flops = ch.sum.matmul_flops + head_flops;
    // Each GEMM is compute- or traffic-bound on its own; attention runs at the kernel library's measured rate
    // for each pass; element-wise ops are bandwidth-bound.
    const double attn_fwd = ch.sum.attention_flops / attn.forward;
    const double attn_bwd = kFlashBackwardFlopRatio * ch.sum.attention_flops / attn.backward;
    const double ew_fwd   = ch.sum.elementwise_bytes / mem_rate;
    ch.fwd_seconds        = ch.sum.gemm_fwd_seconds + attn_fwd + ew_fwd;
    ch.bwd_seconds        = ch.sum.gemm_bwd_seconds + attn_bwd + 2 * ew_fwd;
    ch.fwd_hbm            = ch.sum.gemm_fwd_bytes + ch.sum.elementwise_bytes;
    ch.bwd_hbm            = ch.sum.gemm_bwd_bytes + 2 * ch.sum.elementwise_bytes;
    ch.fwd_flops          = mm_flops + ch.sum.attention_flops;
    switch (c.job.recompute) {
    case Recompute::none:
      break;
    case Recompute::selective:
      ch.recompute_seconds = attn_fwd + ch.sum.selective_bytes / mem_rate;
      ch.recompute_hbm     = ch.sum.selective_bytes;
      ch.recompute_flops   = ch.sum.attention_flops;
      break;
    case Recompute::full:
      ch.recompute_seconds = ch.fwd_seconds;
      ch.recompute_hbm     = ch.fwd_hbm;
      ch.recompute_flops   = ch.fwd_flops;
      break;
    }
  }
  return out;
}

double stored_activations(const Context& c, const ChunkCost& ch)
{
  const double per = c.job.recompute == Recompute::none        ? ch.sum.act_none
                     : c.job.recompute == Recompute::selective ? ch.sum.act_selective
                                                               : ch.sum.act_full;
  return per + ch.logits_bytes;
}

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
  /// Exposed per-layer collectives of one pass over chunk v, chained after `after`; returns the chain's end.
  int layer_collectives(int v, int mb, int after, bool backward);
  /// Parameter all-gathers (FSDP/HSDP) for chunk v; returns the op ids to depend on.
  std::vector<int> gather_params(int v, int mb);
  /// Gradient reduction for chunk v after `after`.
  void reduce_grads(int v, int mb, int after);
  /// The pipeline receive feeding a forward (from the previous chunk) or a backward (from the next one).
  int receive(const Unit& u, int g);
  /// The pipeline send of a forward's activations or a backward's gradients, after `after`.
  void send(const Unit& u, int g, int after);

  const Context& c_;
  const std::vector<ChunkCost>& costs_;
  int stage_;
  StageProgram prog_;
  std::vector<int> gathered_;      // non-resharding FSDP: all-gather op of each chunk, -1 before its first use
  std::vector<int> backward_done_; // backward passes done per chunk
  std::vector<int> reductions_;
};

int StageBuilder::layer_collectives(int v, int mb, int after, bool backward)
{
  const ChunkCost& ch = costs_[global_chunk(v)];
  const ModelSpec& m  = c_.m;
  int end             = after;
  const double act    = c_.tokens * m.hidden * kBf16; // the full (gathered) activation of the micro-batch
  if (c_.tp > 1) {
    const Group g{Axis::tp, c_.tp};
    // Megatron tensor parallelism: two collectives per pass per layer in the attention and MLP blocks; with
    // sequence parallelism each all-reduce becomes a reduce-scatter plus an all-gather.
    const bool sp = c_.job.parallelism.sequence_parallel;
    for (CollectiveOp kind : sp ? std::vector{CollectiveOp::all_gather, CollectiveOp::reduce_scatter}
                                : std::vector{CollectiveOp::all_reduce})
      end = push(Op{.kind        = OpKind::collective,
                    .collective  = kind,
                    .dim         = Dim::tp,
                    .purpose     = Purpose::tp_activations,
                    .chunk       = v,
                    .micro_batch = mb,
                    .group       = g,
                    .bytes       = act,
                    .count       = 2 * ch.layers,
                    .deps        = {end}});
  }
  if (c_.cp > 1) {
    // All-gather based context parallelism (Llama 3): K/V of the whole sequence gathered before attention; in
    // backward gathered again and their gradients reduce-scattered. MLA gathers its compressed latent.
    const double kv_token = m.attention == AttentionKind::mla
                                ? kBf16 * (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim)
                                : kBf16 * std::ceil(double(m.kv_heads) / c_.tp) * (qk_dim(m) + v_dim(m));
    const double kv       = kv_token * double(c_.job.batch.micro_batch) * c_.job.batch.sequence_length;
    const Group g{Axis::cp, c_.cp};
    end = push(Op{.kind        = OpKind::collective,
                  .collective  = CollectiveOp::all_gather,
                  .dim         = Dim::cp,
                  .purpose     = Purpose::cp_kv,
                  .chunk       = v,
                  .micro_batch = mb,
                  .group       = g,
                  .bytes       = kv,
                  .count       = ch.layers,
                  .deps        = {end}});
    if (backward)
      end = push(Op{.kind        = OpKind::collective,
                    .collective  = CollectiveOp::reduce_scatter,
                    .dim         = Dim::cp,
                    .purpose     = Purpose::cp_kv_grads,
                    .chunk       = v,
                    .micro_batch = mb,
                    .group       = g,
                    .bytes       = kv,
                    .count       = ch.layers,
                    .deps        = {end}});
  }
  if (c_.ep > 1 && ch.moe_layers > 0) {
    // One dispatch and one combine per MoE layer and pass, carrying the top-k copies of the rank's tokens.
    const double buf = c_.tokens / c_.sp * m.moe.experts_per_token * m.hidden * kBf16;
    for (Purpose p : {Purpose::ep_dispatch, Purpose::ep_combine})
      end = push(Op{.kind        = OpKind::collective,
                    .collective  = CollectiveOp::all_to_all,
                    .dim         = Dim::ep,
                    .purpose     = p,
                    .chunk       = v,
                    .micro_batch = mb,
                    .group       = Group{Axis::ep, c_.ep},
                    .bytes       = buf,
                    .count       = ch.moe_layers,
                    .deps        = {end}});
  }
  return end;
}

std::vector<int> StageBuilder::gather_params(int v, int mb)
{
  const auto& par = c_.job.parallelism;
  if (par.dp_mode == DataParallelMode::ddp)
    return {};
  if (!par.reshard_after_forward && gathered_[v] >= 0)
    return {gathered_[v]};
  const ChunkCost& ch = costs_[global_chunk(v)];
  const double dense  = ch.sum.dense_params + ch.extra_params;
  const double expert = ch.sum.params - ch.sum.dense_params;
  const bool hsdp     = par.dp_mode == DataParallelMode::hsdp;
  const int shard     = hsdp ? c_.cp * par.hsdp_shard : c_.cp * c_.dp;
  const int edp       = c_.cp * c_.dp / c_.ep;
  const int mb_tag    = par.reshard_after_forward ? mb : -1;
  std::vector<int> ids;
  auto gather = [&](Group g, double params) {
    if (g.size > 1 && params > 0)
      ids.push_back(push(Op{.kind         = OpKind::collective,
                            .collective   = CollectiveOp::all_gather,
                            .dim          = Dim::dp,
                            .purpose      = Purpose::param_gather,
                            .chunk        = v,
                            .micro_batch  = mb_tag,
                            .group        = g,
                            .bytes        = kBf16 * params,
                            .count        = 1,
                            .overlappable = true,
                            .deps         = {}}));
  };
  const AxisSet data_axis = hsdp ? Axis::dp_shard : Axis::dp;
  gather(Group{c_.cp > 1 ? AxisSet(Axis::cp) | data_axis : data_axis, shard}, dense);
  gather(Group{Axis::edp, edp}, expert);
  if (!par.reshard_after_forward)
    gathered_[v] = ids.empty() ? -1 : ids.back();
  return ids;
}

void StageBuilder::reduce_grads(int v, int mb, int after)
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
  auto reduce         = [&](CollectiveOp kind, Group g, double bytes, int dep) {
    if (g.size <= 1 || bytes <= 0)
      return dep;
    int id = push(Op{.kind         = OpKind::collective,
                             .collective   = kind,
                             .dim          = Dim::dp,
                             .purpose      = Purpose::grad_reduce,
                             .chunk        = v,
                             .micro_batch  = mb_tag,
                             .group        = g,
                             .bytes        = bytes,
                             .count        = 1,
                             .overlappable = true,
                             .deps         = {dep}});
    reductions_.push_back(id);
    return id;
  };
  auto with_cp = [&](Axis a) { return c_.cp > 1 ? Axis::cp | a : AxisSet(a); };
  switch (par.dp_mode) {
  case DataParallelMode::ddp:
    reduce(CollectiveOp::all_reduce, Group{with_cp(Axis::dp), c_.cp * c_.dp}, gb * dense, after);
    reduce(CollectiveOp::all_reduce, Group{Axis::edp, edp}, gb * expert, after);
    break;
  case DataParallelMode::fsdp:
    reduce(CollectiveOp::reduce_scatter, Group{with_cp(Axis::dp), c_.cp * c_.dp}, gb * dense, after);
    reduce(CollectiveOp::reduce_scatter, Group{Axis::edp, edp}, gb * expert, after);
    break;
  case DataParallelMode::hsdp: {
    const int shard = c_.cp * par.hsdp_shard;
    const int rs    = reduce(CollectiveOp::reduce_scatter, Group{with_cp(Axis::dp_shard), shard}, gb * dense, after);
    reduce(CollectiveOp::all_reduce, Group{Axis::dp_replicate, c_.dp / par.hsdp_shard}, gb * dense / shard, rs);
    reduce(CollectiveOp::reduce_scatter, Group{Axis::edp, edp}, gb * expert, after);
    break;
  }
  }
}

int StageBuilder::receive(const Unit& u, int g)
{
  const double msg = c_.tokens * c_.m.hidden * kBf16 / c_.sp; // sequence-parallel shard of the activation
  return push(Op{.kind         = OpKind::recv,
                 .dim          = Dim::pp,
                 .purpose      = u.forward ? Purpose::pp_activations : Purpose::pp_gradients,
                 .chunk        = u.chunk,
                 .micro_batch  = u.micro_batch,
                 .group        = Group{Axis::pp, c_.pp},
                 .bytes        = msg,
                 .count        = 1,
                 .peer_stage   = u.forward ? (stage_ - 1 + c_.pp) % c_.pp : (stage_ + 1) % c_.pp,
                 .tag          = u.forward ? tag(true, g - 1, u.micro_batch) : tag(false, g + 1, u.micro_batch),
                 .overlappable = true,
                 .deps         = {}});
}

void StageBuilder::send(const Unit& u, int g, int after)
{
  const double msg = c_.tokens * c_.m.hidden * kBf16 / c_.sp;
  push(Op{.kind         = OpKind::send,
          .dim          = Dim::pp,
          .purpose      = u.forward ? Purpose::pp_activations : Purpose::pp_gradients,
          .chunk        = u.chunk,
          .micro_batch  = u.micro_batch,
          .group        = Group{Axis::pp, c_.pp},
          .bytes        = msg,
          .count        = 1,
          .peer_stage   = u.forward ? (stage_ + 1) % c_.pp : (stage_ - 1 + c_.pp) % c_.pp,
          .tag          = tag(u.forward, g, u.micro_batch),
          .overlappable = true,
          .deps         = {after}});
}

StageProgram StageBuilder::build()
{
  prog_.stage = stage_;
  gathered_.assign(c_.v, -1);
  backward_done_.assign(c_.v, 0);
  int chain = -1; // the end of the previous unit: compute is serialized with its exposed collectives
  auto with = [](std::vector<int> deps, int id) {
    if (id >= 0)
      deps.push_back(id);
    return deps;
  };
  for (const Unit& u : schedule_units(c_.job, stage_)) {
    const int g           = global_chunk(u.chunk);
    const ChunkCost& ch   = costs_[g];
    std::vector<int> deps = gather_params(u.chunk, u.micro_batch);
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
                            .group          = {},
                            .deps           = with(deps, chain)});
      chain       = layer_collectives(u.chunk, u.micro_batch, f, false);
      if (g < c_.chunks - 1)
        send(u, g, chain);
      continue;
    }
    if (c_.job.recompute != Recompute::none) {
      // Recompute needs no gradient: it runs before the receive so that it can hide the wait.
      chain = push(Op{.kind           = OpKind::recompute,
                      .chunk          = u.chunk,
                      .micro_batch    = u.micro_batch,
                      .hardware_flops = ch.recompute_flops,
                      .seconds        = ch.recompute_seconds,
                      .hbm_bytes      = ch.recompute_hbm,
                      .group          = {},
                      .deps           = with(deps, chain)});
      if (c_.job.recompute == Recompute::full)
        chain = layer_collectives(u.chunk, u.micro_batch, chain, false);
    }
    if (g < c_.chunks - 1)
      deps.push_back(receive(u, g));
    const int b = push(Op{.kind           = OpKind::backward,
                          .chunk          = u.chunk,
                          .micro_batch    = u.micro_batch,
                          .model_flops    = 2 * ch.fwd_flops,
                          .hardware_flops = 2 * ch.fwd_flops,
                          .seconds        = ch.bwd_seconds,
                          .hbm_bytes      = ch.bwd_hbm,
                          .group          = {},
                          .deps           = with(deps, chain)});
    chain       = layer_collectives(u.chunk, u.micro_batch, b, true);
    if (g > 0)
      send(u, g, chain);
    reduce_grads(u.chunk, u.micro_batch, chain);
  }

  // Optimizer step over the local shard, once every gradient is reduced.
  const auto& par = c_.job.parallelism;
  double dense = 0, expert = 0;
  for (int v = 0; v < c_.v; ++v) {
    const ChunkCost& ch = costs_[global_chunk(v)];
    prog_.chunk_layers.push_back(ch.layers);
    dense += ch.sum.dense_params + ch.extra_params;
    expert += ch.sum.params - ch.sum.dense_params;
  }
  prog_.params           = dense + expert;
  const int dense_shard  = par.dp_mode == DataParallelMode::ddp    ? 1
                           : par.dp_mode == DataParallelMode::hsdp ? c_.cp * par.hsdp_shard
                                                                   : c_.cp * c_.dp;
  const int expert_shard = par.dp_mode == DataParallelMode::ddp ? 1 : c_.cp * c_.dp / c_.ep;
  const double local     = dense / dense_shard + expert / expert_shard;
  Op opt;
  opt.kind      = OpKind::optimizer;
  opt.hbm_bytes = kOptimizerTrafficPerParam * local;
  opt.seconds   = opt.hbm_bytes / (c_.job.gpu.hbm_bandwidth * c_.job.gpu.elementwise_efficiency);
  opt.deps      = reductions_;
  if (chain >= 0)
    opt.deps.push_back(chain);
  push(std::move(opt));

  // Memory: weights, gradients (fp32 accumulation) and Adam state, then activations at the schedule's peak.
  MemoryEstimate& mem = prog_.memory;
  double chunk_max    = 0;
  for (int v = 0; v < c_.v; ++v)
    chunk_max = std::max(chunk_max, costs_[global_chunk(v)].sum.params + costs_[global_chunk(v)].extra_params);
  mem.optimizer = kOptimizerBytesPerParam * local;
  if (par.dp_mode != DataParallelMode::ddp && par.reshard_after_forward) {
    // Sharded at rest; the chunk being computed and the one prefetched are whole.
    mem.weights   = kBf16 * (local + 2 * chunk_max);
    mem.gradients = kFp32 * (local + chunk_max);
  } else {
    mem.weights   = kBf16 * prog_.params;
    mem.gradients = kFp32 * prog_.params;
  }
  double live = 0, peak = 0, working = 0;
  for (const Unit& u : schedule_units(c_.job, stage_)) {
    const ChunkCost& ch = costs_[global_chunk(u.chunk)];
    working             = std::max(working, ch.act_max_layer);
    live += (u.forward ? 1 : -1) * stored_activations(c_, ch);
    peak = std::max(peak, live);
  }
  mem.activations = peak + working;
  return std::move(prog_);
}

} // namespace

GemmCost gemm_cost(const GpuSpec& gpu, Precision precision, const GemmShape& shape)
{
  const bool fp8        = precision == Precision::fp8;
  const double peak     = fp8 ? gpu.peak_fp8_flops : gpu.peak_bf16_flops;
  const double ceiling  = fp8 ? gpu.gemm.ceiling_fp8 : gpu.gemm.ceiling_bf16;
  const double in_bytes = fp8 ? 1 : kBf16;
  const double groups   = shape.groups;
  GemmCost cost;
  cost.flops = 2 * shape.m * shape.n * shape.k * groups;
  if (!(cost.flops > 0))
    return cost;
  // One output tile per SM per wave: a partial tile or a partly filled last wave costs a whole one, and K advances
  // tile_k at a time. When the output tiles cannot fill the SMs the library may split K across them (split-K):
  // each slice writes a partial fp32 tile that a reduction reads back. The library picks the kernel per GEMM, so
  // the fastest tiling and split count.
  const double tk          = gpu.gemm.tile_k;
  const double steps       = std::ceil(shape.k / tk);
  const double sms         = gpu.gemm.sms;
  const double mem_rate    = gpu.hbm_bandwidth * gpu.elementwise_efficiency;
  const double c_out       = shape.accumulate_fp32 ? 2 * kFp32 : kBf16;
  const double plain_bytes = groups * ((shape.m + shape.n) * shape.k * in_bytes + shape.m * shape.n * c_out);
  cost.seconds             = std::numeric_limits<double>::infinity();
  for (const auto& [tm, tn] : gpu.gemm.tiles) {
    const double tiles = groups * std::ceil(shape.m / tm) * std::ceil(shape.n / tn);
    for (double split : {1.0, tiles < sms ? std::min(std::floor(sms / tiles), steps) : 1.0}) {
      const double waves        = std::ceil(tiles * split / sms);
      const double quantization = cost.flops / (2 * waves * sms * tm * tn * std::ceil(steps / split) * tk);
      const double efficiency   = ceiling / peak * quantization;
      const double bytes        = plain_bytes + (split > 1 ? split * 2 * kFp32 * shape.m * shape.n * groups : 0);
      const double seconds      = std::max(cost.flops / (peak * efficiency), bytes / mem_rate);
      if (seconds < cost.seconds) {
        cost.seconds    = seconds;
        cost.efficiency = efficiency;
        cost.bytes      = bytes;
      }
    }
  }
  return cost;
}

ModelParams count_params(const ModelSpec& model)
{
  ModelParams p;
  const double emb = double(model.vocab) * model.hidden;
  for (int l = 0; l < model.layers; ++l) {
    LayerParams lp = layer_params(model, l);
    p.total += lp.attention + lp.norms + lp.mlp_dense + lp.experts;
    p.active += lp.active;
    p.matmul_active += lp.matmul;
  }
  const double head = model.tied_embeddings ? 0 : emb;
  p.embedding       = emb;
  p.total += emb + head + model.hidden;
  p.active += emb + head + model.hidden;
  p.matmul_active += emb; // the output projection, tied or not
  return p;
}

std::string group_name(const Group& group)
{
  std::string out;
  for (const auto& [axis, name] : EnumNames<Axis>::table)
    if (group.axes.contains(axis))
      out += (out.empty() ? "" : "+") + std::string(name);
  return out.empty() ? "none" : out;
}

std::string_view op_name(const Op& op)
{
  return op.kind == OpKind::collective ? name_of(op.collective) : name_of(op.kind);
}

double wire_bytes_per_rank(const Op& op)
{
  switch (op.kind) {
  case OpKind::collective:
    return wire_bytes_per_rank(op.collective, op.group.size, op.bytes) * op.count;
  case OpKind::send:
    return wire_bytes_per_rank(CollectiveOp::send_recv, 2, op.bytes) * op.count;
  default:
    return 0;
  }
}

StepGraph build_step_graph(const JobSpec& job, const BuildOptions& options)
{
  const Context c(job);
  const auto costs = chunk_costs(c);
  StepGraph graph;
  graph.job           = job;
  graph.micro_batches = c.mbs;
  for (int p = 0; p < c.pp; ++p)
    graph.stages.push_back(StageBuilder(c, costs, p).build());
  if (options.check_memory) {
    for (const auto& st : graph.stages) {
      const MemoryEstimate& m = st.memory;
      if (m.total() <= job.gpu.hbm_capacity)
        continue;
      using units::format_size;
      throw InfeasibleError(std::string(name_of(JobIssue::memory)), job.file, job.json_path,
                            "the job does not fit in GPU memory: pipeline stage " + std::to_string(st.stage) +
                                " needs " + format_size(m.total()) + " per GPU (weights " + format_size(m.weights) +
                                ", gradients " + format_size(m.gradients) + ", optimizer state " +
                                format_size(m.optimizer) + ", activations " + format_size(m.activations) + ") but " +
                                job.gpu.name + " has " + format_size(job.gpu.hbm_capacity) +
                                " of HBM; raise tp/pp/dp sharding, recompute more or shrink the micro-batch");
    }
  }
  return graph;
}

double compute_makespan(const StepGraph& graph)
{
  const std::size_t n = graph.stages.size();
  std::vector<std::size_t> next(n, 0);
  std::vector<double> stream(n, 0);
  std::vector<std::vector<double>> done(n);
  for (std::size_t s = 0; s < n; ++s)
    done[s].assign(graph.stages[s].ops.size(), 0);
  std::unordered_map<std::int64_t, double> sent;
  std::size_t remaining = 0;
  for (const auto& st : graph.stages)
    remaining += st.ops.size();
  double makespan = 0;
  while (remaining > 0) {
    bool progress = false;
    for (std::size_t s = 0; s < n; ++s) {
      const auto& ops = graph.stages[s].ops;
      while (next[s] < ops.size()) {
        const Op& op = ops[next[s]];
        double ready = 0;
        for (int d : op.deps)
          ready = std::max(ready, done[s][d]);
        if (op.kind == OpKind::recv) {
          auto it = sent.find(op.tag);
          if (it == sent.end())
            break; // blocks this stage until the peer has sent
          ready = std::max(ready, it->second);
        }
        double finish = ready;
        if (is_compute(op.kind)) {
          finish    = std::max(ready, stream[s]) + op.seconds;
          stream[s] = finish;
        }
        if (op.kind == OpKind::send)
          sent[op.tag] = finish;
        done[s][next[s]] = finish;
        makespan         = std::max(makespan, finish);
        ++next[s];
        --remaining;
        progress = true;
      }
    }
    if (!progress)
      throw SimulationError("pipeline schedule deadlocks: every stage waits for a receive whose send never comes");
  }
  return makespan;
}

StepSummary summarize(const StepGraph& graph)
{
  StepSummary s;
  const auto& par              = graph.job.parallelism;
  const double ranks_per_stage = double(par.tp) * par.cp * par.dp;
  s.programs                   = graph.stages.size();
  s.ranks                      = static_cast<std::size_t>(graph.job.gpus);
  s.tokens                     = graph.job.tokens_per_step();
  double optimizer_of_busiest  = 0;
  for (const auto& st : graph.stages) {
    s.ops += st.ops.size();
    double compute = 0, optimizer = 0;
    DimArray<double> wire, buffer;
    for (const Op& op : st.ops) {
      s.model_flops += op.model_flops * ranks_per_stage;
      s.hardware_flops += op.hardware_flops * ranks_per_stage;
      if (op.kind == OpKind::optimizer)
        optimizer += op.seconds;
      compute += op.seconds;
      if (op.dim && op.kind != OpKind::recv) {
        wire[*op.dim] += wire_bytes_per_rank(op);
        buffer[*op.dim] += op.bytes * op.count;
      }
    }
    for (Dim d : kDims) {
      if (wire[d] > s.traffic[d].per_gpu_max) {
        s.traffic[d].per_gpu_max    = wire[d];
        s.traffic[d].buffer_per_gpu = buffer[d];
      }
      s.traffic[d].job_total += wire[d] * ranks_per_stage;
    }
    if (compute > s.stage_compute_max) {
      s.stage_compute_max  = compute;
      optimizer_of_busiest = optimizer;
    }
    if (st.memory.total() > s.peak_memory.total()) {
      s.peak_memory       = st.memory;
      s.peak_memory_stage = st.stage;
    }
  }
  s.step_lower_bound = compute_makespan(graph);
  // The bubble is measured against the busiest stage's forward and backward work, as the formula counts it.
  const double busy = s.stage_compute_max - optimizer_of_busiest;
  s.bubble_fraction = busy > 0 ? (s.step_lower_bound - s.stage_compute_max) / busy : 0;
  s.bubble_formula  = double(par.pp - 1) / (double(graph.job.schedule.virtual_stages) * graph.micro_batches);
  return s;
}

nlohmann::json to_json(const StepGraph& graph)
{
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& st : graph.stages) {
    nlohmann::json ops = nlohmann::json::array();
    for (const Op& op : st.ops) {
      nlohmann::json o{{"kind", name_of(op.kind)}, {"deps", op.deps}};
      if (op.kind == OpKind::collective)
        o["collective"] = name_of(op.collective);
      if (op.chunk >= 0)
        o["chunk"] = op.chunk;
      if (op.micro_batch >= 0)
        o["micro_batch"] = op.micro_batch;
      if (!op.dim) {
        o["seconds"]        = op.seconds;
        o["model_flops"]    = op.model_flops;
        o["hardware_flops"] = op.hardware_flops;
        o["hbm_bytes"]      = op.hbm_bytes;
      } else {
        o["traffic"]      = name_of(*op.dim);
        o["purpose"]      = name_of(op.purpose);
        o["group"]        = group_name(op.group);
        o["group_size"]   = op.group.size;
        o["bytes"]        = op.bytes;
        o["count"]        = op.count;
        o["overlappable"] = op.overlappable;
        if (op.peer_stage >= 0) {
          o["peer_stage"] = op.peer_stage;
          o["tag"]        = op.tag;
        }
      }
      ops.push_back(std::move(o));
    }
    stages.push_back({{"stage", st.stage}, {"chunk_layers", st.chunk_layers}, {"ops", std::move(ops)}});
  }
  return {{"job", graph.job.name}, {"micro_batches", graph.micro_batches}, {"stages", std::move(stages)}};
}

} // namespace spansim::workload
