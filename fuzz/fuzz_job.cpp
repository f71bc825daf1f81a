/// @file
/// @brief Fuzz target: a job spec file (dense, MoE and DLRM jobs, their models, GPUs and calibration).
#include "fuzz/fuzz.hpp"
#include "workload/workload.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  const std::string path = spansim::fuzz::write_input(data, size, "job.json");
  return spansim::fuzz::run_parser([&] { spansim::workload::load_job(path); });
}
