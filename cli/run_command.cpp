// `spansim run`: one training step of a scenario, co-simulated, with where the time goes.
#include "cli/commands.hpp"
#include "cli/output.hpp"
#include "common/error.hpp"
#include "common/paths.hpp"
#include "common/units.hpp"
#include "netsim/scenario.hpp"

#include <chrono>
#include <iostream>
#include <memory>

namespace spansim::cli {

namespace {

struct RunOptions {
  std::string scenario;
  std::string fidelity;
  std::string out;
  bool no_outputs = false;
  bool json       = false;
};

std::string pct(double part, double whole)
{
  return whole > 0 ? fixed(100 * part / whole, 1) + "%" : "-";
}

void run(const RunOptions& o)
{
  auto scenario = netsim::load_scenario(o.scenario.empty() ? netsim::default_scenario_path() : o.scenario);
  if (!o.fidelity.empty())
    scenario.options.fidelity = netsim::parse_fidelity(o.fidelity);
  // A status line on a terminal: large steps take a while at flow and packet fidelity.
  const bool status = !o.json && stderr_is_terminal();
  const auto start  = std::chrono::steady_clock::now();
  auto phase        = [&](const std::string& what) {
    if (!status)
      return;
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cerr << "\r\033[K[" << fixed(t, 1) << " s] " << what << "..." << std::flush;
  };
  auto result = netsim::run_scenario(scenario, phase);
  if (status)
    std::cerr << "\r\033[K" << std::flush;
  std::vector<std::string> written;
  if (!o.no_outputs)
    written = netsim::write_outputs(scenario, result, o.out.empty() ? path_in("out", scenario.name) : o.out);

  auto summary               = result.summary;
  summary["outputs_written"] = written;
  if (o.json) {
    std::cout << summary.dump(2) << "\n";
    return;
  }
  const auto& m     = summary["metrics"];
  const auto& cfg   = summary["configuration"];
  const auto& job   = cfg["job"];
  const double step = m["step_time_s"];
  std::cout << "Scenario " << scenario.name << ": " << job["model"].get<std::string>() << " on "
            << job["gpus"].get<long>() << " " << job["gpu"].get<std::string>() << " GPUs of "
            << cfg["topology"]["name"].get<std::string>() << " (" << cfg["fidelity"].get<std::string>()
            << " fidelity)\n";
  std::cout << "Parallelism: TP " << job["tp"] << ", CP " << job["cp"] << ", PP " << job["pp"] << ", DP " << job["dp"]
            << ", EP " << job["ep"] << "; " << job["micro_batches"] << " micro-batches per step\n";
  std::string order;
  for (const auto& d : cfg["placement"]["order"])
    order += (order.empty() ? "" : ", ") + d.get<std::string>();
  std::string buildings;
  for (const auto& b : cfg["placement"]["buildings"])
    buildings += (buildings.empty() ? "" : ", ") + b.get<std::string>();
  std::cout << "Placement: rank order [" << order << "] (innermost first) over " << buildings << "\n\n";

  Table headline{"", {"metric", "value"}, {}};
  headline.rows = {{"step time", units::format_time(step)},
                   {"tokens/s", fmt(m["tokens_per_s"].get<double>(), 4)},
                   {"TFLOP/s per GPU", fixed(m["tflops_per_gpu"].get<double>(), 1)},
                   {"MFU", pct(m["mfu"].get<double>(), 1)},
                   {"flow graph", std::to_string(m["flow_graph_ops"].get<long>()) + " ops, " +
                                      std::to_string(m["transfers"].get<long>()) + " transfers"}};
  print_table(std::cout, headline);

  std::cout << "\n";
  Table parts{
      "Where the step goes, per pipeline stage (mean and max over stages)", {"part", "mean", "max", "mean share"}, {}};
  const auto& agg = summary["breakdown"]["over_stages"];
  for (const char* p :
       {"compute", "exposed_tp", "exposed_cp", "exposed_pp", "exposed_dp", "exposed_ep", "bubble", "idle"}) {
    const auto& v = agg[std::string(p) + "_s"];
    parts.rows.push_back({p, units::format_time(v["mean"]), units::format_time(v["max"]), pct(v["mean"], step)});
  }
  print_table(std::cout, parts);

  std::cout << "\n";
  Table tiers{"Network per step", {"tier", "links used", "bytes", "mean utilisation of used links"}, {}};
  for (const auto& t : summary["network"]["tiers"])
    if (t["bytes"].get<double>() > 0)
      tiers.rows.push_back({t["tier"], std::to_string(t["links_used"].get<int>()), units::format_size(t["bytes"]),
                            pct(t["mean_utilisation"], 1)});
  print_table(std::cout, tiers);
  if (!summary["network"]["boundaries"].empty()) {
    std::cout << "\n";
    Table b{"Building boundaries", {"building", "bytes out", "bytes in", "mean utilisation out"}, {}};
    for (const auto& row : summary["network"]["boundaries"])
      b.rows.push_back({row["name"], units::format_size(row["bytes_out"]), units::format_size(row["bytes_in"]),
                        pct(row["mean_utilisation_out"], 1)});
    print_table(std::cout, b);
  }
  std::cout << "\n";
  Table busy{"Busiest scale-out links (mean utilisation over the step)", {"link", "tier", "bytes", "utilisation"}, {}};
  for (const auto& l : summary["network"]["busiest_links"])
    if (busy.rows.size() < 5)
      busy.rows.push_back({l["link"], l["tier"], units::format_size(l["bytes"]), pct(l["utilisation"], 1)});
  print_table(std::cout, busy);
  std::cout << "\n";
  Table groups{"Groups crossing boundaries (bytes per step under ring lowering)",
               {"group", "size", "groups", "across nodes", "across buildings", "bytes across buildings"},
               {}};
  for (const auto& g : summary["placement"]["groups"])
    groups.rows.push_back({g["group"], std::to_string(g["size"].get<int>()), std::to_string(g["groups"].get<int>()),
                           std::to_string(g["across_nodes"].get<int>()),
                           std::to_string(g["across_buildings"].get<int>()),
                           units::format_size(g["bytes_across_buildings_per_step"])});
  print_table(std::cout, groups);
  if (!written.empty()) {
    std::cout << "\nWritten:";
    for (const auto& w : written)
      std::cout << " " << w;
    std::cout << "\n(trace.json opens in https://ui.perfetto.dev)\n";
  }
}

} // namespace

void add_run_command(CLI::App& app)
{
  auto o  = std::make_shared<RunOptions>();
  auto* c = app.add_subcommand("run", "Co-simulate one training step of a scenario (default: Llama 3 405B on "
                                      "two-buildings)");
  c->add_option("scenario", o->scenario, "Scenario file (topology + job + placement + fidelity)");
  c->add_option("--fidelity", o->fidelity, "Override the scenario's fidelity: analytical, flow, packet");
  c->add_option("--out", o->out, "Directory for summary.json, layers.csv and trace.json (default out/NAME)");
  c->add_flag("--no-outputs", o->no_outputs, "Write no files");
  c->add_flag("--json", o->json, "Print one JSON document (the summary)");
  c->callback([o] { run(*o); });
}

} // namespace spansim::cli
