#pragma once
// A job placed on a topology, built as the step tests build it (tests/netsim, tests/scenario).

#include "netsim/step.hpp"
#include "placement/placement.hpp"
#include "topology/topology.hpp"
#include "workload/workload.hpp"

#include <string>
#include <vector>

namespace spansim::test {

/// @brief Rank order (innermost first) with DP outermost: DP groups span the buildings placed on.
inline const std::vector<workload::Dim> kDpOutermost{workload::Dim::tp, workload::Dim::cp, workload::Dim::pp,
                                                     workload::Dim::dp};
/// @brief Rank order (innermost first) with PP outermost: consecutive stages in consecutive buildings.
inline const std::vector<workload::Dim> kPpOutermost{workload::Dim::tp, workload::Dim::cp, workload::Dim::dp,
                                                     workload::Dim::pp};

/// @brief A topology, a job on it, the job's step graph and its placement, built once. Not copied or moved: the
/// placement refers to the topology and the job.
struct PlacedStep {
  PlacedStep(topology::Topology site, workload::JobSpec job_spec, const placement::PlacementSpec& placement)
      : topo(std::move(site)), job(std::move(job_spec)), graph(workload::build_step_graph(job)),
        place(topo, job, placement)
  {
  }
  /// @brief On a topology preset or file.
  PlacedStep(const std::string& site, workload::JobSpec job_spec, const placement::PlacementSpec& placement)
      : PlacedStep(topology::Topology(topology::load_topology_spec(site)), std::move(job_spec), placement)
  {
  }
  PlacedStep(const PlacedStep&)            = delete;
  PlacedStep& operator=(const PlacedStep&) = delete;

  /// @brief The step simulated with `options`.
  netsim::StepResult simulate(const netsim::StepOptions& options) const
  {
    return netsim::simulate_step(topo, graph, place, options);
  }

  topology::Topology topo;
  workload::JobSpec job;
  workload::StepGraph graph;
  placement::Placement place;
};

} // namespace spansim::test
