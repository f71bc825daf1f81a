#pragma once
/// @file
/// @brief MoE dispatch specs, routing balance and what the dispatch of a job costs in tokens and SMs.

#include "workload/gpu.hpp"
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spansim::workload {

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

struct JobSpec;

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

/// @brief SMs a job's compute leaves free by construction: DeepGEMM beside a dispatcher that names its SMs
/// (DeepEP's) runs on the others, as DeepSeek sets it; 0 otherwise.
int reserved_sms(const JobSpec& job);

} // namespace spansim::workload
