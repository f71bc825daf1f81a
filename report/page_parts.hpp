#pragma once
/// @file
/// @brief What every spansim page shares: its styles, the script that records errors, and the data inline.

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace spansim::report {

/// @brief The pages' styles and the script that shows any script error in #errors (and window.spansimErrors).
extern const std::string_view kPageStyle;

/// @brief A whole page: `title`, the shared styles and helpers (el, html, fig, finished, seconds, bytes, colour), the
/// shared head of the body (#errors, #title, #provenance, #headline), `body` (the page's elements; ends by opening
/// `<script type="application/json" id="data">`), `data` inline, then `script` (closes that element, draws, and
/// calls finished()).
std::string assemble_page(std::string_view title, std::string_view body, const nlohmann::json& data,
                          std::string_view script);

} // namespace spansim::report
