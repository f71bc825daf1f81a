#pragma once
/// @file
/// @brief How commands print: one JSON document with --json, otherwise readable tables.

#include "common/version.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace spansim::cli {

/// @brief A plain text table with right-aligned numeric columns.
struct Table {
  std::string title;
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
};

/// @brief Prints a table with aligned columns.
void print_table(std::ostream& out, const Table& table);

using spansim::provenance;

/// @brief Formats a double with `digits` significant digits.
std::string fmt(double value, int digits = 4);
/// @brief Formats a double with `decimals` digits after the point.
std::string fixed(double value, int decimals);
/// @brief A fraction as a percentage with one decimal ("12.5%"); `sign`: a leading "+" on positive values.
std::string percent(double fraction, bool sign = false);

/// @brief A flag check: an integer in [min, max]; the message names the range as a spec error would.
CLI::Validator integer_in(long long min, long long max);

/// @brief Indices such as "0,8,16" or "0-7,64-71", each checked against `count` before anything grows: errors say
/// "FLAG: NOUN 99 is outside WITHIN (NOUNs 0 to count-1)". @throws UsageError.
std::vector<int> parse_index_list(const std::string& flag, const std::string& noun, const std::string& within,
                                  const std::string& text, std::int64_t count);
/// @brief A flag check: a finite number of at least `min` (greater than `min` when `strict`).
CLI::Validator finite_number(double min, bool strict = false);

/// @brief Whether stderr is a terminal (progress bars only go there).
bool stderr_is_terminal();

/// @brief Runs a plotting script (argv[1]) with its stderr collected: passed on when it succeeds, and its last line
/// (the one-line message the scripts exit with) in a UsageError when it fails.
void run_plot_script(const std::vector<std::string>& argv);

/// @brief Reports progress: phase, items done, items in all.
using ProgressBar = std::function<void(const std::string&, std::size_t, std::size_t)>;
/// @brief A bar on stderr when `show` (a terminal, no --json); nothing otherwise.
ProgressBar progress_bar(bool show);
/// @brief Draws one progress line on stderr: `phase`, a bar, done/total and `tail` (rates, counts); cleared when
/// done reaches total.
void draw_progress_line(const std::string& phase, std::size_t done, std::size_t total, const std::string& tail = "");

} // namespace spansim::cli
