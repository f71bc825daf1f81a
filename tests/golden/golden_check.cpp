// Golden scenarios, as SimGrid's .tesh files pin outputs: a scenario run at one fidelity must give the pinned
// step time, breakdown, bytes per tier and across every boundary. A deliberate model change updates the golden
// file in the same commit (`golden_check FILE --update`, or `make golden` for all), so the change is visible.
//
//   golden_check GOLDEN.json            compare; prints every field's expected and actual value; exit 1 on a miss
//   golden_check GOLDEN.json --update   rewrite the pinned values from this build
//   SPANSIM_GOLDEN_EXACT=1 golden_check GOLDEN.json   compare bit for bit (tolerance 0)
#include "report/report.hpp"
#include "scenario/scenario.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

namespace {

using nlohmann::json;

// The values a golden file pins, flattened to "section.key" names.
json pinned_values(const json& summary)
{
  json out      = json::object();
  const auto& m = summary.at("metrics");
  for (const char* k : {"step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "flow_graph_ops", "transfers"})
    out["metrics." + std::string(k)] = m.at(k);
  for (const auto& [part, v] : summary.at("breakdown").at("over_stages").items()) {
    out["breakdown." + part + ".mean"] = v.at("mean");
    out["breakdown." + part + ".max"]  = v.at("max");
  }
  for (const auto& t : summary.at("network").at("tiers"))
    out["bytes.tier." + t.at("tier").get<std::string>()] = t.at("bytes");
  for (const auto& b : summary.at("network").at("boundaries")) {
    out["bytes.out_of." + b.at("name").get<std::string>()] = b.at("bytes_out");
    out["bytes.into." + b.at("name").get<std::string>()]   = b.at("bytes_in");
  }
  for (const auto& g : summary.at("placement").at("groups")) {
    const std::string name                               = g.at("group").get<std::string>();
    out["placement." + name + ".bytes_across_buildings"] = g.at("bytes_across_buildings_per_step");
    out["placement." + name + ".bytes_across_regions"]   = g.at("bytes_across_regions_per_step");
  }
  if (summary.contains("diloco"))
    for (const char* k : {"inner_step_s", "outer_sync_s", "mean_step_s", "compute_utilization",
                          "bytes_across_regions_per_step", "peak_wan_bytes_per_s"})
      out["diloco." + std::string(k)] = summary.at("diloco").at(k);
  const auto& engine = summary.at("configuration").at("engine");
  if (engine.contains("collectives_chosen_per_step"))
    for (const auto& [dim, algo] : engine.at("collectives_chosen_per_step").items())
      out["collectives_chosen." + dim] = algo;
  return out;
}

bool same(const json& expected, const json& actual, double tolerance)
{
  if (expected.is_number() && actual.is_number()) {
    const double e = expected.get<double>(), a = actual.get<double>();
    if (e == a)
      return true;
    return std::fabs(a - e) <= tolerance * std::max(std::fabs(e), std::fabs(a));
  }
  return expected == actual;
}

std::string text(const json& v)
{
  if (v.is_number_float()) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v.get<double>());
    return buf;
  }
  return v.dump();
}

} // namespace

int main(int argc, char** argv)
{
  if (argc < 2 || (argc == 3 && std::strcmp(argv[2], "--update") != 0) || argc > 3) {
    std::cerr << "usage: golden_check GOLDEN.json [--update]\n";
    return 2;
  }
  const std::string file = argv[1];
  const bool update      = argc == 3;
  try {
    json golden;
    {
      std::ifstream in(file);
      golden = json::parse(in);
    }
    const std::string root = SPANSIM_SOURCE_DIR;
    auto scenario          = spansim::scenario::load_scenario(root + "/" + golden.at("scenario").get<std::string>());
    scenario.options.fidelity =
        spansim::parse_enum<spansim::netsim::Fidelity>(golden.at("fidelity").get<std::string>(), "fidelity");
    // "effects_off": every production effect switched off and no calibration profile: the model before them.
    if (golden.value("effects_off", false)) {
      scenario.job.effects                   = spansim::workload::Effects::none();
      scenario.job.calibration               = {};
      scenario.topology.node.nccl_efficiency = 1;
      scenario.topology.pod.nccl_efficiency  = 1;
    }
    // SPANSIM_GOLDEN_EXACT=1 demands bit-for-bit equality (refactors that must not move any number).
    const double tolerance = std::getenv("SPANSIM_GOLDEN_EXACT") ? 0.0 : golden.value("tolerance", 1e-9);
    const json actual      = pinned_values(spansim::report::summary_json(spansim::scenario::run_scenario(scenario)));
    if (update) {
      golden["pinned"] = actual;
      std::ofstream(file) << golden.dump(2) << "\n";
      std::cout << "updated " << file << " (" << actual.size() << " values)\n";
      return 0;
    }
    const json& expected = golden.at("pinned");
    int misses           = 0;
    std::cout << "golden " << file << ": " << golden.at("scenario").get<std::string>() << " at "
              << golden.at("fidelity").get<std::string>() << " fidelity, relative tolerance " << tolerance << "\n";
    for (const auto& [key, e] : expected.items()) {
      const bool present = actual.contains(key);
      const bool ok      = present && same(e, actual.at(key), tolerance);
      misses += ok ? 0 : 1;
      std::cout << (ok ? "  ok    " : "  MISS  ") << key << ": expected " << text(e) << ", actual "
                << (present ? text(actual.at(key)) : "(absent)") << "\n";
    }
    for (const auto& [key, a] : actual.items())
      if (!expected.contains(key)) {
        ++misses;
        std::cout << "  MISS  " << key << ": expected (absent), actual " << text(a) << "\n";
      }
    std::cout << (misses == 0 ? "all " + std::to_string(expected.size()) + " pinned values hold\n"
                              : std::to_string(misses) + " pinned values moved; if the model change is deliberate, "
                                                         "run `make golden` and commit the golden files\n");
    return misses == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "golden_check: " << file << ": " << e.what() << "\n";
    return 2;
  }
}
