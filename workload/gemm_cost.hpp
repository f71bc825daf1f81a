#pragma once
/// @file
/// @brief One GEMM's cost on a GPU under the tile-and-wave model.

#include "workload/gpu.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spansim::workload {

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
  /// @brief A arrives row-wise quantized from an FP8 dispatch: the rank casts its cast_rows row-wise only before the
  /// dispatch, and the weight gradient needs A column-wise over the m rows received, a second pass that reads the
  /// row-wise copy and writes a column-wise one (DeepSeek-V3's column-wise re-quantization).
  bool dispatched = false;
  /// @brief Bytes an element of a low-precision copy of A (cached_a) or C (cached_c) kept for the backward, 0 for
  /// none: a kernel of its own casts the BF16 tensor in the forward and one casts it back in the backward (DeepSeek's
  /// E5M6 attention output before o_proj, the MLP activation's FP8 input after the up-projection).
  double cached_a = 0;
  double cached_c = 0;
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

} // namespace spansim::workload
