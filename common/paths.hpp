#pragma once
/// @file
/// @brief Names taken from specs that become file or directory names: checked so that no spec can make spansim
/// write outside the output directory it was given.

#include <string>
#include <string_view>
#include <vector>

namespace spansim {

/// @brief Longest name accepted for a scenario, job, optimize spec or campaign.
inline constexpr std::size_t kMaxNameLength = 128;

/// @brief Whether `name` can be one path component: 1 to kMaxNameLength characters among letters, digits and
/// ". _ - +", not starting with '.' or '-' (so never ".", ".." or an option).
bool is_safe_name(std::string_view name);

/// @brief Why `name` is not safe, or empty when it is.
std::string unsafe_name_reason(std::string_view name);

/// @brief A safe name made from `text` (a file stem, say): unsafe characters become '_', cut to the maximum length.
std::string sanitized_name(std::string_view text);

/// @brief `directory`/`name`, after checking that `name` is one safe path component.
/// @throws UsageError if it is not (a bug or a spec that escaped validation).
std::string path_in(const std::string& directory, std::string_view name);

} // namespace spansim

namespace spansim {

/// @brief Writes `contents` to `path` under a temporary name and renames it over `path`: a reader sees the old file
/// or the new one, never a part, and a failed write leaves the old one. @throws UsageError if it cannot.
void write_file_replacing(const std::string& path, std::string_view contents);

/// @brief The stems of the `.json` files in `directory`, sorted (shipped presets, profiles, failure models); empty
/// when the directory cannot be read.
std::vector<std::string> json_names_in(const std::string& directory);
/// @brief The same joined with ", ", for error messages that list what is allowed.
std::string json_names_list(const std::string& directory);

} // namespace spansim
