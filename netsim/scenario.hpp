#pragma once
/// @file
/// @brief A scenario: topology + job + placement + fidelity and collective options, read from one JSON file,
/// and what running it produces (summary, per-chunk CSV, Perfetto trace).

#include "netsim/step.hpp"
#include "placement/placement.hpp"
#include "topology/topology.hpp"
#include "workload/workload.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>

namespace spansim::netsim {

/// @brief Everything needed to simulate one training step.
struct Scenario {
  std::string name;
  std::string file;
  std::string json_path = "$"; ///< where the scenario sits in `file`, for errors found later (placement)
  topology::TopologySpec topology;
  workload::JobSpec job;
  placement::PlacementSpec placement;
  StepOptions options;
  std::vector<int> trace_stages; ///< stages drawn in the trace (empty: all, up to 16)
};

/// @brief Path of the scenario `make run` uses.
std::string default_scenario_path();
/// @brief Reads a scenario file. Topology and job are preset/zoo names, paths (relative to the scenario's
/// folder, the working directory or the source tree) or inline objects. @throws SpecError.
Scenario load_scenario(const std::string& path);
/// @brief Reads a scenario given as JSON; `file` names it in errors and anchors relative paths.
/// `json_path` locates the scenario inside `file` (an inline scenario of a campaign: "$.scenario").
Scenario parse_scenario(const nlohmann::json& document, const std::string& file, const std::string& json_path = "$");

/// @brief A scenario's outcome, with the pieces needed to report it.
struct ScenarioRun {
  StepResult result;
  placement::PlacementReport placement;
  nlohmann::json summary;    ///< the JSON summary (effective configuration, version, metrics)
  workload::StepGraph graph; ///< the simulated step graph (per-chunk CSV and trace read its ops)
};

/// @brief Reports the phase a scenario run is in ("building the step graph", ...), for progress displays.
using PhaseCallback = std::function<void(const std::string&)>;

/// @brief Builds the topology, the step graph and the placement, and simulates the step.
ScenarioRun run_scenario(const Scenario& scenario, const PhaseCallback& phase = {});

/// @brief Writes summary.json, layers.csv (per model chunk) and trace.json (Perfetto) into `directory`.
/// @return the paths written.
std::vector<std::string> write_outputs(const Scenario& scenario, const ScenarioRun& run, const std::string& directory);

} // namespace spansim::netsim
