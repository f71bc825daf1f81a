// What a GPU's kernels reach: a GEMM's time under the tile and wave model at the measured ceilings, a GEMM
// library's published grouped-GEMM rates, the quantization rates, and attention rates over sequence length.
#include "workload/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace spansim::workload {

using detail::kBf16;
using detail::kFp32;

GemmCost gemm_cost(const GpuSpec& gpu, Precision precision, const GemmShape& shape, double clock_fraction,
                   Fp8Recipe recipe)
{
  const GemmFormat format = gpu.runs_as(precision, recipe);
  const double peak       = gpu.peak(format.precision);
  const double ceiling    = gpu.gemm.ceiling(format.precision, format.recipe);
  const double in_bytes   = detail::input_bytes(format.precision);
  const double groups     = shape.groups;
  GemmCost cost;
  cost.flops = 2 * shape.m * shape.n * shape.k * groups;
  if (!(cost.flops > 0))
    return cost;
  // One output tile per SM per wave: a partial tile or a partly filled last wave costs a whole one, and K advances
  // tile_k at a time. When the output tiles cannot fill the SMs the library may split K across them (split-K):
  // each slice writes a partial fp32 tile that a reduction reads back. The library picks the kernel per GEMM, so
  // the fastest tiling and split count.
  const double tk          = gpu.gemm.tile_k;
  const double steps       = std::ceil(shape.k / tk);
  const double sms         = gpu.gemm.sms;
  const double mem_rate    = gpu.hbm_bandwidth * gpu.elementwise_efficiency;
  const double c_out       = shape.accumulate_bytes > 0 ? 2 * shape.accumulate_bytes : kBf16;
  const double plain_bytes = groups * ((shape.m + shape.n) * shape.k * in_bytes + shape.m * shape.n * c_out);
  cost.seconds             = std::numeric_limits<double>::infinity();
  for (const auto& [tm, tn] : gpu.gemm.tiles) {
    const double tiles = groups * std::ceil(shape.m / tm) * std::ceil(shape.n / tn);
    for (double split : {1.0, tiles < sms ? std::min(std::floor(sms / tiles), steps) : 1.0}) {
      const double waves        = std::ceil(tiles * split / sms);
      const double quantization = cost.flops / (2 * waves * sms * tm * tn * std::ceil(steps / split) * tk);
      const double efficiency   = ceiling / peak * quantization;
      const double bytes        = plain_bytes + (split > 1 ? split * 2 * kFp32 * shape.m * shape.n * groups : 0);
      const double seconds      = std::max(cost.flops / (peak * efficiency * clock_fraction), bytes / mem_rate);
      if (seconds < cost.seconds) {
        cost.seconds    = seconds;
        cost.efficiency = efficiency;
        cost.bytes      = bytes;
      }
    }
  }
  return cost;
}

double GemmSpec::ceiling(Precision p, Fp8Recipe r) const
{
  if (p == Precision::fp8 && r == Fp8Recipe::blockwise && ceiling_fp8_blockwise > 0)
    return ceiling_fp8_blockwise;
  return detail::PerPrecision{.bf16 = ceiling_bf16, .fp8 = ceiling_fp8, .mxfp8 = ceiling_mxfp8, .nvfp4 = ceiling_nvfp4}
      .of(p);
}

double GpuSpec::quantize_rate(Precision p, Fp8Recipe r) const
{
  if (p == Precision::bf16)
    return 0;
  const double given = quantize_efficiency[static_cast<std::size_t>(quantize_format(runs_as(p, r)))];
  return hbm_bandwidth * (given > 0 ? given : elementwise_efficiency);
}

GemmFormat GpuSpec::runs_as(Precision p, Fp8Recipe r) const
{
  // TE's fp8_blockwise_scaling.rst, "Supported devices": on SM 10.0 and later "the recipe is emulated with MXFP8".
  if (p == Precision::fp8 && r == Fp8Recipe::blockwise && peak_mxfp8_flops > 0 && !(gemm.ceiling_fp8_blockwise > 0))
    return {.precision = Precision::mxfp8};
  return {.precision = p, .recipe = r};
}

double GpuSpec::peak(Precision p) const
{
  return detail::PerPrecision{
      .bf16 = peak_bf16_flops, .fp8 = peak_fp8_flops, .mxfp8 = peak_mxfp8_flops, .nvfp4 = peak_nvfp4_flops}
      .of(p);
}

std::string GpuSpec::precisions() const
{
  std::string out;
  for (auto p : enum_values<Precision>())
    if (peak(p) > 0)
      out += (out.empty() ? "" : ", ") + std::string(name_of(p));
  return out;
}

namespace {

// Linear in x between the points (x, y), sorted by x; held flat beyond the ends.
double piecewise(std::vector<std::pair<double, double>> points, double x)
{
  std::sort(points.begin(), points.end());
  if (x <= points.front().first)
    return points.front().second;
  if (x >= points.back().first)
    return points.back().second;
  std::size_t i = 1;
  while (points[i].first < x)
    ++i;
  const auto [x0, y0] = points[i - 1];
  const auto [x1, y1] = points[i];
  return x1 > x0 ? y0 + (x - x0) / (x1 - x0) * (y1 - y0) : y1;
}

} // namespace

double GroupedGemmRates::padded(double rows) const
{
  return std::ceil(rows / block_m) * block_m;
}

double GroupedGemmRates::rate(double rows, double k) const
{
  // Each published shape's curve over log2(rows), then the shapes' rates at these rows over log2(k): the reduction
  // depth is what separates the published shapes' rates (a short K loop leaves the kernel's fixed prologue and
  // epilogue a larger share); N only sets how many tiles the rows fill.
  std::map<std::pair<double, double>, std::vector<std::pair<double, double>>> shapes;
  for (const auto& p : points)
    shapes[{p.k, p.n}].emplace_back(std::log2(p.rows), p.full_wave > 0 ? p.full_wave : p.rate);
  std::vector<std::pair<double, double>> by_k;
  const double x = std::log2(padded(rows));
  for (const auto& [shape, curve] : shapes)
    by_k.emplace_back(std::log2(shape.first), piecewise(curve, x));
  return piecewise(by_k, std::log2(k));
}

void GroupedGemmRates::derive_full_wave(const GpuSpec& gpu)
{
  for (auto& p : points) {
    GpuSpec library          = gpu;
    library.gemm.ceiling_fp8 = library.gemm.ceiling_fp8_blockwise = p.rate;
    const GemmShape shape  = {.m = padded(p.rows), .n = p.n, .k = p.k, .groups = p.groups};
    const double modelled  = gemm_cost(library, Precision::fp8, shape, 1, Fp8Recipe::blockwise).seconds;
    const double published = 2 * p.groups * p.rows * p.n * p.k / p.rate;
    p.full_wave            = p.rate * modelled / published;
  }
}

double AttentionRates::rate(double s, bool backward) const
{
  const auto& curve = backward ? backward_by_length : forward_by_length;
  if (sequences.empty())
    return backward ? this->backward : forward;
  if (s <= sequences.front())
    return curve.front();
  if (s >= sequences.back())
    return curve.back();
  std::size_t i = 1;
  while (sequences[i] < s)
    ++i;
  const double x =
      (std::log2(s) - std::log2(sequences[i - 1])) / (std::log2(sequences[i]) - std::log2(sequences[i - 1]));
  return curve[i - 1] + x * (curve[i] - curve[i - 1]);
}

} // namespace spansim::workload
