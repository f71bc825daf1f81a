#include "cli/output.hpp"

#include "common/version.hpp"

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <unistd.h>

namespace spansim::cli {

void print_table(std::ostream& out, const Table& table)
{
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

nlohmann::json provenance()
{
  return {{"tool", "spansim"}, {"version", version()}, {"git_hash", git_hash()}};
}

std::string fmt(double value, int digits)
{
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, value);
  return buf;
}

std::string fixed(double value, int decimals)
{
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

bool stderr_is_terminal()
{
  return isatty(STDERR_FILENO) != 0;
}

} // namespace spansim::cli
