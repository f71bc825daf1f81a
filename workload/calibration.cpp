// Calibration profiles: the compute model's fitted parameters for one GPU, shipped (validation/profiles) or a
// user's own, and the production effects a job switches on or off.
#include "common/error.hpp"
#include "common/format.hpp"
#include "common/json_reader.hpp"
#include "common/paths.hpp"
#include "common/units.hpp"
#include "workload/workload.hpp"

#include <algorithm>
#include <filesystem>

#ifndef SPANSIM_DATA_DIR
#error "SPANSIM_DATA_DIR must point at the source tree"
#endif

namespace spansim::workload {

namespace fs = std::filesystem;

std::string profile_dir()
{
  return std::string(SPANSIM_DATA_DIR) + "/validation/profiles";
}

namespace {

Calibration read_profile(spec::ObjectReader r, const std::string& file)
{
  Calibration c;
  c.name = r.name("name");
  c.gpus = r.strings("gpus");
  if (c.gpus.empty())
    r.fail("gpus", "name at least one GPU the profile holds for");
  c.source = r.optional_string("source").value_or(file);
  auto p   = r.object("parameters");
  // Bounds: a clock fraction below 0.3 or a gap above 1 ms per kernel is not a GPU that trains.
  c.clock_fraction = p.number("clock_fraction", 0.3, 1.0);
  c.kernel_gap     = p.time("kernel_gap");
  if (c.kernel_gap > 1e-3)
    p.fail("kernel_gap", "at most 1ms per kernel");
  c.alltoall_efficiency = p.optional_number("alltoall_efficiency", 0.05, 1.0).value_or(1.0);
  c.moe_host            = p.optional_time("moe_host").value_or(0.0);
  if (c.moe_host > 1)
    p.fail("moe_host", "at most 1s per MoE layer and micro-batch");
  c.moe_host_overlap = p.optional_time("moe_host_overlap").value_or(0.0);
  if (c.moe_host_overlap > 1)
    p.fail("moe_host_overlap", "at most 1s per MoE layer and micro-batch");
  p.finish();
  // What the fit saw and who wrote it: kept in the file for readers, not used by the model.
  for (const char* record : {"fit", "bounds", "spansim"})
    if (r.has(record))
      r.raw(record);
  r.finish();
  return c;
}

} // namespace

Calibration load_calibration(const std::string& name_or_path, const spec::Location& referrer)
{
  if (name_or_path == "none")
    return {};
  const bool shipped     = name_or_path.find('/') == std::string::npos && !name_or_path.ends_with(".json");
  const std::string path = shipped ? profile_dir() + "/" + name_or_path + ".json"
                                   : (fs::path(name_or_path).is_relative() && !referrer.file.empty()
                                          ? (fs::path(referrer.file).parent_path() / name_or_path).string()
                                          : name_or_path);
  if (shipped && !path_exists(path)) {
    const std::string what = "unknown calibration profile \"" + name_or_path +
                             "\" (shipped: " + json_names_list(profile_dir()) + "; or a path, or \"none\")";
    if (referrer.file.empty())
      throw UsageError(what);
    referrer.fail(what);
  }
  const auto doc = spec::load_referenced_json(path, referrer);
  auto c         = read_profile(spec::ObjectReader(doc, spec::Location{path}), path);
  if (!shipped)
    c.name = path;
  return c;
}

Calibration default_calibration(const GpuSpec& gpu)
{
  const std::string name = gpu.name + "-published";
  if (path_exists(profile_dir() + "/" + name + ".json"))
    return load_calibration(name);
  for (const auto& s : json_names_in(profile_dir()))
    if (auto c = load_calibration(s); c.covers(gpu.name))
      return c;
  return {};
}

std::string calibration_line(const JobSpec& job)
{
  const auto& c    = job.calibration;
  std::string line = c.name == "none" ? std::string("no calibration profile")
                                      : c.name + ": clock " + format_fixed(c.clock_fraction, 3) + ", kernel gap " +
                                            units::format_time(c.kernel_gap);
  if (c.name != "none" && c.alltoall_efficiency < 1 && job.model.moe.experts > 0)
    line += ", NCCL all-to-all " + format_fixed(c.alltoall_efficiency, 3);
  if (c.name != "none" && c.moe_host > 0 && job.model.moe.experts > 0)
    line += ", MoE host " + units::format_time(c.moe_host) + " per layer";
  if (c.name != "none" && c.moe_host_overlap > 0 && job.model.moe.experts > 0 && job.schedule.ep_overlap)
    line += " (+" + units::format_time(c.moe_host_overlap) + " under ep_overlap)";
  std::string off;
  for (const auto& [key, member] : kEffectSwitches)
    if (!(job.effects.*member))
      off += (off.empty() ? "" : ", ") + std::string(key);
  return line + "; effects: " + (off.empty() ? "all on" : "off: " + off);
}

} // namespace spansim::workload
