#pragma once
/// @file
/// @brief The reporting stage: what a simulated scenario tells, as typed tables (network use, breakdown over
/// stages) and as files: the JSON summary, the per-chunk CSV and the Perfetto trace. Nothing here simulates.

#include "scenario/scenario.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <string>
#include <vector>

namespace spansim::report {

/// @brief Bytes and mean utilisation of one tier's links that the step used.
struct TierUse {
  topology::Tier tier     = topology::Tier::nvlink;
  double bytes            = 0; ///< both directions, every link of the tier
  int links_used          = 0;
  double mean_utilisation = 0; ///< bytes over (capacity of the used links x step time)
};

/// @brief Traffic across one building's boundary.
struct BoundaryUse {
  std::string kind; ///< "building"
  std::string name;
  double bytes_out            = 0;
  double bytes_in             = 0;
  double mean_utilisation_out = 0;
};

/// @brief A group of parallel links (wavelengths between two buildings): bytes on the busiest against the mean,
/// both directions together.
struct ParallelUse {
  std::string ends; ///< "a -- b"
  int links         = 0;
  double max_bytes  = 0;
  double mean_bytes = 0;
  double imbalance() const { return mean_bytes > 0 ? max_bytes / mean_bytes : 1; }
};

/// @brief One direction of one link.
struct LinkUse {
  std::string link; ///< "a -> b"
  topology::Tier tier = topology::Tier::nvlink;
  double bytes        = 0;
  double utilisation  = 0; ///< mean over the step
};

/// @brief One boundary link's utilisation over the step, in equal bins.
struct LinkSeries {
  std::string link;
  topology::Tier tier = topology::Tier::nvlink;
  double bin_seconds  = 0;
  std::vector<double> utilisation;
};

/// @brief How the step used the network.
struct NetworkReport {
  std::vector<TierUse> tiers;          ///< tiers with used links, in tier order
  std::vector<BoundaryUse> boundaries; ///< one per building (multi-building topologies)
  /// @brief Groups of parallel links (the same two ends), then the ten most uneven leaves' uplinks over explicit
  /// spines: how evenly ECMP spread the bytes.
  std::vector<ParallelUse> parallel;
  std::vector<LinkUse> busiest;         ///< the ten busiest scale-out and boundary link directions
  std::vector<LinkUse> busiest_nvlinks; ///< the ten busiest NVLink directions
  std::vector<LinkSeries> over_time;    ///< links across buildings and regions, 50 bins
};

/// @brief The network use of a run.
NetworkReport network_report(const scenario::ScenarioRun& run);

/// @brief Mean and maximum of one breakdown part over the pipeline stages.
struct PartStats {
  double mean = 0;
  double max  = 0;
};
/// @brief Each part of the breakdown over the stages, in netsim::kParts order, and the exposed total.
struct BreakdownStats {
  std::array<PartStats, netsim::kParts.size()> parts{};
  PartStats exposed_total;
  /// @brief The stats of one part.
  const PartStats& operator[](netsim::Part p) const { return parts[static_cast<std::size_t>(p)]; }
};
/// @brief The breakdown of `result` over its stages.
BreakdownStats breakdown_stats(const netsim::StepResult& result);

/// @brief What each production effect adds to a stage's compute, in seconds per step, mean over the stages.
workload::OpEffects effect_seconds(const scenario::ScenarioRun& run);

/// @brief What the summary JSON holds beyond its core (configuration, metrics, breakdown, network, placement).
struct SummaryOptions {
  bool stages    = true; ///< the breakdown of every stage
  bool over_time = true; ///< boundary links' utilisation over time
  bool timeline  = true; ///< the first pipeline stage's ops with their times (the page's micro-batch timeline)
};

/// @brief The JSON summary of a run: provenance (version, git hash), the effective configuration, metrics,
/// breakdown, network use and boundary crossings.
nlohmann::json summary_json(const scenario::ScenarioRun& run, const SummaryOptions& options = {});

/// @brief The breakdown per model chunk as CSV (the text of layers.csv).
std::string layers_csv(const scenario::ScenarioRun& run);

/// @brief Writes summary.json, layers.csv (per model chunk) and trace.json (Perfetto) into `directory`.
/// @return the paths written.
std::vector<std::string> write_outputs(const scenario::ScenarioRun& run, const std::string& directory);

} // namespace spansim::report
