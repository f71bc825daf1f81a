// The JSON summary of a run: what was simulated (the effective configuration, with version and git hash) and
// what came out (metrics, breakdown, network use, boundary crossings).
#include "report/report.hpp"

#include "common/units.hpp"
#include "common/version.hpp"

#include <cstdio>

namespace spansim::report {

using nlohmann::json;

BreakdownStats breakdown_stats(const netsim::StepResult& r)
{
  BreakdownStats s;
  const double n = static_cast<double>(r.stages.size());
  auto add       = [&](PartStats& p, double v) {
    p.mean += v / n;
    p.max = std::max(p.max, v);
  };
  for (const auto& b : r.stages) {
    for (std::size_t k = 0; k < netsim::kParts.size(); ++k)
      add(s.parts[k], b.part(netsim::kParts[k]));
    add(s.exposed_total, b.exposed_total());
  }
  return s;
}

workload::OpEffects effect_seconds(const scenario::ScenarioRun& run)
{
  workload::OpEffects e;
  const auto& stages = run.placed->graph().stages;
  const double n     = static_cast<double>(stages.size());
  for (const auto& st : stages)
    for (const auto& op : st.ops) {
      e.sustained_clock += op.effects.sustained_clock / n;
      e.kernel_gaps += op.effects.kernel_gaps / n;
      e.attention_by_length += op.effects.attention_by_length / n;
      e.grad_clipping += op.effects.grad_clipping / n;
    }
  for (double s : run.result.sm_contention)
    e.sm_contention += s / n;
  return e;
}

namespace {

json calibration_json(const workload::JobSpec& job)
{
  const auto& c = job.calibration;
  json effects;
  for (const auto& [key, member] : workload::kEffectSwitches)
    effects[std::string(key)] = job.effects.*member;
  return {{"profile", c.name},
          {"gpus", c.gpus},
          {"clock_fraction", c.clock_fraction},
          {"kernel_gap_s", c.kernel_gap},
          {"alltoall_efficiency", c.alltoall_efficiency},
          {"moe_host_s", c.moe_host},
          {"moe_host_overlap_s", c.moe_host_overlap},
          {"source", c.source},
          {"effects", effects}};
}

json configuration(const scenario::ScenarioRun& run)
{
  const auto& sc  = run.scenario;
  const auto& job = sc.job;
  json algorithms;
  for (workload::Dim d : workload::kDims)
    algorithms[std::string(name_of(d))] = name_of(sc.options.algorithms[d]);
  json order = json::array();
  for (workload::Dim d : run.placed->placement().order())
    order.push_back(name_of(d));
  json out = {
      {"topology", sc.topology.to_json()},
      {"job",
       {{"name", job.name},
        {"file", job.file},
        {"model", job.model.name},
        {"gpu", job.gpu.name},
        {"gpus", job.gpus},
        {"tp", job.parallelism.tp},
        {"cp", job.parallelism.cp},
        {"pp", job.parallelism.pp},
        {"dp", job.parallelism.dp},
        {"ep", job.parallelism.ep},
        {"etp", job.parallelism.etp},
        {"pipeline_layout", job.parallelism.pipeline_layout.empty() ? nlohmann::json(nullptr)
                                                                    : nlohmann::json(job.parallelism.pipeline_layout)},
        {"mtp_layers", job.model.mtp_layers},
        {"micro_batches", job.micro_batches()},
        {"tokens_per_step", job.tokens_per_step()},
        {"calibration", calibration_json(job)},
        {"precision", workload::precision_spec(job)},
        {"kernels", workload::kernels_spec(job)},
        {"moe", workload::dispatch_json(job)},
        {"trace", job.trace.empty() ? nlohmann::json(nullptr) : nlohmann::json(job.trace)},
        {"trace_only", job.trace_only},
        {"trace_notes", run.placed->graph().notes}}},
      {"placement", {{"order", order}, {"buildings", run.placement.buildings_used}}},
      {"fidelity", name_of(sc.options.fidelity)},
      {"collectives",
       {{"algorithms", algorithms},
        {"auto", sc.options.choose_per_step ? "per-step" : "per-call"},
        {"alltoall", name_of(sc.options.all_to_all)},
        {"flows_per_pair", sc.options.flows_per_pair},
        {"nccl", sc.options.nccl.to_json()}}},
      {"engine", run.result.engine}};
  if (sc.faults) {
    json links = json::array();
    for (const auto& l : sc.faults->links)
      links.push_back({{"name", l.name}, {"bandwidth", l.bandwidth}});
    json switches = json::array(), nodes = json::array();
    for (const auto& s : sc.faults->switches)
      switches.push_back(s.name);
    for (const auto& n : sc.faults->nodes)
      nodes.push_back(n.name);
    out["faults"] = {
        {"links", links},
        {"switches", switches},
        {"nodes", nodes},
        {"random",
         {{"seed", sc.faults->seed}, {"links", sc.faults->random_links}, {"bandwidth", sc.faults->random_bandwidth}}}};
  }
  if (!sc.options.compression.empty())
    out["compression"] = sc.options.compression.to_json();
  if (sc.diloco)
    out["diloco"] = sc.diloco->to_json();
  if (sc.variability)
    out["variability"] = reliability::to_json(*sc.variability);
  if (sc.reliability)
    out["reliability"] = reliability::to_json(*sc.reliability);
  return out;
}

json breakdown(const scenario::ScenarioRun& run, bool with_stages)
{
  const auto& r    = run.result;
  const auto stats = breakdown_stats(r);
  json over_stages;
  for (auto p : netsim::kParts)
    over_stages[std::string(name_of(p)) + "_s"] = {{"mean", stats[p].mean}, {"max", stats[p].max}};
  over_stages["exposed_total_s"] = {{"mean", stats.exposed_total.mean}, {"max", stats.exposed_total.max}};
  if (!run.scenario.options.compression.empty()) {
    double mean = 0, max = 0;
    for (const auto& s : r.stages) {
      mean += s.compression / static_cast<double>(r.stages.size());
      max = std::max(max, s.compression);
    }
    // GPU time on the communication streams; the compute stream waited for the part counted in exposed_*.
    over_stages["compression_gpu_s"] = {{"mean", mean}, {"max", max}};
  }
  json out = {{"over_stages", over_stages}, {"parts", json::array()}};
  // Of the compute part: what the production effects add (mean over stages).
  const auto fx    = effect_seconds(run);
  out["effects_s"] = {{"sustained_clock", fx.sustained_clock},
                      {"kernel_gaps", fx.kernel_gaps},
                      {"attention_by_length", fx.attention_by_length},
                      {"grad_clipping", fx.grad_clipping},
                      {"sm_contention", fx.sm_contention}};
  for (auto p : netsim::kParts)
    out["parts"].push_back(name_of(p));
  // One micro-batch's compute by kernel class (absent for imported programs, which carry no classes).
  const auto& programs = run.placed->graph().stages;
  if (!programs.empty() && programs.front().kernels.total() > 0) {
    json kernels;
    const double n = static_cast<double>(programs.size());
    for (std::size_t i = 0; i < programs.front().kernels.named().size(); ++i) {
      double mean = 0, max = 0;
      for (const auto& st : programs) {
        const double v = st.kernels.named()[i].second;
        mean += v / n;
        max = std::max(max, v);
      }
      kernels[std::string(programs.front().kernels.named()[i].first)] = {{"mean", mean}, {"max", max}};
    }
    out["kernels_per_micro_batch_s"] = kernels;
  }
  if (with_stages) {
    json stages = json::array();
    for (const auto& b : r.stages) {
      json e = {{"stage", b.stage}};
      for (auto p : netsim::kParts)
        e[std::string(name_of(p)) + "_s"] = b.part(p);
      if (b.stage >= 0 && static_cast<std::size_t>(b.stage) < programs.size() &&
          programs[static_cast<std::size_t>(b.stage)].kernels.total() > 0) {
        const auto& program = programs[static_cast<std::size_t>(b.stage)];
        json k;
        for (const auto& [name, seconds] : program.kernels.named())
          k[std::string(name)] = seconds;
        e["kernels_per_micro_batch_s"] = k;
        if (program.kernels.recompute > 0) {
          json by;
          for (const auto& [name, seconds] : program.recomputed.named())
            if (name != "recompute")
              by[std::string(name)] = seconds;
          e["recomputed_per_micro_batch_s"] = by;
        }
        int layers = 0;
        for (int l : program.chunk_layers)
          layers += l;
        e["layers"] = layers;
      }
      if (!run.scenario.options.compression.empty())
        e["compression_gpu_s"] = b.compression;
      stages.push_back(e);
    }
    out["stages"] = stages;
  }
  // Ranks of a stage run in lockstep (same program, kept in step by their collectives): each stage's timeline
  // stands for all its ranks. Name the first rank of each stage, the one the trace shows.
  json sampled      = json::array();
  const auto& place = run.placed->placement();
  const auto& topo  = run.placed->topology();
  for (int s = 0; s < run.scenario.job.parallelism.pp; ++s) {
    const auto gpus = place.stage_gpus(s);
    sampled.push_back({{"stage", s},
                       {"ranks_in_stage", gpus.size()},
                       {"gpu", gpus.front()},
                       {"gpu_name", topo.vertex_name(gpus.front())}});
  }
  out["stage_ranks"] = sampled;
  return out;
}

json network(const NetworkReport& n, bool over_time)
{
  json tiers = json::array(), boundaries = json::array(), busiest = json::array(), nvlinks = json::array();
  for (const auto& t : n.tiers)
    tiers.push_back({{"tier", name_of(t.tier)},
                     {"bytes", t.bytes},
                     {"links_used", t.links_used},
                     {"mean_utilisation", t.mean_utilisation}});
  for (const auto& b : n.boundaries)
    boundaries.push_back({{"kind", b.kind},
                          {"name", b.name},
                          {"bytes_out", b.bytes_out},
                          {"bytes_in", b.bytes_in},
                          {"mean_utilisation_out", b.mean_utilisation_out}});
  for (const auto* list : {&n.busiest, &n.busiest_nvlinks})
    for (const auto& l : *list)
      (list == &n.busiest ? busiest : nvlinks)
          .push_back({{"link", l.link}, {"tier", name_of(l.tier)}, {"bytes", l.bytes}, {"utilisation", l.utilisation}});
  json out = {{"tiers", tiers}, {"boundaries", boundaries}, {"busiest_links", busiest}, {"busiest_nvlinks", nvlinks}};
  if (!n.parallel.empty()) {
    json parallel = json::array();
    for (const auto& p : n.parallel)
      parallel.push_back({{"ends", p.ends},
                          {"links", p.links},
                          {"max_bytes", p.max_bytes},
                          {"mean_bytes", p.mean_bytes},
                          {"imbalance", p.imbalance()}});
    out["parallel_links"] = parallel;
  }
  if (over_time) {
    json series = json::array();
    for (const auto& s : n.over_time)
      series.push_back({{"link", s.link},
                        {"tier", name_of(s.tier)},
                        {"bin_seconds", s.bin_seconds},
                        {"utilisation", s.utilisation}});
    out["boundary_utilisation_over_time"] = series;
  }
  return out;
}

// One stage's ops as the page draws its micro-batches: [lane, name, micro-batch, start s, end s] each, lane 0
// the compute stream and 1 + d the stream of dimension d. At most kTimelineOps ops, the first in program order.
constexpr std::size_t kTimelineOps = 5000;

json timeline(const scenario::ScenarioRun& run, int stage)
{
  const auto& stages = run.placed->graph().stages;
  json lanes         = json::array({"compute"});
  for (workload::Dim d : workload::kDims)
    lanes.push_back(name_of(d));
  json ops = json::array();
  if (stage < 0 || static_cast<std::size_t>(stage) >= stages.size() ||
      static_cast<std::size_t>(stage) >= run.result.ops.size())
    return {{"stage", stage}, {"lanes", lanes}, {"ops", ops}, {"ops_in_stage", 0}};
  const auto& program = stages[static_cast<std::size_t>(stage)].ops;
  const auto& times   = run.result.ops[static_cast<std::size_t>(stage)];
  for (std::size_t i = 0; i < program.size() && i < times.size() && ops.size() < kTimelineOps; ++i) {
    const auto& op = program[i];
    const int lane = !workload::is_compute(op.kind) && op.dim ? 1 + static_cast<int>(*op.dim) : 0;
    ops.push_back(json::array({lane, workload::op_name(op), op.micro_batch, times[i].active, times[i].end}));
  }
  return {{"stage", stage}, {"lanes", lanes}, {"ops", ops}, {"ops_in_stage", program.size()}};
}

} // namespace

json summary_json(const scenario::ScenarioRun& run, const SummaryOptions& options)
{
  const auto& r = run.result;
  json j;
  j["spansim"]       = provenance();
  j["scenario"]      = {{"name", run.scenario.name}, {"file", run.scenario.file}};
  j["configuration"] = configuration(run);
  j["metrics"]       = {{"step_time_s", r.step_time},
                        {"tokens_per_s", r.tokens_per_second},
                        {"model_flops_per_step", r.model_flops},
                        {"tflops_per_gpu", r.tflops_per_gpu},
                        {"mfu", r.mfu},
                        {"flow_graph_ops", r.flow_ops},
                        {"simulated_rails", r.rails},
                        {"transfers", r.transfers.size()}};
  // model_flops_per_step, tflops_per_gpu and mfu count causal attention; the same under the conventions
  // published figures use, each named by its suffix.
  for (auto c : {workload::FlopConvention::megatron, workload::FlopConvention::torchtitan})
    if (r.flops.get(c) > 0) {
      const std::string suffix                      = "_" + std::string(name_of(c));
      j["metrics"]["model_flops_per_step" + suffix] = r.flops.get(c);
      j["metrics"]["tflops_per_gpu" + suffix]       = r.tflops_per_gpu_under(c);
      j["metrics"]["mfu" + suffix]                  = r.mfu_under(c);
    }
  j["breakdown"] = breakdown(run, options.stages);
  if (options.timeline && run.placed)
    j["timeline"] = timeline(run, 0);
  j["network"]   = network(network_report(run), options.over_time);
  j["placement"] = run.placement.to_json();
  if (run.diloco)
    j["diloco"] = run.diloco->to_json();
  if (run.faults) {
    const auto& f = *run.faults;
    json bounds   = json::array();
    for (std::size_t k = 0; k < f.healthy.size() && k < f.faulty.size(); ++k)
      bounds.push_back({{"kind", f.healthy[k].kind},
                        {"name", f.healthy[k].name},
                        {"healthy_max_flow_Bps", f.healthy[k].max_flow},
                        {"max_flow_Bps", f.faulty[k].max_flow},
                        {"lost_Bps", f.healthy[k].max_flow - f.faulty[k].max_flow}});
    j["faults"] = {{"failed_links", f.failed_links},
                   {"degraded_links", f.degraded_links},
                   {"healthy_step_time_s", f.healthy_step_time},
                   {"step_time_s", r.step_time},
                   {"slowdown", f.healthy_step_time > 0 ? r.step_time / f.healthy_step_time : 0},
                   {"boundaries", bounds}};
  }
  return j;
}

} // namespace spansim::report
