#pragma once
/// @file
/// @brief Infrequent synchronization across regions (DiLoCo, local SGD): data-parallel replicas synchronize inside
/// their region every step (inner steps) and across regions every H steps (the outer step), optionally compressed
/// and overlapped with the next inner steps (streaming variants).
///
/// A network simulator measures only time: what fewer synchronizations cost in convergence (more steps to the same
/// loss) is outside it. Results are tokens per second of wall time, averaged over the H steps.

#include "netsim/compression.hpp"
#include "netsim/netsim.hpp"
#include "placement/placement.hpp"
#include "workload/workload.hpp"

#include <nlohmann/json.hpp>

#include <optional>

namespace spansim::spec {
class ObjectReader;
}

namespace spansim::sync {

/// @brief A scenario's `diloco` block.
struct DilocoSpec {
  int every = 1; ///< H: inner steps per outer step (1: every step, still through the outer path)
  /// @brief Inner steps the outer synchronization may run under (streaming DiLoCo); 0: the replicas wait for it.
  int overlap_steps = 0;
  /// @brief The pseudo-gradients' compression on the wire (its dimension and boundary are not used).
  std::optional<netsim::CompressionRule> compression;

  nlohmann::json to_json() const;
  /// @brief A short label, e.g. "H8" or "H32 overlap1 x4".
  std::string label() const;
  bool operator==(const DilocoSpec&) const = default;
};

/// @brief Reads a `diloco` block. @throws SpecError naming the key and the allowed values.
DilocoSpec read_diloco(spec::ObjectReader& r);

/// @brief One outer synchronization, simulated.
struct OuterSync {
  double seconds                = 0; ///< makespan of the outer synchronization alone
  double bytes_across_regions   = 0;
  double bytes_across_buildings = 0; ///< building boundaries, those between regions included
  int regions                   = 0; ///< regions a data-parallel group spans
  int members_per_region        = 0; ///< a data-parallel group's ranks in each region
  /// @brief Pseudo-gradient bytes a rank all-reduces with its counterparts (before compression), on the stage with
  /// the most parameters.
  double shard_bytes         = 0;
  double compression_seconds = 0; ///< GPU seconds of compressing and decompressing them, on that stage
  std::size_t transfers      = 0;
  nlohmann::json engine; ///< effective engine settings
};

/// @brief The outer synchronization of a placed step: every rank all-reduces its 1/m share of its stage's
/// pseudo-gradient (parameters x gradient bytes) with its counterparts, the ranks of the same index in the other
/// regions (a ring of one rank per region); without FSDP the replicas then all-gather the parameters inside each
/// region. All stages at once, at `fidelity` (hybrid runs at flow level).
/// @throws UsageError when a data-parallel group has different numbers of ranks in its regions.
OuterSync simulate_outer_sync(const topology::Topology& topology, const workload::StepGraph& graph,
                              const placement::Placement& placement, const DilocoSpec& spec, netsim::Fidelity fidelity,
                              const netsim::EngineOptions& engine);

/// @brief A step averaged over the H steps of one outer step.
struct DilocoResult {
  DilocoSpec spec;
  double inner_step = 0; ///< a step whose data parallelism stays inside each region
  OuterSync outer;
  double exposed_outer                 = 0; ///< outer seconds the replicas wait for: max(0, outer - overlap x inner)
  double mean_step                     = 0; ///< inner + exposed_outer / H
  double tokens_per_second             = 0; ///< per mean step
  double bytes_across_regions_per_step = 0; ///< outer bytes / H (inner steps move none)

  nlohmann::json to_json() const;
};

/// @brief The step averaged over H: inner + max(0, outer - overlap_steps x inner) / H.
DilocoResult average(const DilocoSpec& spec, double inner_step, const OuterSync& outer, double tokens_per_step);

} // namespace spansim::sync
