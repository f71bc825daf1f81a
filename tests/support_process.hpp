#pragma once
// What the test process holds, for tests of the workers' memory limits.

#include <catch2/catch.hpp>

#include <fstream>
#include <string>

namespace spansim::test {

/// @brief Bytes of this process's data segment now (VmData of /proc/self/status), what RLIMIT_DATA counts; a forked
/// worker starts with the same.
inline double data_segment_bytes()
{
  std::ifstream status("/proc/self/status");
  double kib = 0;
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmData:", 0) == 0)
      kib = std::stod(line.substr(7));
  REQUIRE(kib > 0);
  return kib * 1024;
}

} // namespace spansim::test
