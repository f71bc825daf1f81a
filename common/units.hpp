#pragma once
/// @file
/// @brief Quantities with units at the boundary ("400Gbps", "5us", "80GiB", "120km"); inside, SI doubles.

#include <string>
#include <string_view>

namespace spansim::units {

/// @brief Light in fiber travels at about 2/3 c: 5 us per km, one way.
inline constexpr double kFiberSecondsPerMeter = 5e-9;

/// @brief The largest quantities accepted (base units): far beyond anything physical, small enough that sums and
/// products of them stay finite. Larger values are refused with the limit named.
inline constexpr double kMaxBandwidth = 1.25e17;               ///< bytes/s: 1 Ebps
inline constexpr double kMaxTime      = 1e10;                  ///< seconds: about 317 years
inline constexpr double kMaxSize      = 1152921504606846976.0; ///< bytes: 1 EiB
inline constexpr double kMaxDistance  = 4.0075e7;              ///< meters: the Earth's circumference
inline constexpr double kMaxFlopRate  = 1e19;                  ///< FLOP/s

/// @brief Parses a bandwidth ("400Gbps", "3.2Tbps", "450GBps", "450GB/s") into bytes per second.
/// @throws UsageError naming the accepted units.
double parse_bandwidth(std::string_view text);
/// @brief Parses a duration ("5us", "1.5ms", "2s", "100ns", "30min", "12h", "54d") into seconds.
double parse_time(std::string_view text);
/// @brief Parses a size ("80GiB", "1MB", "4096B", "1KiB") into bytes.
double parse_size(std::string_view text);
/// @brief Parses a distance ("120km", "300m") into meters.
double parse_distance(std::string_view text);
/// @brief Parses a FLOP rate ("989TFLOPs", "2.25PFLOPs", "500GFLOP/s") into FLOP/s.
double parse_flop_rate(std::string_view text);

/// @brief Formats bytes/s as a bit rate with a decimal prefix, e.g. "400 Gbps".
std::string format_bandwidth(double bytes_per_second);
/// @brief Formats seconds with a fitting unit, e.g. "12.5 us".
std::string format_time(double seconds);
/// @brief Formats bytes with a binary prefix, e.g. "1 GiB".
std::string format_size(double bytes);
/// @brief Formats meters, e.g. "120 km".
std::string format_distance(double meters);

} // namespace spansim::units
