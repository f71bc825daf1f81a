#include "cli/output.hpp"

#include "common/error.hpp"
#include "common/format.hpp"
#include "common/process.hpp"
#include "common/version.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <ostream>
#include <sstream>
#include <unistd.h>

namespace spansim::cli {

namespace {

int parse_int(const std::string& flag, const std::string& text, const std::string& what)
{
  int v        = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < 0)
    throw UsageError(flag + ": \"" + text + "\" is not an index (" + what + ")");
  return v;
}

} // namespace

std::vector<int> parse_index_list(const std::string& flag, const std::string& noun, const std::string& within,
                                  const std::string& text, std::int64_t count)
{
  auto check = [&](int g) {
    if (g >= count)
      throw UsageError(flag + ": " + noun + " " + std::to_string(g) + " is outside " + within + " (" + noun +
                       "s 0 to " + std::to_string(count - 1) + ")");
  };
  std::vector<int> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    auto comma       = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    auto dash        = item.find('-');
    if (dash == std::string::npos) {
      out.push_back(parse_int(flag, item, "write e.g. 0,8,16 or 0-7"));
      check(out.back());
    } else {
      int a = parse_int(flag, item.substr(0, dash), "range start");
      int b = parse_int(flag, item.substr(dash + 1), "range end");
      if (b < a)
        throw UsageError(flag + ": empty range \"" + item + "\"");
      check(b);
      for (int g = a; g <= b; ++g)
        out.push_back(g);
    }
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  return out;
}

void print_table(std::ostream& out, const Table& raw)
{
  // Cells echo names from input files (worker, region and op names): a control character is shown escaped, never
  // sent to the terminal.
  Table table{escape_controls(raw.title), {}, {}};
  for (const auto& h : raw.headers)
    table.headers.push_back(escape_controls(h));
  for (const auto& row : raw.rows) {
    table.rows.emplace_back();
    for (const auto& cell : row)
      table.rows.back().push_back(escape_controls(cell));
  }
  std::vector<std::size_t> width(table.headers.size(), 0);
  for (std::size_t c = 0; c < table.headers.size(); ++c)
    width[c] = table.headers[c].size();
  for (const auto& row : table.rows)
    for (std::size_t c = 0; c < row.size() && c < width.size(); ++c)
      width[c] = std::max(width[c], row[c].size());
  if (!table.title.empty())
    out << table.title << "\n";
  auto line = [&](const std::vector<std::string>& cells) {
    for (std::size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      std::string pad(width[c] - std::min(width[c], cell.size()), ' ');
      // First column left-aligned (names), the others right-aligned (numbers).
      out << (c == 0 ? cell + pad : pad + cell) << (c + 1 < width.size() ? "  " : "\n");
    }
  };
  line(table.headers);
  std::size_t total = 0;
  for (auto w : width)
    total += w + 2;
  out << std::string(total > 2 ? total - 2 : 0, '-') << "\n";
  for (const auto& row : table.rows)
    line(row);
}

CLI::Validator integer_in(long long min, long long max)
{
  const std::string range = max == std::numeric_limits<int>::max() ? "at least " + std::to_string(min)
                                                                   : std::to_string(min) + " to " + std::to_string(max);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        long long v  = 0;
        auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || p != text.data() + text.size() || v < min || v > max)
          return "\"" + text + "\" is not an integer in range (allowed: " + range + ")";
        return {};
      },
      "INT in " + range, "integer_in");
}

CLI::Validator finite_number(double min, bool strict)
{
  std::ostringstream os;
  os << (strict ? "greater than " : "at least ") << min;
  const std::string range = os.str();
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double v     = 0;
        auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || p != text.data() + text.size() || !std::isfinite(v) || v < min || (strict && v == min))
          return "\"" + text + "\" is not a finite number " + range;
        return {};
      },
      "NUMBER " + range, "finite_number");
}

std::string fmt(double value, int digits)
{
  return format_significant(value, digits);
}

std::string fixed(double value, int decimals)
{
  return format_fixed(value, decimals);
}

std::string percent(double fraction, bool sign)
{
  return (sign && fraction >= 0 ? "+" : "") + fixed(100 * fraction, 1) + "%";
}

bool stderr_is_terminal()
{
  return isatty(STDERR_FILENO) != 0;
}

void run_plot_script(const std::vector<std::string>& argv)
{
  const auto r = process::run_program(argv, process::Capture::errors);
  if (r.exit_code == 0) {
    std::cerr << r.captured << std::flush;
    return;
  }
  std::string why;
  if (auto end = r.captured.find_last_not_of(" \n\r\t"); end != std::string::npos) {
    const auto start = r.captured.rfind('\n', end);
    why              = r.captured.substr(start == std::string::npos ? 0 : start + 1,
                            end - (start == std::string::npos ? 0 : start + 1) + 1);
  }
  throw UsageError("plotting failed (" + argv.at(1) + ", exit status " + std::to_string(r.exit_code) +
                   "): " + (why.empty() ? "no message" : why));
}

void draw_progress_line(const std::string& phase, std::size_t done, std::size_t total, const std::string& tail)
{
  const std::size_t width = 30;
  const std::size_t full  = total > 0 ? width * std::min(done, total) / total : width;
  std::cerr << "\r\033[K" << phase << " [" << std::string(full, '#') << std::string(width - full, ' ') << "] " << done
            << "/" << total << (tail.empty() ? "" : " " + tail) << std::flush;
  if (done >= total)
    std::cerr << "\r\033[K" << std::flush;
}

ProgressBar progress_bar(bool show)
{
  if (!show)
    return {};
  return [](const std::string& phase, std::size_t done, std::size_t total) { draw_progress_line(phase, done, total); };
}

} // namespace spansim::cli
