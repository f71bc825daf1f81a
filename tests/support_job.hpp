#pragma once
// A small job for closed-form step tests (tests/netsim, tests/scenario).

#include "workload/workload.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace spansim::test {

using nlohmann::json;

/// @brief A 4-layer, 2048-wide dense model: small enough for closed forms.
inline json small_model()
{
  return {{"name", "small"}, {"layers", 4},    {"hidden", 2048}, {"ffn", 8192},
          {"heads", 16},     {"kv_heads", 16}, {"vocab", 32000}, {"mlp", "swiglu"}};
}

/// @brief A small MoE model: `layers` layers 1024 wide, 8 experts of width 1024, top-2, with `shared` shared experts.
inline json small_moe_model(int layers, int shared)
{
  json moe = {{"experts", 8}, {"experts_per_token", 2}, {"expert_ffn", 1024}};
  if (shared > 0)
    moe["shared_experts"] = shared;
  return {{"name", "small-moe"}, {"layers", layers}, {"hidden", 1024},  {"ffn", 4096}, {"heads", 8},
          {"kv_heads", 8},       {"vocab", 32000},   {"mlp", "swiglu"}, {"moe", moe}};
}

/// @brief A small DLRM model: `tables` tables of 100,000 rows of dimension 64, pooling 2, dot interaction.
inline json small_dlrm_model(int tables)
{
  return {{"name", "small-dlrm"},
          {"dense_features", 13},
          {"tables", {{{"count", tables}, {"rows", 100000}, {"dim", 64}, {"pooling", 2}}}},
          {"bottom_mlp", {128, 64}},
          {"top_mlp", {256, 1}},
          {"interaction", {{"kind", "dot"}}}};
}

/// @brief A 4-layer, 1024-wide dense model (the MLP kind left to its default): a short compute next to its
/// gradient all-reduce.
inline json small_narrow_model()
{
  return {{"name", "small"}, {"layers", 4},   {"hidden", 1024}, {"ffn", 4096},
          {"heads", 8},      {"kv_heads", 8}, {"vocab", 32000}};
}

/// @brief A small job as scenario JSON: small_narrow_model() on `gpus` H100s with `parallelism`, 8 sequences
/// of 1,024 tokens, 1F1B, no calibration profile.
inline json small_job_json(int gpus, json parallelism)
{
  return {{"name", "small"},
          {"model", small_narrow_model()},
          {"gpu", "h100"},
          {"gpus", gpus},
          {"parallelism", std::move(parallelism)},
          {"batch", {{"global_sequences", 8}, {"sequence_length", 1024}, {"micro_batch", 1}}},
          {"schedule", {{"kind", "1f1b"}}},
          {"calibration", "none"}};
}

/// @brief A job of small_model() on H100s with no calibration profile and no production effect, so that compute
/// is the roofline's and closed forms hold.
inline workload::JobSpec job(json parallelism, json schedule, int sequences, int sequence_length)
{
  json j       = {{"name", "test-job"},
                  {"model", small_model()},
                  {"gpu", "h100"},
                  {"gpus", parallelism["tp"].get<int>() * parallelism["pp"].get<int>() * parallelism["dp"].get<int>()},
                  {"parallelism", parallelism},
                  {"batch", {{"global_sequences", sequences}, {"sequence_length", sequence_length}, {"micro_batch", 1}}},
                  {"schedule", schedule},
                  {"recompute", "none"},
                  // The closed forms are the roofline's and the network's: no calibration profile, no effect.
                  {"calibration", "none"}};
  auto spec    = workload::parse_job(j, std::string(SPANSIM_SOURCE_DIR) + "/tests/test-job.json");
  spec.effects = workload::Effects::none();
  return spec;
}

} // namespace spansim::test
