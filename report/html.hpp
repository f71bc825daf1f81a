#pragma once
/// @file
/// @brief A result as one self-contained HTML page: the data inline as JSON, drawn as plain SVG by an inline script,
/// so that it opens offline with no server, no CDN and no library.

#include <nlohmann/json.hpp>

#include <string>

namespace spansim::report {

/// @brief Checks that `summary` is a run result this version draws (summary.json, or what `run --json` prints).
/// @throws SpecError naming `file`, the missing or mistyped key and what was expected.
void check_run_summary(const nlohmann::json& summary, const std::string& file);

/// @brief The page of a run result: the site with each tier and building boundary coloured by its utilization,
/// the step per pipeline stage, the configuration and provenance. @throws SpecError as check_run_summary.
std::string run_page(const nlohmann::json& summary, const std::string& file = "summary");

/// @brief The page of a search: the winner against the baselines as bars of where the time went, the ranked
/// table with each configuration's scenario, the capacity front. `result` is what `optimize --json` prints.
/// @throws SpecError when a key the page draws is missing.
std::string optimize_page(const nlohmann::json& result);

/// @brief The page of a validation: the MAPEs by section and role, each step row's error by GPU and section, and
/// the network rows' measured against simulated bus bandwidth. `result` is what `validate --json` prints.
/// @throws SpecError when it is not that.
std::string validate_page(const nlohmann::json& result);

/// @brief The page of a campaign result: step time against each numeric axis, each point's breakdown and the
/// points. `table` is the HDF5 file's /points table as {"file", "attributes", "rows", "numbers": {COLUMN: [...]},
/// "texts": {COLUMN: [...]}, "units": {COLUMN: UNIT}}. @throws SpecError when a key is missing.
std::string campaign_page(const nlohmann::json& table);

/// @brief Writes DIRECTORY/report.html from DIRECTORY/summary.json. @return the path written.
/// @throws SpecError when the folder holds no run result (one line, naming what is missing).
std::string write_report(const std::string& directory);

} // namespace spansim::report
