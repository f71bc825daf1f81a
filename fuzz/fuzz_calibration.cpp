/// @file
/// @brief Fuzz target: a calibration runs file (published runs with their roles).
#include "calibration/calibration.hpp"
#include "fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  const std::string path = spansim::fuzz::write_input(data, size, "runs.json");
  return spansim::fuzz::run_parser([&] { spansim::calibration::load_dataset(path); });
}
