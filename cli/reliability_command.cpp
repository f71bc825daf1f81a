// `spansim reliability`: the goodput of a whole training run once failures, checkpoints and restarts count.
#include "cli/commands.hpp"
#include "cli/output.hpp"
#include "common/error.hpp"
#include "common/paths.hpp"
#include "common/units.hpp"
#include "reliability/reliability.hpp"
#include "scenario/scenario.hpp"

#include <cmath>
#include <iostream>
#include <memory>
#include <optional>

namespace spansim::cli {

namespace {

struct ReliabilityOptions {
  std::string scenario;
  std::string fidelity = "analytical";
  double days          = 0;
  double tokens        = 0;
  int trials           = 200;
  int steps            = 200;
  long long seed       = -1;
  std::string recovery;
  std::string plot;
  std::string python = "/usr/bin/python3"; // Debian's, where python3-matplotlib installs
  bool json          = false;
};

// Draws the result with reliability/plot_reliability.py; the result JSON is written next to the figure.
void plot(const ReliabilityOptions& o, const nlohmann::json& doc)
{
  const std::string data = o.plot + ".json";
  write_file_replacing(data, doc.dump(2) + "\n");
  const std::string script = std::string(SPANSIM_SOURCE_DIR) + "/reliability/plot_reliability.py";
  run_plot_script({o.python, script, data, "--out", o.plot});
}

// The ETTR with its spread over trials and its closed form: one trial has no spread, and a "+- 0.0%" would read as a
// certain figure.
std::string ettr_text(const reliability::RunOutcome& outcome, int trials)
{
  std::string text = percent(outcome.ettr);
  std::string note = trials > 1 ? "" : "one trial: no spread";
  if (trials > 1)
    text += " +- " + percent(outcome.ettr_stddev);
  if (outcome.ettr_closed_form > 0)
    note += (note.empty() ? "" : "; ") + std::string("closed form ") + percent(outcome.ettr_closed_form);
  return note.empty() ? text : text + " (" + note + ")";
}

void run(const ReliabilityOptions& o)
{
  auto sc = scenario::load_scenario(o.scenario);
  if (!sc.reliability)
    throw UsageError(sc.file + " has no \"reliability\" block (failure model, checkpoints, recovery: "
                               "reliability/README.md)");
  if (o.days > 0 && o.tokens > 0)
    throw UsageError("give at most one of --days and --tokens");
  // The cap on every time spansim reads (units.cpp): a horizon past it would run for ever.
  constexpr double kMaxSeconds = 1e10;
  if (o.days * 86400 > kMaxSeconds)
    throw UsageError("--days " + fmt(o.days, 6) + " is past the cap on times, 1e10 s (about 115,741 days)");
  sc.options.fidelity = parse_enum<netsim::Fidelity>(o.fidelity, "fidelity");
  if (o.seed >= 0)
    sc.reliability->seed = static_cast<std::uint64_t>(o.seed);
  if (!o.recovery.empty()) {
    sc.reliability->recovery = parse_enum<reliability::Recovery>(o.recovery, "recovery");
    if (sc.reliability->recovery == reliability::Recovery::replica &&
        sc.job.parallelism.dp_mode == workload::DataParallelMode::fsdp)
      throw UsageError("--recovery replica needs data-parallel replicas (data_parallel \"hsdp\" or \"ddp\"); the job "
                       "of " +
                       sc.file + " is fsdp");
  }
  const auto progress = progress_bar(!o.json && stderr_is_terminal());
  if (progress)
    progress("simulating the step", 0, 1);
  const auto run = scenario::run_scenario(sc);
  double step    = run.result.step_time;
  std::optional<reliability::SampledSteps> sampled;
  if (sc.variability) {
    reliability::SampleOptions so;
    so.steps    = o.steps;
    so.progress = progress;
    sampled     = reliability::sample_steps(
            {run.placed->topology(), run.placed->graph(), run.placed->placement(), sc.placement, sc.options, run.result},
            *sc.variability, so);
    step = sampled->mean;
  }
  const auto& spec = *sc.reliability;
  const auto shape = reliability::run_shape(sc.job, run.placed->topology(), run.placed->placement(), spec, step);
  const auto costs = reliability::costs(spec, shape);
  if (o.tokens > 0 && o.tokens / shape.tokens_per_step * step > kMaxSeconds)
    throw UsageError("--tokens " + fmt(o.tokens, 6) + " takes " + fmt(o.tokens / shape.tokens_per_step * step, 4) +
                     " s at " + fmt(shape.tokens_per_step / step, 4) +
                     " tokens/s even without failures, past the cap on times, 1e10 s");
  // A horizon or budget shorter than a step trains nothing: its ETTR would mean nothing.
  if (o.days > 0 && o.days * 86400 < step)
    throw UsageError("--days " + fmt(o.days, 6) + " is shorter than one step (" + units::format_time(step) +
                     "): the run would train nothing");
  if (o.tokens > 0 && o.tokens < shape.tokens_per_step)
    throw UsageError("--tokens " + fmt(o.tokens, 6) + " is fewer than one step's " + fmt(shape.tokens_per_step, 6) +
                     ": the run would train nothing");
  reliability::Horizon h;
  h.days   = o.days > 0 || o.tokens > 0 ? o.days : spec.horizon_days;
  h.tokens = o.tokens;
  h.trials = o.trials;
  if (progress)
    progress("Monte Carlo of the run", 0, 1);
  const auto outcome = reliability::simulate_run(spec, shape, costs, h);
  if (progress)
    progress("Monte Carlo of the run", 1, 1);
  // ETTR against the checkpoint interval (closed form, synchronous recovery), for the plot and the optimum.
  const double job_rate =
      spec.recovery == reliability::Recovery::replica ? costs.failure_rate - costs.replica_rate : costs.failure_rate;
  nlohmann::json sweep = nlohmann::json::array();
  if (job_rate > 0)
    for (double f : {0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, 8.0})
      sweep.push_back(
          {{"interval_s", f * costs.interval},
           {"ettr", reliability::ettr_exact(f * costs.interval, costs.checkpoint_write, costs.restart, 1 / job_rate)}});
  {
    nlohmann::json doc = {{"spansim", provenance()},
                          {"scenario", sc.name},
                          {"configuration", reliability::to_json(spec)},
                          {"step_time_s", step},
                          {"deterministic_step_time_s", run.result.step_time},
                          {"horizon", {{"days", h.days}, {"tokens", h.tokens}, {"trials", h.trials}}},
                          {"shape",
                           {{"gpus", shape.gpus},
                            {"nodes", shape.nodes},
                            {"buildings", shape.buildings},
                            {"replicas", shape.replicas},
                            {"parameters", shape.parameters},
                            {"tokens_per_step", shape.tokens_per_step}}},
                          {"costs", costs.to_json()},
                          {"outcome", outcome.to_json()},
                          {"ettr_by_interval", sweep}};
    if (sampled)
      doc["sampled_steps"] = sampled->to_json();
    if (!o.plot.empty())
      plot(o, doc);
    if (o.json) {
      std::cout << doc.dump(2) << "\n";
      return;
    }
  }
  const auto& job = sc.job;
  std::cout << "Scenario " << sc.name << ": " << job.model.name << " on " << job.gpus << " " << job.gpu.name
            << " GPUs, " << name_of(spec.recovery) << " recovery, failure model " << spec.model_name << " (seed "
            << spec.seed << ", " << o.trials << " trials)\n";
  std::cout << "Step: " << units::format_time(step)
            << (sampled ? " (mean of " + std::to_string(sampled->step_times.size()) + " sampled steps; simulated " +
                              units::format_time(run.result.step_time) + ")"
                        : " (simulated, no variability block)")
            << "\n\n";
  Table comps{"Failure model", {"component", "units", "MTTF per unit", "failures/day", "scope"}, {}};
  for (const auto& c : spec.components) {
    const double units = reliability::units_of(c, shape);
    const char* per    = c.per == reliability::Component::Per::gpu    ? " GPUs"
                         : c.per == reliability::Component::Per::node ? " nodes"
                         : c.per == reliability::Component::Per::job  ? " job"
                                                                      : " buildings";
    comps.rows.push_back({c.name, fmt(units, 6) + per, units::format_time(c.mttf), fixed(units / c.mttf * 86400, 2),
                          c.replica_scoped ? "replica" : "job"});
  }
  comps.rows.push_back(
      {"all", "", units::format_time(1 / costs.failure_rate), fixed(costs.failure_rate * 86400, 2), ""});
  print_table(std::cout, comps);
  std::cout << "\n";
  Table c{"Costs", {"quantity", "value"}, {}};
  c.rows = {{"checkpoint", units::format_size(costs.checkpoint_bytes) + " (" + fixed(spec.bytes_per_parameter, 0) +
                               " bytes per parameter)"},
            {"checkpoint write (blocking)", units::format_time(costs.checkpoint_write)},
            {"restart (launch, NCCL, loader, read)", units::format_time(costs.restart)},
            {"checkpoint interval in force",
             units::format_time(costs.interval) + (spec.interval > 0 ? " (given)" : " (maximises ETTR)")},
            {"Young sqrt(2 delta M)", units::format_time(costs.young)},
            {"Daly, higher order", units::format_time(costs.daly)}};
  print_table(std::cout, c);
  std::cout << "\n";
  Table r{"The run (means over trials)", {"quantity", "value"}, {}};
  r.rows = {
      {"wall-clock time", fixed(outcome.wall_seconds / 86400, 2) + " days"},
      {"tokens trained", fmt(outcome.tokens, 4)},
      {"interruptions",
       fixed(outcome.interruptions, 1) +
           (outcome.replica_failures > 0 ? " (" + fixed(outcome.replica_failures, 1) + " recovered by replicas)" : "")},
      {"ETTR (goodput)", ettr_text(outcome, o.trials)},
      {"lost: re-computation", units::format_time(outcome.lost_recompute)},
      {"lost: restarts", units::format_time(outcome.lost_restart)},
      {"lost: checkpoint writes", units::format_time(outcome.lost_checkpoint)},
      {"lost: replicas out (their share)", units::format_time(outcome.lost_degraded)},
      {"lost: replica stalls", units::format_time(outcome.lost_stall)}};
  if (spec.spares_modelled) {
    r.rows.push_back(
        {"hot spares used (pool of " + std::to_string(spec.spare_nodes) + " nodes)", fixed(outcome.spares_used, 1)});
    r.rows.push_back({"waiting for a repaired node (spare pool empty)", units::format_time(outcome.lost_spare_wait)});
    if (shape.spare_gpus_per_node > 0)
      r.rows.push_back({"of which a spare GPU of the node (" + fixed(shape.spare_gpus_per_node, 0) + " per node)",
                        fixed(outcome.gpu_spares_used, 1)});
  }
  print_table(std::cout, r);
  if (!o.plot.empty())
    std::cout << "\nWritten: " << o.plot << " (and its data, " << o.plot << ".json)\n";
}

} // namespace

void add_reliability_command(CLI::App& app)
{
  auto o  = std::make_shared<ReliabilityOptions>();
  auto* c = app.add_subcommand("reliability", "Goodput of a training run under failures: a seeded Monte Carlo with "
                                              "checkpoints, restarts and replica recovery");
  c->add_option("scenario", o->scenario, "Scenario with a reliability block")->required();
  c->add_option("--days", o->days, "Wall-clock days to run (default: the block's horizon)")
      ->check(finite_number(0, true));
  c->add_option("--tokens", o->tokens, "Or: a token budget to train")->check(finite_number(0, true));
  c->add_option("--trials", o->trials, "Monte Carlo trials")->check(integer_in(1, 100000));
  c->add_option("--steps", o->steps, "Steps sampled under the variability block, if any")
      ->check(integer_in(1, 1000000));
  c->add_option("--seed", o->seed, "Override the reliability block's seed")->check(integer_in(0, 1LL << 53));
  c->add_option("--fidelity", o->fidelity, "Engine of the step simulation (default analytical)");
  c->add_option("--recovery", o->recovery, "Override the recovery mode: synchronous, replica");
  c->add_option("--plot", o->plot, "Draw ETTR against the checkpoint interval and the time lost into this PNG");
  c->add_option("--python", o->python, "Python interpreter with matplotlib (for --plot)");
  c->add_flag("--json", o->json, "Print one JSON document");
  c->callback([o] { run(*o); });
}

} // namespace spansim::cli
