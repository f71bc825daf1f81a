#pragma once
/// @file
/// @brief A deterministic random source for every seeded feature: the same seed gives the same numbers on every
/// machine (splitmix64 and our own transforms; standard-library distributions are implementation-defined).
#include <cmath>
#include <cstdint>

namespace spansim {

/// @brief splitmix64 with a mixed seed: neighbouring seeds and streams (seed ^ constant) give unrelated sequences.
class Random {
public:
  explicit Random(std::uint64_t seed) : state_(mix(mix(seed + 0x632BE59BD9B4E019ULL))) {}
  /// @brief Uniform in (0, 1), never 0 or 1 (52 bits, so that k + 0.5 is exact).
  double uniform() { return (static_cast<double>(mix(state_ += 0x9E3779B97F4A7C15ULL) >> 12) + 0.5) * 0x1.0p-52; }
  /// @brief Exponential with the given mean.
  double exponential(double mean) { return -mean * std::log(uniform()); }
  /// @brief splitmix64's finalizer: a well-mixed 64-bit hash of `z` (ECMP's per-flow hash).
  static std::uint64_t hash(std::uint64_t z) { return mix(z + 0x9E3779B97F4A7C15ULL); }

private:
  static std::uint64_t mix(std::uint64_t z)
  {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::uint64_t state_;
};

} // namespace spansim
