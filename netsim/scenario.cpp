// Scenarios: reading them, running them, and writing what they produce.
#include "netsim/scenario.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/version.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#ifndef SPANSIM_DATA_DIR
#error "SPANSIM_DATA_DIR must point at the source tree"
#endif

namespace spansim::netsim {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kCauseNames[] = {"tp", "cp", "pp", "dp", "ep", "bubble", "idle"};

// A path in a scenario: as given, next to the scenario file, or in the source tree (examples/...).
std::string resolve(const std::string& name, const std::string& scenario_file)
{
  for (const fs::path& candidate :
       {fs::path(name), fs::path(scenario_file).parent_path() / name, fs::path(SPANSIM_DATA_DIR) / name})
    if (fs::exists(candidate))
      return candidate.string();
  return name;
}

bool looks_like_path(const std::string& s)
{
  return s.find('/') != std::string::npos || s.ends_with(".json");
}

double sum_exposed(const StageBreakdown& b)
{
  double t = 0;
  for (double e : b.exposed)
    t += e;
  return t;
}

} // namespace

std::string default_scenario_path()
{
  return std::string(SPANSIM_DATA_DIR) + "/examples/scenarios/llama3-405b-two-buildings.json";
}

Scenario load_scenario(const std::string& path)
{
  return parse_scenario(spec::load_json_file(path), path);
}

Scenario parse_scenario(const json& document, const std::string& path, const std::string& json_path)
{
  Scenario sc;
  sc.file      = path;
  sc.json_path = json_path;
  spec::ObjectReader r(document, spec::Location{path, json_path});
  sc.name = r.name("name");
  r.optional_string("description");

  const json& topo = r.raw("topology");
  if (topo.is_string()) {
    std::string t = topo.get<std::string>();
    sc.topology = topology::load_topology_spec(looks_like_path(t) ? resolve(t, path) : t, r.where().member("topology"));
  } else if (topo.is_object()) {
    sc.topology = topology::parse_topology_spec(topo, path, json_path + ".topology");
  } else {
    r.fail("topology", "expected a preset name, a file path or an inline topology object");
  }

  const json& job = r.raw("job");
  if (job.is_string()) {
    const std::string job_file = resolve(job.get<std::string>(), path);
    sc.job = workload::parse_job(spec::load_referenced_json(job_file, r.where().member("job")), job_file);
  } else if (job.is_object())
    sc.job = workload::parse_job(job, path, json_path + ".job");
  else
    r.fail("job", "expected a job file path or an inline job object");

  if (r.has("placement"))
    sc.placement = placement::parse_placement(r.raw("placement"), path, json_path + ".placement");

  if (r.has("fidelity")) {
    try {
      sc.options.fidelity = parse_fidelity(r.string("fidelity"));
    } catch (const UsageError& e) {
      r.fail("fidelity", e.what());
    }
  }
  if (auto c = r.optional_object("collectives")) {
    for (std::size_t d = 0; d < kTrafficDims.size(); ++d) {
      std::string key(workload::traffic_name(kTrafficDims[d]));
      if (c->has(key)) {
        try {
          sc.options.algorithms[d] = parse_algorithm(c->string(key));
        } catch (const UsageError& e) {
          c->fail(key, e.what());
        }
      }
    }
    sc.options.channels = static_cast<int>(c->optional_integer("channels", 1, 64).value_or(1));
    if (c->has("auto")) {
      const std::string mode = c->string("auto");
      if (mode != "per-step" && mode != "per-call")
        c->fail("auto", "unknown value \"" + mode + "\" (allowed: per-step, per-call)");
      sc.options.choose_per_step = mode == "per-step";
    }
    c->finish();
  }
  if (auto t = r.optional_object("trace")) {
    const json& stages = t->raw("stages");
    if (!stages.is_array())
      t->fail("stages", "expected a list of pipeline stage numbers");
    for (const auto& s : stages) {
      if (!s.is_number_integer() || s.get<int>() < 0 || s.get<int>() >= sc.job.parallelism.pp)
        t->fail("stages", "stage numbers go from 0 to " + std::to_string(sc.job.parallelism.pp - 1));
      sc.trace_stages.push_back(s.get<int>());
    }
    t->finish();
  }
  r.finish();
  return sc;
}

ScenarioRun run_scenario(const Scenario& scenario, const PhaseCallback& phase)
{
  auto report = [&](const std::string& what) {
    if (phase)
      phase(what);
  };
  report("building the topology");
  topology::Topology topo(scenario.topology);
  report("building the step graph");
  auto graph = workload::build_step_graph(scenario.job);
  report("placing ranks");
  placement::Placement place(topo, scenario.job, scenario.placement,
                             spec::Location{scenario.file, scenario.json_path + ".placement"});
  ScenarioRun out;
  out.placement = place.report(graph);
  report(std::string("simulating the step at ") + to_string(scenario.options.fidelity) + " fidelity");
  out.result = simulate_step(topo, graph, place, scenario.options);
  report("summarising");
  const auto& r = out.result;

  json j;
  j["spansim"]  = {{"tool", "spansim"}, {"version", version()}, {"git_hash", git_hash()}};
  j["scenario"] = {{"name", scenario.name}, {"file", scenario.file}};
  json algorithms;
  for (std::size_t d = 0; d < kTrafficDims.size(); ++d)
    algorithms[std::string(workload::traffic_name(kTrafficDims[d]))] = to_string(scenario.options.algorithms[d]);
  const auto& job    = scenario.job;
  j["configuration"] = {{"topology", scenario.topology.to_json()},
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
                          {"micro_batches", job.micro_batches()},
                          {"tokens_per_step", job.tokens_per_step()}}},
                        {"placement", {{"order", place.order()}, {"buildings", out.placement.buildings_used}}},
                        {"fidelity", to_string(scenario.options.fidelity)},
                        {"collectives",
                         {{"algorithms", algorithms},
                          {"auto", scenario.options.choose_per_step ? "per-step" : "per-call"},
                          {"channels", scenario.options.channels}}},
                        {"engine", r.engine}};
  j["metrics"]       = {{"step_time_s", r.step_time},
                        {"tokens_per_s", r.tokens_per_second},
                        {"model_flops_per_step", r.model_flops},
                        {"tflops_per_gpu", r.tflops_per_gpu},
                        {"mfu", r.mfu},
                        {"flow_graph_ops", r.flow_ops},
                        {"simulated_rails", r.rails},
                        {"transfers", r.transfers.size()}};

  // Per stage, and the mean and max over stages.
  json stages = json::array();
  std::array<double, 9> mean{}, worst{};
  for (const auto& b : r.stages) {
    std::array<double, 9> v{b.compute,    b.exposed[0], b.exposed[1], b.exposed[2],  b.exposed[3],
                            b.exposed[4], b.bubble,     b.idle,       sum_exposed(b)};
    json e = {{"stage", b.stage}, {"compute_s", b.compute}, {"bubble_s", b.bubble}, {"idle_s", b.idle}};
    for (std::size_t d = 0; d < kTrafficDims.size(); ++d)
      e["exposed_" + std::string(workload::traffic_name(kTrafficDims[d])) + "_s"] = b.exposed[d];
    stages.push_back(e);
    for (std::size_t k = 0; k < v.size(); ++k) {
      mean[k] += v[k] / static_cast<double>(r.stages.size());
      worst[k] = std::max(worst[k], v[k]);
    }
  }
  const char* parts[] = {"compute",    "exposed_tp", "exposed_cp", "exposed_pp",   "exposed_dp",
                         "exposed_ep", "bubble",     "idle",       "exposed_total"};
  json agg;
  for (std::size_t k = 0; k < mean.size(); ++k)
    agg[std::string(parts[k]) + "_s"] = {{"mean", mean[k]}, {"max", worst[k]}};
  j["breakdown"] = {{"stages", stages}, {"over_stages", agg}};
  // Ranks of a stage run in lockstep (same program, kept in step by their collectives): each stage's timeline
  // stands for all its ranks. Name the first rank of each stage, the one the trace shows.
  json sampled = json::array();
  for (int s = 0; s < job.parallelism.pp; ++s) {
    int gpu = place.stage_gpus(s).front();
    sampled.push_back({{"stage", s},
                       {"ranks_in_stage", place.stage_gpus(s).size()},
                       {"gpu", gpu},
                       {"gpu_name", topo.vertex_name(gpu)}});
  }
  j["breakdown"]["stage_ranks"] = sampled;

  // Links: bytes and utilisation per tier, per boundary, and the busiest ones.
  const auto& links = topo.links();
  std::vector<double> tier_bytes(topology::kTierCount, 0), tier_capacity(topology::kTierCount, 0);
  std::vector<std::pair<double, int>> busiest; // (utilisation, directed link)
  std::vector<int> tier_links(topology::kTierCount, 0);
  for (std::size_t l = 0; l < links.size(); ++l) {
    int t = static_cast<int>(links[l].tier);
    // Utilisation is over the links the job used: a 64-GPU job on a 131K-GPU topology leaves most idle.
    if (r.link_bytes[2 * l] + r.link_bytes[2 * l + 1] > 0) {
      tier_capacity[t] += 2 * links[l].bandwidth;
      tier_links[t]++;
    }
    for (int dir = 0; dir < 2; ++dir) {
      double bytes = r.link_bytes[2 * l + dir];
      tier_bytes[t] += bytes;
      if (bytes > 0 && r.step_time > 0)
        busiest.emplace_back(bytes / (links[l].bandwidth * r.step_time), static_cast<int>(2 * l + dir));
    }
  }
  json tiers = json::array();
  for (int t = 0; t < topology::kTierCount; ++t)
    if (tier_capacity[t] > 0)
      tiers.push_back({{"tier", topology::to_string(static_cast<topology::Tier>(t))},
                       {"bytes", tier_bytes[t]},
                       {"links_used", tier_links[t]},
                       {"mean_utilisation", r.step_time > 0 ? tier_bytes[t] / (tier_capacity[t] * r.step_time) : 0}});
  std::sort(busiest.begin(), busiest.end(), std::greater<>());
  // NVLinks are listed apart: inside a node they are almost always the busiest, and the question is usually
  // which scale-out or boundary links saturate.
  json top = json::array(), top_nvlink = json::array();
  for (const auto& [util, directed] : busiest) {
    const auto& link = links[directed / 2];
    bool forward     = directed % 2 == 0;
    json& list       = link.tier == topology::Tier::nvlink ? top_nvlink : top;
    if (list.size() >= 10)
      continue;
    list.push_back(
        {{"link", topo.vertex_name(forward ? link.a : link.b) + " -> " + topo.vertex_name(forward ? link.b : link.a)},
         {"tier", topology::to_string(link.tier)},
         {"bytes", r.link_bytes[directed]},
         {"utilisation", util}});
  }
  json boundaries = json::array();
  for (int b = 0; b < topo.building_count() && topo.building_count() > 1; ++b) {
    double out_bytes = 0, in_bytes = 0, capacity = 0;
    for (std::size_t l = 0; l < links.size(); ++l) {
      const auto& link = links[l];
      if (link.tier != topology::Tier::inter_building && link.tier != topology::Tier::building_uplink)
        continue;
      const int agg = topo.aggregation_vertex(b);
      if (link.a != agg && link.b != agg)
        continue;
      bool outward = link.a == agg;
      out_bytes += r.link_bytes[2 * l + (outward ? 0 : 1)];
      in_bytes += r.link_bytes[2 * l + (outward ? 1 : 0)];
      capacity += link.bandwidth;
    }
    boundaries.push_back({{"kind", "building"},
                          {"name", topo.building_name(b)},
                          {"bytes_out", out_bytes},
                          {"bytes_in", in_bytes},
                          {"mean_utilisation_out", r.step_time > 0 ? out_bytes / (capacity * r.step_time) : 0}});
  }
  j["network"] = {
      {"tiers", tiers}, {"boundaries", boundaries}, {"busiest_links", top}, {"busiest_nvlinks", top_nvlink}};

  // Boundary links over time: each transfer's bytes spread evenly over its lifetime, in 50 bins.
  const int bins = 50;
  std::map<int, std::vector<double>> series; // directed link -> bytes per bin
  if (r.step_time > 0)
    for (const auto& t : r.transfers) {
      auto ls = topo.locate(t.src), ld = topo.locate(t.dst);
      if (ls.building == ld.building)
        continue;
      for (const auto& h : topo.route(t.src, t.dst)) {
        auto tier = links[h.link].tier;
        if (tier != topology::Tier::inter_building && tier != topology::Tier::inter_region &&
            tier != topology::Tier::building_uplink)
          continue;
        auto& v = series[2 * h.link + (h.forward ? 0 : 1)];
        v.resize(bins, 0);
        double width = r.step_time / bins;
        double span  = std::max(t.end - t.start, 1e-12);
        for (int k = std::max(0, static_cast<int>(t.start / width)); k < bins && k * width < t.end; ++k) {
          double overlap = std::min(t.end, (k + 1) * width) - std::max(t.start, k * width);
          if (overlap > 0)
            v[k] += t.bytes * r.rails * overlap / span; // one simulated transfer per rail
        }
      }
    }
  json over_time = json::array();
  for (auto& [dl, v] : series) {
    const auto& link = links[dl / 2];
    json util        = json::array();
    for (double bytes : v)
      util.push_back(bytes / (link.bandwidth * r.step_time / bins));
    bool forward = dl % 2 == 0;
    over_time.push_back(
        {{"link", topo.vertex_name(forward ? link.a : link.b) + " -> " + topo.vertex_name(forward ? link.b : link.a)},
         {"tier", topology::to_string(link.tier)},
         {"bin_seconds", r.step_time / bins},
         {"utilisation", util}});
  }
  j["network"]["boundary_utilisation_over_time"] = over_time;
  j["placement"]                                 = out.placement.to_json();

  out.summary = j;
  out.graph   = std::move(graph);
  return out;
}

std::vector<std::string> write_outputs(const Scenario& scenario, const ScenarioRun& run, const std::string& directory)
{
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec)
    throw UsageError("cannot create the output directory \"" + directory + "\": " + ec.message());
  std::vector<std::string> written;
  auto open = [&](const std::string& name) {
    std::string path = (fs::path(directory) / name).string();
    std::ofstream f(path);
    if (!f)
      throw UsageError("cannot write \"" + path + "\"");
    written.push_back(path);
    return f;
  };
  const auto& stages_of = run.graph.stages;
  const auto& r         = run.result;

  json summary       = run.summary;
  summary["outputs"] = {{"summary", "summary.json"}, {"layers_csv", "layers.csv"}, {"trace", "trace.json"}};
  {
    auto f = open("summary.json");
    f << summary.dump(2) << "\n";
  }

  // Per model chunk: compute by kind and what its compute ops waited for.
  {
    auto f = open("layers.csv");
    f << "stage,chunk,layers,forward_s,backward_s,recompute_s,exposed_tp_s,exposed_cp_s,exposed_pp_s,exposed_dp_s,"
         "exposed_ep_s,bubble_s,idle_s\n";
    for (const auto& program : stages_of) {
      const int s        = program.stage;
      const auto& layers = program.chunk_layers;
      std::vector<std::array<double, 10>> rows(layers.size(), std::array<double, 10>{});
      const auto& ops = program.ops;
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const int chunk = ops[i].chunk;
        if (chunk < 0 || chunk >= static_cast<int>(layers.size()))
          continue;
        const double dt = r.ops[s][i].end - r.ops[s][i].start;
        if (ops[i].kind == workload::OpKind::forward)
          rows[chunk][0] += dt;
        else if (ops[i].kind == workload::OpKind::backward)
          rows[chunk][1] += dt;
        else if (ops[i].kind == workload::OpKind::recompute)
          rows[chunk][2] += dt;
      }
      for (const auto& w : r.waits) {
        if (w.stage != s || w.op < 0)
          continue;
        const int chunk = ops[w.op].chunk;
        if (chunk >= 0 && chunk < static_cast<int>(layers.size()))
          rows[chunk][3 + w.cause] += w.seconds;
      }
      for (std::size_t c = 0; c < layers.size(); ++c) {
        f << s << "," << c << "," << layers[c];
        for (double v : rows[c])
          f << "," << v;
        f << "\n";
      }
    }
  }

  // Perfetto / Chrome trace: one process per traced stage, one thread per stream; boundary links as counters.
  {
    json events             = json::array();
    std::vector<int> stages = scenario.trace_stages;
    if (stages.empty())
      for (int s = 0; s < std::min<int>(16, static_cast<int>(stages_of.size())); ++s)
        stages.push_back(s);
    const char* threads[] = {"compute", "tp", "cp", "pp", "dp", "ep"};
    for (int s : stages) {
      const auto& who = run.summary["breakdown"]["stage_ranks"][s];
      events.push_back(
          {{"ph", "M"},
           {"name", "process_name"},
           {"pid", s},
           {"args",
            {{"name", "stage " + std::to_string(s) + " (" + who["gpu_name"].get<std::string>() + " and " +
                          std::to_string(who["ranks_in_stage"].get<int>() - 1) + " ranks in lockstep)"}}}});
      for (int t = 0; t < 6; ++t)
        events.push_back(
            {{"ph", "M"}, {"name", "thread_name"}, {"pid", s}, {"tid", t}, {"args", {{"name", threads[t]}}}});
      const auto& ops = stages_of[s].ops;
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const auto& op  = ops[i];
        const int dim   = traffic_index(op.traffic);
        const bool comm = op.traffic != workload::Traffic::none && op.kind != workload::OpKind::forward &&
                          op.kind != workload::OpKind::backward && op.kind != workload::OpKind::recompute &&
                          op.kind != workload::OpKind::optimizer;
        const int tid = comm && dim >= 0 ? 1 + dim : 0; // threads: compute, then kTrafficDims order
        const std::string kind(workload::op_kind_name(op.kind));
        double start = r.ops[s][i].active, end = r.ops[s][i].end;
        json args = {{"chunk", op.chunk}, {"micro_batch", op.micro_batch}};
        if (tid > 0)
          args["bytes"] = op.bytes * std::max(1, op.count);
        events.push_back({{"ph", "X"},
                          {"name", kind},
                          {"pid", s},
                          {"tid", tid},
                          {"ts", start * 1e6},
                          {"dur", std::max(0.0, end - start) * 1e6},
                          {"args", args}});
      }
    }
    const int links_pid = 100000;
    events.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", links_pid}, {"args", {{"name", "boundary links"}}}});
    for (const auto& s : run.summary["network"]["boundary_utilisation_over_time"]) {
      double width = s["bin_seconds"];
      int k        = 0;
      for (const auto& u : s["utilisation"]) {
        events.push_back({{"ph", "C"},
                          {"name", s["link"]},
                          {"pid", links_pid},
                          {"ts", k * width * 1e6},
                          {"args", {{"utilisation", u}}}});
        ++k;
      }
    }
    auto f = open("trace.json");
    f << json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << "\n";
  }
  return written;
}

} // namespace spansim::netsim
