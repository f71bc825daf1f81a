#pragma once
/// @file
/// @brief The spansim version and the git commit it was built from, written into every result.

#include <nlohmann/json.hpp>

namespace spansim {

/// @brief Semantic version of spansim, e.g. "0.1.0".
const char* version();
/// @brief Git commit hash of the source tree at build time ("-dirty" appended when modified; "unknown" outside git).
const char* git_hash();
/// @brief The provenance block every result carries: {"tool": "spansim", "version", "git_hash"}.
nlohmann::json provenance();

} // namespace spansim
