#pragma once
/// @file
/// @brief Calibration profiles (the compute model's fitted parameters) and the production effects they switch.

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace spansim::workload {

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
  /// @brief Seconds the host adds to moe_host under Megatron's all-to-all overlap (`ep_overlap`: a layer's forward of
  /// one micro-batch paired with another's backward, on two streams, issued piece by piece): fitted on published MoE
  /// runs with the overlap on; 0: as without it.
  double moe_host_overlap = 0;
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

} // namespace spansim::workload
