#pragma once
/// @file
/// @brief Summaries of a step graph: size, FLOPs under each convention, traffic, memory, bounds, JSON.

#include "workload/step_graph.hpp"
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spansim::workload {

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
