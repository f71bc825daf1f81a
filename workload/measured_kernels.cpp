// A user's measured kernel times: CSV tables of GEMMs by shape and of attention by sequence, heads and head width,
// read once and looked up by the cost model in place of its estimates.
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "workload/workload.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace spansim::workload {

namespace {

std::vector<std::string> split(const std::string& line)
{
  std::vector<std::string> cells;
  std::stringstream in(line);
  for (std::string cell; std::getline(in, cell, ',');) {
    const auto a = cell.find_first_not_of(" \t\r");
    const auto b = cell.find_last_not_of(" \t\r");
    cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
  }
  return cells;
}

// The data rows of a CSV table whose header must be `columns`: blank lines and lines starting with '#' skipped.
std::vector<std::pair<int, std::vector<std::string>>> read_table(const std::string& file,
                                                                 const std::vector<std::string>& columns)
{
  std::stringstream in(spec::load_text_file(file));
  std::vector<std::pair<int, std::vector<std::string>>> rows;
  bool header = false;
  int number  = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos || line.front() == '#')
      continue;
    auto cells = split(line);
    if (!header) {
      if (cells != columns) {
        std::string want;
        for (const auto& c : columns)
          want += (want.empty() ? "" : ",") + c;
        throw SpecError(file, "line " + std::to_string(number), "the header must be \"" + want + "\"");
      }
      header = true;
      continue;
    }
    if (cells.size() != columns.size())
      throw SpecError(file, "line " + std::to_string(number),
                      "expected " + std::to_string(columns.size()) + " values, found " + std::to_string(cells.size()));
    rows.emplace_back(number, std::move(cells));
  }
  if (rows.empty())
    throw SpecError(file, "", "no data rows");
  return rows;
}

double positive(const std::string& file, int line, const std::string& column, const std::string& text)
{
  double v        = 0;
  std::size_t end = 0;
  try {
    v = std::stod(text, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  if (end != text.size() || !std::isfinite(v) || !(v > 0))
    throw SpecError(file, "line " + std::to_string(line),
                    column + ": \"" + text + "\" is not a number greater than zero");
  return v;
}

// Interpolates an achieved rate at `q` from points (log2 coordinates, rate): a point at q gives its rate; else
// inverse-squared-distance weights. Nothing when q lies outside the points' range in some coordinate.
template <std::size_t N>
std::optional<double> interpolate(const std::vector<std::pair<std::array<double, N>, double>>& points,
                                  const std::array<double, N>& q)
{
  if (points.empty())
    return std::nullopt;
  for (std::size_t d = 0; d < N; ++d) {
    double lo = points.front().first[d], hi = lo;
    for (const auto& p : points) {
      lo = std::min(lo, p.first[d]);
      hi = std::max(hi, p.first[d]);
    }
    if (q[d] < lo - 1e-12 || q[d] > hi + 1e-12)
      return std::nullopt;
  }
  double weights = 0, sum = 0;
  for (const auto& [x, rate] : points) {
    double d2 = 0;
    for (std::size_t d = 0; d < N; ++d)
      d2 += (x[d] - q[d]) * (x[d] - q[d]);
    if (d2 < 1e-18)
      return rate;
    weights += 1 / d2;
    sum += rate / d2;
  }
  return sum / weights;
}

// FLOPs of one causal attention pass over one sequence in the FlashAttention papers' convention.
double attention_flops(bool backward, double s, double heads, double d)
{
  return (backward ? 2.5 : 1.0) * 2 * s * s * d * heads;
}

} // namespace

std::optional<double> MeasuredKernels::gemm_seconds(Precision dtype, double m, double n, double k) const
{
  std::vector<std::pair<std::array<double, 3>, double>> points;
  for (const auto& g : gemm)
    if (g.dtype == dtype)
      points.push_back({{std::log2(g.m), std::log2(g.n), std::log2(g.k)}, 2 * g.m * g.n * g.k / g.seconds});
  const auto rate = interpolate(points, {std::log2(m), std::log2(n), std::log2(k)});
  if (!rate)
    return std::nullopt;
  return 2 * m * n * k / *rate;
}

std::optional<double> MeasuredKernels::attention_seconds(bool backward, double sequence, double heads,
                                                         double head_dim) const
{
  std::vector<std::pair<std::array<double, 3>, double>> points;
  for (const auto& a : attention)
    if (a.backward == backward)
      points.push_back({{std::log2(a.sequence), std::log2(a.heads), std::log2(a.head_dim)},
                        attention_flops(backward, a.sequence, a.heads, a.head_dim) / a.seconds});
  const auto rate = interpolate(points, {std::log2(sequence), std::log2(heads), std::log2(head_dim)});
  if (!rate)
    return std::nullopt;
  return attention_flops(backward, sequence, heads, head_dim) / *rate;
}

MeasuredKernels read_measured_kernels(spec::ObjectReader r)
{
  MeasuredKernels out;
  auto file_of = [&](const char* key) {
    const std::string path = spec::referenced_path(r.string(key), r.where());
    spec::check_referenced_file(path, r.where().member(key));
    return path;
  };
  if (r.has("gemm")) {
    out.gemm_file = file_of("gemm");
    for (const auto& [line, c] : read_table(out.gemm_file, {"op", "m", "n", "k", "dtype", "seconds"})) {
      if (c[0] != "gemm")
        throw SpecError(out.gemm_file, "line " + std::to_string(line),
                        "op: unknown value \"" + c[0] + "\" (allowed: \"gemm\")");
      if (c[4] != "bf16" && c[4] != "fp8")
        throw SpecError(out.gemm_file, "line " + std::to_string(line),
                        "dtype: unknown value \"" + c[4] + "\" (allowed: \"bf16\", \"fp8\")");
      out.gemm.push_back({c[4] == "fp8" ? Precision::fp8 : Precision::bf16, positive(out.gemm_file, line, "m", c[1]),
                          positive(out.gemm_file, line, "n", c[2]), positive(out.gemm_file, line, "k", c[3]),
                          positive(out.gemm_file, line, "seconds", c[5])});
    }
  }
  if (r.has("attention")) {
    out.attention_file = file_of("attention");
    const auto& f      = out.attention_file;
    for (const auto& [line, c] : read_table(f, {"pass", "sequence", "heads", "head_dim", "seconds"})) {
      if (c[0] != "forward" && c[0] != "backward")
        throw SpecError(f, "line " + std::to_string(line),
                        "pass: unknown value \"" + c[0] + "\" (allowed: \"forward\", \"backward\")");
      out.attention.push_back({c[0] == "backward", positive(f, line, "sequence", c[1]),
                               positive(f, line, "heads", c[2]), positive(f, line, "head_dim", c[3]),
                               positive(f, line, "seconds", c[4])});
    }
  }
  r.finish();
  if (out.gemm.empty() && out.attention.empty())
    r.where().fail("name a \"gemm\" or an \"attention\" table");
  return out;
}

} // namespace spansim::workload
