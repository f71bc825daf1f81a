// `spansim optimize`: search placement, parallelism and schedules; print the ranked table and why the winner won.
#include "cli/commands.hpp"
#include "cli/output.hpp"
#include "cli/slurm_options.hpp"
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/paths.hpp"
#include "common/units.hpp"
#include "experiments/optimize_farm.hpp"
#include "optimizer/dlrm_search.hpp"
#include "optimizer/optimizer.hpp"
#include "report/html.hpp"
#include "scenario/scenario.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

namespace spansim::cli {

namespace {

struct OptimizeOptions {
  std::string spec;
  std::string out;
  int top_k   = 0;
  int workers = -1;
  bool json   = false;
  bool report = false;
  SlurmFlags slurm;        ///< tiers 2 and 3 on Slurm (experiments/optimize_farm.hpp)
  std::string slurm_task;  ///< a batch script's role: an array task of this work list
  std::string slurm_merge; ///< a batch script's role: the merge job of this work list
};

// An array task or the merge job of `optimize --slurm` (the scripts it writes run these).
void run_slurm_role(const OptimizeOptions& o, const optimizer::OptimizeSpec& spec)
{
  if (!o.slurm_merge.empty()) {
    const auto j = experiments::merge_farm_phase(o.slurm_merge);
    std::cout << (o.json
                      ? j.dump(2)
                      : "merged " + j["recorded"].dump() + " of " + j["points"].dump() + " points of " + o.slurm_merge)
              << "\n";
    return;
  }
  const auto [task, tasks] = o.slurm.share();
  const auto started       = std::chrono::steady_clock::now();
  const auto done          = experiments::run_farm_task(spec, o.slurm_task, task, tasks, std::max(1, o.workers));
  std::cout << "task " << task << "/" << tasks << " of " << o.slurm_task << ": " << done << " points evaluated in "
            << fmt(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 4) << " s\n";
}

std::string pct(double x)
{
  return fixed(100 * x, 1) + "%";
}

// The label, with what `auto` chose for DP over the whole step when it settled on one algorithm.
std::string label_with_choice(const optimizer::Evaluation& e)
{
  std::string label        = e.point.label();
  const auto chosen        = e.metrics.collectives_chosen.find("dp");
  const std::string suffix = " dp:auto";
  if (chosen != e.metrics.collectives_chosen.end() && chosen->second.rfind("auto", 0) != 0 &&
      label.size() >= suffix.size() && label.compare(label.size() - suffix.size(), suffix.size(), suffix) == 0)
    label += "=" + chosen->second;
  return label;
}

nlohmann::json evaluation_json(const optimizer::Evaluation& e)
{
  nlohmann::json j = {{"configuration", e.point.to_json()},
                      {"label", e.point.label()},
                      {"lower_bound_s", e.lower_bound},
                      {"analytical_score_s", e.score},
                      {"metrics", e.metrics.to_json()}};
  if (e.refined)
    j["step_time_s"] = *e.refined;
  if (!e.failure.empty())
    j["refine_failed"] = e.failure; // step_time_s is then the analytical score
  if (e.ettr) {
    j["ettr"]             = *e.ettr;
    j["recovery"]         = e.recovery;
    j["effective_step_s"] = e.effective_step();
  }
  return j;
}

nlohmann::json failed_json(const optimizer::OptimizeResult& result)
{
  auto j = nlohmann::json::array();
  for (const auto& f : result.failed)
    j.push_back({{"point", f.point}, {"phase", f.phase}, {"why", f.why}});
  return j;
}

std::string capacity_text(double bandwidth)
{
  return bandwidth > 0 ? units::format_bandwidth(bandwidth) : "as built";
}

// The capacity choices as CSV (for optimizer/plot_capacity.py): cost, step, and whether each is on the front.
std::string write_capacity_csv(const std::string& dir, const optimizer::OptimizeSpec& spec,
                               const optimizer::OptimizeResult& result)
{
  const std::string path = path_in(dir, "capacity.csv");
  ReplacingFile out(path);
  auto& f = out.stream();
  f << "inter_building_Bps,inter_region_Bps,cost,cost_unit,step_s,on_front,configuration\n";
  for (const auto& c : result.capacity)
    f << c.inter_building << "," << c.inter_region << "," << c.cost << ",\"" << spec.capacity.unit << "\","
      << c.best.effective_step() << "," << (c.on_front ? 1 : 0) << ",\"" << c.best.point.label() << "\"\n";
  out.commit();
  return path;
}

// A scenario whose job is a DLRM: its sharding plan and towers searched, each candidate simulated.
void run_dlrm(const OptimizeOptions& o)
{
  const auto sc       = scenario::load_scenario(o.spec);
  const auto progress = progress_bar(!o.json && stderr_is_terminal());
  const auto search   = optimizer::search_dlrm(sc, [&](std::size_t done, std::size_t total) {
    if (progress)
      progress("DLRM sharding and towers", done, total);
  });
  if (o.json) {
    std::cout << optimizer::to_json(search).dump(2) << "\n";
    return;
  }
  std::cout << "DLRM search over " << sc.name << " (" << sc.job.gpus << " GPUs of " << sc.topology.name << ", "
            << name_of(sc.options.fidelity) << " fidelity): sharding x towers, ranked by step time\n\n";
  Table t{"Candidates", {"rank", "sharding", "towers", "step", "samples/s", "exposed EP", "boundary bytes"}, {}};
  int rank = 0;
  for (const auto& c : search.candidates) {
    const std::string towers =
        c.towers > 0 ? std::to_string(c.towers) + " per " + std::string(name_of(c.level)) : "none";
    if (!c.refused.empty()) {
      t.rows.push_back({"-", std::string(name_of(c.sharding)), towers, "refused", "", "", ""});
      continue;
    }
    t.rows.push_back({std::to_string(++rank), std::string(name_of(c.sharding)), towers,
                      fmt(c.step_time * 1e3, 4) + " ms", fmt(c.samples_per_second, 4),
                      fmt(c.exposed_ep * 1e3, 4) + " ms", fmt(c.boundary_bytes / 1e9, 4) + " GB"});
  }
  print_table(std::cout, t);
}

void run(const OptimizeOptions& o)
{
  if (o.slurm_task.empty() && o.slurm_merge.empty()) // the batch scripts' roles pass the options their task needs
    o.slurm.check_used();
  {
    // A scenario (it names a job) is a DLRM search; anything else is an optimize spec.
    const auto doc = spec::load_json_file(o.spec);
    if (doc.is_object() && doc.contains("job")) {
      if (o.slurm.any() || !o.slurm_task.empty() || !o.slurm_merge.empty())
        throw UsageError("--slurm searches an optimize spec's tiers 2 and 3; \"" + o.spec +
                         "\" is a DLRM scenario, whose search runs here");
      if (o.report)
        throw UsageError("--report draws an optimize spec's search; \"" + o.spec +
                         "\" is a DLRM scenario, whose search has no page yet");
      run_dlrm(o);
      return;
    }
  }
  auto spec = optimizer::load_optimize_spec(o.spec);
  if (o.top_k > 0)
    spec.top_k = o.top_k;
  if (o.workers >= 0)
    spec.workers = o.workers;
  const bool bar = !o.json && stderr_is_terminal();
  // Points per second since the phase began, and the best step so far.
  auto phase_start = std::make_shared<std::pair<std::string, std::chrono::steady_clock::time_point>>();
  auto progress    = [bar, phase_start](const std::string& phase, std::size_t done, std::size_t total, double best) {
    if (!bar)
      return;
    if (phase_start->first != phase)
      *phase_start = {phase, std::chrono::steady_clock::now()};
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - phase_start->second).count();
    const int width = 30;
    int filled      = total > 0 ? static_cast<int>(width * done / total) : width;
    std::cerr << "\r\033[K" << phase << " [" << std::string(filled, '#') << std::string(width - filled, ' ') << "] "
              << done << "/" << total;
    if (elapsed > 0 && done > 0)
      std::cerr << ", " << fmt(static_cast<double>(done) / elapsed, 3) << " points/s";
    if (best > 0)
      std::cerr << ", best " << units::format_time(best);
    std::cerr << std::flush;
    if (done >= total)
      std::cerr << "\n";
  };
  if (!o.slurm_task.empty() || !o.slurm_merge.empty()) {
    run_slurm_role(o, spec);
    return;
  }
  const std::string dir = o.out.empty() ? path_in("out/optimize", spec.name) : o.out;
  std::optional<experiments::SlurmFarm> farm;
  if (o.slurm.any()) {
    experiments::FarmOptions f;
    f.directory    = dir;
    f.spec_file    = o.spec;
    f.task_seconds = o.slurm.task_seconds();
    f.max_tasks    = o.slurm.max_tasks;
    f.slurm        = o.slurm.options();
    f.progress     = [progress](const std::string& what, std::size_t done, std::size_t total) {
      progress(what, done, total, 0);
    };
    farm.emplace(spec, f);
  }
  optimizer::OptimizeResult result;
  try {
    result = optimizer::optimize(spec, progress, farm ? optimizer::Farm(std::ref(*farm)) : optimizer::Farm{});
  } catch (const experiments::FarmDryRun& dry) {
    nlohmann::json j = {{"spansim", provenance()},
                        {"dry_run", true},
                        {"phase", dry.phase.to_json()},
                        {"array_script", dry.scripts.array_script},
                        {"merge_script", dry.scripts.merge_script}};
    if (o.json)
      std::cout << j.dump(2) << "\n";
    else
      std::cout << "Dry run: tier 2's first array (" << dry.phase.tasks << " tasks, " << dry.phase.per_task
                << " points each) written, not submitted:\n  " << dry.scripts.array_script << "\n  "
                << dry.scripts.merge_script << "\nLater phases need its results; run with --slurm to go on.\n";
    return;
  }

  // Every configuration as a scenario `spansim run` accepts.
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw UsageError("cannot create \"" + dir + "\": " + ec.message());
  auto write = [&](const std::string& name, const optimizer::Point& p) {
    std::string path = path_in(dir, name + ".json");
    write_file_replacing(path, optimizer::scenario_json(spec, p).dump(2) + "\n");
    return path;
  };
  std::vector<std::string> ranked_files;
  for (std::size_t i = 0; i < result.ranked.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "rank-%02zu", i + 1);
    ranked_files.push_back(write(name, result.ranked[i].point));
  }
  std::string baseline_file = write("baseline", result.baseline.point);
  std::string single_file = result.single_change.empty() ? "" : write("single-change", result.best_single_change.point);
  const std::string capacity_file = result.capacity.empty() ? "" : write_capacity_csv(dir, spec, result);

  const auto& best  = result.ranked.front();
  const double base = *result.baseline.refined;
  const double win  = *best.refined;
  if (o.json || o.report) {
    nlohmann::json j;
    j["spansim"] = provenance();
    j["spec"]    = spec.to_json();
    j["search"]  = {{"points", result.points},
                    {"feasible", result.feasible},
                    {"pruned", result.pruned},
                    {"bound_pruned", result.bound_pruned},
                    {"scored", result.scored},
                    {"failed", failed_json(result)},
                    {"worker_memory_bytes", result.worker_memory},
                    {"wall_seconds", result.wall_seconds},
                    {"scoring_wall_seconds", result.scoring_seconds}};
    if (farm) {
      j["slurm"] = nlohmann::json::array();
      for (const auto& p : farm->phases())
        j["slurm"].push_back(p.to_json());
    }
    if (result.screened > 0)
      j["search"]["screen"] = {{"combinations", result.screened},
                               {"kept", result.screen_kept},
                               {"wall_seconds", result.screen_seconds},
                               {"combinations_per_second", result.screened / std::max(1e-9, result.screen_seconds)}};
    j["ranked"] = nlohmann::json::array();
    for (std::size_t i = 0; i < result.ranked.size(); ++i) {
      auto e        = evaluation_json(result.ranked[i]);
      e["scenario"] = ranked_files[i];
      j["ranked"].push_back(e);
    }
    j["baseline"]             = evaluation_json(result.baseline);
    j["baseline"]["scenario"] = baseline_file;
    if (!single_file.empty()) {
      j["best_single_change"]             = evaluation_json(result.best_single_change);
      j["best_single_change"]["change"]   = result.single_change;
      j["best_single_change"]["scenario"] = single_file;
    }
    j["speedup_over_baseline"]    = base / win;
    j["best_change_by_dimension"] = nlohmann::json::array();
    for (const auto& d : result.by_dimension) {
      auto e       = evaluation_json(d.evaluation);
      e["change"]  = d.change;
      e["speedup"] = base / d.evaluation.effective_step();
      j["best_change_by_dimension"].push_back({{"dimension", name_of(d.dimension)}, {"best", e}});
    }
    if (!result.capacity.empty()) {
      nlohmann::json choices = nlohmann::json::array();
      for (const auto& c : result.capacity) {
        auto e                  = evaluation_json(c.best);
        e["inter_building_Bps"] = c.inter_building;
        e["inter_region_Bps"]   = c.inter_region;
        e["cost"]               = c.cost;
        e["on_front"]           = c.on_front;
        choices.push_back(e);
      }
      j["capacity"] = {
          {"cost", spec.capacity.to_json()},
          {"choices", choices},
          {"csv", capacity_file},
          {"cheapest_within",
           result.cheapest_within ? nlohmann::json(*result.cheapest_within) : nlohmann::json(nullptr)},
          {"best_in_budget", result.best_in_budget ? nlohmann::json(*result.best_in_budget) : nlohmann::json(nullptr)}};
    }
    if (o.report) {
      j["report"] = path_in(dir, "report.html");
      write_file_replacing(j["report"].get<std::string>(), report::optimize_page(j));
    }
    if (o.json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
  }

  std::cout << "Optimize " << spec.name << ": " << spec.base.gpus << " GPUs on " << spec.topology.name << "\n";
  if (result.screened > 0)
    std::cout << "Tier 1 (closed-form screen): " << result.screened << " combinations in "
              << fixed(result.screen_seconds, 1) << " s ("
              << fixed(result.screened / std::max(1e-9, result.screen_seconds) / 1e3, 0) << "K/s), best "
              << result.screen_kept << " kept for the analytical engine\n";
  std::cout << result.points << " points: " << result.feasible << " feasible, " << result.bound_pruned
            << " skipped by bound, " << result.scored << " scored analytically, " << result.ranked.size()
            << " re-simulated at " << name_of(spec.refine) << " fidelity (" << fixed(result.wall_seconds, 1) << " s)\n";
  if (!result.pruned.empty()) {
    std::cout << "Pruned:";
    for (const auto& [reason, n] : result.pruned)
      std::cout << " " << reason << " " << n << ";";
    std::cout << "\n";
  }
  for (const auto& f : result.failed)
    std::cout << "Failed (" << f.phase << (f.phase == "refine" ? ", ranked by its analytical score" : "")
              << "): " << f.point << ": " << f.why << "\n";
  std::cout << "\n";
  Table t{"Best configurations (step time at " + std::string(name_of(spec.refine)) + " fidelity)",
          {"#", "configuration", "step", "analytical", "MFU", "exposed tp", "exposed pp", "exposed dp", "bubble",
           "across buildings"},
          {}};
  // A MoE search's expert all-to-alls are often its largest exposed communication.
  const bool moe = spec.base.model.moe.experts > 0;
  if (moe)
    t.headers.insert(t.headers.begin() + 8, "exposed ep");
  if (spec.reliability) {
    t.title += spec.time_to_train ? "; ranked by step / ETTR (expected time to train)" : "";
    t.headers.insert(t.headers.begin() + 3, {"ETTR", "step / ETTR"});
  }
  auto row = [&](const std::string& rank, const optimizer::Evaluation& e) {
    const auto& m = e.metrics;
    std::vector<std::string> out{rank,
                                 label_with_choice(e),
                                 units::format_time(*e.refined) + (e.failure.empty() ? "" : " (failed)"),
                                 units::format_time(e.score),
                                 pct(m.mfu),
                                 units::format_time(m.exposed[workload::Dim::tp]),
                                 units::format_time(m.exposed[workload::Dim::pp]),
                                 units::format_time(m.exposed[workload::Dim::dp]),
                                 units::format_time(m.bubble),
                                 units::format_size(m.bytes_across_buildings.value_or(0.0))};
    if (moe)
      out.insert(out.begin() + 8, units::format_time(m.exposed[workload::Dim::ep]));
    if (spec.reliability)
      out.insert(out.begin() + 3,
                 {e.ettr ? pct(*e.ettr) + " (" + e.recovery + ")" : "-", units::format_time(e.effective_step())});
    return out;
  };
  for (std::size_t i = 0; i < result.ranked.size(); ++i)
    t.rows.push_back(row(std::to_string(i + 1), result.ranked[i]));
  t.rows.push_back(row("default", result.baseline));
  if (!single_file.empty())
    t.rows.push_back(row("1 change", result.best_single_change));
  print_table(std::cout, t);

  std::cout << "\nWhy: the winner, " << label_with_choice(best) << ", takes " << units::format_time(win)
            << " per step, " << fixed(base / win, 2) << "x the speed of the production default ("
            << label_with_choice(result.baseline) << ": " << units::format_time(base) << ").\n";
  if (!single_file.empty())
    std::cout << "The best single change from the default, " << result.single_change << ", gives "
              << units::format_time(*result.best_single_change.refined) << " ("
              << fixed(base / *result.best_single_change.refined, 2) << "x).\n";
  if (best.ettr && result.baseline.ettr)
    std::cout << "Counting failures (" << spec.reliability->model_name << ", "
              << fixed(spec.reliability->horizon_days, 0) << "-day Monte Carlo): the winner's wall time per step is "
              << units::format_time(best.effective_step()) << " (ETTR " << pct(*best.ettr) << ", " << best.recovery
              << " recovery), the default's " << units::format_time(result.baseline.effective_step()) << " (ETTR "
              << pct(*result.baseline.ettr) << ").\n";
  std::cout << "Against the default, the winner's step changes by:";
  const auto& mb = result.baseline.metrics;
  const auto& mw = best.metrics;
  for (auto d : workload::kDims) {
    const double delta = mw.exposed[d] - mb.exposed[d];
    if (std::abs(delta) > 1e-4 * base)
      std::cout << " exposed " << name_of(d) << " " << (delta > 0 ? "+" : "") << units::format_time(delta) << ";";
  }
  const double dbubble = mw.bubble - mb.bubble;
  std::cout << " bubble " << (dbubble > 0 ? "+" : "") << units::format_time(dbubble) << "; bytes across buildings "
            << units::format_size(mb.bytes_across_buildings.value_or(0.0)) << " -> "
            << units::format_size(mw.bytes_across_buildings.value_or(0.0)) << ".\n";
  if (!result.by_dimension.empty()) {
    std::cout << "\n";
    Table d{"Best single change from the default in each dimension (step at " + std::string(name_of(spec.refine)) +
                " fidelity)",
            {"dimension", "change", "step", "speed-up"},
            {}};
    for (const auto& c : result.by_dimension)
      d.rows.push_back({std::string(name_of(c.dimension)), c.change, units::format_time(c.evaluation.effective_step()),
                        fixed(base / c.evaluation.effective_step(), 3) + "x"});
    print_table(std::cout, d);
  }
  if (!result.capacity.empty()) {
    std::cout << "\n";
    Table c{"Long-haul capacity: the best configuration for each (cost in " + spec.capacity.unit +
                "; * on the Pareto front: faster than every cheaper choice)",
            {"inter-building", "inter-region", "cost", "best step", "front", "configuration"},
            {}};
    for (const auto& k : result.capacity)
      c.rows.push_back({capacity_text(k.inter_building), capacity_text(k.inter_region), fmt(k.cost, 4),
                        units::format_time(k.best.effective_step()), k.on_front ? "*" : "", label_with_choice(k.best)});
    print_table(std::cout, c);
    if (result.cheapest_within) {
      const auto& k = result.capacity[*result.cheapest_within];
      std::cout << "Cheapest within " << pct(spec.capacity.within) << " of the best step: inter-building "
                << capacity_text(k.inter_building) << ", inter-region " << capacity_text(k.inter_region) << " ("
                << fmt(k.cost, 4) << " " << spec.capacity.unit << ", " << units::format_time(k.best.effective_step())
                << ").\n";
    }
    if (spec.capacity.budget)
      std::cout << "Best step for a budget of " << fmt(*spec.capacity.budget, 4) << " " << spec.capacity.unit << ": "
                << (result.best_in_budget
                        ? units::format_time(result.capacity[*result.best_in_budget].best.effective_step()) +
                              " (inter-region " + capacity_text(result.capacity[*result.best_in_budget].inter_region) +
                              ")"
                        : std::string("no capacity choice fits"))
                << ".\n";
    std::cout << "Front as CSV: " << capacity_file << " (plot: /usr/bin/python3 optimizer/plot_capacity.py "
              << capacity_file << ")\n";
  }
  std::cout << "\nScenarios (re-run any with `spansim run FILE`): " << dir << "/rank-NN.json, " << baseline_file
            << (single_file.empty() ? "" : ", " + single_file) << "\n";
  if (o.report)
    std::cout << "Report: " << path_in(dir, "report.html") << " (opens offline in a browser)\n";
}

} // namespace

void add_optimize_command(CLI::App& app)
{
  auto o  = std::make_shared<OptimizeOptions>();
  auto* c = app.add_subcommand("optimize", "Search placement, parallelism and schedules for the shortest step");
  c->add_option("spec", o->spec,
                "Optimize spec (topology, model, GPUs, batch, search space), or a scenario whose job is a DLRM "
                "(its sharding and towers are searched)")
      ->required();
  c->add_option("--out", o->out, "Directory for the scenario files (default out/optimize/NAME)");
  c->add_option("--top-k", o->top_k, "Configurations re-simulated at the refine fidelity (default: the spec's)")
      ->check(integer_in(1, 1000));
  c->add_option("--workers", o->workers, "Child processes (default: the spec's, 0 = one per core)")
      ->check(integer_in(0, 256));
  c->add_flag("--json", o->json, "Print one JSON document");
  c->add_flag("--report", o->report,
              "Also write OUT/report.html: the winner against the baselines, the ranking, "
              "the capacity front");
  add_slurm_flags(c, o->slurm, "Tiers 2 and 3");
  // The roles the batch scripts run; not for people.
  c->add_option("--slurm-task", o->slurm_task)->group("");
  c->add_option("--slurm-merge", o->slurm_merge)->group("");
  c->callback([o] { run(*o); });
}

} // namespace spansim::cli
