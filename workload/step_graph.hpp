#pragma once
/// @file
/// @brief The training-step graph: one op program per pipeline stage, and its builders.

#include "common/collective.hpp"
#include "workload/job.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace spansim::workload {

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

/// @brief One micro-batch's compute on one rank, by kernel class: seconds over a stage's model chunks, forward,
/// backward and recompute together (what a profiler's kernel table sums to). The classes add up to the compute
/// ops' seconds before SM contention, which netsim adds.
struct KernelTimes {
  double gemm         = 0; ///< forward and input-gradient GEMMs but the routed experts' (output layer, router included)
  double grouped_gemm = 0; ///< the routed experts' forward and input-gradient GEMMs
  double wgrad        = 0; ///< weight-gradient GEMMs but the routed experts'
  double expert_wgrad = 0; ///< the routed experts' weight-gradient GEMMs
  double quantize     = 0; ///< casts of GEMM inputs and weights into a low precision
  double attention    = 0; ///< the attention kernels (fused, or the unfused GEMMs, softmax and dropout)
  double permute      = 0; ///< MoE token permute and unpermute around the dispatch and combine
  double norms        = 0;
  double elementwise  = 0; ///< residual adds, rotary, the MLP activation and the rest
  double recompute    = 0; ///< the forward work recomputed in the backward, all classes
  double kernel_gaps  = 0; ///< GPU idle between kernels and waiting on the host
  /// @brief The classes with their names, in this order.
  std::array<std::pair<std::string_view, double>, 11> named() const;
  /// @brief The sum of the classes.
  double total() const;
  /// @brief Adds `o` class by class.
  KernelTimes& operator+=(const KernelTimes& o);
};

/// @brief The program every rank of one pipeline stage runs in one training step.
struct StageProgram {
  int stage = 0;
  std::vector<int> chunk_layers; ///< Transformer layers in each model chunk.
  double params = 0;             ///< Parameters held per GPU (before data-parallel sharding).
  MemoryEstimate memory;
  KernelTimes kernels; ///< one micro-batch's compute by kernel class (zero for an imported program)
  /// @brief kernels.recompute by the class of the kernels it re-runs (a profiler files them so; its recompute 0).
  KernelTimes recomputed;
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

} // namespace spansim::workload
