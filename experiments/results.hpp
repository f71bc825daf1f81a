#pragma once
/// @file
/// @brief Campaign results: one JSON record per finished point, gathered into an HDF5 table and a CSV summary.
///
/// HDF5 layout (readable with h5py; `pandas.DataFrame({k: f["points"][k][()] for k in f["points"]})`):
///   /                  attributes: format, campaign, campaign_file, campaign_json, spansim_version, git_hash,
///                      points_total, points_done
///   /points/COLUMN     one 1-D dataset per column, a row per finished point in expansion order: index,
///                      repetition, seed, key, status, error, axis.NAME (float64 when numeric, with a "unit"
///                      attribute; else text), label.NAME, metrics, breakdown parts (PART_mean_s, PART_max_s),
///                      bytes per tier, scenario and configuration (JSON text), spansim_version, git_hash, elapsed_s
///   /stages/KEY/COL    per pipeline stage breakdown of point KEY (when recorded)
///   /ranks/KEY/COL     per rank: gpu, tp, cp, pp, dp and its stage's breakdown (when recorded)
///   /links/KEY/...     name, tier, capacity_Bps [L], bytes [L x 2] (forward a->b, backward) of point KEY (when
///   recorded)

#include "experiments/campaign.hpp"
#include "netsim/step.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <map>
#include <string>
#include <vector>

namespace spansim::experiments {

/// @brief Finished points by key: the JSON records the point processes wrote.
using ResultMap = std::map<std::string, nlohmann::json>;

/// @brief The breakdown columns of one pipeline stage, one per part of netsim::kParts ("compute_s",
/// "exposed_tp_s", ..., "idle_s"): the per-stage and per-rank records and tables use these names.
const std::vector<std::string>& stage_columns();

/// @brief The scalar columns of the points table, in order (after the axis columns).
const std::vector<std::string>& metric_columns();

/// @brief Writes the HDF5 table of the `points` that have a result, to a temporary file renamed over `path`
/// once complete and synced: a reader (or a kill) sees the old file or the new one, never a torn one.
void write_results_hdf5(const Campaign& campaign, const std::vector<Point>& points, const ResultMap& results,
                        const std::string& path);
/// @brief The summary CSV (one row per finished point: axes, metrics, breakdown), written the same way.
void write_results_csv(const Campaign& campaign, const std::vector<Point>& points, const ResultMap& results,
                       const std::string& path);

/// @brief The /points table of a result file, as read back (for tests and merges).
struct ResultTable {
  std::map<std::string, std::vector<double>> numbers;    ///< numeric columns
  std::map<std::string, std::vector<std::string>> texts; ///< text columns
  std::map<std::string, std::string> attributes;         ///< root attributes (numbers as text)
  std::map<std::string, std::string> units;              ///< numeric axis columns' "unit" attributes
  std::size_t rows = 0;
};

/// @brief Whether a point record read from disk has everything the result writers read from it, with the
/// right types, and belongs to the point `key`. Records failing this are treated as missing (the point runs again).
bool usable_record(const nlohmann::json& record, const std::string& key);

/// @brief Reads the /points table of a campaign result file. @throws Error if it is not one.
ResultTable read_results_hdf5(const std::string& path);

} // namespace spansim::experiments
