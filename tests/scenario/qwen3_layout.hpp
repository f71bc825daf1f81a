#pragma once
// Qwen3-235B-A22B's published layout (examples/scenarios/qwen3-235b-a22b-256-h100.json), shared by the tests that
// run it at each fidelity (test_moe_layout.cpp, test_moe_packet.cpp).

#include "scenario/scenario.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace spansim::test {

/// @brief The example scenario as shipped.
inline nlohmann::json qwen3_layout()
{
  return spec::load_json_file(std::string(SPANSIM_SOURCE_DIR) + "/examples/scenarios/qwen3-235b-a22b-256-h100.json");
}

/// @brief The step time of scenario `d` (the example or a variant of it) at `fidelity`.
inline double qwen3_step(nlohmann::json d, const std::string& fidelity)
{
  d["fidelity"] = fidelity;
  return scenario::run_scenario(scenario::parse_scenario(d, "qwen3-235b-a22b-256-h100.json")).result.step_time;
}

} // namespace spansim::test
