/// @file
/// @brief Fuzz target: an optimize spec (search space, screen, capacity).
#include "fuzz/fuzz.hpp"
#include "optimizer/optimizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  const std::string path = spansim::fuzz::write_input(data, size, "optimize.json");
  return spansim::fuzz::run_parser([&] { spansim::optimizer::load_optimize_spec(path); });
}
