#pragma once
/// @file
/// @brief Measured kernel times from a PyTorch profiler (Kineto) trace, the Chrome-trace JSON `torch.profiler`
/// writes: GEMM and flash-attention kernels attached to the CPU ops that launched them, by op and shape, as the
/// measured-kernel tables of workload/ (`measured_kernels`), so that they replace the cost model's estimates for
/// those shapes through the one path that tables take.

#include "workload/workload.hpp"

#include <map>
#include <string>
#include <vector>

namespace spansim::traces {

/// @brief What a Kineto trace gave.
struct KinetoKernels {
  workload::MeasuredKernels kernels; ///< one row per distinct shape: the median of its calls
  std::vector<double> iterations;    ///< seconds of each ProfilerStep#N annotation
  std::size_t gpu_kernels     = 0;   ///< kernel events in the trace
  std::size_t matched_kernels = 0;   ///< of which attached to a GEMM or attention op
  double gpu_seconds          = 0;   ///< their total time
  double matched_seconds      = 0;
  std::map<std::string, std::size_t> unmatched; ///< launching op (or "no op") -> kernels not attached
  /// @brief The median iteration, 0 without ProfilerStep annotations.
  double iteration_seconds() const;
};

/// @brief Reads a Kineto trace. GEMMs: kernels launched by `aten::mm` (inputs [M, K], [K, N]), `aten::addmm` (bias,
/// [M, K], [K, N]) or `aten::linear` (input [..., K], weight [N, K]) with BF16 or FP8 inputs; attention: kernels of
/// `aten::_flash_attention_forward` / `_backward` (q as [batch, sequence, heads, head_dim]) or
/// `aten::_scaled_dot_product_flash_attention` / `_backward` (q as [batch, heads, sequence, head_dim]), per sequence.
/// Kernels attach to the op whose "External id" they carry (or their launch's, through "correlation").
/// @throws TraceError naming the file for a file that is not a Chrome trace.
KinetoKernels read_kineto(const std::string& path);

/// @brief Writes the tables as DIR/gemm.csv and DIR/attention.csv (those with rows); returns the paths written.
std::vector<std::string> write_measured_tables(const KinetoKernels& k, const std::string& dir);

} // namespace spansim::traces
