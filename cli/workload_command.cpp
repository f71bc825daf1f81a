// `spansim workload describe JOB [--json]`: the training-step graph's size, FLOPs, traffic per parallelism
// dimension, memory per GPU and the compute-and-bubble lower bound on the step time.
#include "cli/commands.hpp"
#include "cli/output.hpp"
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/paths.hpp"
#include "common/units.hpp"
#include "placement/placement.hpp"
#include "scenario/scenario.hpp"
#include "traces/kineto.hpp"
#include "traces/traces.hpp"
#include "workload/workload.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>

namespace spansim::cli {

namespace {

struct WorkloadDescribeOptions {
  std::string job;
  bool json  = false;
  bool graph = false;
};

nlohmann::json memory_json(const workload::MemoryEstimate& m)
{
  return {{"weights_bytes", m.weights},
          {"gradients_bytes", m.gradients},
          {"optimizer_bytes", m.optimizer},
          {"activations_bytes", m.activations},
          {"total_bytes", m.total()}};
}

void describe_workload(const WorkloadDescribeOptions& o)
{
  if (o.graph && !o.json)
    throw UsageError("--graph lists every op as JSON: use it with --json");
  // A job of kind chakra describes the graph its trace holds.
  const auto doc                     = spec::load_json_file(o.job);
  const bool chakra                  = doc.is_object() && doc.contains("kind") && doc["kind"] == "chakra";
  const workload::JobSpec job        = chakra ? traces::load_chakra_job(doc, o.job, "$") : workload::load_job(o.job);
  const workload::StepGraph graph    = chakra ? traces::import_chakra(job) : workload::build_step_graph(job);
  const workload::StepSummary s      = workload::summarize(graph);
  const workload::ModelParams params = workload::count_params(job.model);
  const auto& par                    = job.parallelism;
  const double peak                  = job.gpu.peak(job.precision);
  const double mfu_bound             = s.model_flops / (s.step_lower_bound * double(job.gpus) * peak);

  if (o.json) {
    nlohmann::json traffic = nlohmann::json::object();
    for (workload::Dim d : workload::kDims)
      traffic[std::string(name_of(d))] = {{"per_gpu_max_bytes", s.traffic[d].per_gpu_max},
                                          {"job_total_bytes", s.traffic[d].job_total},
                                          {"buffer_per_gpu_bytes", s.traffic[d].buffer_per_gpu}};
    nlohmann::json stages = nlohmann::json::array();
    for (const auto& st : graph.stages)
      stages.push_back({{"stage", st.stage},
                        {"chunk_layers", st.chunk_layers},
                        {"ops", st.ops.size()},
                        {"params_per_gpu", st.params},
                        {"memory", memory_json(st.memory)}});
    nlohmann::json out{
        {"spansim", provenance()},
        {"job", job.name},
        {"model",
         {{"name", job.model.name},
          {"params_total", params.total},
          {"params_active", params.active},
          {"mtp_layers", job.model.mtp_layers}}},
        {"gpu", job.gpu.name},
        {"gpus", job.gpus},
        {"parallelism",
         {{"tp", par.tp},
          {"cp", par.cp},
          {"pp", par.pp},
          {"dp", par.dp},
          {"ep", par.ep},
          {"etp", par.etp},
          {"data_parallel", name_of(par.dp_mode)},
          {"pipeline_layout",
           par.pipeline_layout.empty() ? nlohmann::json(nullptr) : nlohmann::json(par.pipeline_layout)}}},
        {"schedule",
         {{"kind", name_of(job.schedule.kind)},
          {"virtual_stages", job.schedule.virtual_stages},
          {"micro_batches", graph.micro_batches}}},
        {"graph", {{"programs", s.programs}, {"ops", s.ops}, {"ranks", s.ranks}}},
        {"tokens_per_step", job.trace_only ? nlohmann::json(nullptr) : nlohmann::json(s.tokens)},
        {"model_flops_per_step", s.model_flops},
        {"hardware_flops_per_step", s.hardware_flops},
        {"traffic", traffic},
        {"memory_peak", memory_json(s.peak_memory)},
        {"memory_peak_stage", s.peak_memory_stage},
        {"hbm_capacity_bytes", job.gpu.hbm_capacity},
        {"stages", stages},
        {"step_time_lower_bound_seconds", s.step_lower_bound},
        {"busiest_stage_compute_seconds", s.stage_compute_max},
        {"bubble_fraction", s.bubble_fraction},
        // null for DualPipe and DualPipeV, whose bubble is no fraction of pp, v and m.
        {"bubble_formula", s.bubble_formula_text.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.bubble_formula)},
        {"bubble_formula_expression",
         s.bubble_formula_text.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.bubble_formula_text)},
        {"mfu_upper_bound", mfu_bound},
        {"calibration", workload::calibration_line(job)},
        {"effects_busiest_stage_s",
         {{"sustained_clock", s.effects.sustained_clock},
          {"kernel_gaps", s.effects.kernel_gaps},
          {"attention_by_length", s.effects.attention_by_length},
          {"grad_clipping", s.effects.grad_clipping}}}};
    if (!job.dlrm) {
      out["precision"] = workload::precision_line(job);
      out["kernels"]   = workload::kernels_line(job);
    }
    if (o.graph)
      out["step_graph"] = workload::to_json(graph);
    std::cout << out.dump(2) << "\n";
    return;
  }

  Table t{"job " + job.name, {"quantity", "value"}, {}};
  if (job.dlrm) {
    // A recommendation model: its tables and the plan they are sharded by.
    const auto& m = job.dlrm->model;
    double rows   = 0;
    for (const auto& tb : m.tables)
      rows += tb.count * tb.rows;
    const auto plan = workload::dlrm_plan(job);
    t.rows.push_back({"model", m.name + " (" + std::to_string(m.table_count()) + " tables, " + fmt(rows / 1e6) +
                                   "M rows of " + std::to_string(m.dim()) + ", " + fmt(rows * m.dim() / 1e9) +
                                   "B embedding parameters)"});
    t.rows.push_back({"sharding", std::string(name_of(plan.sharding)) + " over " + std::to_string(plan.group) +
                                      " GPUs" +
                                      (job.dlrm->towers > 0 ? ", " + std::to_string(job.dlrm->towers) + " towers per " +
                                                                  std::string(name_of(job.dlrm->tower_level))
                                                            : std::string())});
  } else if (job.trace_only) {
    // A foreign trace read without a model: its placeholder model sizes nothing, as run prints it.
    t.rows.push_back({"model", "- (a foreign trace read without a model)"});
  } else {
    t.rows.push_back(
        {"model", job.model.name + " (" + fmt(params.total / 1e9) + "B params, " + fmt(params.active / 1e9) +
                      "B active" +
                      (job.model.mtp_layers > 0 ? ", with " + std::to_string(job.model.mtp_layers) + " MTP module(s)"
                                                : std::string()) +
                      ")"});
  }
  t.rows.push_back({"gpus", std::to_string(job.gpus) + " x " + job.gpu.name});
  t.rows.push_back(
      {"parallelism", "tp " + std::to_string(par.tp) + ", cp " + std::to_string(par.cp) + ", pp " +
                          std::to_string(par.pp) + ", dp " + std::to_string(par.dp) + " (" +
                          std::string(name_of(par.dp_mode)) + "), ep " + std::to_string(par.ep) +
                          (par.etp != par.tp ? ", etp " + std::to_string(par.etp) : std::string()) +
                          (par.pipeline_layout.empty() ? std::string() : ", layout \"" + par.pipeline_layout + "\"")});
  t.rows.push_back({"schedule", std::string(name_of(job.schedule.kind)) + ", v " +
                                    std::to_string(job.schedule.virtual_stages) + ", " +
                                    std::to_string(graph.micro_batches) + " micro-batches"});
  t.rows.push_back({"graph", std::to_string(s.programs) + " stage programs, " + std::to_string(s.ops) + " ops, for " +
                                 std::to_string(s.ranks) + " ranks"});
  t.rows.push_back({"tokens per step", job.trace_only ? std::string("-") : fmt(s.tokens, 6)});
  t.rows.push_back({"model FLOPs per step", fmt(s.model_flops)});
  t.rows.push_back({"hardware FLOPs per step", fmt(s.hardware_flops) + " (with recompute)"});
  t.rows.push_back({"busiest stage compute", units::format_time(s.stage_compute_max)});
  t.rows.push_back({"calibration", workload::calibration_line(job)});
  if (!job.dlrm) {
    t.rows.push_back({"precision", workload::precision_line(job)});
    t.rows.push_back({"kernels", workload::kernels_line(job)});
  }
  t.rows.push_back({"of which effects", "clock " + units::format_time(s.effects.sustained_clock) + ", gaps " +
                                            units::format_time(s.effects.kernel_gaps) + ", attention " +
                                            units::format_time(s.effects.attention_by_length) + ", clipping " +
                                            units::format_time(s.effects.grad_clipping)});
  t.rows.push_back(
      {"bubble", fixed(100 * s.bubble_fraction, 2) + "% (" +
                     (s.bubble_formula_text.empty()
                          ? std::string(name_of(job.schedule.kind)) + ": no formula in pp, v and m"
                          : "formula " + s.bubble_formula_text + ": " + fixed(100 * s.bubble_formula, 2) + "%") +
                     ")"});
  t.rows.push_back({"step time lower bound", units::format_time(s.step_lower_bound) + " (compute and bubble only)"});
  t.rows.push_back({"MFU upper bound",
                    std::isfinite(mfu_bound) && !job.trace_only ? fixed(100 * mfu_bound, 1) + "%" : std::string("-")});
  print_table(std::cout, t);
  std::cout << "\n";

  Table tr{"bytes per step per parallelism dimension (sent, textbook ring/pairwise algorithms)",
           {"dimension", "per GPU (busiest stage)", "collective buffers per GPU", "whole job"},
           {}};
  for (workload::Dim d : workload::kDims)
    tr.rows.push_back({std::string(name_of(d)), units::format_size(s.traffic[d].per_gpu_max),
                       units::format_size(s.traffic[d].buffer_per_gpu), units::format_size(s.traffic[d].job_total)});
  print_table(std::cout, tr);
  std::cout << "\n";

  Table mt{"memory per GPU", {"stage", "weights", "gradients", "optimizer", "activations", "total", "of HBM"}, {}};
  for (const auto& st : graph.stages) {
    const auto& m = st.memory;
    mt.rows.push_back({std::to_string(st.stage), units::format_size(m.weights), units::format_size(m.gradients),
                       units::format_size(m.optimizer), units::format_size(m.activations),
                       units::format_size(m.total()), fixed(100 * m.total() / job.gpu.hbm_capacity, 1) + "%"});
  }
  print_table(std::cout, mt);
}

struct ChakraExportOptions {
  std::string input;
  std::string out;
  std::string prefix = "et";
  std::string ranks;
  bool representatives = false;
  bool json            = false;
};

// A job file, or a scenario (its placed step graph, rank order and job).
void export_chakra(const ChakraExportOptions& o)
{
  if (!is_safe_name(o.prefix))
    throw UsageError("--prefix: \"" + o.prefix + "\": " + unsafe_name_reason(o.prefix));
  const auto doc = spec::load_json_file(o.input);
  std::optional<scenario::Scenario> sc;
  std::shared_ptr<const scenario::PlacedStep> placed;
  workload::JobSpec job;
  workload::StepGraph graph;
  nlohmann::json job_json;
  std::vector<workload::Dim> order;
  if (doc.is_object() && doc.contains("topology")) {
    sc.emplace(scenario::parse_scenario(doc, o.input));
    if (!sc->job.trace.empty())
      throw UsageError(o.input + ": its job is already a Chakra trace (" + sc->job.trace + ")");
    placed        = std::make_shared<const scenario::PlacedStep>(*sc);
    job           = sc->job;
    graph         = placed->graph();
    order         = placed->placement().order();
    const auto& j = doc["job"];
    job_json      = j.is_string() ? spec::load_json_file(scenario::resolve_path(j.get<std::string>(), o.input)) : j;
  } else {
    job      = workload::load_job(o.input);
    graph    = workload::build_step_graph(job);
    order    = job.parallelism.order;
    job_json = doc;
  }
  const placement::RankLayout layout(job.parallelism, order);
  traces::ExportOptions options;
  options.prefix          = o.prefix;
  options.representatives = o.representatives;
  if (!o.ranks.empty())
    options.ranks = parse_index_list("--ranks", "rank", "the job", o.ranks, layout.ranks());
  const auto report = traces::export_chakra(graph, layout, job_json, o.out, options);
  if (o.json) {
    auto j       = report.to_json();
    j["spansim"] = provenance();
    j["job"]     = job.name;
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << "Exported " << job.name << " (" << layout.ranks() << " ranks, " << job.parallelism.pp
            << " pipeline stages) as Chakra ETs, schema " << traces::kChakraSchemaVersion << "\n";
  Table t{"", {"what", "value"}, {}};
  t.rows = {{"ET files", std::to_string(report.files.size()) + " (" + o.out + "/" + o.prefix + ".<rank>.et)"},
            {"nodes", std::to_string(report.nodes)},
            {"communicator groups", report.comm_groups},
            {"rank map", report.rank_map.empty() ? "-" : report.rank_map},
            {"wall time", fixed(report.seconds, 2) + " s"}};
  print_table(std::cout, t);
  std::cout << "ASTRA-sim: --workload-configuration=" << o.out << "/" << o.prefix
            << " --comm-group-configuration=" << report.comm_groups << "\n";
}

struct KinetoOptions {
  std::string trace;
  std::string out;
  std::string scenario;
  bool json = false;
};

// Measured kernel tables from a Kineto trace; with a scenario, its step replayed with them against the trace's
// own iteration time. Everything is read and checked first: a refused import writes nothing.
void import_kineto(const KinetoOptions& o)
{
  const auto k = traces::read_kineto(o.trace);
  nlohmann::json replay;
  if (!o.scenario.empty()) {
    auto sc = scenario::load_scenario(o.scenario);
    // A replay with nothing measured in it would only repeat the model: no error figure means anything then.
    if (k.kernels.gemm.empty() && k.kernels.attention.empty())
      throw TraceError(o.trace, "",
                       "no BF16 or FP8 GEMM or attention kernel was attached to its op (" +
                           std::to_string(k.attached_kernels) + " of " + std::to_string(k.gpu_kernels) +
                           " kernels linked to a CPU op), so there is nothing to replay " + o.scenario + " with");
    const auto modelled = scenario::run_scenario(sc);
    if (!k.kernels.gemm.empty()) {
      sc.job.gpu.measured.gemm      = k.kernels.gemm;
      sc.job.gpu.measured.gemm_file = k.kernels.gemm_file;
    }
    if (!k.kernels.attention.empty()) {
      sc.job.gpu.measured.attention      = k.kernels.attention;
      sc.job.gpu.measured.attention_file = k.kernels.attention_file;
    }
    const auto replayed = scenario::run_scenario(sc);
    const auto covered =
        traces::replay_coverage(k, o.trace, o.scenario, modelled.placed->graph(), replayed.placed->graph());
    const double step = replayed.result.step_time;
    const double iter = k.iteration_seconds();
    replay            = {{"scenario", o.scenario},
                         {"modelled_step_s", modelled.result.step_time},
                         {"replayed_step_s", step},
                         {"timed_ops", covered.timed_ops},
                         {"compute_ops", covered.compute_ops},
                         {"trace_iteration_s", iter},
                         {"error", iter > 0 ? nlohmann::json((step - iter) / iter) : nlohmann::json(nullptr)}};
  }
  const auto written = traces::write_measured_tables(k, o.out);
  if (o.json) {
    nlohmann::json j = {{"spansim", provenance()},
                        {"trace", o.trace},
                        {"written", written},
                        {"gemm_shapes", k.kernels.gemm.size()},
                        {"other_gemm_shapes", k.other_gemms.size()},
                        {"attention_shapes", k.kernels.attention.size()},
                        {"gpu_kernels", k.gpu_kernels},
                        {"attached_kernels", k.attached_kernels},
                        {"gemm_kernels", k.gemm_kernels},
                        {"matched_kernels", k.matched_kernels},
                        {"gpu_seconds", k.gpu_seconds},
                        {"matched_seconds", k.matched_seconds},
                        {"unmatched", k.unmatched},
                        {"iterations_s", k.iterations},
                        {"iteration_s", k.iteration_seconds()},
                        {"truncated_iteration_s",
                         k.truncated_iteration > 0 ? nlohmann::json(k.truncated_iteration) : nlohmann::json(nullptr)}};
    if (!replay.is_null())
      j["replay"] = replay;
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << "Kineto trace " << o.trace << ": " << k.gpu_kernels << " GPU kernels, " << k.attached_kernels
            << " linked to the CPU op that launched them, " << k.gemm_kernels << " launched by GEMM ops, "
            << k.matched_kernels << " in the tables ("
            << fixed(k.gpu_seconds > 0 ? 100 * k.matched_seconds / k.gpu_seconds : 0, 1) << "% of GPU kernel time)\n";
  if (!k.unmatched.empty()) {
    // The largest reasons first; the long tail of element-wise ops folds into one row (--json lists them all).
    std::vector<std::pair<std::size_t, std::string>> reasons;
    for (const auto& [reason, n] : k.unmatched)
      reasons.emplace_back(n, reason);
    std::stable_sort(reasons.begin(), reasons.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    Table why{"Kernels left out of the tables", {"why", "kernels"}, {}};
    constexpr std::size_t kShown = 10;
    std::size_t rest = 0, rest_reasons = 0;
    for (std::size_t i = 0; i < reasons.size(); ++i)
      if (i < kShown) {
        why.rows.push_back({reasons[i].second, std::to_string(reasons[i].first)});
      } else {
        rest += reasons[i].first;
        ++rest_reasons;
      }
    if (rest_reasons > 0)
      why.rows.push_back({std::to_string(rest_reasons) + " other reasons (--json lists them)", std::to_string(rest)});
    print_table(std::cout, why);
  }
  Table t{"", {"what", "value"}, {}};
  t.rows = {{"GEMM shapes (BF16, FP8)", std::to_string(k.kernels.gemm.size())},
            {"other GEMM shapes (FP32, TF32, FP16, batched)", std::to_string(k.other_gemms.size())},
            {"attention shapes", std::to_string(k.kernels.attention.size())},
            {"iterations (ProfilerStep)",
             std::to_string(k.iterations.size()) + ", median " + units::format_time(k.iteration_seconds()) +
                 (k.truncated_iteration > 0 ? "; a last one of " + units::format_time(k.truncated_iteration) +
                                                  " left out (cut by the profiler's stop: under half the median)"
                                            : "")}};
  for (const auto& w : written)
    t.rows.push_back({"written", w});
  if (!replay.is_null()) {
    t.rows.push_back({"modelled step", units::format_time(replay["modelled_step_s"].get<double>())});
    t.rows.push_back({"replayed step (measured kernels)", units::format_time(replay["replayed_step_s"].get<double>())});
    t.rows.push_back({"compute ops timed from the measured kernels",
                      replay["timed_ops"].dump() + " of " + replay["compute_ops"].dump()});
    if (!replay["error"].is_null())
      t.rows.push_back(
          {"replay error against the trace's iteration", fixed(100 * replay["error"].get<double>(), 2) + "%"});
  }
  print_table(std::cout, t);
  std::string keys;
  if (!k.kernels.gemm.empty())
    keys += "\"gemm\": \"" + o.out + "/gemm.csv\"";
  if (!k.kernels.attention.empty())
    keys += std::string(keys.empty() ? "" : ", ") + "\"attention\": \"" + o.out + "/attention.csv\"";
  if (!keys.empty())
    std::cout << "Use them in a job: \"measured_kernels\": {" << keys << "}\n";
}

} // namespace

void add_workload_command(CLI::App& app)
{
  CLI::App* wl = app.add_subcommand("workload", "Training jobs and their training-step graphs");
  wl->require_subcommand(1);
  auto opts   = std::make_shared<WorkloadDescribeOptions>();
  CLI::App* d = wl->add_subcommand("describe", "Graph size, FLOPs, bytes per dimension, memory, step-time bound");
  d->add_option("job", opts->job, "Job spec (JSON), e.g. examples/jobs/llama3-405b-8k-h100.json")->required();
  d->add_flag("--json", opts->json, "Print one JSON document");
  d->add_flag("--graph", opts->graph, "With --json, include every op of every stage program");
  d->callback([opts]() { describe_workload(*opts); });
  auto eo = std::make_shared<ChakraExportOptions>();
  CLI::App* e =
      wl->add_subcommand("export-chakra", "Write a job's or scenario's step graph as Chakra ETs, one per rank");
  e->add_option("input", eo->input, "Job or scenario (JSON)")->required();
  e->add_option("--out", eo->out, "Folder for PREFIX.<rank>.et and PREFIX.comm_groups.json")->required();
  e->add_option("--prefix", eo->prefix, "File prefix (default et)");
  e->add_option("--ranks", eo->ranks, "Only these ranks, e.g. 0-7,64");
  e->add_flag("--representatives", eo->representatives,
              "One rank per pipeline stage, and PREFIX.rank_map.json naming the ranks each stands for");
  e->add_flag("--json", eo->json, "Print one JSON document");
  e->callback([eo]() { export_chakra(*eo); });
  auto ko     = std::make_shared<KinetoOptions>();
  CLI::App* k = wl->add_subcommand("import-kineto", "Measured kernel tables from a PyTorch profiler (Kineto) trace");
  k->add_option("trace", ko->trace, "Chrome-trace JSON written by torch.profiler (.json or .json.gz)")->required();
  k->add_option("--out", ko->out, "Folder for gemm.csv, attention.csv and gemm_other.csv")->required();
  k->add_option("--scenario", ko->scenario,
                "Replay this scenario with the measured kernels and compare with the trace's iteration time");
  k->add_flag("--json", ko->json, "Print one JSON document");
  k->callback([ko]() { import_kineto(*ko); });
}

} // namespace spansim::cli
