#pragma once
/// @file
/// @brief Test helper: a job switched to the roofline model (no calibration profile, no production effect), the
/// model the closed forms of the workload tests describe.

#include "workload/workload.hpp"

#include <nlohmann/json.hpp>

namespace workload_test {

/// @brief `job` with "calibration": "none" and every effect switched off.
inline nlohmann::json roofline(nlohmann::json job)
{
  job["calibration"] = "none";
  nlohmann::json effects;
  for (const auto& [key, member] : spansim::workload::kEffectSwitches)
    effects[std::string(key)] = false;
  job["effects"] = effects;
  return job;
}

} // namespace workload_test
