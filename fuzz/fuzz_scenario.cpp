/// @file
/// @brief Fuzz target: a scenario file (topology, job, placement, network keys, reliability, DiLoCo).
#include "fuzz/fuzz.hpp"
#include "scenario/scenario.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  const std::string path = spansim::fuzz::write_input(data, size, "scenario.json");
  return spansim::fuzz::run_parser([&] { spansim::scenario::load_scenario(path); });
}
