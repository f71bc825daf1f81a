#pragma once
/// @file
/// @brief Campaigns: a base scenario and sweep axes, expanded into points (effective scenarios) to simulate.
///
/// An axis edits one scenario field, or several zipped fields, by path ("topology.inter_region.bandwidth",
/// "placement.order", "topology.regions.0.buildings" or a JSON pointer "/job/gpus"). Axes combine as a Cartesian
/// product, the first axis outermost; every point runs `repetitions` times with seeds seed, seed+1, ...

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace spansim::experiments {

/// @brief One scenario field an axis sets, with a value per axis step.
struct AxisField {
  std::string path;      ///< as written in the campaign
  std::string json_path; ///< where `path` is written ("$.axes[0].path"): errors about the field point there
  nlohmann::json::json_pointer pointer;
  std::vector<nlohmann::json> values;
};

/// @brief A sweep axis: one field, or several fields zipped together (stepping in lock-step).
struct Axis {
  std::string name;
  std::vector<AxisField> fields;
  std::vector<std::string> labels; ///< one per step: given, or the field's value as text
  bool numeric = false;            ///< every step has a plain number (the table column is then numeric)
  std::vector<double> numbers;     ///< the numbers when `numeric`: given, the value, or the magnitude of "400Gbps"
  std::string unit;                ///< of `numbers`: given, or the unit the values are written in ("Gbps")
  std::size_t size() const { return labels.size(); }
};

/// @brief What each point records besides the summary metrics.
struct RecordOptions {
  bool links  = false; ///< bytes per link and direction, with link names, tiers and capacities
  bool stages = true;  ///< the breakdown per pipeline stage (every rank of a stage runs the same program)
  bool ranks  = false; ///< per rank: GPU, coordinates and its stage's breakdown
};

/// @brief A parsed campaign file.
struct Campaign {
  std::string name;
  std::string description;
  std::string file;                     ///< the campaign file (absolute)
  nlohmann::json base;                  ///< the base scenario, with topology and job inlined where an axis edits them
  std::string scenario_file;            ///< anchors the base scenario's relative paths (absolute)
  std::string scenario_json_path = "$"; ///< where the base scenario sits in scenario_file ("$.scenario" inline)
  std::vector<Axis> axes;
  int repetitions    = 1;
  std::uint32_t seed = 1;
  RecordOptions record;
  std::string output;      ///< HDF5 result path (relative to the working directory unless absolute)
  nlohmann::json document; ///< the campaign file as written
};

/// @brief One point of a campaign: an effective scenario and where it sits on the axes.
struct Point {
  int index          = 0; ///< position in expansion order (rows of the result table follow it)
  int repetition     = 0;
  std::uint32_t seed = 1;
  std::vector<std::size_t> steps; ///< step per axis
  nlohmann::json scenario;        ///< the effective scenario JSON
  std::string key;                ///< content hash of scenario, seed and repetition: names the point's result file
};

/// @brief Reads a campaign file. @throws SpecError naming the file and JSON path.
Campaign load_campaign(const std::string& path);
/// @brief Reads a campaign given as JSON; `file` names it in errors and anchors relative paths.
Campaign parse_campaign(const nlohmann::json& document, const std::string& file);

/// @brief All points, in order: the Cartesian product of the axes (first axis outermost), then repetitions.
/// Every point's scenario is checked by parsing it. @throws SpecError naming the point and the field.
std::vector<Point> expand(const Campaign& campaign);

/// @brief Sets a field by a campaign path on a JSON document. @throws SpecError if the path does not exist
/// (only the last member may be new, so typos in the middle of a path are caught).
void set_field(nlohmann::json& document, const AxisField& field, const nlohmann::json& value, const std::string& file);

} // namespace spansim::experiments
