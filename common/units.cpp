#include "common/units.hpp"

#include "common/error.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <utility>

namespace spansim::units {

namespace {

struct Unit {
  std::string_view suffix;
  double factor;
};

// Longest suffixes first so that "Gbps" is not read as "bps" with a "G" number tail.
constexpr std::array kBandwidthUnits{Unit{"Pbps", 1e15 / 8},      Unit{"Tbps", 1e12 / 8},  Unit{"Gbps", 1e9 / 8},
                                     Unit{"Mbps", 1e6 / 8},       Unit{"Kbps", 1e3 / 8},   Unit{"kbps", 1e3 / 8},
                                     Unit{"bps", 1.0 / 8},        Unit{"PB/s", 1e15},      Unit{"TB/s", 1e12},
                                     Unit{"GB/s", 1e9},           Unit{"MB/s", 1e6},       Unit{"KB/s", 1e3},
                                     Unit{"kB/s", 1e3},           Unit{"B/s", 1.0},        Unit{"PBps", 1e15},
                                     Unit{"TBps", 1e12},          Unit{"GBps", 1e9},       Unit{"MBps", 1e6},
                                     Unit{"KBps", 1e3},           Unit{"kBps", 1e3},       Unit{"Bps", 1.0},
                                     Unit{"GiB/s", 1073741824.0}, Unit{"MiB/s", 1048576.0}};
// Microseconds also as the micro sign's "µs" and Greek mu's "μs" (UTF-8), as tools print them.
constexpr std::array kTimeUnits{Unit{"ns", 1e-9},      Unit{"us", 1e-6},  Unit{"\u00b5s", 1e-6},
                                Unit{"\u03bcs", 1e-6}, Unit{"ms", 1e-3},  Unit{"s", 1.0},
                                Unit{"min", 60.0},     Unit{"h", 3600.0}, Unit{"d", 86400.0}};
constexpr std::array kSizeUnits{Unit{"KiB", 1024.0},
                                Unit{"MiB", 1048576.0},
                                Unit{"GiB", 1073741824.0},
                                Unit{"TiB", 1099511627776.0},
                                Unit{"PiB", 1125899906842624.0},
                                Unit{"EiB", 1152921504606846976.0},
                                Unit{"kB", 1e3},
                                Unit{"KB", 1e3},
                                Unit{"MB", 1e6},
                                Unit{"GB", 1e9},
                                Unit{"TB", 1e12},
                                Unit{"PB", 1e15},
                                Unit{"EB", 1e18},
                                Unit{"B", 1.0}};
constexpr std::array kDistanceUnits{Unit{"km", 1e3}, Unit{"m", 1.0}};
constexpr std::array kFlopRateUnits{Unit{"PFLOPs", 1e15},  Unit{"TFLOPs", 1e12},  Unit{"GFLOPs", 1e9},
                                    Unit{"PFLOP/s", 1e15}, Unit{"TFLOP/s", 1e12}, Unit{"GFLOP/s", 1e9},
                                    Unit{"FLOP/s", 1.0},   Unit{"FLOPs", 1.0}};

template <std::size_t N>
std::string list_units(const std::array<Unit, N>& units)
{
  std::string out;
  for (const auto& u : units) {
    if (!out.empty())
      out += ", ";
    out += u.suffix;
  }
  return out;
}

// The largest value of each kind of quantity, in base units: far beyond anything physical, small enough that
// sums and products of them stay finite.
struct Kind {
  const char* what;
  const char* example;
  double max;
  const char* max_text;
};
constexpr Kind kBandwidth{"bandwidth", "400Gbps", kMaxBandwidth, "1 Ebps"};
constexpr Kind kTime{"time", "5us", kMaxTime, "1e10 s (about 317 years)"};
constexpr Kind kSize{"size", "80GiB", kMaxSize, "1 EiB"};
constexpr Kind kDistance{"distance", "120km", kMaxDistance, "40075 km (the Earth's circumference)"};
constexpr Kind kFlopRate{"FLOP rate", "989TFLOPs", kMaxFlopRate, "1e19 FLOP/s"};

template <std::size_t N>
double parse_with(std::string_view text, const std::array<Unit, N>& units, const Kind& kind)
{
  std::string_view trimmed = text;
  while (!trimmed.empty() && trimmed.front() == ' ')
    trimmed.remove_prefix(1);
  while (!trimmed.empty() && trimmed.back() == ' ')
    trimmed.remove_suffix(1);

  // Pick the longest matching suffix: the table order alone cannot tell "GiB/s" from "B/s".
  const Unit* best = nullptr;
  for (const auto& u : units)
    if (trimmed.size() > u.suffix.size() && trimmed.ends_with(u.suffix) &&
        (best == nullptr || u.suffix.size() > best->suffix.size()))
      best = &u;
  auto fail = [&](const std::string& why) -> double {
    throw UsageError("invalid " + std::string(kind.what) + " \"" + std::string(text) + "\": " + why +
                     " (write e.g. \"" + kind.example + "\"; units: " + list_units(units) + ")");
  };
  if (best == nullptr)
    return fail("missing or unknown unit");
  std::string_view number = trimmed.substr(0, trimmed.size() - best->suffix.size());
  while (!number.empty() && number.back() == ' ')
    number.remove_suffix(1);
  double value   = 0;
  auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec == std::errc::result_out_of_range)
    return fail(std::string("out of range (at most ") + kind.max_text + ")");
  if (ec != std::errc() || ptr != number.data() + number.size()) {
    // A number followed by letters the unit did not take ("1Xs"): the unit is what is wrong.
    if (ec == std::errc() && ptr != number.data() && std::isalpha(static_cast<unsigned char>(*ptr)))
      return fail("unknown unit \"" + std::string(trimmed.substr(static_cast<std::size_t>(ptr - number.data()))) +
                  "\"");
    return fail("not a number");
  }
  if (!std::isfinite(value) || value < 0)
    return fail("must be a finite, non-negative number");
  const double scaled = value * best->factor;
  if (!std::isfinite(scaled) || scaled > kind.max)
    return fail(std::string("out of range (at most ") + kind.max_text + ")");
  return scaled;
}

std::string format_scaled(double value, const std::array<std::pair<double, const char*>, 6>& scale)
{
  for (const auto& [factor, name] : scale) {
    if (std::fabs(value) >= factor) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.4g %s", value / factor, name);
      return buf;
    }
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g %s", value / scale.back().first, scale.back().second);
  return buf;
}

} // namespace

double parse_bandwidth(std::string_view text)
{
  return parse_with(text, kBandwidthUnits, kBandwidth);
}
double parse_time(std::string_view text)
{
  return parse_with(text, kTimeUnits, kTime);
}
double parse_size(std::string_view text)
{
  return parse_with(text, kSizeUnits, kSize);
}
double parse_distance(std::string_view text)
{
  return parse_with(text, kDistanceUnits, kDistance);
}

double parse_flop_rate(std::string_view text)
{
  return parse_with(text, kFlopRateUnits, kFlopRate);
}

std::string format_bandwidth(double bytes_per_second)
{
  return format_scaled(bytes_per_second * 8,
                       {{{1e15, "Pbps"}, {1e12, "Tbps"}, {1e9, "Gbps"}, {1e6, "Mbps"}, {1e3, "Kbps"}, {1.0, "bps"}}});
}
std::string format_time(double seconds)
{
  return format_scaled(seconds, {{{3600.0, "h"}, {60.0, "min"}, {1.0, "s"}, {1e-3, "ms"}, {1e-6, "us"}, {1e-9, "ns"}}});
}
std::string format_size(double bytes)
{
  return format_scaled(
      bytes,
      {{{1099511627776.0, "TiB"}, {1073741824.0, "GiB"}, {1048576.0, "MiB"}, {1024.0, "KiB"}, {1.0, "B"}, {1.0, "B"}}});
}
std::string format_distance(double meters)
{
  return format_scaled(meters, {{{1e3, "km"}, {1.0, "m"}, {1e-3, "mm"}, {1e-3, "mm"}, {1e-3, "mm"}, {1e-3, "mm"}}});
}

} // namespace spansim::units
