#pragma once
/// @file
/// @brief The workload stage: a training job (model, GPU, parallelism, batch, schedule) becomes a training-step
/// graph: one op program per pipeline stage, communication groups named by parallelism dimensions, not GPU ids.
///
/// Units inside: seconds, bytes, bytes/s, FLOP and FLOP/s as doubles. Spec files carry units as strings.

#include "common/collective.hpp"
#include "common/json_reader.hpp"
#include "workload/dims.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spansim::workload {

/// @brief Parses a FLOP rate ("989TFLOPs", "2.25PFLOPs", "500GFLOP/s") into FLOP/s.
/// @throws UsageError naming the accepted units.
double parse_flop_rate(std::string_view text);

/// @brief Dense SwiGLU-style gated MLP (three matrices) or a plain two-matrix MLP (GELU, GPT-3).
enum class MlpKind { gated, plain };
constexpr std::array<std::string_view, 2> enum_names(MlpKind)
{
  return {"swiglu", "gelu"};
}
/// @brief Grouped-query attention (covers MHA and MQA) or DeepSeek's multi-head latent attention.
enum class AttentionKind { gqa, mla };
constexpr std::array<std::string_view, 2> enum_names(AttentionKind)
{
  return {"gqa", "mla"};
}

/// @brief Multi-head latent attention shape (DeepSeek-V2/V3); only read when the attention kind is mla.
struct MlaSpec {
  int q_lora_rank      = 0; ///< 0: queries are projected directly from the hidden state.
  int kv_lora_rank     = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim       = 0;
};

/// @brief Mixture-of-experts shape; `experts == 0` means a dense model.
struct MoeSpec {
  int experts            = 0;
  int experts_per_token  = 0;
  int shared_experts     = 0;
  int expert_ffn         = 0;
  int every              = 1; ///< Layer i (after the leading dense ones) is MoE when (i + 1) % every == 0.
  int first_dense_layers = 0;
};

/// @brief A transformer's shape, as in the model zoo files.
struct ModelSpec {
  std::string name;
  std::string source;
  int layers              = 0;
  int hidden              = 0;
  int ffn                 = 0; ///< FFN size of the dense layers.
  int heads               = 0;
  int kv_heads            = 0;
  int head_dim            = 0;
  int vocab               = 0;
  MlpKind mlp             = MlpKind::gated;
  bool tied_embeddings    = false;
  AttentionKind attention = AttentionKind::gqa;
  MlaSpec mla;
  MoeSpec moe;
  /// @brief Multi-token prediction modules trained with the model (Megatron's mtp_num_layers; DeepSeek-V3 trains
  /// one): each a transformer layer like the model's last, with its own norms and input projection, sharing the
  /// embedding and the output layer. Set by the job (`mtp_layers`); layers + i is the i-th module's layer.
  int mtp_layers = 0;

  /// @brief Whether layer `layer` (0-based; from `layers` on, a multi-token prediction module's) is a
  /// mixture-of-experts layer.
  bool is_moe_layer(int layer) const;
  /// @brief The transformer layers a micro-batch passes through: the model's and its MTP modules'.
  int all_layers() const { return layers + mtp_layers; }
};

/// @brief Parameter counts of a model (exact for the shapes above; biases are not modeled).
struct ModelParams {
  double total         = 0; ///< Every distinct parameter (a tied embedding counted once).
  double active        = 0; ///< Parameters a token goes through (routed experts: only the top-k).
  double matmul_active = 0; ///< Active parameters used in matrix products (no input embedding, no norms).
  double embedding     = 0; ///< Input embedding table.
};

/// @brief Counts the parameters of `model`.
ModelParams count_params(const ModelSpec& model);

/// @brief Attention kernels: fused (flash) libraries whose measured rates a GPU file gives, or `unfused`, the
/// pre-FlashAttention path (two batched GEMMs and a softmax and dropout over the whole score matrix in HBM), costed
/// from the GEMM model and HBM bandwidth.
enum class AttentionKernel { flash2, flash3, cudnn, unfused };
constexpr std::array<std::string_view, 4> enum_names(AttentionKernel)
{
  return {"flash2", "flash3", "cudnn", "unfused"};
}
/// @brief The fused attention libraries, in the order of GpuSpec::attention.
inline constexpr std::array kAttentionKernels{AttentionKernel::flash2, AttentionKernel::flash3, AttentionKernel::cudnn};

/// @brief Measured rates of one fused (flash) attention kernel: causal, BF16, the FlashAttention papers' FLOP
/// convention (forward 4 s^2 d per head halved by the mask; backward 2.5 times the forward's FLOPs), at the GPU
/// file's reference sequence length, and optionally over sequence lengths.
struct AttentionRates {
  double forward  = 0;                   ///< FLOP/s at the reference length; 0: the library is not listed for this GPU.
  double backward = 0;                   ///< FLOP/s
  std::vector<double> sequences;         ///< lengths of the measured curve, increasing (empty: no curve)
  std::vector<double> forward_by_length; ///< FLOP/s at each length
  std::vector<double> backward_by_length; ///< FLOP/s at each length
  /// @brief The forward (or backward) rate at sequence length `s`: the curve interpolated linearly in log2(s),
  /// held flat beyond its ends; the reference rate without a curve.
  double rate(double s, bool backward) const;
};

/// @brief The number format of the linear layers' GEMMs: BF16, FP8 (E4M3 with per-tensor or block scales, by
/// the job's recipe), MXFP8 (E4M3 in blocks of 32 with E8M0 scales, Blackwell) or NVFP4 (E2M1 in blocks of 16 with
/// E4M3 scales and a per-tensor FP32 scale, Blackwell). Attention and the output layer stay in BF16.
enum class Precision { bf16, fp8, mxfp8, nvfp4 };
constexpr std::array<std::string_view, 4> enum_names(Precision)
{
  return {"bf16", "fp8", "mxfp8", "nvfp4"};
}

/// @brief How FP8 scales are chosen (Transformer Engine's recipes): `delayed` from an amax history of earlier
/// steps, `current` from the tensor's own amax (an extra pass over it), `blockwise` per 1 x 128 activation and
/// 128 x 128 weight blocks (DeepSeek-V3). MXFP8 and NVFP4 imply their own block scaling.
enum class Fp8Recipe { delayed, current, blockwise };
constexpr std::array<std::string_view, 3> enum_names(Fp8Recipe)
{
  return {"delayed", "current", "blockwise"};
}

/// @brief A GEMM input format as the kernels run it: a precision and, for FP8, its scaling recipe.
struct GemmFormat {
  Precision precision = Precision::bf16;
  Fp8Recipe recipe    = Fp8Recipe::delayed;
};

/// @brief The quantization kernels a GPU file rates (`efficiency.quantize`), in the order of
/// GpuSpec::quantize_efficiency: FP8 under delayed and block-wise scaling, FP8 under current scaling, MXFP8, NVFP4.
enum class QuantizeFormat { fp8, fp8_current, mxfp8, nvfp4 };
constexpr std::array<std::string_view, 4> enum_names(QuantizeFormat)
{
  return {"fp8", "fp8_current", "mxfp8", "nvfp4"};
}

/// @brief The precision a quantization format writes.
constexpr Precision precision_of(QuantizeFormat f)
{
  return f == QuantizeFormat::mxfp8 ? Precision::mxfp8 : f == QuantizeFormat::nvfp4 ? Precision::nvfp4 : Precision::fp8;
}

/// @brief The quantization kernels of low-precision format `f` (not BF16).
constexpr QuantizeFormat quantize_format(GemmFormat f)
{
  switch (f.precision) {
  case Precision::mxfp8:
    return QuantizeFormat::mxfp8;
  case Precision::nvfp4:
    return QuantizeFormat::nvfp4;
  default:
    return f.recipe == Fp8Recipe::current ? QuantizeFormat::fp8_current : QuantizeFormat::fp8;
  }
}

/// @brief A measured GEMM: op kind "gemm", shape (M x K times K x N), input type, seconds.
struct MeasuredGemm {
  Precision dtype = Precision::bf16;
  double m = 0, n = 0, k = 0;
  double seconds = 0;
};
/// @brief A measured causal attention kernel over one sequence: pass, sequence length, heads, head width, seconds.
struct MeasuredAttention {
  bool backward   = false;
  double sequence = 0, heads = 0, head_dim = 0;
  double seconds = 0;
};
/// @brief A user's measured kernel times (CSV files named by a GPU file or a job): they replace the model's
/// estimate for the shapes they cover, interpolated between measured ones (workload/README.md).
struct MeasuredKernels {
  std::string gemm_file;      ///< where the GEMM rows came from (empty: none)
  std::string attention_file; ///< where the attention rows came from
  std::vector<MeasuredGemm> gemm;
  std::vector<MeasuredAttention> attention;

  /// @brief Seconds of one (m, n, k) GEMM in `dtype`: a measured row's, or interpolated from the achieved FLOP/s of
  /// the rows of that type (inverse-distance weights in log2 of m, n and k) when the shape lies within their
  /// range in each of m, n and k; nothing outside it.
  std::optional<double> gemm_seconds(Precision dtype, double m, double n, double k) const;
  /// @brief Seconds of one causal attention pass over one sequence, the same way over (sequence, heads, head_dim).
  std::optional<double> attention_seconds(bool backward, double sequence, double heads, double head_dim) const;
};
/// @brief Reads `{"gemm": "FILE.csv", "attention": "FILE.csv"}` (either or both; paths relative to the file that
/// names them). @throws SpecError naming the CSV file and line, or the JSON path of a missing file.
MeasuredKernels read_measured_kernels(spec::ObjectReader r);

/// @brief The GEMM model's per-GPU inputs: the best measured rate of a full-wave GEMM and the tiling that
/// quantizes other shapes.
struct GemmSpec {
  double ceiling_bf16  = 0; ///< FLOP/s a BF16 GEMM reaches when its tiles fill whole waves (a measured best).
  double ceiling_fp8   = 0; ///< Same for FP8 inputs; 0 without an FP8 measurement.
  double ceiling_mxfp8 = 0; ///< MXFP8 (the FP8 path with block scales); 0: the GPU has no MXFP8.
  double ceiling_nvfp4 = 0; ///< NVFP4; 0: the GPU has no NVFP4.
  /// @brief FP8 with block scales (DeepSeek-V3's recipe), the work of its scales included; 0: ceiling_fp8.
  double ceiling_fp8_blockwise = 0;
  /// @brief The ceiling for `p` (0 where the GPU lacks it); FP8 under recipe `r`.
  double ceiling(Precision p, Fp8Recipe r = Fp8Recipe::delayed) const;
  int sms = 0;                           ///< Streaming multiprocessors: one output tile each per wave.
  std::vector<std::array<int, 2>> tiles; ///< Output tile shapes (M x N) the library chooses among per GEMM.
  int tile_k = 64;                       ///< Depth of one main-loop step: K is padded to a multiple of it.
};

/// @brief A GPU's peak rates and the kernel-level measurements the compute model uses.
struct GpuSpec {
  std::string name;
  std::string source;
  double peak_bf16_flops  = 0; ///< Dense (no sparsity), FLOP/s.
  double peak_fp8_flops   = 0;
  double peak_mxfp8_flops = 0; ///< 0: no MXFP8 tensor cores (Hopper and older)
  double peak_nvfp4_flops = 0; ///< 0: no NVFP4 tensor cores
  double hbm_bandwidth    = 0; ///< bytes/s
  double hbm_capacity     = 0; ///< bytes
  GemmSpec gemm;
  std::array<AttentionRates, 3> attention{}; ///< Indexed by AttentionKernel (the fused libraries).
  AttentionKernel attention_default   = AttentionKernel::flash2;
  double attention_reference_sequence = 8192; ///< the length the reference rates were measured at
  double elementwise_efficiency       = 0;    ///< Achieved fraction of HBM bandwidth in memory-bound kernels.
  /// @brief Achieved fraction of HBM bandwidth in each low precision's quantization kernels (cast, transpose and
  /// scales), indexed by QuantizeFormat; 0: elementwise_efficiency.
  std::array<double, 4> quantize_efficiency{};
  /// @brief SMs a collective's kernels occupy while it runs (NCCL runs one CTA per channel on an SM of its own):
  /// overlapped compute has the rest. 0: not given (no SM contention).
  int comm_sms = 0;
  MeasuredKernels measured; ///< measured kernel times that replace the model's estimates (none by default)
  /// @brief The dense peak for `p` (0 where the GPU lacks it).
  double peak(Precision p) const;
  /// @brief HBM bytes per second quantizing into `p` (FP8 under recipe `r`) moves (0 in BF16), as runs_as() runs it.
  double quantize_rate(Precision p, Fp8Recipe r) const;
  /// @brief The format the kernels of `p` (FP8 under recipe `r`) run in here: FP8 block-wise scaling runs as MXFP8
  /// on a GPU with MXFP8 tensor cores and no block-scaled FP8 ceiling of its own (Transformer Engine emulates the
  /// recipe with MXFP8 on Blackwell); otherwise as given.
  GemmFormat runs_as(Precision p, Fp8Recipe r) const;
  /// @brief The precisions the GPU has, for messages ("bf16, fp8").
  std::string precisions() const;
};

/// @brief A calibration profile: the compute model's free parameters, fitted on published runs of one GPU
/// (`spansim calibrate`) or measured on a user's own cluster.
struct Calibration {
  std::string name = "none";     ///< profile name ("h100-published"), "none", or the file it came from
  std::vector<std::string> gpus; ///< the GPU files it holds for (one chip: "a100" and "a100-40gb")
  std::string source;            ///< what it was fitted on
  double clock_fraction = 1;     ///< sustained compute rate over the measured best (GEMMs and attention kernels)
  double kernel_gap     = 0;     ///< seconds of host dispatch per kernel the GPU waits for (launch and framework gaps)
  /// @brief The share of the scale-out bandwidth NCCL's all-to-all (a MoE job's alltoall dispatcher) gets, over the
  /// share its rings get (the topology's NCCL efficiency): fitted on published MoE runs; 1: as rings.
  double alltoall_efficiency = 1;
  /// @brief Seconds the host (Python, PyTorch, Transformer Engine) takes to issue one MoE layer's forward and backward
  /// for one micro-batch: the GPU waits where a pass's compute is shorter. Fitted on published MoE runs; 0: off.
  double moe_host = 0;
  /// @brief Whether the profile holds for the GPU named `gpu`.
  bool covers(const std::string& gpu) const { return std::find(gpus.begin(), gpus.end(), gpu) != gpus.end(); }
};

/// @brief Production effects beyond the roofline, each one switchable (all on by default).
struct Effects {
  bool sustained_clock     = true; ///< the profile's clock_fraction slows compute-bound kernels
  bool kernel_gaps         = true; ///< the profile's kernel_gap per kernel launched and its MoE host floor
  bool attention_by_length = true; ///< attention rates follow the measured curve over sequence length
  bool grad_clipping       = true; ///< the gradient norm reads every local gradient once per step
  bool sm_contention       = true; ///< compute overlapped by communication runs on the SMs NCCL leaves
  /// @brief Data-parallel gathers and reductions go unit by unit (a layer; PyTorch FSDP's wrapped units, DDP's and
  /// Megatron's gradient buckets): only the first unit's gather and the last unit's reduction wait on compute.
  bool dp_overlap_by_unit = true;

  /// @brief Every effect switched off: the roofline model before them.
  static Effects none() { return {false, false, false, false, false, false}; }
};
/// @brief The effect switches by their key in a job's `effects` object.
inline constexpr std::array<std::pair<std::string_view, bool Effects::*>, 6> kEffectSwitches{{
    {"sustained_clock", &Effects::sustained_clock},
    {"kernel_gaps", &Effects::kernel_gaps},
    {"attention_by_length", &Effects::attention_by_length},
    {"grad_clipping", &Effects::grad_clipping},
    {"sm_contention", &Effects::sm_contention},
    {"dp_overlap_by_unit", &Effects::dp_overlap_by_unit},
}};

/// @brief How context parallelism moves K and V: `allgather` (Llama 3: the whole sequence's K/V gathered before
/// attention, exposed), `ring` (Transformer Engine's P2P: K/V chunks passed around the ring under the blocks'
/// attention), `a2a` (DeepSpeed-Ulysses: all-to-alls of Q, K, V and the output between sequence and head
/// sharding, exposed) and `a2a+p2p` (Megatron's hierarchical: all-to-all inside groups of `cp_a2a`, a ring across
/// them).
enum class CpComm { allgather, ring, a2a, a2a_p2p };
constexpr std::array<std::string_view, 4> enum_names(CpComm)
{
  return {"allgather", "ring", "a2a", "a2a+p2p"};
}

/// @brief How the data-parallel dimension holds parameters, gradients and optimizer state.
enum class DataParallelMode { ddp, fsdp, hsdp };
constexpr std::array<std::string_view, 3> enum_names(DataParallelMode)
{
  return {"ddp", "fsdp", "hsdp"};
}
/// @brief Pipeline schedules: GPipe, 1F1B, Megatron's interleaved 1F1B, the zero-bubble ZB-H1 (Qi et al., the
/// backward split into input (B) and weight (W) gradients), DeepSeek's DualPipe (two directions, each stage held
/// twice) and DualPipeV (its V-shaped half: 2 x pp stages, each held once).
enum class ScheduleKind { gpipe, one_f_one_b, interleaved_1f1b, zb_h1, dualpipe, dualpipev };
constexpr std::array<std::string_view, 6> enum_names(ScheduleKind)
{
  return {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "dualpipe", "dualpipev"};
}
/// @brief Activation recomputation: none, selective (attention core and norms) or full (whole layers).
enum class Recompute { none, selective, full };
constexpr std::array<std::string_view, 3> enum_names(Recompute)
{
  return {"none", "selective", "full"};
}

/// @brief One GEMM C[M x N] = A[M x K] B[K x N], or `groups` of them launched together (grouped MoE experts).
struct GemmShape {
  double m   = 0;
  double n   = 0;
  double k   = 0;
  int groups = 1;
  /// @brief Bytes per element of C when C is the gradient buffer, read and written (gradient-accumulation fusion):
  /// 4 in fp32, 2 where gradients are reduced in bf16; 0 when C is written once in bf16.
  double accumulate_bytes = 0;
  /// @brief In a low precision: rows of A (per group) the rank quantizes itself, -1 for all m. Sequence parallelism
  /// quantizes its shard before the all-gather; an FP8 dispatch sends tokens already quantized.
  double cast_rows = -1;
  bool cast_fused  = false; ///< A is quantized by the norm that produces it (Transformer Engine's LayerNormLinear)
};

/// @brief What one GEMM costs under the model: FLOPs, HBM bytes, achieved fraction of peak, and time.
struct GemmCost {
  double flops      = 0;
  double bytes      = 0; ///< A and B read once, C written (and read when accumulating).
  double efficiency = 0; ///< Of the precision's peak: ceiling x tile/wave quantization x K-depth padding.
  double seconds    = 0; ///< max(FLOPs at that efficiency, bytes at the element-wise HBM rate).
};

/// @brief Costs a GEMM on `gpu` with inputs in `precision` (outputs are bf16, or the gradient buffer when
/// accumulating); the compute-bound part runs at `clock_fraction` of the measured rate (the sustained clock).
GemmCost gemm_cost(const GpuSpec& gpu, Precision precision, const GemmShape& shape, double clock_fraction = 1,
                   Fp8Recipe recipe = Fp8Recipe::delayed);

/// @brief What the production effects add to a compute op's seconds (each part of Op::seconds).
struct OpEffects {
  double sustained_clock     = 0; ///< compute-bound kernels at the sustained rather than the measured clock
  double kernel_gaps         = 0; ///< GPU idle between kernels
  double attention_by_length = 0; ///< attention slower than at the reference sequence length (negative: faster)
  double grad_clipping       = 0; ///< the gradient norm's pass over the local gradients (optimizer op)
  double sm_contention       = 0; ///< the SMs NCCL takes while overlapped communication runs (set by netsim)
  /// @brief The sum of the parts.
  double total() const { return sustained_clock + kernel_gaps + attention_by_length + grad_clipping + sm_contention; }
};

/// @brief Degrees of parallelism and how data parallelism shards.
struct ParallelismSpec {
  int tp                 = 1;
  bool sequence_parallel = true;
  /// @brief Transformer Engine's TP communication overlap (userbuffers): each layer's all-gather and
  /// reduce-scatter run in chunks under the GEMMs they feed, so a chunk's TP traffic overlaps its compute.
  bool tp_overlap = false;
  int cp          = 1;
  CpComm cp_comm  = CpComm::allgather; ///< how K/V move between the cp ranks
  int cp_a2a      = 1;                 ///< a2a+p2p: the all-to-all group's size (divides cp)
  int pp          = 1;
  int dp          = 1;
  /// @brief Expert parallelism: the expert layers fold etp x ep x edp over the tp x cp x dp ranks of a pipeline
  /// stage (innermost first, in rank order; Megatron's parallel folding), so EP may span TP and DP.
  int ep  = 1;
  int etp = 1; ///< Expert tensor parallelism: the routed experts' FFN split etp ways (a job's default: tp).
  DataParallelMode dp_mode   = DataParallelMode::fsdp;
  bool reshard_after_forward = true;
  int hsdp_shard             = 0; ///< HSDP: data-parallel ranks sharding one replica.
  std::vector<Dim> order{kProductionOrder.begin(), kProductionOrder.end()}; ///< Rank order, innermost first.
  /// @brief Layers of each pipeline stage (pp entries summing to the model's layers). Empty: as even as possible.
  std::vector<int> stage_layers;
  /// @brief Megatron's pipeline_model_parallel_layout as given (e.g. "Et|(tt|)*30mL"); empty: none.
  std::string pipeline_layout;
  /// @brief The decoder layers of each model chunk (chunk g = v x pp + stage) the layout gives; empty: none. The
  /// multi-token prediction modules sit in the last chunk, with the loss.
  std::vector<int> chunk_layers;
  /// @brief Expert data parallelism: the ranks of a stage holding the same experts.
  int edp() const { return tp * cp * dp / (etp * ep); }
  /// @brief `"stage_layers": "balanced"`: where stages run on different GPU types, layers in proportion to each
  /// stage's speed (placement::build_stage_graph sets stage_layers); elsewhere as even as possible.
  bool balance_layers = false;
};

/// @brief Batch shape: the global batch in sequences, the micro-batch in sequences.
struct BatchSpec {
  std::int64_t global_sequences = 0;
  int micro_batch               = 1;
  int sequence_length           = 0;
  bool by_tokens                = false; ///< given as global_tokens (errors name that key)
};

/// @brief Pipeline schedule and its knobs.
struct ScheduleSpec {
  ScheduleKind kind    = ScheduleKind::one_f_one_b;
  int virtual_stages   = 1; ///< Model chunks per pipeline stage (interleaving; DualPipe and DualPipeV hold 2).
  int microbatch_group = 0; ///< Interleaved: consecutive micro-batches per chunk (Llama 3's N); 0 means pp.
  /// @brief 1F1B and interleaved 1F1B: Megatron's expert all-to-all overlap (overlap_moe_expert_parallel_comm with
  /// delay_wgrad_compute): in the steady state the forward of one micro-batch and the backward of another run as an
  /// overlapped pair, each one's expert all-to-alls under the pair's compute; one more warm-up forward. DualPipe and
  /// DualPipeV always overlap their forward-backward pairs.
  bool ep_overlap = false;
  /// @brief Whether forward and backward chunks of different micro-batches run as overlapped pairs.
  bool overlapped_pairs() const
  {
    return ep_overlap || kind == ScheduleKind::dualpipe || kind == ScheduleKind::dualpipev;
  }
};

/// @brief How a DLRM's embedding tables are split over the GPUs of a group (the job, or a tower).
enum class Sharding : std::uint8_t { table_wise, row_wise, column_wise, automatic };
constexpr std::array<std::string_view, 4> enum_names(Sharding)
{
  return {"table-wise", "row-wise", "column-wise", "auto"};
}

/// @brief A DLRM's feature interaction: pairwise dot products, or DCNv2's low-rank cross layers.
enum class Interaction : std::uint8_t { dot, dcnv2 };
constexpr std::array<std::string_view, 2> enum_names(Interaction)
{
  return {"dot", "dcnv2"};
}

/// @brief The hierarchy level DLRM towers are aligned to: each tower's GPUs inside one node, pod or building.
enum class TowerLevel : std::uint8_t { node, pod, building };
constexpr std::array<std::string_view, 3> enum_names(TowerLevel)
{
  return {"node", "pod", "building"};
}

/// @brief One embedding table (or `count` identical ones).
struct EmbeddingTable {
  int count      = 1;
  double rows    = 0;
  int dim        = 0;
  double pooling = 1; ///< rows looked up and summed per sample (multi-hot size)
};

/// @brief A recommendation model's architecture (a DLRM zoo entry, workload/dlrm/).
struct DlrmModel {
  std::string name;
  std::string source;
  int dense_features = 0;
  std::vector<EmbeddingTable> tables;
  std::vector<int> bottom_mlp; ///< widths after the dense features; the last is the embedding dimension
  std::vector<int> top_mlp;    ///< widths after the interaction; the last is the output (1)
  Interaction interaction = Interaction::dcnv2;
  int cross_layers        = 3;   ///< DCNv2
  int cross_rank          = 512; ///< DCNv2 low rank
  /// @brief Tables in all.
  int table_count() const;
  /// @brief The embedding dimension (every table's, checked equal).
  int dim() const;
};

/// @brief How a DLRM is trained: its sharding plan, towers and embedding precision.
struct DlrmSpec {
  DlrmModel model;
  Sharding sharding        = Sharding::automatic;
  double embedding_bytes   = 4; ///< per element of the tables and the pooled embeddings (fp32: 4, fp16: 2)
  int towers               = 0; ///< DMT towers (0: none): intra-tower exchange, tower modules, a small cross-tower one
  TowerLevel tower_level   = TowerLevel::node;
  double tower_compression = 4; ///< a tower module's input width over its output width
};

/// @brief How a MoE layer moves the token copies to the experts' GPUs and back (names: "alltoall", "allgather",
/// "deepep").
enum class Dispatcher : std::uint8_t {
  alltoall,  ///< an NCCL all-to-all of every token copy over the EP group (Megatron's alltoall dispatcher)
  allgather, ///< every rank gathers the EP x ETP group's tokens, the combine reduce-scatters (Megatron's allgather)
  deepep ///< hierarchical (DeepEP's normal kernels): one copy per destination node over the scale-out network, to the
         ///< GPU of the same local index, then NVLink to each destination GPU once
};
constexpr std::array<std::string_view, 3> enum_names(Dispatcher)
{
  return {"alltoall", "allgather", "deepep"};
}
/// @brief How routing spreads tokens over experts (names: "balanced", "dropless", "token-drop").
enum class RoutingBalance : std::uint8_t {
  balanced,  ///< forced balance: every expert gets the mean load (Megatron's force_load_balancing)
  dropless,  ///< every token kept: the busiest expert's GPU sets the pace of its MoE layer
  token_drop ///< an expert takes at most capacity_factor x the mean; the rest is dropped
};
constexpr std::array<std::string_view, 3> enum_names(RoutingBalance)
{
  return {"balanced", "dropless", "token-drop"};
}
/// @brief Routing balance and the expert load it gives.
struct RoutingSpec {
  RoutingBalance balance = RoutingBalance::balanced;
  /// @brief Dropless and token-drop: coefficient of variation of the experts' popularity in a layer (seeded, drawn
  /// anew per MoE layer); 0: every expert equally popular.
  double skew            = 0;
  double capacity_factor = 1;     ///< token-drop: an expert's capacity over the mean load
  bool pad_to_capacity   = false; ///< token-drop: every expert computes its whole capacity (static shapes)
  std::uint64_t seed     = 1;
};
/// @brief SMs DeepEP's normal kernels take by default: 20, as DeepSeek-V3 dedicates to them (arXiv 2412.19437,
/// section 3.2.2: "only 20 SMs are sufficient") and Megatron-LM's flex dispatcher sets.
inline constexpr int kDeepEpSms = 20;
/// @brief How a MoE job's expert layers communicate (the job's "moe" object).
struct DispatchSpec {
  Dispatcher dispatcher = Dispatcher::alltoall;
  int node_limit        = 0; ///< at most this many nodes per token (DeepSeek-V3: 4); 0: no limit
  /// @brief Precision of the dispatched tokens (FP8: a byte per element and an fp32 scale per 128); the combine is
  /// always BF16.
  Precision precision = Precision::bf16;
  int sms             = 0; ///< SMs the dispatch and combine kernels take while they run; 0: the GPU's comm_sms
  RoutingSpec routing;
};

/// @brief A whole training job, validated.
struct JobSpec {
  std::string name;
  std::string file; ///< Where it was read from, for error messages.
  /// @brief A Chakra trace prefix (DIR/PREFIX) the step graph is read from instead of built (traces/); empty: built.
  std::string trace;
  /// @brief A foreign trace read without a model and batch: its step has no tokens and no model FLOP counts (the
  /// model, layers and batch of the job are placeholders that size nothing).
  bool trace_only = false;
  /// @brief How a foreign trace's all-gather `comm_size` reads: each rank's input, as ASTRA-sim reads it (true), or the
  /// gathered output, as nccl-tests reports it (false). spansim's own traces carry their exact sizes.
  bool trace_sizes_per_rank = true;
  std::string json_path     = "$"; ///< Where it sits in `file` (an inline job of a scenario: "$.job").
  ModelSpec model;
  GpuSpec gpu;
  std::int64_t gpus = 0;
  ParallelismSpec parallelism;
  BatchSpec batch;
  ScheduleSpec schedule;
  Recompute recompute       = Recompute::none;
  Precision precision       = Precision::bf16;
  Fp8Recipe fp8_recipe      = Fp8Recipe::delayed;      ///< with precision fp8
  AttentionKernel attention = AttentionKernel::flash2; ///< The GPU's default unless `kernels.attention` is given.
  /// @brief Bytes per gradient element on the wire and in the gradient buffer (fp32: 4, bf16: 2): Megatron allocates
  /// its gradient buffer in the reduce dtype (param_and_grad_buffer.py: "torch.float if grad_reduce_in_fp32, else
  /// param.dtype"), and the weight-gradient GEMMs accumulate into it.
  double gradient_reduce_bytes = 4;
  /// @brief Megatron's fp8_param_gather: the linear layers' weights are all-gathered in the compute format (FP8 or
  /// MXFP8, with their scales) rather than BF16.
  bool low_precision_param_gather = false;
  Calibration calibration; ///< the profile in force (default: the shipped one for the GPU, if any)
  Effects effects;
  /// @brief A recommendation model (`"kind": "dlrm"`): its step graph is built by build_dlrm_graph; batch
  /// counts samples (a sample is one "token"), parallelism is data parallelism over every GPU.
  std::optional<DlrmSpec> dlrm;
  /// @brief A MoE job's dispatch and routing (the job's "moe" object; defaults for a MoE model without one).
  DispatchSpec dispatch;

  /// @brief Micro-batches per step on each data-parallel replica.
  int micro_batches() const;
  /// @brief Tokens per optimizer step across the job.
  double tokens_per_step() const;
};

/// @brief The chance that a token's top-k experts, drawn uniformly among `experts` (no two the same), include at
/// least one of a set of `in_set` experts: 1 - C(experts - in_set, k) / C(experts, k).
double hit_probability(int experts, int top_k, int in_set);

/// @brief How often a token copy reaches a node and a GPU of its EP group under uniform routing (with node-limited
/// routing, among `node_limit` nodes chosen first), for the deduplicated bytes of a hierarchical dispatch.
struct DispatchRates {
  double node = 0; ///< the chance that a given node of the group receives the token (once, deduplicated)
  double gpu  = 0; ///< the chance that a given GPU of the group receives it (once, whatever its experts hit)
};
/// @brief The rates for `experts` experts spread evenly over `gpus` GPUs on `nodes` nodes (gpus / nodes each), top-k
/// routing, at most `node_limit` nodes per token (0 or >= nodes: no limit).
DispatchRates dispatch_rates(int experts, int top_k, int gpus, int nodes, int node_limit);

/// @brief Why `sms` dispatch SMs cannot run on `gpu` (the kernels leave at least one SM to the compute they
/// overlap), naming the GPU as `gpu_label`; empty when they can.
std::string dispatch_sms_problem(std::int64_t sms, const GpuSpec& gpu, const std::string& gpu_label);

/// @brief The expert load a job's routing gives its busiest GPU, per layer.
struct ExpertLoad {
  /// @brief Per layer of the model: tokens the busiest EP member computes over the balanced mean (1 under balanced
  /// routing; with padded token drop, the capacity factor; 0 for dense layers).
  std::vector<double> busiest;
  int hot_member = 0;          ///< the EP member (index in its group) busiest over the whole model
  double mean_busiest() const; ///< over the MoE layers
  double max_busiest() const;  ///< over the MoE layers
};
/// @brief The tokens each expert of MoE layer `layer` computes over the balanced mean, as the job's routing gives them:
/// 1 when balanced; dropless, a seeded log-normal popularity with the routing's skew (coefficient of variation),
/// drawn anew per layer; token drop caps an expert at the capacity factor, or pads it to it.
std::vector<double> expert_popularity(const JobSpec& job, int layer);
/// @brief The busiest EP member per layer: the largest mean of expert_popularity over a member's experts (the
/// experts of member j are j x E/ep to (j + 1) x E/ep - 1).
ExpertLoad expert_load(const JobSpec& job);
/// @brief A MoE job's effective dispatch and routing, with the expert load they give (for results); null for a
/// dense job.
nlohmann::json dispatch_json(const JobSpec& job);
/// @brief The same as one line ("deepep (node limit 4, FP8 dispatch, 20 SMs); balanced routing; ..."); empty for a
/// dense job.
std::string dispatch_line(const JobSpec& job);

/// @brief Loads a model: a zoo name ("llama3-405b") or a path to a JSON file.
ModelSpec load_model(const std::string& name_or_path);
/// @brief Loads a GPU spec: a zoo name ("h100") or a path to a JSON file.
GpuSpec load_gpu(const std::string& name_or_path);
/// @brief Loads a calibration profile: a shipped name (validation/profiles/NAME.json), a path, or "none".
Calibration load_calibration(const std::string& name_or_path, const spec::Location& referrer = {});
/// @brief The shipped profile for a GPU: "GPU-published", else the first shipped profile (by file name) that
/// covers it; "none" when there is none.
Calibration default_calibration(const GpuSpec& gpu);
/// @brief Directory of the shipped calibration profiles (the source tree's validation/profiles).
std::string profile_dir();
/// @brief The calibration profile in force and the effects switched off, as one line ("h100-published: clock
/// 0.886, kernel gap 3.17 us; effects: all on").
std::string calibration_line(const JobSpec& job);
/// @brief The number formats in force, as one line: the GEMMs' (and how the GPU runs them where it differs: block-wise
/// FP8 on Blackwell runs as MXFP8), the gradients' and the gathered parameters' ("fp8 blockwise, run as mxfp8 on
/// b200; gradients bf16; parameters gathered in bf16").
std::string precision_line(const JobSpec& job);
/// @brief Reads and validates a job spec file. @throws SpecError with the JSON path of the problem.
JobSpec load_job(const std::string& path);

/// @brief The checks validate_job makes; their names are the reason codes of the InfeasibleError it throws.
enum class JobIssue {
  gpus,             ///< tp x cp x pp x dp is not the GPU count
  tp,               ///< heads, K/V heads, FFN or expert FFN not divisible by tp
  ep,               ///< expert parallelism on a dense model, or not dividing experts or cp x dp
  hsdp,             ///< dp not divisible by the HSDP shard size
  sequence,         ///< the sequence does not split into 2 x cp chunks
  cp_comm,          ///< a context-parallel variant that cannot split the heads or the cp degree as it needs
  batch,            ///< the batch does not divide by dp x micro_batch, or has too many micro-batches
  schedule,         ///< interleaving without pp >= 2 or virtual_stages >= 2, or virtual stages without interleaving
  microbatch_group, ///< interleaved: the group is not between pp and the micro-batches, dividing them
  pipeline_depth,   ///< fewer micro-batches than pipeline stages (1F1B, interleaved)
  layers,           ///< fewer layers than pp x virtual_stages model chunks
  precision,        ///< a compute precision (FP8, MXFP8, NVFP4) the GPU has no peak for
  attention,        ///< an attention library the GPU file gives no rates for
  memory,           ///< the memory estimate exceeds HBM (thrown by build_step_graph)
};
constexpr std::array<std::string_view, 14> enum_names(JobIssue)
{
  return {"gpus",           "tp",       "ep",
          "hsdp",           "sequence", "cp-comm",
          "batch",          "schedule", "microbatch-group",
          "pipeline-depth", "layers",   "precision",
          "attention",      "memory"};
}

/// @brief Checks a job's degrees, batch and schedule against its model and GPU, and fills what defaults from
/// them (the interleaved micro-batch group). Errors are located at the job's file and the JSON path of the key.
/// @throws InfeasibleError with the JobIssue's name as its reason.
void validate_job(JobSpec& job);

/// @brief Reads a "model" reference: a zoo name, a path relative to the reading file, or an inline object.
ModelSpec read_model_ref(spec::ObjectReader& r, std::string_view key);
/// @brief Reads a "gpu" reference: a zoo name, a path relative to the reading file, or an inline object.
GpuSpec read_gpu_ref(spec::ObjectReader& r, std::string_view key);
/// @brief Reads a job's "moe" object: dispatcher, node limit, dispatch precision and SMs (1 to the SMs of `gpu` less
/// one), routing balance.
/// @throws SpecError at the key's JSON path.
DispatchSpec read_dispatch(spec::ObjectReader r, const GpuSpec& gpu);
/// @brief Reads the optional `precision` object of a job (or an optimize spec) into `job`, whose GPU is read: a compute
/// precision the GPU has no peak for is refused at `precision.compute`.
void read_precision(spec::ObjectReader& r, JobSpec& job);
/// @brief Reads a batch object; with `micro_batch_allowed` false, a micro_batch key is refused (it is searched).
BatchSpec read_batch(spec::ObjectReader r, bool micro_batch_allowed = true);
/// @brief Reads the optional `calibration` key (a profile for the job's GPU) and `effects` object of a job (or an
/// optimize spec) into `job`; without `calibration`, the shipped default for the GPU.
void read_calibration_and_effects(spec::ObjectReader& r, JobSpec& job);
/// @brief The `calibration` and `effects` keys that give `job`'s, for a job file written back.
nlohmann::json calibration_and_effects_json(const JobSpec& job);
/// @brief Validates a job given as JSON; `file` names it in errors and anchors relative model/GPU paths.
/// `json_path` locates the job inside `file` (an inline job of a scenario: "$.job").
JobSpec parse_job(const nlohmann::json& json, const std::string& file, const std::string& json_path = "$");
/// @brief Reads a rank order: a permutation of "tp", "cp", "pp", "dp" (innermost first). @throws SpecError.
std::vector<Dim> read_rank_order(spec::ObjectReader& r, std::string_view key);
/// @brief The same for a JSON value at `at`.
std::vector<Dim> parse_rank_order(const nlohmann::json& value, const spec::Location& at);
/// @brief Directory of the shipped model and GPU zoo (the source tree's workload/).
std::string data_dir();

/// @brief What an op is: compute on the GPU, a collective of a group, or one side of a pipeline transfer. A backward
/// split in two (zero-bubble schedules) is a `backward` for the input gradients and a `weight_grad` for the weights'.
enum class OpKind { forward, backward, recompute, optimizer, collective, send, recv, weight_grad };
constexpr std::array<std::string_view, 8> enum_names(OpKind)
{
  return {"forward", "backward", "recompute", "optimizer", "collective", "send", "recv", "weight-grad"};
}
/// @brief Whether ops of this kind run on the compute stream.
constexpr bool is_compute(OpKind kind)
{
  return kind == OpKind::forward || kind == OpKind::backward || kind == OpKind::recompute ||
         kind == OpKind::optimizer || kind == OpKind::weight_grad;
}

/// @brief Why a communication op exists, finer than its kind (an all-to-all dispatches or combines tokens).
enum class Purpose {
  compute,
  tp_activations,
  cp_kv,
  cp_kv_grads,
  pp_activations,
  pp_gradients,
  param_gather,
  grad_reduce,
  ep_dispatch,
  ep_combine
};
constexpr std::array<std::string_view, 10> enum_names(Purpose)
{
  return {"compute",      "tp_activations", "cp_kv",       "cp_kv_grads", "pp_activations",
          "pp_gradients", "param_gather",   "grad_reduce", "ep_dispatch", "ep_combine"};
}

/// @brief One op of a stage program. Every rank of the stage runs it.
///
/// Compute ops run one after another on the compute stream in program order. A communication op is issued when
/// its dependencies are done; `count` identical collectives of `bytes` each (one per layer, say) are folded into it.
struct Op {
  OpKind kind             = OpKind::forward;
  CollectiveOp collective = CollectiveOp::all_reduce; ///< kind collective: which one
  std::optional<Dim> dim{};                           ///< the dimension its traffic is accounted to (none: compute)
  Purpose purpose = Purpose::compute;
  int chunk       = -1; ///< Model chunk (virtual stage) on this pipeline stage.
  int micro_batch = -1;
  // Compute.
  double model_flops    = 0; ///< FLOPs that count towards MFU (no recompute).
  double hardware_flops = 0; ///< FLOPs executed, recompute included.
  double seconds        = 0; ///< Compute time under the roofline and efficiency factors.
  double hbm_bytes      = 0; ///< HBM traffic: GEMMs (gradient accumulation included) plus element-wise ops.
  OpEffects effects{};       ///< the parts of `seconds` the production effects add
  /// @brief A CPU op of an imported trace (Chakra's `is_cpu_op`): it runs on the host's own stream, beside the GPU's
  /// compute and communication, as ASTRA-sim's hardware resource runs it.
  bool host = false;
  // Communication.
  Group group;
  double bytes   = 0; ///< Buffer size of one collective: the gathered/reduced/exchanged tensor, or the message.
  int count      = 0;
  int peer_stage = -1; ///< send/recv: the other pipeline stage.
  /// @brief A send whose bytes leave when it starts and which ends when they arrive, whatever its receive does
  /// (ASTRA-sim's sends, for foreign traces); otherwise the transfer waits for both sides, as NCCL's do.
  bool eager        = false;
  std::int64_t tag  = -1;    ///< send/recv: a send and its recv share a tag.
  bool overlappable = false; ///< May run under compute (prefetch, gradient reduction, pipeline transfers).
  /// @brief Expert all-to-all: the busiest member of each group receives (dispatch) or sends (combine) this many
  /// times the mean (the routing's load imbalance).
  double imbalance = 1;
  int sms          = 0;  ///< SMs the op's kernels take while it runs; 0: the GPU's comm_sms (NCCL)
  std::vector<int> deps; ///< Indices of ops in the same program.
};

/// @brief Bytes one rank sends for `op` under the textbook ring/pairwise algorithms, all `count` instances.
double wire_bytes_per_rank(const Op& op);
/// @brief The op's name in reports: its kind, or its collective ("allgather") for a collective.
std::string_view op_name(const Op& op);

/// @brief Per-GPU memory estimate of one pipeline stage, bytes.
struct MemoryEstimate {
  double weights     = 0;
  double gradients   = 0;
  double optimizer   = 0;
  double activations = 0; ///< Peak over the schedule, including one layer's transient working set.
  /// @brief Sum of the parts.
  double total() const { return weights + gradients + optimizer + activations; }
};

/// @brief The program every rank of one pipeline stage runs in one training step.
struct StageProgram {
  int stage = 0;
  std::vector<int> chunk_layers; ///< Transformer layers in each model chunk.
  double params = 0;             ///< Parameters held per GPU (before data-parallel sharding).
  MemoryEstimate memory;
  std::vector<Op> ops;
  /// @brief An imported program: the rank whose trace it was read from and each op's node id there, so that errors
  /// name them (-1 and empty: built).
  int trace_rank = -1;
  std::vector<std::uint64_t> trace_nodes;
};

/// @brief The training-step graph: one program per pipeline stage; ranks differ only by group coordinates.
struct StepGraph {
  JobSpec job;
  int micro_batches = 0;
  std::vector<StageProgram> stages;
  /// @brief What an import tolerated or read its own way (dependencies dropped, sizes converted), for the report.
  std::vector<std::string> notes;
};

/// @brief Knobs of the graph builder.
struct BuildOptions {
  bool check_memory = true; ///< Refuse (SpecError) a job whose memory estimate exceeds the GPU's HBM.
};

/// @brief Builds the training-step graph of `job` (a DLRM's by build_dlrm_graph). @throws SpecError when the
/// job does not fit in memory.
StepGraph build_step_graph(const JobSpec& job, const BuildOptions& options = {});

/// @brief What a DLRM's sharding plan resolves to on its group (the job, or one tower).
struct DlrmPlan {
  Sharding sharding = Sharding::row_wise; ///< never automatic
  int group         = 1;                  ///< GPUs the tables are sharded over
  int tables        = 0;                  ///< tables sharded over them
  /// @brief Bytes one GPU sends per pass in the pooled-embedding exchange of the group (the all-to-all's, or
  /// the reduce-scatter's under row-wise sharding), as the textbook algorithms move them.
  double wire_bytes_per_gpu = 0;
  double buffer_bytes       = 0; ///< the collective's buffer per rank
};

/// @brief The sharding plan of a DLRM job: the one asked for, or (auto) the feasible one sending the fewest bytes.
/// @throws InfeasibleError ("sharding") naming why a plan asked for does not apply.
DlrmPlan dlrm_plan(const JobSpec& job);

/// @brief The step graph of a DLRM job: embedding lookups, the pooled-embedding exchange (with towers, inside
/// each tower, then the tower modules' outputs across towers), bottom and top MLPs and the interaction, the dense
/// all-reduce and the sparse update, one stage. @throws InfeasibleError ("memory", "sharding").
StepGraph build_dlrm_graph(const JobSpec& job, const BuildOptions& options = {});

/// @brief One pipeline stage's costs, without its program.
struct StageCosts {
  double forward             = 0; ///< seconds of one micro-batch's forward passes over the stage's chunks
  double backward            = 0;
  double recompute           = 0;
  double optimizer           = 0; ///< seconds of the optimizer step
  double wgrad               = 0; ///< of the backward: its weight-gradient GEMMs (a zero-bubble schedule's W)
  int layers                 = 0; ///< transformer layers over the stage's chunks
  int moe_layers             = 0;
  double dense_params        = 0; ///< per GPU, before data-parallel sharding
  double expert_params       = 0;
  double dense_gather_bytes  = 0; ///< one all-gather of the dense parameters (BF16, or FP8 linear weights)
  double expert_gather_bytes = 0; ///< one all-gather of the routed experts' parameters
  double lead_share          = 1; ///< largest share of a chunk's parameters in its first unit (exposed DP)
  MemoryEstimate memory;
};

/// @brief What a search's screen needs of a job: per-stage compute, memory and the buffers of its communication,
/// from the same cost model as build_step_graph but without the op programs (microseconds, not milliseconds).
struct JobCosts {
  int micro_batches = 0;
  /// One tensor-parallel collective's buffer, 2 per layer and pass (x2 with SP, where it is the mean of the
  /// all-gather's, quantized in a low precision, and the BF16 reduce-scatter's).
  double tp_bytes = 0;
  /// One context-parallel K/V all-gather's (or ring's) buffer, 1 per layer and pass: over the cp group, or over
  /// a2a+p2p's ring of cp / cp_a2a ranks (the K/V of the all-to-all group's share of the heads).
  double cp_bytes = 0;
  /// Ulysses' two all-to-alls' buffers (per layer and pass) over `cp_a2a` ranks: the cp group (a2a) or a2a+p2p's
  /// all-to-all group; 0 for the other variants.
  double cp_a2a_bytes    = 0;
  int cp_a2a             = 1; ///< the all-to-all group's size (1: no all-to-all)
  double ep_bytes        = 0; ///< one dispatch or combine (1 each per MoE layer and pass)
  double ep_gather_bytes = 0; ///< one all-gather dispatch (the allgather dispatcher's buffer)
  double pp_bytes        = 0; ///< one pipeline message
  std::vector<StageCosts> stages;
};

/// @brief The costs of `job`. @throws InfeasibleError ("memory") as build_step_graph does with check_memory.
JobCosts job_costs(const JobSpec& job, const BuildOptions& options = {});

/// @brief Communication volume of one parallelism dimension.
struct TrafficBytes {
  double per_gpu_max    = 0; ///< Bytes one GPU sends per step, on the busiest pipeline stage.
  double job_total      = 0; ///< Bytes sent per step by all GPUs.
  double buffer_per_gpu = 0; ///< Sum of collective buffer sizes per GPU on the busiest stage.
};

/// @brief What `spansim workload describe` prints.
struct StepSummary {
  std::size_t programs  = 0;
  std::size_t ops       = 0;
  std::size_t ranks     = 0;
  double model_flops    = 0; ///< Per step, whole job.
  double hardware_flops = 0;
  double tokens         = 0;
  DimArray<TrafficBytes> traffic;
  double stage_compute_max = 0; ///< Compute seconds of the busiest stage (no bubble).
  double step_lower_bound  = 0; ///< Makespan of the graph with free communication.
  double bubble_fraction   = 0; ///< (lower bound - busiest stage compute) / busiest stage compute.
  /// @brief The schedule's closed-form bubble over the busiest stage's forward and backward work: (pp - 1) / m for
  /// GPipe and 1F1B, (pp - 1) / (v m) interleaved, (pp - 1)(F + B - 2W) / (m (F + B)) for ZB-H1 with the busiest
  /// stage's W share; 0 for DualPipe and DualPipeV (see bubble_formula_text).
  double bubble_formula = 0;
  /// @brief That formula as printed ("(pp-1)/m"); empty for DualPipe and DualPipeV, whose bubble is a time that
  /// depends on the passes' times, not a fraction of pp, v and m.
  std::string bubble_formula_text;
  int peak_memory_stage = 0;
  MemoryEstimate peak_memory;
  OpEffects effects; ///< of the busiest stage's compute: what each production effect adds (SM contention: netsim)
};

/// @brief How a figure counts a step's model FLOPs: `causal`, spansim's own (every matrix product of the
/// forward and backward, attention over the causal half of the score matrix, no recompute); `megatron`,
/// Megatron-LM's num_floating_point_operations (full attention, no router or norms); `torchtitan`, 6 N + 12 L H Q T
/// (N without the input embedding, full attention).
enum class FlopConvention { causal, megatron, torchtitan };
constexpr std::array<std::string_view, 3> enum_names(FlopConvention)
{
  return {"causal", "megatron", "torchtitan"};
}

/// @brief A step's model FLOPs (whole job) under each convention; 0 where a convention has no meaning (DLRM, a
/// trace without a model).
struct FlopCounts {
  double causal     = 0;
  double megatron   = 0;
  double torchtitan = 0;
  /// @brief The count under `c`.
  double get(FlopConvention c) const;
};

/// @brief The counts for `job`, given its causal count (the step graph's model FLOPs).
FlopCounts model_flop_counts(const JobSpec& job, double causal);

/// @brief spansim's causal count per token in closed form: 6 x the active matrix-product parameters (the output
/// layer included) + 3 L H s (d_qk + d_v); the step graph's model FLOPs equal it times the tokens.
double causal_flops_per_token(const ModelSpec& model, double sequence);

/// @brief Summarizes a graph: its size, FLOPs, traffic per dimension, memory and the step-time lower bound.
StepSummary summarize(const StepGraph& graph);

/// @brief How an op of a stage program waits beyond its deps: the previous op of its stream (one stream for compute,
/// one per communicator; pipeline sends and receives are not serialised), or -1. The lowering orders ops so.
std::vector<int> stream_predecessors(const StageProgram& program);
/// @brief The same for every stage: [stage][op].
std::vector<std::vector<int>> stream_predecessors(const StepGraph& graph);

/// @brief Makespan of the graph when communication is free and compute ops take their `seconds`.
/// @throws SimulationError if the programs deadlock (a recv whose send never comes).
double compute_makespan(const StepGraph& graph);

/// @brief The graph as JSON (ops of every stage program), for tools downstream.
nlohmann::json to_json(const StepGraph& graph);

} // namespace spansim::workload
