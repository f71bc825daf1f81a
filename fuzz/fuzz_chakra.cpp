/// @file
/// @brief Fuzz target: a Chakra execution trace, read as rank 0 of a chakra job and imported as a step graph.
#include "traces/traces.hpp"

#include "fuzz/fuzz.hpp"
#include <nlohmann/json.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  const std::string path   = spansim::fuzz::write_input(data, size, "et.0.et");
  const nlohmann::json job = {{"name", "fuzz"}, {"kind", "chakra"}, {"trace", spansim::fuzz::scratch_dir() + "/et"}};
  return spansim::fuzz::run_parser([&] {
    const auto spec = spansim::traces::load_chakra_job(job, "fuzz-job.json", "$");
    spansim::traces::import_chakra(spec);
  });
}
