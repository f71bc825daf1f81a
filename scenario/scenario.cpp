// Scenarios: reading them, building them once, simulating them.
#include "scenario/scenario.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "traces/traces.hpp"

#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#ifndef SPANSIM_DATA_DIR
#error "SPANSIM_DATA_DIR must point at the source tree"
#endif

namespace spansim::scenario {

namespace fs = std::filesystem;
using nlohmann::json;

std::string resolve_path(const std::string& name, const std::string& anchor_file)
{
  // With an error code: a name too long for the file system is no file, not an exception.
  std::error_code ec;
  for (const fs::path& candidate :
       {fs::path(name), fs::path(anchor_file).parent_path() / name, fs::path(SPANSIM_DATA_DIR) / name})
    if (fs::exists(candidate, ec))
      return candidate.string();
  return name;
}

bool looks_like_path(const std::string& reference)
{
  return reference.find('/') != std::string::npos || reference.ends_with(".json");
}

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
    sc.topology =
        topology::load_topology_spec(looks_like_path(t) ? resolve_path(t, path) : t, r.where().member("topology"));
  } else if (topo.is_object()) {
    sc.topology = topology::parse_topology_spec(topo, path, json_path + ".topology");
  } else {
    r.fail("topology", "expected a preset name, a file path or an inline topology object");
  }

  const json& job = r.raw("job");
  auto is_chakra  = [](const json& j) { return j.is_object() && j.contains("kind") && j["kind"] == "chakra"; };
  if (job.is_string()) {
    const std::string job_file = resolve_path(job.get<std::string>(), path);
    const auto doc             = spec::load_referenced_json(job_file, r.where().member("job"));
    sc.job = is_chakra(doc) ? traces::load_chakra_job(doc, job_file, "$") : workload::parse_job(doc, job_file);
  } else if (job.is_object()) {
    sc.job = is_chakra(job) ? traces::load_chakra_job(job, path, json_path + ".job")
                            : workload::parse_job(job, path, json_path + ".job");
  } else {
    r.fail("job", "expected a job file path or an inline job object");
  }

  if (r.has("placement"))
    sc.placement = placement::parse_placement(r.raw("placement"), path, json_path + ".placement");
  if (auto f = r.optional_enumeration<netsim::Fidelity>("fidelity"))
    sc.options.fidelity = *f;
  if (auto t = r.optional_object("transport")) {
    if (auto w = t->optional_size("window")) {
      if (*w <= 0)
        t->fail("window", "expected a positive size such as \"16MiB\" (leave it out for no limit)");
      sc.topology.window = *w;
    }
    t->finish();
  }
  if (auto p = r.optional_object("packet")) {
    auto& packet = sc.options.engine.packet;
    if (p->has("transport"))
      packet.transport = p->choice("transport", {"roce", "dctcp", "newreno"});
    if (p->has("congestion_control")) {
      packet.congestion_control = p->choice("congestion_control", {"none", "dcqcn"});
      if (packet.transport != "roce")
        p->fail("congestion_control", "applies to the roce transport (dctcp and newreno are TCP's own)");
    }
    p->finish();
  }
  if (auto h = r.optional_object("hybrid")) {
    auto& hybrid = sc.options.engine.hybrid;
    for (auto [key, field] : {std::pair{"max_pattern_bytes", &hybrid.max_pattern_bytes},
                              std::pair{"min_transfer_bytes", &hybrid.min_transfer_bytes}})
      if (auto b = h->optional_size(key)) {
        if (*b <= 0)
          h->fail(key, "expected a positive size such as \"1GiB\"");
        *field = *b;
      }
    if (auto w = h->optional_integer("workers", 0, 64))
      hybrid.workers = static_cast<int>(*w);
    h->finish();
  }
  if (auto f = r.optional_object("flow")) {
    if (auto n = f->optional_integer("own_solver_above", 0, std::int64_t{1} << 40))
      sc.options.own_solver_above = static_cast<std::size_t>(*n);
    f->finish();
  }
  if (auto c = r.optional_object("collectives")) {
    for (workload::Dim d : workload::kDims)
      if (auto a = c->optional_enumeration<netsim::Algorithm>(name_of(d)))
        sc.options.algorithms[d] = *a;
    sc.options.flows_per_pair = static_cast<int>(c->optional_integer("flows_per_pair", 1, 64).value_or(1));
    if (c->has("auto"))
      sc.options.choose_per_step = c->choice("auto", {"per-step", "per-call"}) == "per-step";
    if (auto a = c->optional_enumeration<netsim::AllToAllTiming>("alltoall"))
      sc.options.all_to_all = *a;
    if (auto n = c->optional_object("nccl"))
      sc.options.nccl = netsim::read_nccl(*n);
    c->finish();
  }
  if (r.has("compression"))
    sc.options.compression = netsim::read_compression(r.raw("compression"), path, json_path + ".compression");
  if (auto d = r.optional_object("diloco")) {
    sc.diloco                    = sync::read_diloco(*d);
    sc.options.dp_within_regions = true;
  }
  if (auto f = r.optional_object("faults"))
    sc.faults = topology::read_faults(*f);
  if (auto m = r.optional_object("multipath")) {
    sc.topology.multipath = topology::read_multipath(*m);
    if (sc.topology.multipath.spray && sc.options.engine.packet.transport != "roce")
      m->fail("routing", "\"spray\" sends a flow's packets over every path, which only the \"roce\" transport takes: "
                         "TCP (packet.transport \"" +
                             sc.options.engine.packet.transport +
                             "\") would read the reordering as loss (allowed with it: \"ideal\", \"ecmp\")");
    if (sc.topology.graph && sc.topology.multipath.long_links > 1)
      m->fail("long_links", "splits a template's long links; an imported graph lists its own parallel links");
    if (sc.topology.multipath.ecmp_mode == topology::EcmpMode::rails_apart &&
        sc.options.fidelity != netsim::Fidelity::analytical && sc.options.fidelity != netsim::Fidelity::flow)
      m->fail("ecmp_mode", "\"rails-apart\" runs at analytical and flow fidelity only, not at " +
                               std::string(name_of(sc.options.fidelity)) + " (allowed there: \"auto\", \"exact\")");
  }
  if (auto v = r.optional_object("variability"))
    sc.variability = reliability::read_variability(*v);
  if (auto v = r.optional_object("reliability"))
    sc.reliability = reliability::read_reliability(*v);
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

namespace {
void report(const PhaseCallback& phase, const std::string& what)
{
  if (phase)
    phase(what);
}
} // namespace

namespace {
topology::Topology site(const Scenario& scenario)
{
  topology::Topology t(scenario.topology);
  return scenario.faults ? t.with_faults(*scenario.faults) : t;
}

// An algorithm the scenario names for a dimension must apply to that dimension's collectives (ring is no all-to-all,
// halving-doubling needs a power-of-two group): refused at its key, with what the dimension runs and what applies.
void check_algorithms(const Scenario& scenario, const PlacedStep& placed)
{
  std::set<std::tuple<std::size_t, int, int, std::uint32_t>> seen;
  const auto& stages = placed.graph().stages;
  for (std::size_t s = 0; s < stages.size(); ++s)
    for (const auto& op : stages[s].ops) {
      if (op.kind != workload::OpKind::collective || !op.dim || op.group.size < 2)
        continue;
      const auto a = scenario.options.algorithms[*op.dim];
      if (a == netsim::Algorithm::automatic ||
          !seen.insert({s, static_cast<int>(*op.dim), static_cast<int>(op.collective), op.group.key()}).second)
        continue;
      const auto groups = placed.placement().groups(static_cast<int>(s), op.group);
      if (groups.empty())
        continue;
      netsim::Collective c;
      c.op        = op.collective;
      c.algorithm = a;
      c.gpus      = groups.front();
      c.bytes     = op.bytes * op.count;
      c.nccl      = scenario.options.nccl;
      if (netsim::applicable(placed.topology(), c, a))
        continue;
      std::string allowed;
      for (auto x : netsim::algorithms_for(op.collective))
        if (x == netsim::Algorithm::automatic || netsim::applicable(placed.topology(), c, x))
          allowed += (allowed.empty() ? "" : ", ") + std::string(name_of(x));
      throw SpecError(scenario.file, scenario.json_path + ".collectives." + std::string(name_of(*op.dim)),
                      "algorithm " + std::string(name_of(a)) + " does not apply to the " +
                          std::string(name_of(*op.dim)) + " dimension's " + std::string(name_of(op.collective)) +
                          " over " + std::to_string(c.gpus.size()) + " GPUs (allowed here: " + allowed + ", auto)");
    }
}
} // namespace

PlacedStep::PlacedStep(const Scenario& scenario, const PhaseCallback& phase)
    : topology_((report(phase, "building the topology"), site(scenario))),
      placement_((report(phase, "placing ranks"), topology_), scenario.job, scenario.placement,
                 spec::Location{scenario.file, scenario.json_path + ".placement"}),
      graph_((report(phase, scenario.job.trace.empty() ? "building the step graph" : "reading the Chakra trace"),
              scenario.job.trace.empty()
                  ? placement::build_stage_graph(scenario.job, topology_, placement_,
                                                 spec::Location{scenario.file, scenario.json_path + ".placement"},
                                                 workload::BuildOptions{scenario.check_memory})
                  : traces::import_chakra(scenario.job)))
{
}

ScenarioRun simulate(const Scenario& scenario, std::shared_ptr<const PlacedStep> placed, const PhaseCallback& phase)
{
  ScenarioRun run;
  run.scenario  = scenario;
  run.placement = placed->placement().report(placed->graph());
  report(phase, "simulating the step at " + std::string(name_of(scenario.options.fidelity)) + " fidelity");
  auto options = scenario.options;
  if (scenario.faults)
    options.rail_symmetry = false; // the rails are no longer alike
  sync::OuterSyncParams outer_params{scenario.options.fidelity, options.engine, options.nccl, scenario.file,
                                     scenario.json_path + ".diloco"};
  if (scenario.diloco && scenario.diloco->workers != sync::WorkerLevel::region)
    options.dp_workers = sync::resolve_workers(placed->topology(), placed->graph(), placed->placement(),
                                               *scenario.diloco, spec::Location{outer_params.file, outer_params.path})
                             .of_gpu;
  check_algorithms(scenario, *placed);
  try {
    run.result = netsim::simulate_step(placed->topology(), placed->graph(), placed->placement(), options);
  } catch (const UsageError& e) {
    // The rails apart asked for and refused once the step was placed: the scenario's key is to blame.
    const std::string prefix = "multipath.ecmp_mode \"rails-apart\": ";
    const std::string what   = e.what();
    if (what.rfind(prefix, 0) == 0)
      throw SpecError(scenario.file, scenario.json_path + ".multipath.ecmp_mode",
                      "\"rails-apart\": " + what.substr(prefix.size()));
    throw;
  }
  if (scenario.diloco) {
    report(phase, "simulating the outer synchronization");
    const auto outer = sync::simulate_outer_sync(placed->topology(), placed->graph(), placed->placement(),
                                                 *scenario.diloco, outer_params);
    double compute   = 0;
    for (const auto& st : run.result.stages)
      compute = std::max(compute, st.compute);
    run.diloco =
        sync::average(*scenario.diloco, {run.result.step_time, compute, scenario.job.tokens_per_step()}, outer);
  }
  run.placed = std::move(placed);
  return run;
}

ScenarioRun run_scenario(const Scenario& scenario, const PhaseCallback& phase)
{
  auto run = simulate(scenario, std::make_shared<const PlacedStep>(scenario, phase), phase);
  if (scenario.faults) {
    // The same scenario on the healthy site, for the comparison.
    Scenario healthy = scenario;
    healthy.faults.reset();
    report(phase, "simulating the healthy site");
    const auto h = simulate(healthy, std::make_shared<const PlacedStep>(healthy), {});
    FaultReport f;
    f.healthy_step_time = h.result.step_time;
    f.failed_links      = run.placed->topology().failed_links();
    f.degraded_links    = run.placed->topology().degraded_links();
    f.healthy           = h.placed->topology().boundary_capacities();
    f.faulty            = run.placed->topology().boundary_capacities();
    run.faults          = std::move(f);
  }
  return run;
}

} // namespace spansim::scenario
