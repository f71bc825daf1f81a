#pragma once
/// @file
/// @brief Model specs of the workload stage: transformer shapes (dense, MoE, MLA) and their parameter counts.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spansim::workload {

/// @brief Parses a FLOP rate ("989TFLOPs", "2.25PFLOPs", "500GFLOP/s") into FLOP/s.
/// @throws UsageError naming the accepted units.
double parse_flop_rate(std::string_view text);

/// @brief Dense SwiGLU-style gated MLP (three matrices) or a plain two-matrix MLP (GELU, GPT-3).
enum class MlpKind { gated, plain };
constexpr std::array<std::string_view, 2> enum_names(MlpKind)
{
  return {"swiglu", "gelu"};
}
/// @brief Grouped-query attention (covers MHA and MQA) or DeepSeek's multi-head latent attention.
enum class AttentionKind { gqa, mla };
constexpr std::array<std::string_view, 2> enum_names(AttentionKind)
{
  return {"gqa", "mla"};
}

/// @brief Multi-head latent attention shape (DeepSeek-V2/V3); only read when the attention kind is mla.
struct MlaSpec {
  int q_lora_rank      = 0; ///< 0: queries are projected directly from the hidden state.
  int kv_lora_rank     = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim       = 0;
};

/// @brief Mixture-of-experts shape; `experts == 0` means a dense model.
struct MoeSpec {
  int experts            = 0;
  int experts_per_token  = 0;
  int shared_experts     = 0;
  int expert_ffn         = 0;
  int every              = 1; ///< Layer i (after the leading dense ones) is MoE when (i + 1) % every == 0.
  int first_dense_layers = 0;
};

/// @brief A transformer's shape, as in the model zoo files.
struct ModelSpec {
  std::string name;
  std::string source;
  int layers           = 0;
  int hidden           = 0;
  int ffn              = 0; ///< FFN size of the dense layers.
  int heads            = 0;
  int kv_heads         = 0;
  int head_dim         = 0;
  int vocab            = 0;
  MlpKind mlp          = MlpKind::gated;
  bool tied_embeddings = false;
  /// @brief RMSNorm of every query and key head over head_dim before RoPE (Qwen3's q_norm and k_norm; Megatron's
  /// qk_layernorm): two norms more a layer, their weights head_dim each.
  bool qk_norm            = false;
  AttentionKind attention = AttentionKind::gqa;
  MlaSpec mla;
  MoeSpec moe;
  /// @brief Multi-token prediction modules trained with the model (Megatron's mtp_num_layers; DeepSeek-V3 trains
  /// one): each a transformer layer like the model's last, with its own norms and input projection, sharing the
  /// embedding and the output layer. Set by the job (`mtp_layers`); layers + i is the i-th module's layer.
  int mtp_layers = 0;

  /// @brief Whether layer `layer` (0-based; from `layers` on, a multi-token prediction module's) is a
  /// mixture-of-experts layer.
  bool is_moe_layer(int layer) const;
  /// @brief The transformer layers a micro-batch passes through: the model's and its MTP modules'.
  int all_layers() const { return layers + mtp_layers; }
};

/// @brief Parameter counts of a model (exact for the shapes above; biases are not modeled).
struct ModelParams {
  double total         = 0; ///< Every distinct parameter (a tied embedding counted once).
  double active        = 0; ///< Parameters a token goes through (routed experts: only the top-k).
  double matmul_active = 0; ///< Active parameters used in matrix products (no input embedding, no norms).
  double embedding     = 0; ///< Input embedding table.
};

/// @brief Counts the parameters of `model`.
ModelParams count_params(const ModelSpec& model);

} // namespace spansim::workload
