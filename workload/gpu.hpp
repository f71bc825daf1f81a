#pragma once
/// @file
/// @brief GPU specs of the workload stage: peaks, the GEMM model's inputs, attention libraries' rates, low-precision
/// formats and measured kernel tables.

#include "common/json_reader.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spansim::workload {

/// @brief Attention kernels: fused (flash) libraries whose measured rates a GPU file gives, or `unfused`, the
/// pre-FlashAttention path (two batched GEMMs and a softmax and dropout over the whole score matrix in HBM), costed
/// from the GEMM model and HBM bandwidth. The fused ones: FlashAttention 2, 3 and 4, cuDNN's fused attention, and
/// `triton`, llm-foundry's Triton FlashAttention (flash_attn_triton.py on pre-MLIR Triton, which MPT's benchmarks
/// ran).
enum class AttentionKernel { flash2, flash3, cudnn, flash4, triton, unfused };
constexpr std::array<std::string_view, 6> enum_names(AttentionKernel)
{
  return {"flash2", "flash3", "cudnn", "flash4", "triton", "unfused"};
}
/// @brief The fused attention libraries, in the order of GpuSpec::attention.
inline constexpr std::array kAttentionKernels{AttentionKernel::flash2, AttentionKernel::flash3, AttentionKernel::cudnn,
                                              AttentionKernel::flash4, AttentionKernel::triton};

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

/// @brief The GEMM library a job's linear layers run on: `cublas` (cuBLAS and CUTLASS kernels under Transformer
/// Engine: the tile-and-wave model at the GPU's measured ceilings) or `deepgemm` (DeepSeek's FP8 block-scaled
/// kernels at the rates DeepGEMM publishes; FP8 with block-wise scaling only).
enum class GemmLibrary { cublas, deepgemm };
constexpr std::array<std::string_view, 2> enum_names(GemmLibrary)
{
  return {"cublas", "deepgemm"};
}

/// @brief How a MoE job's casts of its experts' GEMM operands are launched: `grouped` (one kernel for all of a rank's
/// experts: DeepSeek's kernels, Transformer Engine's grouped quantize) or `per_expert` (Transformer Engine's
/// split_quantize before its grouped quantize reached GroupedLinear in mid-2026: a kernel per expert for current
/// scaling, block scaling and MXFP8; delayed scaling's multi-tensor cast-transpose and NVFP4's fused split stay one).
enum class ExpertQuantize { grouped, per_expert };
constexpr std::array<std::string_view, 2> enum_names(ExpertQuantize)
{
  return {"grouped", "per_expert"};
}

struct GpuSpec;

/// @brief A GEMM library's published grouped-GEMM rates: FLOP/s by rows per group on each published (n, k) shape,
/// and what its weight-gradient kernels reach against them.
struct GroupedGemmRates {
  /// @brief One published figure: `groups` GEMMs of `rows` rows each, `n` x `k`, at `rate` FLOP/s.
  struct Point {
    double rows = 0, n = 0, k = 0, rate = 0;
    int groups = 1;
    /// @brief The rate of whole waves: `rate` over the tile and wave model's quantization at the published shape,
    /// so that the model gives the published time back there (derive_full_wave).
    double full_wave = 0;
  };
  std::vector<Point> points;
  int block_m = 128; ///< each group's rows are padded to a multiple of this (the kernel's block of rows)
  /// @brief The weight-gradient GEMMs' rate over the forward's (K-grouped kernels whose scales run along K).
  double wgrad_fraction = 1;
  /// @brief FLOP/s at `rows` rows per group (padded), `n` x `k`: on each published shape linearly in log2 of the
  /// rows, then across shapes linearly in log2(k); held flat beyond the published ends.
  double rate(double rows, double k) const;
  /// @brief `rows` padded to the block.
  double padded(double rows) const;
  /// @brief Sets each point's full_wave on `gpu`'s SMs and tiles: a published rate was measured on its own shape,
  /// whose partial waves it already includes.
  void derive_full_wave(const GpuSpec& gpu);
};

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
  GroupedGemmRates deepgemm;             ///< DeepGEMM's published rates (empty: not published for this GPU)
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
  std::array<AttentionRates, kAttentionKernels.size()> attention{}; ///< Indexed by AttentionKernel (fused ones).
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

} // namespace spansim::workload
