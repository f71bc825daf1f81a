// Summaries of a step graph: names, bytes per rank on the wire, the compute-and-bubble makespan, the per-dimension
// traffic and memory that `workload describe` prints, and the graph as JSON.
#include "common/error.hpp"
#include "workload/workload.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace spansim::workload {

std::string group_name(const Group& group)
{
  std::string out;
  for (Axis axis : enum_values<Axis>())
    if (group.axes.contains(axis))
      out += (out.empty() ? "" : "+") + std::string(name_of(axis));
  return out.empty() ? "none" : out;
}

std::string precision_line(const JobSpec& job)
{
  std::string line(name_of(job.precision));
  if (job.precision == Precision::fp8)
    line += " " + std::string(name_of(job.fp8_recipe));
  const GemmFormat runs = job.gpu.runs_as(job.precision, job.fp8_recipe);
  if (runs.precision != job.precision)
    line += ", run as " + std::string(name_of(runs.precision)) + " on " + job.gpu.name;
  line += std::string("; gradients ") + (job.gradient_reduce_bytes == 2 ? "bf16" : "fp32");
  line += std::string("; parameters gathered in ") +
          (job.low_precision_param_gather ? std::string(name_of(job.precision)) : std::string("bf16"));
  const auto& kept = job.activation_cache;
  if (kept.attention_output != KeptFormat::bf16)
    line += "; attention output kept in " + std::string(name_of(kept.attention_output));
  if (kept.mlp_activation_input != KeptFormat::bf16)
    line += "; MLP activation input kept in " + std::string(name_of(kept.mlp_activation_input));
  return line;
}

std::string kernels_line(const JobSpec& job)
{
  std::string line = "attention " + std::string(name_of(job.attention)) +
                     (job.attention == job.gpu.attention_default ? " (the GPU's default)" : "") + "; GEMMs " +
                     std::string(name_of(job.gemm_library));
  if (job.model.moe.experts > 0 && job.precision != Precision::bf16)
    line +=
        "; experts' casts " + std::string(job.expert_quantize == ExpertQuantize::per_expert ? "per expert" : "grouped");
  return line;
}

nlohmann::json precision_spec(const JobSpec& job)
{
  nlohmann::json j = {{"compute", name_of(job.precision)}};
  if (job.precision == Precision::fp8)
    j["recipe"] = name_of(job.fp8_recipe);
  j["gradient_reduce"]  = job.gradient_reduce_bytes == 2 ? "bf16" : "fp32";
  j["param_gather"]     = job.low_precision_param_gather ? "fp8" : "bf16"; // "fp8": the compute format's copy
  j["activation_cache"] = {{"attention_output", name_of(job.activation_cache.attention_output)},
                           {"mlp_activation_input", name_of(job.activation_cache.mlp_activation_input)}};
  return j;
}

nlohmann::json kernels_spec(const JobSpec& job)
{
  return {{"attention", name_of(job.attention)},
          {"gemm", name_of(job.gemm_library)},
          {"expert_quantize", name_of(job.expert_quantize)}};
}

std::string_view op_name(const Op& op)
{
  return op.kind == OpKind::collective ? name_of(op.collective) : name_of(op.kind);
}

double wire_bytes_per_rank(const Op& op)
{
  switch (op.kind) {
  case OpKind::collective:
    return wire_bytes_per_rank(op.collective, op.group.size, op.bytes) * op.count;
  case OpKind::send:
    return wire_bytes_per_rank(CollectiveOp::send_recv, 2, op.bytes) * op.count;
  default:
    return 0;
  }
}

double compute_makespan(const StepGraph& graph)
{
  const std::size_t n = graph.stages.size();
  std::vector<std::size_t> next(n, 0);
  std::vector<double> stream(n, 0), host(n, 0); // the GPU's compute stream and the host's (a trace's CPU ops)
  std::vector<std::vector<double>> done(n);
  for (std::size_t s = 0; s < n; ++s)
    done[s].assign(graph.stages[s].ops.size(), 0);
  std::unordered_map<std::int64_t, double> sent;
  std::size_t remaining = 0;
  for (const auto& st : graph.stages)
    remaining += st.ops.size();
  double makespan = 0;
  while (remaining > 0) {
    bool progress = false;
    for (std::size_t s = 0; s < n; ++s) {
      const auto& ops = graph.stages[s].ops;
      while (next[s] < ops.size()) {
        const Op& op = ops[next[s]];
        double ready = 0;
        for (int d : op.deps)
          ready = std::max(ready, done[s][d]);
        if (op.kind == OpKind::recv) {
          auto it = sent.find(op.tag);
          if (it == sent.end())
            break; // blocks this stage until the peer has sent
          ready = std::max(ready, it->second);
        }
        double finish = ready;
        if (is_compute(op.kind)) {
          double& lane = op.host ? host[s] : stream[s];
          finish       = std::max(ready, lane) + op.seconds;
          lane         = finish;
        }
        if (op.kind == OpKind::send)
          sent[op.tag] = finish;
        done[s][next[s]] = finish;
        makespan         = std::max(makespan, finish);
        ++next[s];
        --remaining;
        progress = true;
      }
    }
    if (!progress)
      throw SimulationError("pipeline schedule deadlocks: every stage waits for a receive whose send never comes");
  }
  return makespan;
}

StepSummary summarize(const StepGraph& graph)
{
  StepSummary s;
  const auto& par              = graph.job.parallelism;
  const double ranks_per_stage = double(par.tp) * par.cp * par.dp;
  s.programs                   = graph.stages.size();
  s.ranks                      = static_cast<std::size_t>(graph.job.gpus);
  s.tokens                     = graph.job.tokens_per_step();
  double optimizer_of_busiest = 0, wgrad_of_busiest = 0;
  for (const auto& st : graph.stages) {
    s.ops += st.ops.size();
    double compute = 0, optimizer = 0, wgrad = 0;
    OpEffects effects;
    DimArray<double> wire, buffer;
    for (const Op& op : st.ops) {
      s.model_flops += op.model_flops * ranks_per_stage;
      s.hardware_flops += op.hardware_flops * ranks_per_stage;
      if (op.kind == OpKind::optimizer)
        optimizer += op.seconds;
      if (op.kind == OpKind::weight_grad)
        wgrad += op.seconds;
      compute += op.seconds;
      effects.sustained_clock += op.effects.sustained_clock;
      effects.kernel_gaps += op.effects.kernel_gaps;
      effects.attention_by_length += op.effects.attention_by_length;
      effects.grad_clipping += op.effects.grad_clipping;
      if (op.dim && op.kind != OpKind::recv) {
        wire[*op.dim] += wire_bytes_per_rank(op);
        buffer[*op.dim] += op.bytes * op.count;
      }
    }
    for (Dim d : kDims) {
      if (wire[d] > s.traffic[d].per_gpu_max) {
        s.traffic[d].per_gpu_max    = wire[d];
        s.traffic[d].buffer_per_gpu = buffer[d];
      }
      s.traffic[d].job_total += wire[d] * ranks_per_stage;
    }
    if (compute > s.stage_compute_max) {
      s.stage_compute_max  = compute;
      optimizer_of_busiest = optimizer;
      wgrad_of_busiest     = wgrad;
      s.effects            = effects;
    }
    if (st.memory.total() > s.peak_memory.total()) {
      s.peak_memory       = st.memory;
      s.peak_memory_stage = st.stage;
    }
  }
  s.step_lower_bound = compute_makespan(graph);
  // The bubble is measured against the busiest stage's forward and backward work, as the formula counts it.
  const double busy = s.stage_compute_max - optimizer_of_busiest;
  s.bubble_fraction = busy > 0 ? (s.step_lower_bound - s.stage_compute_max) / busy : 0;
  const double pp = par.pp, m = graph.micro_batches;
  switch (graph.job.schedule.kind) {
  case ScheduleKind::gpipe:
  case ScheduleKind::one_f_one_b:
    s.bubble_formula      = (pp - 1) / m;
    s.bubble_formula_text = "(pp-1)/m";
    break;
  case ScheduleKind::interleaved_1f1b:
    s.bubble_formula      = (pp - 1) / (graph.job.schedule.virtual_stages * m);
    s.bubble_formula_text = "(pp-1)/(v*m)";
    break;
  case ScheduleKind::zb_h1:
    // The makespan m (F + B) + (pp - 1)(F + B - 2W) (workload/README.md) over m (F + B): it depends on the weight
    // gradients' share of the work, taken from the busiest stage (F + B = busy / m, W = its weight passes / m).
    s.bubble_formula      = busy > 0 ? (pp - 1) * (busy - 2 * wgrad_of_busiest) / (m * busy) : 0;
    s.bubble_formula_text = "(pp-1)(F+B-2W)/(m(F+B))";
    break;
  case ScheduleKind::dualpipe:
  case ScheduleKind::dualpipev:
    // Their bubble, (pp/2 - 1)(F&B + B - 3W) (workload/README.md, stated at F = W = B/2), is a time that depends on
    // the passes' times and does not shrink with m: no fraction of pp, v and m to set beside the measure.
    break;
  }
  return s;
}

nlohmann::json to_json(const StepGraph& graph)
{
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& st : graph.stages) {
    nlohmann::json ops = nlohmann::json::array();
    for (const Op& op : st.ops) {
      nlohmann::json o{{"kind", name_of(op.kind)}, {"deps", op.deps}};
      if (op.kind == OpKind::collective)
        o["collective"] = name_of(op.collective);
      if (op.chunk >= 0)
        o["chunk"] = op.chunk;
      if (op.micro_batch >= 0)
        o["micro_batch"] = op.micro_batch;
      if (!op.dim) {
        o["seconds"]        = op.seconds;
        o["model_flops"]    = op.model_flops;
        o["hardware_flops"] = op.hardware_flops;
        o["hbm_bytes"]      = op.hbm_bytes;
      } else {
        o["traffic"]      = name_of(*op.dim);
        o["purpose"]      = name_of(op.purpose);
        o["group"]        = group_name(op.group);
        o["group_size"]   = op.group.size;
        o["bytes"]        = op.bytes;
        o["count"]        = op.count;
        o["overlappable"] = op.overlappable;
        if (op.peer_stage >= 0) {
          o["peer_stage"] = op.peer_stage;
          o["tag"]        = op.tag;
        }
      }
      ops.push_back(std::move(o));
    }
    stages.push_back({{"stage", st.stage}, {"chunk_layers", st.chunk_layers}, {"ops", std::move(ops)}});
  }
  return {{"job", graph.job.name}, {"micro_batches", graph.micro_batches}, {"stages", std::move(stages)}};
}

std::vector<int> stream_predecessors(const StageProgram& program)
{
  const auto& ops = program.ops;
  std::vector<int> out(ops.size(), -1);
  std::map<int, int> last_in_stream;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::send || ops[i].kind == OpKind::recv)
      continue;
    const int stream = is_compute(ops[i].kind) ? (ops[i].host ? -2 : -1) : static_cast<int>(*ops[i].dim);
    if (auto it = last_in_stream.find(stream); it != last_in_stream.end())
      out[i] = it->second;
    last_in_stream[stream] = static_cast<int>(i);
  }
  return out;
}

std::vector<std::vector<int>> stream_predecessors(const StepGraph& graph)
{
  std::vector<std::vector<int>> out;
  out.reserve(graph.stages.size());
  for (const auto& st : graph.stages)
    out.push_back(stream_predecessors(st));
  return out;
}

} // namespace spansim::workload
