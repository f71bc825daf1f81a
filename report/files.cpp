// The files a run leaves: summary.json, layers.csv (the breakdown per model chunk) and trace.json (a Perfetto /
// Chrome trace: one process per stage, one thread per stream, boundary links as counters).
#include "report/report.hpp"

#include "common/paths.hpp"

#include "common/error.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace spansim::report {

namespace fs = std::filesystem;
using nlohmann::json;
using workload::OpKind;

namespace {

void write_layers_csv(const scenario::ScenarioRun& run, std::ostream& f)
{
  const auto& r = run.result;
  f << "stage,chunk,layers,forward_s,backward_s,recompute_s";
  for (auto cause : enum_values<workload::WaitCause>())
    f << "," << (workload::dim_of(cause) ? "exposed_" : "") << name_of(cause) << "_s";
  f << "\n";
  constexpr std::size_t kCauses = enum_values<workload::WaitCause>().size();
  for (const auto& program : run.placed->graph().stages) {
    const int s        = program.stage;
    const auto& layers = program.chunk_layers;
    std::vector<std::array<double, 3 + kCauses>> rows(layers.size(), std::array<double, 3 + kCauses>{});
    const auto& ops = program.ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const int chunk = ops[i].chunk;
      if (chunk < 0 || chunk >= static_cast<int>(layers.size()))
        continue;
      const double dt = r.ops[s][i].end - r.ops[s][i].start;
      if (ops[i].kind == OpKind::forward)
        rows[chunk][0] += dt;
      else if (ops[i].kind == OpKind::backward || ops[i].kind == OpKind::weight_grad)
        rows[chunk][1] += dt;
      else if (ops[i].kind == OpKind::recompute)
        rows[chunk][2] += dt;
    }
    for (const auto& w : r.waits) {
      if (w.stage != s || w.op < 0)
        continue;
      const int chunk = ops[w.op].chunk;
      if (chunk >= 0 && chunk < static_cast<int>(layers.size()))
        rows[chunk][3 + static_cast<std::size_t>(w.cause)] += w.seconds;
    }
    for (std::size_t c = 0; c < layers.size(); ++c) {
      f << s << "," << c << "," << layers[c];
      for (double v : rows[c])
        f << "," << v;
      f << "\n";
    }
  }
}

json trace(const scenario::ScenarioRun& run, const NetworkReport& network)
{
  const auto& r           = run.result;
  const auto& stages_of   = run.placed->graph().stages;
  const auto& place       = run.placed->placement();
  const auto& topo        = run.placed->topology();
  json events             = json::array();
  std::vector<int> stages = run.scenario.trace_stages;
  if (stages.empty())
    for (int s = 0; s < std::min<int>(16, static_cast<int>(stages_of.size())); ++s)
      stages.push_back(s);
  for (int s : stages) {
    const auto gpus = place.stage_gpus(s);
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", s},
                      {"args",
                       {{"name", "stage " + std::to_string(s) + " (" + topo.vertex_name(gpus.front()) + " and " +
                                     std::to_string(gpus.size() - 1) + " ranks in lockstep)"}}}});
    // Threads: compute, then one per dimension.
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", s}, {"tid", 0}, {"args", {{"name", "compute"}}}});
    for (workload::Dim d : workload::kDims)
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", s},
                        {"tid", 1 + static_cast<int>(d)},
                        {"args", {{"name", name_of(d)}}}});
    const auto& ops = stages_of[s].ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& op     = ops[i];
      const int tid      = !workload::is_compute(op.kind) && op.dim ? 1 + static_cast<int>(*op.dim) : 0;
      const double start = r.ops[s][i].active, end = r.ops[s][i].end;
      json args = {{"chunk", op.chunk}, {"micro_batch", op.micro_batch}};
      if (tid > 0)
        args["bytes"] = op.bytes * std::max(1, op.count);
      events.push_back({{"ph", "X"},
                        {"name", workload::op_name(op)},
                        {"pid", s},
                        {"tid", tid},
                        {"ts", start * 1e6},
                        {"dur", std::max(0.0, end - start) * 1e6},
                        {"args", args}});
    }
  }
  const int links_pid = 100000;
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", links_pid}, {"args", {{"name", "boundary links"}}}});
  for (const auto& series : network.over_time)
    for (std::size_t k = 0; k < series.utilisation.size(); ++k)
      events.push_back({{"ph", "C"},
                        {"name", series.link},
                        {"pid", links_pid},
                        {"ts", static_cast<double>(k) * series.bin_seconds * 1e6},
                        {"args", {{"utilisation", series.utilisation[k]}}}});
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

} // namespace

std::string layers_csv(const scenario::ScenarioRun& run)
{
  std::ostringstream out;
  write_layers_csv(run, out);
  return out.str();
}

std::vector<std::string> write_outputs(const scenario::ScenarioRun& run, const std::string& directory)
{
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec)
    throw UsageError("cannot create the output directory \"" + directory + "\": " + ec.message());
  std::vector<std::string> written;
  // Each file under a temporary name, renamed into place: a symlink planted at its name is replaced, never written
  // through, and a failure leaves the earlier run's file.
  auto write = [&](const std::string& name, const auto& fill) {
    ReplacingFile f((fs::path(directory) / name).string());
    fill(f.stream());
    f.commit();
    written.push_back(f.path());
  };
  const auto network = network_report(run);
  json summary       = summary_json(run);
  summary["outputs"] = {{"summary", "summary.json"}, {"layers_csv", "layers.csv"}, {"trace", "trace.json"}};
  write("summary.json", [&](std::ostream& f) { f << summary.dump(2) << "\n"; });
  write("layers.csv", [&](std::ostream& f) { write_layers_csv(run, f); });
  write("trace.json", [&](std::ostream& f) { f << trace(run, network).dump() << "\n"; });
  return written;
}

} // namespace spansim::report
