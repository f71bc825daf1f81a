#pragma once
/// @file
/// @brief Plain numbers as text for messages and summary lines (quantities with units: common/units.hpp).

#include <cstdio>
#include <string>

namespace spansim {

/// @brief `value` with `decimals` digits after the point, as printf's "%.*f" writes it.
inline std::string format_fixed(double value, int decimals)
{
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

/// @brief `value` to `digits` significant digits, as printf's "%.*g" writes it.
inline std::string format_significant(double value, int digits)
{
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, value);
  return buf;
}

} // namespace spansim
