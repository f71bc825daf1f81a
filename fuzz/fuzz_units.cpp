/// @file
/// @brief Fuzz target: the unit parsers (bandwidth, time, size, distance, FLOP rate); the first byte picks one.
#include "common/units.hpp"

#include "fuzz/fuzz.hpp"
#include <iterator>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  if (size == 0)
    return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  // The first byte picks the parser (modulo their count); the rest is its text.
  constexpr double (*parsers[])(std::string_view) = {spansim::units::parse_bandwidth, spansim::units::parse_time,
                                                     spansim::units::parse_size, spansim::units::parse_distance,
                                                     spansim::units::parse_flop_rate};
  return spansim::fuzz::run_parser([&] { parsers[data[0] % std::size(parsers)](text); });
}
