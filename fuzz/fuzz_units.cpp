/// @file
/// @brief Fuzz target: the unit parsers (bandwidth, time, size, distance, FLOP rate); the first byte picks one.
#include "common/units.hpp"

#include "fuzz/fuzz.hpp"
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  if (size == 0)
    return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  return spansim::fuzz::run_parser([&] {
    switch (data[0] % 5) {
    case 0:
      spansim::units::parse_bandwidth(text);
      break;
    case 1:
      spansim::units::parse_time(text);
      break;
    case 2:
      spansim::units::parse_size(text);
      break;
    case 3:
      spansim::units::parse_distance(text);
      break;
    default:
      spansim::units::parse_flop_rate(text);
      break;
    }
  });
}
