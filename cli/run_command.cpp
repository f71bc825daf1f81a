// `spansim run`: one training step of a scenario, co-simulated, with where the time goes.
#include "cli/commands.hpp"
#include "cli/output.hpp"
#include "common/error.hpp"
#include "common/paths.hpp"
#include "common/units.hpp"
#include "report/html.hpp"
#include "report/report.hpp"
#include "scenario/scenario.hpp"

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <set>

namespace spansim::cli {

namespace {

struct RunOptions {
  std::string scenario;
  std::string fidelity;
  std::string out;
  bool no_outputs = false;
  bool json       = false;
  bool report     = false;
  int steps       = 0;
  long long seed  = -1;
};

std::string pct(double part, double whole)
{
  return whole > 0 ? fixed(100 * part / whole, 1) + "%" : "-";
}

// A rate under each FLOP convention that has a count: "403.1 causal, 470.2 megatron, 468.0 torchtitan".
template <class Format>
std::string flop_line(const netsim::StepResult& r, Format format)
{
  std::string out;
  for (auto c : enum_values<workload::FlopConvention>())
    if (c == workload::FlopConvention::causal || r.flops.get(c) > 0)
      out += (out.empty() ? "" : ", ") + format(c) + " " + std::string(name_of(c));
  return out;
}

// One micro-batch's compute by kernel class, mean and max over the stages (nothing for an imported program); with
// a recompute, its row split by the class of what it re-runs, beside (a profiler files those kernels there).
void print_kernel_classes(const workload::StepGraph& graph)
{
  if (graph.stages.empty() || !(graph.stages.front().kernels.total() > 0))
    return;
  const double n = static_cast<double>(graph.stages.size());
  double total = 0, recomputed = 0;
  for (const auto& st : graph.stages) {
    total += st.kernels.total() / n;
    recomputed += st.recomputed.total() / n;
  }
  Table t{"Compute of one micro-batch by kernel class, per GPU (mean and max over stages)",
          {"kernel class", "mean", "max", "mean share"},
          {}};
  if (recomputed > 0)
    t.headers.push_back("recompute by class (mean)");
  const auto names = graph.stages.front().kernels.named();
  for (std::size_t i = 0; i < names.size(); ++i) {
    double mean = 0, max = 0, again = 0;
    for (const auto& st : graph.stages) {
      const double v = st.kernels.named()[i].second;
      mean += v / n;
      max = std::max(max, v);
      again += st.recomputed.named()[i].second / n;
    }
    if (!(max > 0) && !(again > 0))
      continue;
    t.rows.push_back(
        {std::string(names[i].first), units::format_time(mean), units::format_time(max), pct(mean, total)});
    if (recomputed > 0)
      t.rows.back().push_back(again > 0 ? units::format_time(again) : "");
  }
  t.rows.push_back({"total", units::format_time(total), "", "100.0%"});
  if (recomputed > 0)
    t.rows.back().push_back(units::format_time(recomputed));
  std::cout << "\n";
  print_table(std::cout, t);
}

// Sampled steps: the distribution, and where the time lost to variability went.
void print_sampled(const reliability::SampledSteps& s, std::uint64_t seed)
{
  std::cout << "\n";
  Table head{"Sampled steps (" + std::to_string(s.step_times.size()) + ", seed " + std::to_string(seed) +
                 "; lockstep groups of " + std::to_string(s.lockstep_group) + " ranks, " + std::to_string(s.replicas) +
                 " replicas)",
             {"statistic", "step time", "against the simulated step"},
             {}};
  auto vs   = [&](double x) { return (x >= s.deterministic ? "+" : "") + pct(x - s.deterministic, s.deterministic); };
  head.rows = {{"simulated (no variability)", units::format_time(s.deterministic), ""},
               {"mean", units::format_time(s.mean), vs(s.mean)},
               {"p50", units::format_time(s.p50), vs(s.p50)},
               {"p90", units::format_time(s.p90), vs(s.p90)},
               {"p99", units::format_time(s.p99), vs(s.p99)}};
  if (s.degraded_links > 0)
    head.rows.insert(head.rows.begin() + 1, {"simulated on " + std::to_string(s.degraded_links) + " degraded links",
                                             units::format_time(s.degraded_step), vs(s.degraded_step)});
  print_table(std::cout, head);
  std::cout << "\n";
  Table where{"What slowed the critical path (mean seconds added on each sample's; slack can absorb part)",
              {"part", "seconds"},
              {}};
  std::vector<std::pair<double, int>> stages;
  for (std::size_t k = 0; k < s.attribution.stage_compute.size(); ++k)
    stages.emplace_back(s.attribution.stage_compute[k], static_cast<int>(k));
  std::sort(stages.rbegin(), stages.rend());
  for (std::size_t k = 0; k < stages.size() && k < 4; ++k)
    if (stages[k].first > 0)
      where.rows.push_back({"compute of stage " + std::to_string(stages[k].second) +
                                (s.stage_factor[stages[k].second] > 1 ? " (a slow GPU)" : ""),
                            units::format_time(stages[k].first)});
  for (workload::Dim d : workload::kDims)
    if (s.attribution.communication[static_cast<std::size_t>(d)] > 0)
      where.rows.push_back({std::string(name_of(d)) + " communication",
                            units::format_time(s.attribution.communication[static_cast<std::size_t>(d)])});
  if (s.degraded_links > 0)
    where.rows.push_back(
        {"degraded links (the step simulated on them)", units::format_time(s.degraded_step - s.deterministic)});
  if (s.attribution.replica_sync > 0)
    where.rows.push_back({"waiting for the slowest replica", units::format_time(s.attribution.replica_sync)});
  print_table(std::cout, where);
}

void run(const RunOptions& o)
{
  auto scenario = scenario::load_scenario(o.scenario.empty() ? scenario::default_scenario_path() : o.scenario);
  if (!o.fidelity.empty())
    scenario.options.fidelity = parse_enum<netsim::Fidelity>(o.fidelity, "fidelity");
  if (o.steps > 0 && !scenario.variability)
    throw UsageError("--steps samples steps under the scenario's \"variability\" block, and " + scenario.file +
                     " has none (reliability/README.md)");
  if (o.seed >= 0 && !scenario.variability)
    throw UsageError("--seed sets the seed of the scenario's \"variability\" block, and " + scenario.file +
                     " has none (reliability/README.md)");
  if (o.seed >= 0)
    scenario.variability->seed = static_cast<std::uint64_t>(o.seed);
  // A status line on a terminal: large steps take a while at flow and packet fidelity.
  const bool status = !o.json && stderr_is_terminal();
  const auto start  = std::chrono::steady_clock::now();
  auto phase        = [&](const std::string& what) {
    if (!status)
      return;
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cerr << "\r\033[K[" << fixed(t, 1) << " s] " << what << "..." << std::flush;
  };
  const auto run = scenario::run_scenario(scenario, phase);
  if (status)
    std::cerr << "\r\033[K" << std::flush;
  std::optional<reliability::SampledSteps> sampled;
  if (o.steps > 0) {
    reliability::SampleOptions so;
    so.steps    = o.steps;
    so.progress = progress_bar(!o.json && stderr_is_terminal());
    sampled     = reliability::sample_steps({run.placed->topology(), run.placed->graph(), run.placed->placement(),
                                             scenario.placement, scenario.options, run.result},
                                            *scenario.variability, so);
  }
  std::vector<std::string> written;
  if (!o.no_outputs) {
    const auto directory = o.out.empty() ? path_in("out", scenario.name) : o.out;
    written              = report::write_outputs(run, directory);
    if (o.report)
      written.push_back(report::write_report(directory));
  }

  if (o.json) {
    auto summary = report::summary_json(run);
    if (sampled)
      summary["sampled_steps"] = sampled->to_json();
    summary["outputs_written"] = written;
    std::cout << summary.dump(2) << "\n";
    return;
  }
  const auto& r     = run.result;
  const auto& job   = scenario.job;
  const auto& par   = job.parallelism;
  const double step = r.step_time;
  std::cout << "Scenario " << scenario.name << ": " << job.model.name << " on " << job.gpus << " " << job.gpu.name
            << " GPUs of " << scenario.topology.name << " (" << name_of(scenario.options.fidelity) << " fidelity)\n";
  std::cout << "Parallelism: TP " << par.tp << ", CP " << par.cp << ", PP " << par.pp << ", DP " << par.dp << ", EP "
            << par.ep << (par.etp != par.tp ? ", ETP " + std::to_string(par.etp) : std::string()) << "; "
            << job.micro_batches() << " micro-batches per step\n";
  std::string order;
  for (auto d : run.placed->placement().order())
    order += (order.empty() ? "" : ", ") + std::string(name_of(d));
  std::string buildings;
  for (const auto& b : run.placement.buildings_used)
    buildings += (buildings.empty() ? "" : ", ") + b;
  std::cout << "Placement: rank order [" << order << "] (innermost first) over " << buildings << "\n";
  std::cout << "Calibration: " << workload::calibration_line(job) << "\n";
  // Buildings of another GPU type run their stages under that GPU's own shipped profile.
  {
    const auto& topo = run.placed->topology();
    std::set<std::string> others;
    for (const auto& name : run.placement.buildings_used)
      for (int b = 0; b < topo.building_count(); ++b)
        if (topo.building_name(b) == name && !topo.building_gpu(b).empty() && topo.building_gpu(b) != job.gpu.name)
          others.insert(topo.building_gpu(b));
    for (const auto& type : others) {
      const auto c = workload::default_calibration(workload::load_gpu(type));
      std::cout << "Calibration (" << type << " buildings): "
                << (c.name == "none" ? std::string("no calibration profile")
                                     : c.name + ": clock " + fixed(c.clock_fraction, 3) + ", kernel gap " +
                                           units::format_time(c.kernel_gap))
                << "\n";
    }
  }
  if (const auto moe = workload::dispatch_line(job); !moe.empty())
    std::cout << "MoE: " << moe << "\n";
  if (!job.trace.empty())
    std::cout << "Trace: " << job.trace
              << (job.trace_only ? " (no model: its ops' own times and sizes; no tokens or FLOP conventions)" : "")
              << "\n";
  for (const auto& note : run.placed->graph().notes)
    std::cout << "  read: " << note << "\n";
  std::cout << "\n";

  Table headline{"", {"metric", "value"}, {}};
  headline.rows = {
      {"step time", units::format_time(step)},
      {"tokens/s", job.trace_only ? std::string("-") : fmt(r.tokens_per_second, 4)},
      {"TFLOP/s per GPU",
       job.trace_only ? std::string("-") : flop_line(r, [&](auto c) { return fixed(r.tflops_per_gpu_under(c), 1); })},
      {"MFU", job.trace_only ? std::string("-") : flop_line(r, [&](auto c) { return pct(r.mfu_under(c), 1); })},
      {"flow graph", std::to_string(r.flow_ops) + " ops, " + std::to_string(r.transfers.size()) + " transfers"}};
  print_table(std::cout, headline);
  if (run.diloco) {
    const auto& d = *run.diloco;
    const auto& o = d.outer;
    std::cout << "\n";
    const std::string level =
        d.spec.workers == sync::WorkerLevel::ranges ? "worker" : std::string(name_of(d.spec.workers));
    Table t{"DiLoCo: data parallelism inside each " + level + " every step, between " + level + "s every " +
                std::to_string(d.spec.every) + " steps" +
                (d.spec.fragments > 1 ? ", in " + std::to_string(d.spec.fragments) + " fragments" : std::string()) +
                " (time only: the convergence cost is outside a network simulator)",
            {"metric", "value"},
            {}};
    const std::string exchange = d.spec.fragments > 1 ? "outer exchange (one fragment)" : "outer synchronization";
    t.rows                     = {{"inner step (the step above)", units::format_time(d.inner_step)},
                                  {exchange, units::format_time(o.seconds) + " (" + units::format_size(o.shard_bytes) + " per rank, " +
                                                 std::to_string(o.workers) + " workers in " + std::to_string(o.regions) + " regions)"},
                                  {"exposed per exchange (overlap " + std::to_string(d.spec.overlap_steps) + " steps)",
                                   units::format_time(d.exposed_outer)},
                                  {"mean step over " + std::to_string(d.spec.every), units::format_time(d.mean_step)},
                                  {"tokens/s", fmt(d.tokens_per_second, 4)},
                                  {"compute utilization", pct(d.compute_utilization, 1)},
                                  {"bytes across regions per step", units::format_size(d.bytes_across_regions_per_step)},
                                  {"peak WAN bandwidth (plain DiLoCo)", units::format_bandwidth(d.peak_wan_bandwidth) + " (" +
                                                                            units::format_bandwidth(d.plain_peak_wan_bandwidth) + ")"}};
    double most                = 0;
    std::string busiest;
    for (const auto& w : o.traffic)
      if (w.bytes_out > most) {
        most    = w.bytes_out;
        busiest = w.name;
      }
    if (!busiest.empty())
      t.rows.push_back(
          {"bytes out of the busiest worker's uplink per exchange", units::format_size(most) + " (" + busiest + ")"});
    print_table(std::cout, t);
  }
  if (r.engine.contains("hybrid")) {
    const auto& h = r.engine["hybrid"];
    std::cout << "\n";
    Table corrections{
        "Hybrid fidelity: " + std::to_string(h["packet_runs"].get<int>()) + " packet runs for " +
            std::to_string(h["collectives"].get<int>()) + " collectives (" +
            fixed(h["run_wall_seconds"].get<double>(), 1) + " s of runs, " + fixed(h["wall_seconds"].get<double>(), 1) +
            " s elapsed)",
        {"collective", "group", "size", "measured at", "measured on", "occurrences", "flow", "packet", "correction"},
        {}};
    // A pattern whose worker died, or that was too large, has no measurement: its cells say so, and why is noted
    // under the table (once per reason).
    auto size_of = [](const nlohmann::json& v) { return v.is_number() ? units::format_size(v.get<double>()) : "-"; };
    auto time_of = [](const nlohmann::json& v) { return v.is_number() ? units::format_time(v.get<double>()) : "-"; };
    auto on_of   = [](const nlohmann::json& c) -> std::string {
      if (!c.contains("measured_on"))
        return "-";
      const auto& m      = c["measured_on"];
      const int nodes    = m["nodes"].get<int>();
      const int of_nodes = m["of_nodes"].get<int>();
      const int rails    = m["rails"].get<int>();
      std::string on     = nodes < of_nodes ? std::to_string(nodes) + " of " + std::to_string(of_nodes) + " nodes" : "";
      if (rails > 0)
        on += (on.empty() ? "" : ", ") + std::string("1 rail of ") + std::to_string(rails);
      return on.empty() ? "whole" : on;
    };
    std::vector<std::string> reasons;
    for (const auto& c : h["corrections"]) {
      std::string packet = c.contains("packet_s") ? time_of(c["packet_s"]) : "skipped";
      if (!c.contains("packet_s") && c.contains("skipped")) {
        const auto why = c["skipped"].get<std::string>();
        auto it        = std::find(reasons.begin(), reasons.end(), why);
        if (it == reasons.end())
          it = reasons.insert(reasons.end(), why);
        packet += " (" + std::to_string(it - reasons.begin() + 1) + ")";
      }
      corrections.rows.push_back({c["collective"].get<std::string>() + " (" + c["algorithm"].get<std::string>() + ")",
                                  std::to_string(c["group"].get<int>()), size_of(c["bytes"]),
                                  size_of(c["measured_bytes"]), on_of(c), std::to_string(c["occurrences"].get<int>()),
                                  time_of(c["flow_s"]), packet, fixed(c["factor"].get<double>(), 3) + "x"});
    }
    print_table(std::cout, corrections);
    for (std::size_t i = 0; i < reasons.size(); ++i)
      std::cout << "(" << i + 1 << ") " << reasons[i] << "\n";
  }

  std::cout << "\n";
  Table parts{
      "Where the step goes, per pipeline stage (mean and max over stages)", {"part", "mean", "max", "mean share"}, {}};
  const auto stats = report::breakdown_stats(r);
  for (auto p : netsim::kParts)
    parts.rows.push_back({std::string(name_of(p)), units::format_time(stats[p].mean), units::format_time(stats[p].max),
                          pct(stats[p].mean, step)});
  print_table(std::cout, parts);
  if (!scenario.options.compression.empty()) {
    double total = 0;
    for (const auto& s : r.stages)
      total += s.compression / static_cast<double>(r.stages.size());
    std::cout << "  compression: " << units::format_time(total)
              << " of GPU time per stage on the communication streams (its exposed part is in exposed_*)\n";
  }
  const auto fx = report::effect_seconds(run);
  std::cout << "  of compute, production effects: sustained clock " << units::format_time(fx.sustained_clock)
            << ", kernel gaps " << units::format_time(fx.kernel_gaps) << ", attention by length "
            << units::format_time(fx.attention_by_length)
            << (fx.attention_by_length < 0 ? " (a saving: the kernel is faster at this length than at the reference)"
                                           : "")
            << ", gradient clipping " << units::format_time(fx.grad_clipping) << ", SM contention "
            << units::format_time(fx.sm_contention) << "\n";
  print_kernel_classes(run.placed->graph());

  const auto network = report::network_report(run);
  std::cout << "\n";
  Table tiers{"Network per step", {"tier", "links used", "bytes", "mean utilisation of used links"}, {}};
  for (const auto& t : network.tiers)
    if (t.bytes > 0)
      tiers.rows.push_back({std::string(name_of(t.tier)), std::to_string(t.links_used), units::format_size(t.bytes),
                            pct(t.mean_utilisation, 1)});
  print_table(std::cout, tiers);
  if (!network.boundaries.empty()) {
    std::cout << "\n";
    Table b{"Building boundaries", {"building", "bytes out", "bytes in", "mean utilisation out"}, {}};
    for (const auto& row : network.boundaries)
      b.rows.push_back({row.name, units::format_size(row.bytes_out), units::format_size(row.bytes_in),
                        pct(row.mean_utilisation_out, 1)});
    print_table(std::cout, b);
  }
  if (!network.parallel.empty()) {
    std::cout << "\n";
    Table p{
        "Parallel links (both directions): busiest against mean", {"ends", "links", "max", "mean", "imbalance"}, {}};
    for (const auto& row : network.parallel)
      p.rows.push_back({row.ends, std::to_string(row.links), units::format_size(row.max_bytes),
                        units::format_size(row.mean_bytes), fmt(row.imbalance())});
    print_table(std::cout, p);
  }
  std::cout << "\n";
  Table busy{"Busiest scale-out links (mean utilisation over the step)", {"link", "tier", "bytes", "utilisation"}, {}};
  for (const auto& l : network.busiest)
    if (busy.rows.size() < 5)
      busy.rows.push_back({l.link, std::string(name_of(l.tier)), units::format_size(l.bytes), pct(l.utilisation, 1)});
  print_table(std::cout, busy);
  std::cout << "\n";
  Table groups{"Groups crossing boundaries (bytes per step under ring lowering)",
               {"group", "size", "groups", "across nodes", "across buildings", "bytes across buildings"},
               {}};
  for (const auto& g : run.placement.groups)
    groups.rows.push_back({g.group, std::to_string(g.size), std::to_string(g.groups), std::to_string(g.across_nodes),
                           std::to_string(g.across_buildings), units::format_size(g.bytes_across_buildings)});
  print_table(std::cout, groups);
  if (run.faults) {
    const auto& f = *run.faults;
    std::cout << "\n";
    Table t{"Faults: " + std::to_string(f.failed_links) + " links failed, " + std::to_string(f.degraded_links) +
                " degraded; step " + units::format_time(step) + " against " + units::format_time(f.healthy_step_time) +
                " on the healthy site (" + pct(step - f.healthy_step_time, f.healthy_step_time) + " more)",
            {"boundary", "max-flow out, healthy", "with the faults", "lost"},
            {}};
    for (std::size_t k = 0; k < f.healthy.size() && k < f.faulty.size(); ++k)
      t.rows.push_back({f.healthy[k].kind + " " + f.healthy[k].name, units::format_bandwidth(f.healthy[k].max_flow),
                        units::format_bandwidth(f.faulty[k].max_flow),
                        units::format_bandwidth(f.healthy[k].max_flow - f.faulty[k].max_flow)});
    print_table(std::cout, t);
  }
  if (sampled)
    print_sampled(*sampled, scenario.variability->seed);
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
  c->add_option("--fidelity", o->fidelity, "Override the scenario's fidelity: " + allowed_names<netsim::Fidelity>());
  auto* out =
      c->add_option("--out", o->out, "Directory for summary.json, layers.csv and trace.json (default out/NAME)");
  auto* none = c->add_flag("--no-outputs", o->no_outputs, "Write no files")->excludes(out);
  c->add_flag("--report", o->report, "Also write report.html: the site, the network and the step as one page")
      ->excludes(none);
  c->add_flag("--json", o->json, "Print one JSON document (the summary)");
  c->add_option("--steps", o->steps, "Sample this many steps under the scenario's variability block")
      ->check(integer_in(1, 1000000));
  c->add_option("--seed", o->seed, "Override the variability block's seed (a scenario without one is refused)")
      ->check(integer_in(0, 1LL << 53));
  c->callback([o] { run(*o); });
}

void add_report_command(CLI::App& app)
{
  auto directory = std::make_shared<std::string>();
  auto json      = std::make_shared<bool>(false);
  auto* c        = app.add_subcommand("report", "Draw a run result (a `run --out` folder) as one self-contained HTML "
                                                       "page: DIR/report.html");
  c->add_option("result", *directory, "The folder `spansim run` wrote (it holds summary.json)")->required();
  c->add_flag("--json", *json, "Print one JSON document");
  c->callback([directory, json] {
    const auto path  = report::write_report(*directory);
    const auto bytes = std::filesystem::file_size(path);
    if (*json)
      std::cout << nlohmann::json{{"report", path}, {"bytes", bytes}}.dump(2) << "\n";
    else
      std::cout << "Wrote " << path << " (" << bytes << " bytes; opens offline in a browser)\n";
  });
}

} // namespace spansim::cli
