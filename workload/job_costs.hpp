#pragma once
/// @file
/// @brief A job's per-stage costs without its op programs: what a search's screen prices.

#include "workload/step_graph.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spansim::workload {

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

} // namespace spansim::workload
