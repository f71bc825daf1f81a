#pragma once
/// @file
/// @brief What every spansim page shares: its styles, the script that records errors, and the data inline.

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace spansim::report {

/// @brief The pages' styles and the script that shows any script error in #errors (and window.spansimErrors).
extern const std::string_view kPageStyle;

/// @brief `data` as the text of a <script type="application/json">: "</" written as "<\/", which JSON reads as the
/// same string, so that no value ends the element.
std::string inline_json(const nlohmann::json& data);

} // namespace spansim::report
