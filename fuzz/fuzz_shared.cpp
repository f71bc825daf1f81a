/// @file
/// @brief Fuzz target: a shared-network spec (several jobs on one topology).
#include "fuzz/fuzz.hpp"
#include "sharing/sharing.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  const std::string path = spansim::fuzz::write_input(data, size, "shared.json");
  return spansim::fuzz::run_parser([&] { spansim::sharing::load_shared(path); });
}
