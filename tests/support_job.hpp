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
