/// @file
/// @brief Fuzz target: a PyTorch profiler (Kineto) trace.
#include "fuzz/fuzz.hpp"
#include "traces/kineto.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  const std::string path = spansim::fuzz::write_input(data, size, "trace.json");
  return spansim::fuzz::run_parser([&] { spansim::traces::read_kineto(path); });
}
