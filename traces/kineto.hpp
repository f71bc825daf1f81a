#pragma once
/// @file
/// @brief Measured kernel times from a PyTorch profiler (Kineto) trace, the Chrome-trace JSON `torch.profiler`
/// writes (plain or gzip-compressed, as HTA reads it): GPU kernels linked to the CPU ops that launched them, as HTA
/// and Chakra's trace link do, and GEMM and flash-attention kernels reduced, by op and shape, to the
/// measured-kernel tables of workload/ (`measured_kernels`), so that they replace the cost model's estimates for
/// those shapes through the one path that tables take.

#include "workload/workload.hpp"

#include <map>
#include <string>
#include <vector>

namespace spansim::traces {

/// @brief Largest trace text read (512 MiB once decompressed): a larger one is refused before it is parsed.
inline constexpr std::size_t kMaxKinetoTextBytes = 512ULL << 20;

/// @brief A GEMM the measured-kernel tables do not take: FP32, TF32 or FP16 inputs, or a batched product.
struct OtherGemm {
  std::string op;    ///< "mm" (aten::mm, addmm, linear) or "bmm" (aten::bmm, baddbmm)
  std::string dtype; ///< bf16, fp8, fp16, tf32 (FP32 inputs on a TF32 kernel) or fp32
  double batch = 1, m = 0, n = 0, k = 0;
  double seconds = 0; ///< median per call
};

/// @brief What a Kineto trace gave.
struct KinetoKernels {
  workload::MeasuredKernels kernels;  ///< BF16 and FP8 rows, one per distinct shape: the median of its calls
  std::vector<OtherGemm> other_gemms; ///< FP32/TF32/FP16 GEMMs and batched GEMMs, in tables of their own
  std::vector<double> iterations;     ///< seconds of each complete ProfilerStep#N annotation, in trace order
  /// @brief Seconds of a last ProfilerStep left out as cut short by the profiler's stop (under half the median of
  /// the others); 0 when none was.
  double truncated_iteration   = 0;
  std::size_t gpu_kernels      = 0; ///< kernel events in the trace
  std::size_t attached_kernels = 0; ///< of which linked to the CPU op that launched them
  std::size_t gemm_kernels     = 0; ///< of which launched by a GEMM op (aten::mm, addmm, linear, bmm, baddbmm)
  std::size_t matched_kernels  = 0; ///< of which in a table row (GEMM or attention of a readable shape)
  double gpu_seconds           = 0; ///< their total time
  double matched_seconds       = 0;
  /// @brief Why kernels stayed out of the tables -> how many: no launch event with their correlation id, a launch
  /// outside any CPU op, or the launching op's name and what it lacked.
  std::map<std::string, std::size_t> unmatched;
  /// @brief The median iteration, 0 without ProfilerStep annotations.
  double iteration_seconds() const;
};

/// @brief Reads a Kineto trace (`.json`, or gzip data such as `.json.gz`). Each kernel is linked as HTA and
/// `chakra_trace_link` link it: to the runtime launch (`cuda_runtime`/`cuda_driver`) of the same `correlation`,
/// then to the innermost CPU op (`cpu_op`) of the launch's process and thread that encloses the launch's start.
/// GEMMs: `aten::mm` ([M, K], [K, N]), `aten::addmm` (bias, [M, K], [K, N]), `aten::linear` (input [..., K], weight
/// [N, K]), `aten::bmm` / `baddbmm` ([B, M, K], [B, K, N]) by input type (`Input type`; FP32 inputs run as TF32
/// when the kernel's name says tf32); attention: `aten::_flash_attention_forward` / `_backward` (q as [batch,
/// sequence, heads, head_dim]) or `aten::_scaled_dot_product_flash_attention` / `_backward` (q as [batch, heads,
/// sequence, head_dim]), per sequence.
/// An op whose operands' inner (or batch) dimensions differ gives no row: it is counted in `unmatched`.
/// @throws TraceError naming the file for a file that is not a Chrome trace, not whole gzip data or without GPU
/// kernel events, and the event for a duration or a CPU op's or launch's start that is not a number of microseconds.
KinetoKernels read_kineto(const std::string& path);

/// @brief What the measured kernels timed in a step replayed with them.
struct ReplayCoverage {
  std::size_t timed_ops   = 0; ///< GPU compute ops whose time differs from the modelled step's
  std::size_t compute_ops = 0; ///< GPU compute ops of the stage programs (forward, backward, recompute, optimizer)
};

/// @brief Compares a scenario's step graph as modelled with the same graph built with `k`'s tables: a compute op
/// (a chunk's pass over one micro-batch) whose time changed ran at least one GEMM or attention kernel of a shape the
/// tables cover (measured times replace the model's between measured shapes only). @throws TraceError naming
/// `trace` and `scenario` when none did: the replay would repeat the model, and its error against the trace's
/// iteration would pass for a validation.
ReplayCoverage replay_coverage(const KinetoKernels& k, const std::string& trace, const std::string& scenario,
                               const workload::StepGraph& modelled, const workload::StepGraph& replayed);

/// @brief Writes the tables as DIR/gemm.csv and DIR/attention.csv (BF16 and FP8: what `measured_kernels` reads) and
/// DIR/gemm_other.csv (the other GEMMs), those with rows; returns the paths written.
std::vector<std::string> write_measured_tables(const KinetoKernels& k, const std::string& dir);

} // namespace spansim::traces
