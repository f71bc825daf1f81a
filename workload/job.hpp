#pragma once
/// @file
/// @brief A training job: parallelism, batch, schedule, precision and kernels over a model and a GPU; reading and
/// validating it.

#include "common/json_reader.hpp"
#include "workload/calibration.hpp"
#include "workload/dims.hpp"
#include "workload/dlrm.hpp"
#include "workload/gpu.hpp"
#include "workload/model.hpp"
#include "workload/moe.hpp"
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spansim::workload {

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
/// @brief Megatron-LM's recompute modules of selective recompute (TransformerConfig.recompute_modules): the core
/// attention, the two norms, MLA's up-projections with their RoPE, a dense layer's MLP, the routed experts'
/// activation function, the shared experts, the whole MoE layer (with its all-to-alls).
enum class RecomputeModule { core_attn, layernorm, mla_up_proj, mlp, moe_act, shared_experts, moe };
constexpr std::array<std::string_view, 7> enum_names(RecomputeModule)
{
  return {"core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act", "shared_experts", "moe"};
}

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

/// @brief The format an activation is kept in for the backward: BF16 as computed, or a low-precision copy with an FP32
/// scale per 128 elements (1x128 tiles): FP8, or DeepSeek-V3's 12-bit E5M6.
enum class KeptFormat { bf16, fp8, e5m6 };
constexpr std::array<std::string_view, 3> enum_names(KeptFormat)
{
  return {"bf16", "fp8", "e5m6"};
}

/// @brief Activations a job keeps for the backward in a low precision, as DeepSeek-V3 does (arXiv 2412.19437 section
/// 3.3.3) and Megatron's activation_func_fp8_input_store (`precision.activation_cache`).
struct ActivationCache {
  KeptFormat mlp_activation_input = KeptFormat::bf16; ///< a gated MLP's activation input (gate and up): FP8
  KeptFormat attention_output     = KeptFormat::bf16; ///< the attention output, o_proj's input: FP8 or E5M6
};

/// @brief A whole training job, validated.
struct JobSpec {
  std::string name;
  std::string file; ///< Where it was read from, for error messages.
  /// @brief A Chakra trace prefix (DIR/PREFIX) the step graph is read from instead of built (traces/); empty: built.
  std::string trace;
  /// @brief The trace's communicator-group file (ASTRA-sim's --comm-group-configuration); empty:
  /// PREFIX.comm_groups.json when there is one.
  std::string trace_comm_groups;
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
  Recompute recompute = Recompute::none;
  /// @brief With selective recompute, the modules Megatron re-runs (`recompute_modules`); empty: spansim's own
  /// selective recompute (the core attention, the norms and the MLP activation).
  std::vector<RecomputeModule> recompute_modules;
  /// @brief Whether selective recompute re-runs the core attention: spansim's own selective recompute (no modules
  /// listed) or Megatron's `core_attn` module.
  bool recomputes_core_attention() const
  {
    return recompute == Recompute::selective && (recompute_modules.empty() || recomputes(RecomputeModule::core_attn));
  }
  /// @brief Whether selective recompute re-runs module `m`.
  bool recomputes(RecomputeModule m) const
  {
    return recompute == Recompute::selective &&
           std::find(recompute_modules.begin(), recompute_modules.end(), m) != recompute_modules.end();
  }
  Precision precision            = Precision::bf16;
  Fp8Recipe fp8_recipe           = Fp8Recipe::delayed;      ///< with precision fp8
  AttentionKernel attention      = AttentionKernel::flash2; ///< The GPU's default unless `kernels.attention` is given.
  GemmLibrary gemm_library       = GemmLibrary::cublas;     ///< `kernels.gemm`
  ExpertQuantize expert_quantize = ExpertQuantize::grouped; ///< `kernels.expert_quantize`
  /// @brief Bytes per gradient element on the wire and in the gradient buffer (fp32: 4, bf16: 2): Megatron allocates
  /// its gradient buffer in the reduce dtype (param_and_grad_buffer.py: "torch.float if grad_reduce_in_fp32, else
  /// param.dtype"), and the weight-gradient GEMMs accumulate into it.
  double gradient_reduce_bytes = 4;
  /// @brief Megatron's fp8_param_gather: the linear layers' weights are all-gathered in the compute format (FP8 or
  /// MXFP8, with their scales) rather than BF16.
  bool low_precision_param_gather = false;
  /// @brief Activations kept for the backward in a low precision (`precision.activation_cache`), each cast from BF16
  /// in the forward and back in the backward.
  ActivationCache activation_cache;
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
/// @brief The kernels in force, as one line: the attention kernel (and whether it is the GPU's default), the GEMM
/// library and, for a MoE job in a low precision, how its experts' casts are launched.
std::string kernels_line(const JobSpec& job);
/// @brief The job's number formats as a job spec's `precision` block, every key given (what a result writes, and a
/// search writes into the scenarios it finds): compute, recipe (FP8 only), gradient_reduce, param_gather,
/// activation_cache.
nlohmann::json precision_spec(const JobSpec& job);
/// @brief The job's kernels as a job spec's `kernels` block, every key given (the GPU's default attention filled in):
/// attention, gemm, expert_quantize.
nlohmann::json kernels_spec(const JobSpec& job);
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
  gemm,             ///< a GEMM library the GPU file gives no rates for, or that does not run the job's precision
};
constexpr std::array<std::string_view, 15> enum_names(JobIssue)
{
  return {"gpus",           "tp",       "ep",
          "hsdp",           "sequence", "cp-comm",
          "batch",          "schedule", "microbatch-group",
          "pipeline-depth", "layers",   "precision",
          "attention",      "memory",   "gemm"};
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
/// @brief Reads the optional `kernels` object of a job (or an optimize spec) into `job`, whose GPU is read: the
/// attention kernel, the GEMM library and how the experts' casts are launched (checked with the job, validate_job).
void read_kernels(spec::ObjectReader& r, JobSpec& job);
/// @brief Reads `recompute_modules` of `r` (an object that has it) for a job recomputing as `recompute` on `model`:
/// Megatron's module names, each once, each one the model has something for. @throws SpecError otherwise.
std::vector<RecomputeModule> read_recompute_modules(spec::ObjectReader& r, Recompute recompute, const ModelSpec& model);
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

} // namespace spansim::workload
