/// @file
/// @brief Fuzz target: a campaign spec (axes, points, output).
#include "experiments/campaign.hpp"
#include "fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  const std::string path = spansim::fuzz::write_input(data, size, "campaign.json",
                                                      (spansim::fuzz::scratch_root() / "campaign" / "in").string());
  return spansim::fuzz::run_parser([&] { spansim::experiments::load_campaign(path); });
}
