// Several jobs on one network: reading the file, placing the jobs on GPUs of their own, running each alone and
// all together over a window, and reading per-job steps back.
#include "sharing/sharing.hpp"

#include "common/error.hpp"
#include "common/format.hpp"
#include "common/json_reader.hpp"
#include "common/units.hpp"
#include "common/version.hpp"
#include "report/report.hpp"

#include <cmath>
#include <memory>
#include <set>

namespace spansim::sharing {

using nlohmann::json;

SharedSpec load_shared(const std::string& path)
{
  return parse_shared(spec::load_json_file(path), path);
}

SharedSpec parse_shared(const json& document, const std::string& file)
{
  SharedSpec s;
  s.file = file;
  spec::ObjectReader r(document, spec::Location{file, "$"});
  s.name = r.name("name");
  r.optional_string("description");
  const json& topo = r.raw("topology");
  if (topo.is_string()) {
    const auto t = topo.get<std::string>();
    s.topology   = topology::load_topology_spec(scenario::looks_like_path(t) ? scenario::resolve_path(t, file) : t,
                                              r.where().member("topology"));
  } else if (topo.is_object()) {
    s.topology = topology::parse_topology_spec(topo, file, "$.topology");
  } else {
    r.fail("topology", "expected a preset name, a file path or an inline topology object");
  }
  if (auto f = r.optional_enumeration<netsim::Fidelity>("fidelity")) {
    if (*f == netsim::Fidelity::hybrid)
      r.fail("fidelity", "jobs on a shared network run at analytical, flow or packet fidelity (allowed: analytical, "
                         "flow, packet)");
    s.fidelity = *f;
  }
  if (auto w = r.optional_object("window")) {
    if (w->has("steps") && w->has("time"))
      w->fail("time", "give the window as steps of the slowest job or as a time, not both");
    if (w->has("steps"))
      s.window_steps = static_cast<int>(w->integer("steps", 1, 100));
    if (w->has("time")) {
      s.window_seconds = w->time("time");
      if (!(s.window_seconds > 0))
        w->fail("time", "expected a positive time such as \"30s\"");
    }
    w->finish({"steps", "time"});
  }
  auto entries = r.objects("jobs", true);
  if (entries.empty() || entries.size() > 64)
    r.fail("jobs", "expected 1 to 64 jobs");
  std::set<std::string> names;
  for (auto& e : entries) {
    // Each job is read as a scenario on the shared topology: the same keys, checks and messages.
    json one = {{"name", e.name("name")}, {"topology", topo}, {"job", e.raw("job")}};
    if (!names.insert(one["name"].get<std::string>()).second)
      e.fail("name", "another job of this network has the name \"" + one["name"].get<std::string>() + "\"");
    for (const char* key : {"placement", "collectives", "compression"})
      if (e.has(key))
        one[key] = e.raw(key);
    e.optional_string("description");
    e.finish({"placement", "collectives", "compression", "description"});
    s.jobs.push_back({scenario::parse_scenario(one, file, e.where().path)});
  }
  r.finish({"description", "fidelity", "window"});
  return s;
}

namespace {

// A whole number as text, in exponent form when it would not fit in a long.
std::string count(double n)
{
  return n < 9e15 ? format_fixed(n, 0) : format_significant(n, 3);
}

void report_phase(const PhaseCallback& phase, const std::string& what)
{
  if (phase)
    phase(what);
}

// Steps [from, to) of a job measured under sharing: after the first (every job starts at 0, in phase) and
// ending by `until`, when the first job to finish stops loading the network. Falls back to the steps ending by
// then, and to the first step.
std::pair<int, int> measured_steps(const std::vector<double>& ends, double until, bool& under_load)
{
  const double slack = 1e-12 * std::max(1.0, until);
  int to             = 0;
  while (to < static_cast<int>(ends.size()) && ends[static_cast<std::size_t>(to)] <= until + slack)
    ++to;
  under_load = to >= 1;
  if (to >= 2)
    return {1, to};
  return {0, std::max(to, 1)};
}

} // namespace

SharedRun run_shared(const SharedSpec& spec, const PhaseCallback& phase)
{
  SharedRun out;
  out.spec = spec;
  report_phase(phase, "building the topology");
  const topology::Topology topo(spec.topology);
  const auto n_jobs = spec.jobs.size();
  std::vector<int> owner(static_cast<std::size_t>(topo.gpu_count()), -1);
  std::vector<std::unique_ptr<placement::Placement>> places;
  std::vector<workload::StepGraph> graphs;
  for (std::size_t j = 0; j < n_jobs; ++j) {
    const auto& sc = spec.jobs[j].scenario;
    const spec::Location where{sc.file, sc.json_path + ".placement"};
    auto pspec = sc.placement;
    pspec.taken.assign(owner.size(), 0);
    for (std::size_t g = 0; g < owner.size(); ++g)
      pspec.taken[g] = owner[g] >= 0 ? 1 : 0;
    if (pspec.first_gpu < 0 && pspec.buildings.empty()) {
      // The next free GPUs: the first run of as many consecutive GPUs as the job has that no earlier job holds.
      std::int64_t run = 0, first = -1;
      for (std::size_t g = 0; g < owner.size() && first < 0; ++g) {
        run = owner[g] >= 0 ? 0 : run + 1;
        if (run == sc.job.gpus)
          first = static_cast<std::int64_t>(g) + 1 - run;
      }
      if (first < 0)
        throw InfeasibleError("placement", sc.file, where.path,
                              "no " + std::to_string(sc.job.gpus) +
                                  " consecutive free GPUs left after the jobs before it (give buildings or a "
                                  "first_gpu)");
      pspec.first_gpu = first;
    } else if (pspec.first_gpu >= 0) {
      // A range overlapping another job's GPUs is refused, naming that job.
      const std::int64_t last = std::min<std::int64_t>(pspec.first_gpu + sc.job.gpus, topo.gpu_count());
      for (std::int64_t g = pspec.first_gpu; g < last; ++g)
        if (owner[static_cast<std::size_t>(g)] >= 0)
          throw InfeasibleError(
              "placement", sc.file, where.path + ".first_gpu",
              "GPUs " + std::to_string(pspec.first_gpu) + " to " + std::to_string(pspec.first_gpu + sc.job.gpus - 1) +
                  " overlap job \"" +
                  spec.jobs[static_cast<std::size_t>(owner[static_cast<std::size_t>(g)])].scenario.name + "\" (GPU " +
                  std::to_string(g) + ", " + topo.vertex_name(static_cast<int>(g)) +
                  "); jobs on one network use GPUs of their own");
    }
    report_phase(phase, "placing job " + sc.name);
    places.push_back(std::make_unique<placement::Placement>(topo, sc.job, pspec, where));
    for (int r = 0; r < places.back()->ranks(); ++r)
      owner[static_cast<std::size_t>(places.back()->gpu(r))] = static_cast<int>(j);
    graphs.push_back(placement::build_stage_graph(sc.job, topo, *places.back(), where));
  }

  std::vector<netsim::JobOnNetwork> all;
  for (std::size_t j = 0; j < n_jobs; ++j)
    all.push_back({&graphs[j], places[j].get(), spec.jobs[j].scenario.options, 1});
  netsim::TogetherOptions options;
  options.fidelity = spec.fidelity;
  // Alone and together on the same rails, so that a job whose links no other job uses comes out the same.
  options.rail_symmetry = netsim::rails_alike(topo, all);

  out.jobs.resize(n_jobs);
  double slowest              = 0;
  std::int64_t ops_per_window = 0;
  std::vector<std::size_t> ops_per_step(n_jobs);
  for (std::size_t j = 0; j < n_jobs; ++j) {
    auto& o     = out.jobs[j];
    o.name      = spec.jobs[j].scenario.name;
    o.gpus      = places[j]->ranks();
    o.first_gpu = o.last_gpu = places[j]->gpu(0);
    for (int r = 0; r < places[j]->ranks(); ++r) {
      o.first_gpu = std::min(o.first_gpu, places[j]->gpu(r));
      o.last_gpu  = std::max(o.last_gpu, places[j]->gpu(r));
    }
    for (int b : places[j]->buildings())
      o.buildings.push_back(topo.building_name(b));
    report_phase(phase, "running job " + o.name + " alone");
    auto alone      = netsim::simulate_together(topo, {all[j]}, options);
    o.alone_step    = alone.jobs[0].step_ends[0];
    o.alone         = std::move(alone.jobs[0].steps[0]);
    ops_per_step[j] = alone.flow_ops;
    slowest         = std::max(slowest, o.alone_step);
  }
  out.window = spec.window_seconds > 0 ? spec.window_seconds : spec.window_steps * slowest;
  for (std::size_t j = 0; j < n_jobs; ++j) {
    const double a = out.jobs[j].alone_step;
    // One step more than the window holds alone, so that every job still runs when a slowed one reaches the
    // window's end.
    // In doubles first: a long window over a short step would overflow an int.
    const double steps = a > 0 ? std::ceil(out.window / a - 1e-9) + 1 : 2;
    if (steps > 100'000)
      throw SpecError(spec.file, spec.window_seconds > 0 ? "$.window.time" : "$.window.steps",
                      "job \"" + out.jobs[j].name + "\" (a " + units::format_time(a) + " step alone) would run " +
                          count(steps) + " steps in the window (at most 100,000): shorten the window");
    all[j].steps = static_cast<int>(steps);
    ops_per_window += static_cast<std::int64_t>(ops_per_step[j]) * all[j].steps;
  }
  if (ops_per_window > spec.max_flow_ops)
    throw UsageError("shared network \"" + spec.name + "\": the window needs " + std::to_string(ops_per_window) +
                     " flow ops (limit " + std::to_string(spec.max_flow_ops) +
                     "): shorten the window (window.steps or window.time)");

  report_phase(phase, "running the jobs together");
  auto together      = netsim::simulate_together(topo, all, options);
  out.makespan       = together.makespan;
  out.flow_ops       = together.flow_ops;
  out.rails          = together.rails;
  out.engine         = together.engine;
  out.measured_until = std::numeric_limits<double>::infinity();
  for (const auto& part : together.jobs)
    out.measured_until = std::min(out.measured_until, part.step_ends.back());
  for (std::size_t j = 0; j < n_jobs; ++j) {
    auto& o               = out.jobs[j];
    auto& part            = together.jobs[j];
    o.step_ends           = part.step_ends;
    o.all_to_all_isolated = part.all_to_all_isolated;
    const auto [from, to] = measured_steps(o.step_ends, out.measured_until, o.measured_under_load);
    o.measured_from       = from;
    o.measured_to         = to;
    const double begin    = from == 0 ? 0.0 : o.step_ends[static_cast<std::size_t>(from - 1)];
    o.shared_step         = (o.step_ends[static_cast<std::size_t>(to - 1)] - begin) / (to - from);
    o.slowdown            = o.alone_step > 0 ? o.shared_step / o.alone_step : 1;
    o.alone_parts.assign(netsim::kParts.size(), 0);
    o.shared_parts.assign(netsim::kParts.size(), 0);
    const auto alone_stats = report::breakdown_stats(o.alone);
    for (std::size_t k = 0; k < netsim::kParts.size(); ++k)
      o.alone_parts[k] = alone_stats.parts[k].mean;
    for (int s = from; s < to; ++s) {
      const auto stats = report::breakdown_stats(part.steps[static_cast<std::size_t>(s)]);
      for (std::size_t k = 0; k < netsim::kParts.size(); ++k)
        o.shared_parts[k] += stats.parts[k].mean / (to - from);
    }
    o.shared = std::move(part.steps[static_cast<std::size_t>(to - 1)]);
  }

  // Boundary links: between buildings and between regions, with the bytes each job moves per step.
  for (std::size_t l = 0; l < topo.links().size(); ++l) {
    const auto tier = topo.links()[l].tier;
    if (tier != topology::Tier::inter_building && tier != topology::Tier::inter_region &&
        tier != topology::Tier::building_uplink)
      continue;
    BoundaryBytes b{topo.link_name(static_cast<int>(l)), std::string(name_of(tier)), {}};
    double any = 0;
    for (const auto& o : out.jobs) {
      const auto& bytes = o.shared.link_bytes;
      b.bytes.push_back(bytes.size() > 2 * l + 1 ? bytes[2 * l] + bytes[2 * l + 1] : 0);
      any += b.bytes.back();
    }
    if (any > 0)
      out.boundaries.push_back(std::move(b));
  }
  return out;
}

json to_json(const SharedRun& run)
{
  json jobs = json::array();
  for (const auto& o : run.jobs) {
    json exposed = json::object();
    for (auto [label, values] : {std::pair{"alone", &o.alone_parts}, std::pair{"shared", &o.shared_parts}}) {
      json parts;
      for (std::size_t k = 0; k < netsim::kParts.size(); ++k)
        parts[std::string(name_of(netsim::kParts[k])) + "_s"] = (*values)[k];
      exposed[label] = parts;
    }
    jobs.push_back({{"name", o.name},
                    {"gpus", o.gpus},
                    {"gpu_range", {o.first_gpu, o.last_gpu}},
                    {"buildings", o.buildings},
                    {"alone_step_s", o.alone_step},
                    {"shared_step_s", o.shared_step},
                    {"slowdown", o.slowdown},
                    {"steps_run", o.step_ends.size()},
                    {"steps_measured", {o.measured_from, o.measured_to}},
                    {"measured_under_load", o.measured_under_load},
                    {"all_to_all_isolated", o.all_to_all_isolated},
                    {"step_ends_s", o.step_ends},
                    {"breakdown_mean_over_stages_and_measured_steps", exposed}});
  }
  json boundaries = json::array();
  for (const auto& b : run.boundaries) {
    json per_job = json::object();
    for (std::size_t j = 0; j < run.jobs.size(); ++j)
      per_job[run.jobs[j].name] = b.bytes[j];
    boundaries.push_back({{"link", b.link}, {"tier", b.tier}, {"bytes_per_step", per_job}});
  }
  json window = {{"seconds", run.window}, {"measured_until_s", run.measured_until}, {"makespan_s", run.makespan}};
  if (run.spec.window_seconds > 0)
    window["asked"] = "time";
  else
    window["asked"] = std::to_string(run.spec.window_steps) + " steps of the slowest job alone";
  return {{"provenance", provenance()},
          {"shared_network", run.spec.name},
          {"file", run.spec.file},
          {"topology", run.spec.topology.name},
          {"fidelity", name_of(run.spec.fidelity)},
          {"window", window},
          {"flow_ops", run.flow_ops},
          {"rails", run.rails},
          {"engine", run.engine},
          {"jobs", jobs},
          {"boundaries", boundaries}};
}

} // namespace spansim::sharing
