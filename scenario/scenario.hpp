#pragma once
/// @file
/// @brief The scenario stage: a scenario file (topology + job + placement + fidelity and collective options) is
/// read once, built once into a placed step (topology, step graph, placement), and simulated into a typed run.
/// What a run reports (JSON summary, per-chunk CSV, Perfetto trace) is written by report/.

#include "netsim/step.hpp"
#include "placement/placement.hpp"
#include "reliability/reliability.hpp"
#include "sync/sync.hpp"
#include "topology/topology.hpp"
#include "workload/workload.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace spansim::scenario {

/// @brief Everything needed to simulate one training step.
struct Scenario {
  std::string name;
  std::string file;
  std::string json_path = "$"; ///< where the scenario sits in `file` (an inline scenario of a campaign)
  topology::TopologySpec topology;
  workload::JobSpec job;
  placement::PlacementSpec placement;
  netsim::StepOptions options;
  std::vector<int> trace_stages;                           ///< stages drawn in the trace (empty: all, up to 16)
  std::optional<reliability::VariabilitySpec> variability; ///< slow GPUs and jitter (`spansim run --steps`)
  std::optional<reliability::ReliabilitySpec> reliability; ///< failures and recovery (`spansim reliability`)
  std::optional<topology::FaultSpec> faults;               ///< failed and degraded elements of the site
  std::optional<sync::DilocoSpec> diloco;                  ///< data parallelism across regions every H steps
  /// @brief Refuse a job whose memory estimate exceeds HBM (false for published runs, which ran).
  bool check_memory = true;
};

/// @brief A file a scenario (or a campaign) names: `name` as given, next to `anchor_file`, or in the source tree
/// (examples/..., experiments/...), the first that exists; `name` itself when none does.
std::string resolve_path(const std::string& name, const std::string& anchor_file);
/// @brief Whether a topology or job reference is a file path rather than a preset or zoo name.
bool looks_like_path(const std::string& reference);

/// @brief Path of the scenario `make run` uses.
std::string default_scenario_path();
/// @brief Reads a scenario file. Topology and job are preset/zoo names, paths (relative to the scenario's
/// folder, the working directory or the source tree) or inline objects. @throws SpecError.
Scenario load_scenario(const std::string& path);
/// @brief Reads a scenario given as JSON; `file` names it in errors and anchors relative paths; `json_path`
/// locates it inside `file` (an inline scenario of a campaign: "$.scenario").
Scenario parse_scenario(const nlohmann::json& document, const std::string& file, const std::string& json_path = "$");

/// @brief Reports the phase a run is in ("building the step graph", ...), for progress displays.
using PhaseCallback = std::function<void(const std::string&)>;

/// @brief A scenario built: its topology, step graph and placement, each built once. Not movable: the placement
/// refers to the topology.
class PlacedStep {
public:
  /// @brief Builds the topology, the step graph and the placement. @throws SpecError naming the scenario's file
  /// and JSON path for a placement that cannot be.
  explicit PlacedStep(const Scenario& scenario, const PhaseCallback& phase = {});
  PlacedStep(const PlacedStep&)            = delete;
  PlacedStep& operator=(const PlacedStep&) = delete;

  const topology::Topology& topology() const { return topology_; }
  const workload::StepGraph& graph() const { return graph_; }
  const placement::Placement& placement() const { return placement_; }

private:
  topology::Topology topology_;
  placement::Placement placement_; // before the graph: on a heterogeneous site a stage's GPU type is its building's
  workload::StepGraph graph_;
};

/// @brief What the faults of a scenario cost: the healthy network's step and boundary capacities against these.
struct FaultReport {
  double healthy_step_time = 0;
  int failed_links = 0, degraded_links = 0;
  std::vector<topology::BoundaryCapacity> healthy, faulty; ///< per building and region boundary
};

/// @brief A simulated scenario: the scenario as run, what it was built into, and the typed results.
struct ScenarioRun {
  Scenario scenario;
  std::shared_ptr<const PlacedStep> placed;
  netsim::StepResult result;
  placement::PlacementReport placement;     ///< which groups cross which boundaries, bytes across them
  std::optional<FaultReport> faults;        ///< with a `faults` block: against the healthy site
  std::optional<sync::DilocoResult> diloco; ///< with a `diloco` block: `result` is an inner step
};

/// @brief Builds the scenario and simulates one step.
ScenarioRun run_scenario(const Scenario& scenario, const PhaseCallback& phase = {});
/// @brief Simulates one step of an already built scenario (a placed step can be simulated many times).
ScenarioRun simulate(const Scenario& scenario, std::shared_ptr<const PlacedStep> placed,
                     const PhaseCallback& phase = {});

} // namespace spansim::scenario
