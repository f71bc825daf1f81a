// spansim_bench: figures for the network simulation stage (issue 3). A benchmark prints, it never asserts.
//
// Every case runs in a forked child of its own, so that its peak memory can be read from wait4 alone and
// so that SimGrid's one-Engine-per-process rule holds; the flow engine forks once more inside the child
// (netsim::run_flow), and the child reports that process's peak as the engine's.
//
//   spansim_bench              all cases
//   spansim_bench ring 16K     only cases whose name contains "ring" or "16K"
//   spansim_bench --list       the case names
//   spansim_bench --large      add the cases that take minutes (100K flows on one link, 30K random flows)
//   spansim_bench --exact      simulated times with 17 significant digits (to compare builds bit for bit)
//   spansim_bench --timeout S  give up a case after S seconds of wall time (default 600)
#include "calibration/calibration.hpp"
#include "common/json_reader.hpp"
#include "common/process.hpp"
#include "netsim/collectives.hpp"
#include "netsim/netsim.hpp"
#include "netsim/simgrid_platform.hpp"
#include "netsim/step.hpp"
#include "optimizer/optimizer.hpp"
#include "optimizer/screen.hpp"
#include "placement/placement.hpp"
#include "reliability/reliability.hpp"
#include "sharing/sharing.hpp"
#include "topology/topology.hpp"
#include "traces/traces.hpp"
#include "workload/workload.hpp"

#include <simgrid/s4u.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace spansim;
using Clock = std::chrono::steady_clock;

constexpr double kGiB = 1073741824.0;

double seconds_since(Clock::time_point start)
{
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// @brief Peak resident set of this process (self) or of its largest waited-for child, in MiB.
double max_rss_mib(int who)
{
  rusage usage{};
  getrusage(who, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// User CPU seconds of `who` so far: steadier than wall time on a shared machine (time stolen by other guests is
// not counted).
double user_cpu_seconds(int who)
{
  rusage usage{};
  getrusage(who, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec) + static_cast<double>(usage.ru_utime.tv_usec) * 1e-6;
}

/// @brief What a case child sends back to the bench process (plain bytes through a pipe).
struct Figures {
  double simulated   = 0; ///< makespan in simulated seconds
  double lower_wall  = 0; ///< building the flow graph (lowering), seconds
  double engine_wall = 0; ///< running the engine (fork, platform, simulation), seconds
  double warm_wall   = 0; ///< analytical: the fastest of a few more runs in the same process (no page faults,
                          ///< no lazy symbol binding), as in an optimizer's inner loop
  double engine_rss = 0;  ///< MiB: the flow engine's process, or the child itself for the analytical engine
  long transfers    = 0;
  int gpus          = 0;
  char error[200]   = {};
  char note[160]    = {}; ///< a figure of the case's own, printed after the target
};

/// @brief Records a simulated step: its time, transfers and GPUs, the engine's wall time since `start`, peak RSS.
void record_step(Figures& f, const netsim::StepResult& r, std::int64_t gpus, Clock::time_point start)
{
  f.engine_wall = seconds_since(start);
  f.simulated   = r.step_time;
  f.transfers   = static_cast<long>(r.transfers.size());
  f.gpus        = static_cast<int>(gpus);
  f.engine_rss  = std::max(max_rss_mib(RUSAGE_SELF), max_rss_mib(RUSAGE_CHILDREN));
}

/// @brief One benchmark case: a topology preset and what to run on it.
struct Case {
  std::string name;
  std::string preset;
  std::string fidelity; ///< "analytical", "flow" or "platform" (build the SimGrid platform only)
  std::function<void(const topology::Topology&, netsim::FlowGraph&, Figures&)> build;
  double target_wall = 0; ///< seconds; 0: no target
  std::string target_text;
  bool large = false; ///< minutes rather than seconds: only with --large
  /// @brief Whole-workflow cases (a training step, a search) that run themselves instead of `build`.
  std::function<void(Figures&)> custom;
};

/// @brief Runs `work` in a forked child; returns its figures and its peak RSS (wait4, children included).
/// The child leads a process group of its own, so that a case over `timeout` seconds ends with its engine.
Figures in_child(const std::function<void(Figures&)>& work, double timeout, double& child_rss_mib)
{
  auto r = process::run_child(
      [&] {
        Figures out;
        work(out);
        return std::string(reinterpret_cast<const char*>(&out), sizeof out);
      },
      process::ChildOptions{.timeout_s = timeout});
  child_rss_mib = r.max_rss_mib;
  Figures figures;
  if (!r.error.empty())
    std::snprintf(figures.error, sizeof figures.error, "%s", r.error.c_str());
  else if (r.output.size() == sizeof figures)
    std::memcpy(&figures, r.output.data(), sizeof figures);
  else
    std::snprintf(figures.error, sizeof figures.error, "the case process returned %zu bytes", r.output.size());
  return figures;
}

std::vector<int> range(int first, int count)
{
  std::vector<int> gpus(count);
  for (int i = 0; i < count; ++i)
    gpus[i] = first + i;
  return gpus;
}

// Half of the group in each building of two-buildings: the first K/2 GPUs of each.
std::vector<int> two_building_group(const topology::Topology& t, int k)
{
  auto gpus              = range(0, k / 2);
  const int per_building = t.gpu_count() / t.building_count();
  auto second            = range(per_building, k / 2);
  gpus.insert(gpus.end(), second.begin(), second.end());
  return gpus;
}

std::function<void(const topology::Topology&, netsim::FlowGraph&, Figures&)>
collective(CollectiveOp op, netsim::Algorithm algorithm, double bytes,
           std::function<std::vector<int>(const topology::Topology&)> group)
{
  return [=](const topology::Topology& t, netsim::FlowGraph& g, Figures& f) {
    netsim::Collective c;
    c.op        = op;
    c.algorithm = algorithm;
    c.bytes     = bytes;
    c.gpus      = group(t);
    netsim::add_collective(g, t, c, {});
    f.gpus = static_cast<int>(c.gpus.size());
  };
}

// Concurrent flows from east to west of two-regions, all through the one inter-region link: flow i goes
// from GPU 64 i of the first region to GPU 64 i of the second (distinct nodes on both sides) when there
// are few flows, else from GPU i to GPU i, wrapping around (more flows than GPUs share their NICs).
std::function<void(const topology::Topology&, netsim::FlowGraph&, Figures&)> region_flows(int flows, double bytes)
{
  return [=](const topology::Topology& t, netsim::FlowGraph& g, Figures& f) {
    const int per_region = t.gpu_count() / static_cast<int>(t.counts().regions);
    const int spacing    = per_region / flows >= 64 ? 64 : 1;
    for (int i = 0; i < flows; ++i) {
      const int gpu = (i * spacing) % per_region;
      g.add_transfer(gpu, per_region + gpu, bytes);
    }
    f.gpus = 2 * std::min(flows, per_region);
  };
}

// Concurrent flows between GPUs drawn uniformly (fixed seed) from the whole topology, src != dst.
std::function<void(const topology::Topology&, netsim::FlowGraph&, Figures&)> random_flows(int flows, double bytes)
{
  return [=](const topology::Topology& t, netsim::FlowGraph& g, Figures& f) {
    std::mt19937 rng(1);
    std::uniform_int_distribution<int> gpu(0, t.gpu_count() - 1);
    for (int i = 0; i < flows; ++i) {
      int src = gpu(rng), dst = gpu(rng);
      while (dst == src)
        dst = gpu(rng);
      g.add_transfer(src, dst, bytes);
    }
    f.gpus = t.gpu_count();
  };
}

// One co-simulated training step of Llama 3 405B (TP 8, PP 16, interleaved 1F1B, FSDP) with DP across the
// buildings; `dp` replicas, 16 micro-batches of one 8K sequence each.
// Llama 3 405B's configuration with `dp` data-parallel ranks (8 x 16 x dp GPUs).
nlohmann::json job_405b(int dp)
{
  return {
      {"name", "bench-405b"},
      {"model", "llama3-405b"},
      {"gpu", "h100"},
      {"gpus", 8 * 16 * dp},
      {"parallelism", {{"tp", 8}, {"pp", 16}, {"dp", dp}, {"data_parallel", "fsdp"}, {"reshard_after_forward", false}}},
      {"batch", {{"global_sequences", 16 * dp}, {"sequence_length", 8192}, {"micro_batch", 1}}},
      {"schedule", {{"kind", "interleaved-1f1b"}, {"virtual_stages", 4}}},
      {"recompute", "selective"}};
}

// Issue 13: step sampling and a whole run's Monte Carlo over the step of `dp` replicas on `preset` (analytical,
// per-call collective choice). The wall time is the reliability stage's alone; the note gives the step's.
/// @brief Tier 1 against tier 2 over several spaces: does the screen's top 1% hold the exhaustive analytical best?
struct Containment {
  int spaces = 0, contained = 0;
  double worst_percent = 0; ///< the largest tier-1 rank (as a share of the feasible points) of a tier-2 best
  std::string detail;
};

Containment screen_containment()
{
  struct Case {
    const char* model;
    const char* topology;
    std::vector<std::string> buildings;
    int gpus;
    double tokens;
    nlohmann::json search;
  };
  const nlohmann::json all_orders = "all";
  const std::vector<Case> cases   = {
        {"llama3-8b",
         "two-regions",
         {"east-b0", "west-b0"},
         256,
         4194304,
         {{"tp", {1, 2, 4, 8}},
          {"cp", {1, 2}},
          {"pp", {1, 2, 4}},
          {"data_parallel", {"fsdp", "hsdp"}},
          {"schedule", {"1f1b", "interleaved-1f1b"}},
          {"virtual_stages", {2}},
          {"order", all_orders},
          {"recompute", {"none", "selective"}}}},
        {"llama3-8b",
         "two-buildings",
         {"bldg-a", "bldg-b"},
         256,
         4194304,
         {{"tp", {1, 2, 4, 8}},
          {"cp", {1, 2}},
          {"pp", {1, 2, 4}},
          {"data_parallel", {"fsdp", "hsdp", "ddp"}},
          {"micro_batch", {1, 2}},
          {"order", all_orders},
          {"recompute", {"none", "selective"}}}},
        {"llama3-70b",
         "two-regions",
         {"east-b0", "west-b0"},
         1024,
         8388608,
         {{"tp", {2, 4, 8}},
          {"pp", {2, 4, 8}},
          {"data_parallel", {"fsdp", "hsdp"}},
          {"schedule", {"1f1b", "interleaved-1f1b"}},
          {"virtual_stages", {2, 4}},
          {"order", all_orders},
          {"recompute", {"selective", "full"}}}},
        {"llama3-70b",
         "two-buildings",
         {"bldg-a", "bldg-b"},
         1024,
         8388608,
         {{"tp", {2, 4, 8}},
          {"cp", {1, 2}},
          {"pp", {2, 4, 8}},
          {"data_parallel", {"fsdp", "hsdp"}},
          {"micro_batch", {1, 2}},
          {"order", all_orders},
          {"recompute", {"selective", "full"}},
          {"dp_algorithm", {"auto", "ring"}}}},
        {"llama4-scout",
         "two-buildings",
         {"bldg-a", "bldg-b"},
         512,
         4194304,
         {{"tp", {1, 2, 4, 8}},
          {"pp", {1, 2, 4}},
          {"ep", {1, 4, 16}},
          {"data_parallel", {"fsdp", "hsdp"}},
          {"order", all_orders},
          {"recompute", {"selective", "full"}}}},
        {"llama3-405b",
         "two-buildings",
         {"bldg-a", "bldg-b"},
         4096,
         16777216,
         {{"tp", {4, 8}},
          {"pp", {4, 8, 16}},
          {"data_parallel", {"fsdp", "hsdp"}},
          {"schedule", {"1f1b", "interleaved-1f1b"}},
          {"virtual_stages", {2, 4}},
          {"order", all_orders},
          {"recompute", {"selective", "full"}}}},
  };
  Containment out;
  for (const auto& c : cases) {
    nlohmann::json j       = {{"name", std::string("containment-") + c.model},
                              {"topology", c.topology},
                              {"model", c.model},
                              {"gpu", "h100"},
                              {"gpus", c.gpus},
                              {"buildings", c.buildings},
                              {"batch", {{"global_tokens", c.tokens}, {"sequence_length", 8192}}},
                              {"search", c.search},
                              {"top_k", 1},
                              {"refine_fidelity", "analytical"},
                              {"screen", {{"above", optimizer::kMaxEnumerated}}}};
    const std::string path = "/tmp/spansim-bench-containment-" + std::to_string(::getpid()) + ".json";
    std::ofstream(path) << j.dump();
    const auto spec = optimizer::load_optimize_spec(path);
    std::remove(path.c_str());
    // The exhaustive tier-2 best: the lowest analytical score (bound-skipped points cannot beat it).
    const auto result = optimizer::optimize(spec);
    const auto best   = result.ranked.front().point.label();
    const auto [rank, feasible] =
        optimizer::screen_rank(optimizer::IndexedSpace(spec), topology::Topology(spec.topology), best);
    const double percent = 100.0 * static_cast<double>(rank + 1) / static_cast<double>(feasible);
    out.spaces++;
    out.contained += (rank + 1) * 100 <= feasible ? 1 : 0;
    out.worst_percent = std::max(out.worst_percent, percent);
    out.detail += std::string(out.detail.empty() ? "" : "; ") + c.model + "/" + c.topology + " " +
                  std::to_string(rank + 1) + " of " + std::to_string(feasible);
    std::fprintf(stderr, "containment %s on %s (%d GPUs): tier-2 best %s is tier-1 rank %zu of %zu (%.2f%%)\n", c.model,
                 c.topology, c.gpus, best.c_str(), rank + 1, feasible, percent);
  }
  return out;
}

std::function<void(Figures&)> reliability_405b(const char* preset, int dp, int steps, double days)
{
  return [=](Figures& f) {
    topology::Topology topo(topology::load_topology_spec(preset));
    auto job   = workload::parse_job(job_405b(dp), "bench-405b.json");
    auto graph = workload::build_step_graph(job);
    placement::Placement place(topo, job, {});
    netsim::StepOptions o;
    o.fidelity        = netsim::Fidelity::analytical;
    o.choose_per_step = false;
    auto start        = Clock::now();
    auto r            = netsim::simulate_step(topo, graph, place, o);
    const double sim  = seconds_since(start);
    reliability::VariabilitySpec v;
    v.slow_fraction       = 0.005;
    v.slowdown            = 1.1;
    v.compute.kind        = reliability::Jitter::Kind::lognormal;
    v.compute.sigma       = 0.02;
    v.communication.kind  = reliability::Jitter::Kind::lognormal;
    v.communication.sigma = 0.05;
    reliability::SampleOptions so;
    so.steps                   = steps;
    start                      = Clock::now();
    auto sampled               = reliability::sample_steps(graph, r, place, v, so);
    const double sampling      = seconds_since(start);
    const nlohmann::json block = {{"seed", 1}, {"failures", "llama3-405b"}};
    auto spec                  = reliability::read_reliability(spec::ObjectReader(block, spec::Location{"bench"}));
    auto shape                 = reliability::run_shape(job, topo, place, spec, sampled.mean);
    auto costs                 = reliability::costs(spec, shape);
    reliability::Horizon h;
    h.days          = days;
    h.trials        = 200;
    start           = Clock::now();
    auto outcome    = reliability::simulate_run(spec, shape, costs, h);
    const double mc = seconds_since(start);
    f.engine_wall   = sampling + mc;
    f.simulated     = sampled.mean;
    f.gpus          = static_cast<int>(job.gpus);
    f.engine_rss    = std::max(max_rss_mib(RUSAGE_SELF), max_rss_mib(RUSAGE_CHILDREN));
    std::snprintf(f.note, sizeof f.note,
                  "step simulated in %.1f s; %d steps sampled in %.2f s (mean %+.1f%%); %.0f days x 200 trials in "
                  "%.2f s: %.0f interruptions, ETTR %.1f%%",
                  sim, steps, sampling, 100 * sampled.lost_share, days, mc, outcome.interruptions, 100 * outcome.ettr);
  };
}

// Runs `body` on one step of Llama 3 405B over all 131,072 GPUs of two-regions (DP 1,024), in the default order.
void on_405b_131k(const std::function<void(const topology::Topology&, const workload::JobSpec&,
                                           const workload::StepGraph&, const placement::Placement&)>& body)
{
  topology::Topology topo(topology::load_topology_spec("two-regions"));
  auto job   = workload::parse_job(job_405b(1024), "bench-405b.json");
  auto graph = workload::build_step_graph(job);
  placement::Placement place(topo, job, {});
  body(topo, job, graph, place);
}

/// @brief Explicit spines, 16 wavelengths between the buildings, ECMP.
void with_ecmp(topology::TopologySpec& spec)
{
  spec.multipath.ecmp            = true;
  spec.multipath.explicit_spines = true;
  spec.multipath.long_links      = 16;
}

std::function<void(Figures&)> step_405b(const char* preset, int dp, const char* fidelity, bool imported = false,
                                        bool ecmp_spines = false, bool building_symmetry = true)
{
  return [=](Figures& f) {
    auto spec = topology::load_topology_spec(preset);
    if (ecmp_spines)
      with_ecmp(spec);
    topology::Topology topo(spec);
    auto start = Clock::now();
    if (imported) // the preset's explicit graph, exported and imported again: routed by least cost
      topo = topology::Topology(topology::parse_topology_spec(topo.to_graph_json(), "exported.json"));
    auto job   = workload::parse_job(job_405b(dp), "bench-405b.json");
    auto graph = workload::build_step_graph(job);
    placement::Placement place(topo, job, {});
    f.lower_wall = seconds_since(start);
    netsim::StepOptions o;
    o.fidelity          = parse_enum<netsim::Fidelity>(fidelity, "fidelity");
    o.building_symmetry = building_symmetry;
    start               = Clock::now();
    auto r              = netsim::simulate_step(topo, graph, place, o);
    record_step(f, r, job.gpus, start);
    const auto& folded = r.engine["building_symmetry"];
    std::snprintf(f.note, sizeof f.note, "building symmetry: %s",
                  folded.is_string() ? folded.get<std::string>().c_str() : "none");
  };
}

// Issue 59: DeepSeek-V3 (PP 16, FSDP) on 64 of each GB200 NVL72 rack's 72 GPUs, one building of three-regions-nvl72,
// NCCL pinned to 64 channels so that its rings leave each rack by all 64 used NICs: the step with the simulated rails
// standing for the others against every rail simulated. EP 64 in Megatron's order folds onto rail 0; EP 32 with data
// parallelism inside the pipeline ([tp, cp, dp, pp]: two EP groups a rack, each expert data-parallel group at one
// offset of both halves of its racks) folds onto rails 0 and 32, each standing for its half.
std::function<void(Figures&)> nvl72_spares_fold(int gpus, int ep, netsim::Fidelity fidelity)
{
  return [=](Figures& f) {
    topology::Topology topo(topology::load_topology_spec("three-regions-nvl72"));
    nlohmann::json j = {
        {"name", "deepseek-v3-nvl72-spares"},
        {"model", "deepseek-v3"},
        {"gpu", "gb200"},
        {"gpus", gpus},
        {"parallelism",
         {{"tp", 1},
          {"pp", 16},
          {"dp", gpus / 16},
          {"ep", ep},
          {"data_parallel", "fsdp"},
          {"reshard_after_forward", false}}},
        {"batch", {{"global_sequences", gpus}, {"sequence_length", 4096}, {"micro_batch", 1}}},
        {"schedule", {{"kind", "1f1b"}}},
        {"recompute", "full"},
        {"precision", {{"compute", "fp8"}, {"recipe", "blockwise"}, {"gradient_reduce", "bf16"}}},
        {"moe", {{"dispatcher", "deepep"}, {"dispatch_precision", "fp8"}, {"routing", {{"balance", "balanced"}}}}}};
    auto job   = workload::parse_job(j, "bench-deepseek-nvl72.json");
    auto graph = workload::build_step_graph(job);
    placement::PlacementSpec where;
    where.buildings     = {topo.building_name(0)};
    where.gpus_per_node = 64;
    if (ep < 64)
      where.order = {workload::Dim::tp, workload::Dim::cp, workload::Dim::dp, workload::Dim::pp};
    placement::Placement place(topo, job, where);
    netsim::StepOptions o;
    o.fidelity            = fidelity;
    o.nccl.channels       = 64;
    o.nccl.fixed_channels = true;
    auto start            = Clock::now();
    const auto folded     = netsim::simulate_step(topo, graph, place, o);
    record_step(f, folded, job.gpus, start);
    o.rail_symmetry         = false;
    start                   = Clock::now();
    const auto every        = netsim::simulate_step(topo, graph, place, o);
    const double every_wall = seconds_since(start);
    std::snprintf(f.note, sizeof f.note, "%s; %zu ops; every rail: %zu ops, %.1f s, step %.9g s (%+.1e rel.)",
                  folded.engine.value("rail_symmetry", nlohmann::json("no fold")).dump().c_str(), folded.flow_ops,
                  every.flow_ops, every_wall, every.step_time, folded.step_time / every.step_time - 1);
  };
}

// Issue 59: ECMP's rails apart at flow fidelity, every rail through SimGrid against every rail on spansim's own
// max-min engine (own_solver_above 1): the step and each rail's step, and their largest relative difference.
std::function<void(Figures&)> ecmp_solver_agreement(int dp)
{
  return [=](Figures& f) {
    auto spec = topology::load_topology_spec("two-buildings");
    with_ecmp(spec);
    spec.multipath.ecmp_mode = topology::EcmpMode::rails_apart; // `auto` keeps 4,096 GPUs' rails together
    topology::Topology topo(spec);
    auto job   = workload::parse_job(job_405b(dp), "bench-405b.json");
    auto graph = workload::build_step_graph(job);
    placement::Placement place(topo, job, {});
    netsim::StepOptions o;
    o.fidelity                = netsim::Fidelity::flow;
    o.flow_every_rail         = true;
    o.own_solver_above        = 0;
    auto start                = Clock::now();
    const auto simgrid        = netsim::simulate_step(topo, graph, place, o);
    const double simgrid_wall = seconds_since(start);
    o.own_solver_above        = 1;
    start                     = Clock::now();
    const auto own            = netsim::simulate_step(topo, graph, place, o);
    record_step(f, own, job.gpus, start);
    const auto& a = simgrid.engine.at("ecmp").at("rail_steps_s");
    const auto& b = own.engine.at("ecmp").at("rail_steps_s");
    double worst  = std::abs(own.step_time / simgrid.step_time - 1);
    for (std::size_t r = 0; r < a.size() && r < b.size(); ++r)
      worst = std::max(worst, std::abs(b[r].get<double>() / a[r].get<double>() - 1));
    std::snprintf(f.note, sizeof f.note,
                  "%zu rails; SimGrid every rail %.1f s, step %.9g s; worst |own/SimGrid - 1| %.1e", a.size(),
                  simgrid_wall, simgrid.step_time, worst);
  };
}

/// @brief An ECMP case of two-buildings (the job across both buildings), or of all of two-regions: explicit spines,
/// the long haul split into `long_links` wavelengths.
struct EcmpCase {
  const char* model; ///< llama3-70b (dense) or an MoE model (EP 8 over data parallelism)
  int gpus;
  double long_haul_tbps; ///< between two-buildings' buildings (the preset's 204.8, or a thin 12.8 that binds)
  int long_links, qps, seed;
  bool two_regions = false; ///< all of two-regions as shipped (long_haul_tbps unused)
};

/// @brief The scenario of an ECMP case at analytical fidelity (TP 8, PP 2, FSDP over the rest; 4,096 tokens a GPU).
scenario::Scenario ecmp_case(const EcmpCase& c)
{
  nlohmann::json job = {{"name", "ecmp"},
                        {"model", c.model},
                        {"gpu", "h100"},
                        {"gpus", c.gpus},
                        {"batch", {{"global_tokens", c.gpus * 4096}, {"sequence_length", 4096}, {"micro_batch", 1}}},
                        {"schedule", {{"kind", "1f1b"}}}};
  job["parallelism"] = {{"tp", 8}, {"pp", 2}, {"dp", c.gpus / 16}, {"data_parallel", "fsdp"}};
  if (std::string(c.model) != "llama3-70b")
    job["parallelism"]["ep"] = 8;
  nlohmann::json doc = {
      {"name", "ecmp-error"},
      {"topology", c.two_regions ? "two-regions" : "two-buildings"},
      {"job", job},
      {"placement", {{"order", {"tp", "cp", "pp", "dp"}}}},
      {"fidelity", "analytical"},
      {"multipath",
       {{"routing", "ecmp"}, {"spines", "explicit"}, {"long_links", c.long_links}, {"qps", c.qps}, {"seed", c.seed}}}};
  if (!c.two_regions)
    doc["placement"]["buildings"] = {"bldg-a", "bldg-b"};
  auto sc = scenario::parse_scenario(doc, "ecmp-error.json");
  if (!c.two_regions)
    sc.topology.inter_building.bandwidth = c.long_haul_tbps * 1e12 / 8;
  return sc;
}

// Issue 59: an MoE step whose all-to-alls cross nodes under ECMP, as `auto` runs it (every rail together up to
// 16,384 GPUs, the rails apart with time-resolved shares above), on two-buildings with a thin long haul, or on all of
// two-regions. Past netsim::kAllToAllFlowBudget its all-to-alls are timed in isolation, so at 4,096 GPUs the note
// gives that mechanism's error (all-to-alls as flows against isolated, both exact).
std::function<void(Figures&)> ecmp_moe_auto(int gpus, netsim::Fidelity fidelity, bool two_regions = false)
{
  return [=](Figures& f) {
    auto sc             = ecmp_case({"qwen3-30b-a3b", gpus, 12.8, 16, 1, 1, two_regions});
    sc.options.fidelity = fidelity;
    auto start          = Clock::now();
    const auto run      = scenario::simulate(sc, std::make_shared<const scenario::PlacedStep>(sc));
    record_step(f, run.result, gpus, start);
    const auto engine = run.result.engine.value("max_min_engine", std::string(name_of(fidelity)));
    if (gpus > 4096) {
      const auto& ecmp = run.result.engine.at("ecmp");
      std::snprintf(f.note, sizeof f.note, "%s; %s; all-to-alls %s", ecmp.value("mode", "").c_str(),
                    engine.substr(0, 40).c_str(), run.result.engine.value("all_to_all", "").substr(0, 40).c_str());
      return;
    }
    double step[2] = {0, 0};
    for (int isolated = 0; isolated < 2; ++isolated) {
      auto each               = ecmp_case({"qwen3-30b-a3b", gpus, 12.8, 16, 1, 1});
      each.options.all_to_all = isolated ? netsim::AllToAllTiming::isolated : netsim::AllToAllTiming::flows;
      step[isolated] = scenario::simulate(each, std::make_shared<const scenario::PlacedStep>(each)).result.step_time;
    }
    std::snprintf(f.note, sizeof f.note, "all-to-alls isolated %.6f s / as flows %.6f s - 1 = %+.2f%%", step[1],
                  step[0], 100 * (step[1] / step[0] - 1));
  };
}

// Issue 37: ECMP's rails simulated apart against every rail together (analytical, the flow engine's model), on
// Llama 3 70B (dense) and Qwen3-30B-A3B (MoE, EP over data parallelism) across both buildings of two-buildings,
// with explicit spines, 1-16 long links, 1-16 queue pairs and several hash seeds. One row per case as it ends.
std::function<void(Figures&)> ecmp_error_table(bool large)
{
  return [=](Figures& f) {
    using Row = EcmpCase;
    std::vector<Row> rows;
    // The 4,096-GPU rows alone (minutes each exactly); the table of 256 and 1,024 is the case without --large.
    if (large) {
      for (double tbps : {204.8, 12.8})
        rows.push_back({"llama3-70b", 4096, tbps, 16, 1, 1});
      rows.push_back({"qwen3-30b-a3b", 4096, 204.8, 16, 1, 1});
    }
    for (int gpus : {256, 1024})
      for (double tbps : {204.8, 12.8})
        for (int links : {1, 4, 16})
          for (int qps : {1, 4, 16})
            for (int seed : {1, 2, 3})
              if (!large && (gpus == 256 || (qps < 16 && seed < 3)))
                rows.push_back({"llama3-70b", gpus, tbps, links, qps, seed});
    for (int gpus : {256, 1024})
      for (double tbps : {204.8, 12.8})
        for (int links : {1, 16})
          for (int qps : {1, 4})
            for (int seed : {1, 2})
              if (!large && (gpus == 256 || qps == 1)) // MoE at 1,024 GPUs with 4 QPs: 10 minutes per exact run
                rows.push_back({"qwen3-30b-a3b", gpus, tbps, links, qps, seed});
    std::printf(
        "\n| model | GPUs | between buildings | long links | QPs | seed | exact | rails apart | error | error with "
        "byte shares | exact wall | apart wall |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    std::fflush(stdout);
    double worst = 0, apart_wall = 0, exact_wall = 0;
    std::string worst_case;
    for (const auto& row : rows) {
      // Exact, the rails apart (time-resolved shares where all-to-alls cross nodes), and for those the byte shares.
      const bool moe = std::string(row.model) != "llama3-70b";
      double step[3] = {0, 0, 0}, wall[3] = {0, 0, 0};
      for (int way = 0; way < (moe ? 3 : 2); ++way) {
        auto sc = ecmp_case({row.model, row.gpus, row.long_haul_tbps, row.long_links, row.qps, row.seed});
        sc.topology.multipath.ecmp_mode = way > 0 ? topology::EcmpMode::rails_apart : topology::EcmpMode::exact;
        sc.options.time_resolved_shares = way != 2;
        const auto start                = Clock::now();
        const auto run                  = scenario::simulate(sc, std::make_shared<const scenario::PlacedStep>(sc));
        wall[way]                       = seconds_since(start);
        step[way]                       = run.result.step_time;
      }
      const double error = (step[1] - step[0]) / step[0];
      if (std::abs(error) >= std::abs(worst)) {
        worst = error;
        char text[160];
        std::snprintf(text, sizeof text, "%s %d GPUs, %.1f Tbps over %d links, %d QPs, seed %d", row.model, row.gpus,
                      row.long_haul_tbps, row.long_links, row.qps, row.seed);
        worst_case = text;
      }
      exact_wall += wall[0];
      apart_wall += wall[1];
      char bytes[64] = "-";
      if (moe)
        std::snprintf(bytes, sizeof bytes, "%+.3f%%", 100 * (step[2] - step[0]) / step[0]);
      std::printf("| %s | %d | %.1f Tbps | %d | %d | %d | %.6f s | %.6f s | %+.3f%% | %s | %.1f s | %.1f s |\n",
                  row.model, row.gpus, row.long_haul_tbps, row.long_links, row.qps, row.seed, step[0], step[1],
                  100 * error, bytes, wall[0], wall[1]);
      std::fflush(stdout);
    }
    f.engine_wall = apart_wall;
    f.gpus        = rows.back().gpus;
    f.engine_rss  = std::max(max_rss_mib(RUSAGE_SELF), max_rss_mib(RUSAGE_CHILDREN));
    std::snprintf(f.note, sizeof f.note, "%zu cases; worst %+.2f%% (%s); exact %.0f s in all", rows.size(), 100 * worst,
                  worst_case.c_str(), exact_wall);
  };
}

// Issue 18: two Llama 3 405B jobs of 8K GPUs each (4K per building) on two-buildings, both with data parallelism
// across the inter-building link: each alone, then together for three steps of the slower.
std::function<void(Figures&)> shared_405b(const char* fidelity)
{
  return [=](Figures& f) {
    sharing::SharedSpec spec;
    spec.name     = "bench-shared";
    spec.topology = topology::load_topology_spec("two-buildings");
    spec.fidelity = parse_enum<netsim::Fidelity>(fidelity, "fidelity");
    for (const char* name : {"a", "b"}) {
      scenario::Scenario sc;
      sc.name                = name;
      sc.file                = "bench-shared.json";
      sc.job                 = workload::parse_job(job_405b(64), "bench-405b.json");
      sc.placement.buildings = {"bldg-a", "bldg-b"};
      spec.jobs.push_back({sc});
    }
    const auto start = Clock::now();
    const auto run   = sharing::run_shared(spec);
    f.engine_wall    = seconds_since(start);
    f.simulated      = run.makespan;
    f.transfers      = static_cast<long>(run.flow_ops);
    f.gpus           = 2 * 8192;
    f.engine_rss     = std::max(max_rss_mib(RUSAGE_SELF), max_rss_mib(RUSAGE_CHILDREN));
    std::snprintf(f.note, sizeof f.note, "a: %.4f s alone, %.4f s shared (%.3fx); b: %.3fx; %zu + %zu steps",
                  run.jobs[0].alone_step, run.jobs[0].shared_step, run.jobs[0].slowdown, run.jobs[1].slowdown,
                  run.jobs[0].step_ends.size(), run.jobs[1].step_ends.size());
  };
}

// One example scenario as `spansim run` simulates it at the given fidelity; `note` adds the figure the bench reports.
std::function<void(Figures&)>
example_scenario(const std::string& file, const char* fidelity, int gpus,
                 std::function<void(const scenario::Scenario&, const netsim::StepResult&, Figures&)> note)
{
  return [=](Figures& f) {
    auto sc             = scenario::load_scenario(std::string(SPANSIM_SOURCE_DIR) + "/examples/scenarios/" + file);
    sc.options.fidelity = parse_enum<netsim::Fidelity>(fidelity, "fidelity");
    auto start          = Clock::now();
    auto placed         = std::make_shared<const scenario::PlacedStep>(sc);
    f.lower_wall        = seconds_since(start);
    start               = Clock::now();
    const auto run      = scenario::simulate(sc, placed);
    f.engine_wall       = seconds_since(start);
    f.simulated         = run.result.step_time;
    f.transfers         = static_cast<long>(run.result.transfers.size());
    f.gpus              = gpus;
    f.engine_rss        = std::max(max_rss_mib(RUSAGE_SELF), max_rss_mib(RUSAGE_CHILDREN));
    note(sc, run.result, f);
  };
}

// The full search of one examples/optimize file on every core; `note` adds (or overrides) what the bench reports.
std::function<void(Figures&)>
example_search(const std::string& file,
               std::function<void(const optimizer::OptimizeSpec&, const optimizer::OptimizeResult&, Figures&)> note)
{
  return [=](Figures& f) {
    auto spec     = optimizer::load_optimize_spec(std::string(SPANSIM_SOURCE_DIR) + "/examples/optimize/" + file);
    auto start    = Clock::now();
    auto result   = optimizer::optimize(spec);
    f.engine_wall = seconds_since(start);
    f.simulated   = *result.ranked.front().refined;
    f.transfers   = static_cast<long>(result.scored);
    f.gpus        = static_cast<int>(spec.base.gpus);
    f.engine_rss  = std::max(max_rss_mib(RUSAGE_SELF), max_rss_mib(RUSAGE_CHILDREN));
    note(spec, result, f);
  };
}

// Issue 18: MLPerf's DLRM-DCNv2 on 1,024 GPUs of two-buildings (examples/scenarios/dlrm-dcnv2-1024-two-buildings.json).
std::function<void(Figures&)> dlrm_1024(const char* fidelity)
{
  return example_scenario("dlrm-dcnv2-1024-two-buildings.json", fidelity, 1024,
                          [](const scenario::Scenario& sc, const netsim::StepResult& r, Figures& f) {
                            std::snprintf(f.note, sizeof f.note, "%s sharding; %.0f samples/s",
                                          std::string(name_of(workload::dlrm_plan(sc.job).sharding)).c_str(),
                                          r.tokens_per_second);
                          });
}

// Issue 33: DeepSeek-V3 on 2,048 H100 of two-buildings (DualPipe, DeepEP) as the example scenario runs it.
std::function<void(Figures&)> deepseek_2048(const char* fidelity)
{
  return example_scenario("deepseek-v3-2048-two-buildings.json", fidelity, 2048,
                          [](const scenario::Scenario&, const netsim::StepResult& r, Figures& f) {
                            std::snprintf(f.note, sizeof f.note, "%.0f tokens/s", r.tokens_per_second);
                          });
}

// The 8K step at hybrid fidelity, and at flow fidelity for the difference.
std::function<void(Figures&)> hybrid_405b()
{
  return [](Figures& f) {
    topology::Topology topo(topology::load_topology_spec("two-buildings"));
    auto start = Clock::now();
    auto job   = workload::parse_job(job_405b(64), "bench-405b.json");
    auto graph = workload::build_step_graph(job);
    placement::Placement place(topo, job, {});
    f.lower_wall = seconds_since(start);
    netsim::StepOptions o;
    o.fidelity      = netsim::Fidelity::flow;
    const auto flow = netsim::simulate_step(topo, graph, place, o);
    o.fidelity      = netsim::Fidelity::hybrid;
    start           = Clock::now();
    const auto r    = netsim::simulate_step(topo, graph, place, o);
    record_step(f, r, job.gpus, start);
    const auto& h = r.engine["hybrid"];
    double lo = 1e9, hi = 0;
    for (const auto& c : h["corrections"]) {
      lo = std::min(lo, c["factor"].get<double>());
      hi = std::max(hi, c["factor"].get<double>());
    }
    std::snprintf(f.note, sizeof f.note,
                  "flow %.4f s, hybrid %+.2f%%; %d packet runs of %d patterns (%.0f s of runs), factors %.3f-%.3f",
                  flow.step_time, 100 * (r.step_time / flow.step_time - 1), h["packet_runs"].get<int>(),
                  h["patterns"].get<int>(), h["run_wall_seconds"].get<double>(), lo, hi);
  };
}

// Issue 59: a hybrid pattern too large for packet level is measured on one rail and on fewer of its nodes. Against
// the whole collective where it still runs: DP 64 (FSDP, a small model) over 8 nodes of two-buildings, 4 in each
// building, with packet level held to 16 GPUs so that each DP pattern is cut to 2 of its 8 nodes and one rail (at 32
// GPUs it is cut as far: 4 nodes, floored at min_transfer_bytes, would move more than max_pattern_bytes).
std::function<void(Figures&)> hybrid_cut_vs_whole()
{
  return [](Figures& f) {
    topology::Topology topo(topology::load_topology_spec("two-buildings"));
    nlohmann::json j = {{"name", "bench-hybrid-cut"},
                        {"model",
                         {{"name", "small"},
                          {"layers", 4},
                          {"hidden", 1024},
                          {"ffn", 4096},
                          {"heads", 16},
                          {"kv_heads", 16},
                          {"vocab", 32000},
                          {"mlp", "swiglu"}}},
                        {"gpu", "h100"},
                        {"gpus", 64},
                        {"parallelism", {{"tp", 1}, {"pp", 1}, {"dp", 64}, {"data_parallel", "fsdp"}}},
                        {"batch", {{"global_sequences", 64}, {"sequence_length", 2048}, {"micro_batch", 1}}},
                        {"schedule", {{"kind", "1f1b"}}}};
    auto job         = workload::parse_job(j, "bench-hybrid-cut.json");
    auto graph       = workload::build_step_graph(job);
    placement::Placement place(
        topo, job,
        {{workload::Dim::tp, workload::Dim::cp, workload::Dim::dp, workload::Dim::pp}, {"bldg-a", "bldg-b"}});
    netsim::StepOptions o;
    o.fidelity       = netsim::Fidelity::hybrid;
    auto start       = Clock::now();
    const auto whole = netsim::simulate_step(topo, graph, place, o);
    record_step(f, whole, job.gpus, start);
    double worst_factor = 0, worst_step = 0;
    for (int gpus : {16}) {
      o.engine.packet.max_gpus = gpus;
      const auto cut           = netsim::simulate_step(topo, graph, place, o);
      const auto& w            = whole.engine["hybrid"]["corrections"];
      const auto& c            = cut.engine["hybrid"]["corrections"];
      for (std::size_t k = 0; k < w.size() && k < c.size(); ++k) {
        if (!c[k].contains("measured_on") || !w[k].contains("measured_on"))
          continue;
        const double rel = c[k]["factor"].get<double>() / w[k]["factor"].get<double>() - 1;
        std::printf("  %s of %d: whole (%d nodes) %.4f, on %d of %d nodes and 1 rail of %d %.4f (%+.2f%%)\n",
                    c[k]["collective"].get<std::string>().c_str(), c[k]["group"].get<int>(),
                    w[k]["measured_on"]["nodes"].get<int>(), w[k]["factor"].get<double>(),
                    c[k]["measured_on"]["nodes"].get<int>(), c[k]["measured_on"]["of_nodes"].get<int>(),
                    c[k]["measured_on"]["rails"].get<int>(), c[k]["factor"].get<double>(), 100 * rel);
        std::fflush(stdout);
        worst_factor = std::max(worst_factor, std::fabs(rel));
      }
      const double step = cut.step_time / whole.step_time - 1;
      std::printf("  packet level held to %d GPUs: step %.6f s against whole %.6f s (%+.2f%%)\n", gpus, cut.step_time,
                  whole.step_time, 100 * step);
      std::fflush(stdout);
      worst_step = std::max(worst_step, std::fabs(step));
    }
    std::snprintf(f.note, sizeof f.note, "cut to 2 of 8 nodes: corrections within %.2f%%, step within %.2f%%",
                  100 * worst_factor, 100 * worst_step);
  };
}

std::vector<Case> cases()
{
  using netsim::Algorithm;
  std::vector<Case> all;
  for (const char* preset : {"two-buildings", "two-regions"})
    all.push_back({std::string("platform build ") + preset, preset, "platform", nullptr, 0, "", false, {}});
  struct Size {
    int gpus;
    const char* label;
  };
  for (auto [algorithm, algo_name] : {std::pair{Algorithm::ring, "ring"}, {Algorithm::hierarchical, "hier"}})
    for (bool across : {false, true})
      for (auto [k, label] : {Size{1024, "1K"}, Size{4096, "4K"}, Size{16384, "16K"}})
        for (const char* fidelity : {"analytical", "flow"}) {
          std::string name = std::string(algo_name) + " allreduce 1GiB " + label + (across ? " 2-bldg" : " 1-bldg");
          auto group       = across ? std::function<std::vector<int>(const topology::Topology&)>(
                                    [k = k](const topology::Topology& t) { return two_building_group(t, k); })
                                    : [k = k](const topology::Topology&) { return range(0, k); };
          Case c{name, "two-buildings", fidelity, collective(CollectiveOp::all_reduce, algorithm, kGiB, group), 0,
                 "",   false,           {}};
          if (k == 16384 && fidelity == std::string("flow")) {
            c.target_wall = 10;
            c.target_text = "< 10 s";
          }
          if (k == 16384 && !across && algorithm == Algorithm::ring && fidelity == std::string("analytical")) {
            c.target_wall = 0.010;
            c.target_text = "< 10 ms";
          }
          all.push_back(std::move(c));
        }
  for (const char* fidelity : {"analytical", "flow"})
    all.push_back({"alltoall 1GiB 64 GPUs",
                   "two-buildings",
                   fidelity,
                   collective(CollectiveOp::all_to_all, Algorithm::direct, kGiB,
                              [](const topology::Topology&) { return range(0, 64); }),
                   0,
                   "",
                   false,
                   {}});
  for (int flows : {1000, 10000, 100000})
    for (const char* fidelity : {"analytical", "flow"})
      all.push_back({std::to_string(flows) + " flows 1GiB east->west",
                     "two-regions",
                     fidelity,
                     region_flows(flows, kGiB),
                     0,
                     "",
                     flows > 10000,
                     {}});
  for (int flows : {10000, 30000})
    for (const char* fidelity : {"analytical", "flow"})
      all.push_back({std::to_string(flows) + " random flows 64MiB",
                     "two-buildings",
                     fidelity,
                     random_flows(flows, 64.0 * 1048576.0),
                     0,
                     "",
                     flows > 10000,
                     {}});
  // Issue 5: one step of Llama 3 405B on 16K GPUs over two buildings, and on all 131K GPUs of two-regions.
  all.push_back({"405B step 16K 2-bldg", "two-buildings", "analytical", nullptr, 0, "", false,
                 step_405b("two-buildings", 128, "analytical")});
  all.push_back({"405B step 16K 2-bldg", "two-buildings", "flow", nullptr, 60, "< 60 s, 8 GiB", true,
                 step_405b("two-buildings", 128, "flow")});
  // Issue 22: the same step with explicit spines, 16 parallel long links and ECMP (no rail symmetry).
  all.push_back({"405B step 16K 2-bldg ecmp", "two-buildings", "analytical", nullptr, 0, "", true,
                 step_405b("two-buildings", 128, "analytical", false, true)});
  all.push_back({"405B step 16K 2-bldg ecmp", "two-buildings", "flow", nullptr, 60, "< 60 s", true,
                 step_405b("two-buildings", 128, "flow", false, true)});
  // Issue 37: ECMP over all 131,072 GPUs of two-regions (the rails apart), and 262,144 GPUs over three regions of
  // 3, 3 and 2 buildings (no building or region symmetry).
  all.push_back({"405B step 131K 2-region ecmp", "two-regions", "analytical", nullptr, 0, "", true,
                 step_405b("two-regions", 1024, "analytical", false, true)});
  all.push_back({"405B step 131K 2-region ecmp", "two-regions", "flow", nullptr, 600, "< 10 min", true,
                 step_405b("two-regions", 1024, "flow", false, true)});
  all.push_back({"405B step 262K 3-region", "three-regions", "analytical", nullptr, 0, "", true,
                 step_405b("three-regions", 2048, "analytical")});
  all.push_back({"405B step 262K 3-region", "three-regions", "flow", nullptr, 600, "< 10 min, 8 GB", true,
                 step_405b("three-regions", 2048, "flow")});
  // Issue 37: partial symmetry, the job on the two alike regions of three-regions (196,608 GPUs; the third fixed),
  // folded and, beside it, not.
  for (bool fold : {true, false})
    for (const char* fidelity : {"analytical", "flow"})
      all.push_back({fold ? "405B step 196K 3-region alike two" : "405B step 196K 3-region alike two unfolded",
                     "three-regions", fidelity, nullptr, 0, "", true,
                     step_405b("three-regions", 1536, fidelity, false, false, fold)});
  // Issue 59: a step on NVL72 racks with spares, folded to one rail and not.
  all.push_back({"DeepSeek-V3 16K NVL72 64 of 72 rail fold vs every rail", "three-regions-nvl72", "analytical", nullptr,
                 0, "", true, nvl72_spares_fold(16384, 64, netsim::Fidelity::analytical)});
  all.push_back({"DeepSeek-V3 16K NVL72 64 of 72 EP 32 rail blocks vs every rail", "three-regions-nvl72", "analytical",
                 nullptr, 0, "", true, nvl72_spares_fold(16384, 32, netsim::Fidelity::analytical)});
  all.push_back({"DeepSeek-V3 16K NVL72 64 of 72 EP 32 rail blocks vs every rail", "three-regions-nvl72", "flow",
                 nullptr, 0, "", true, nvl72_spares_fold(16384, 32, netsim::Fidelity::flow)});
  // Issue 59: the own max-min solver against SimGrid on ECMP's rails (every rail both ways).
  all.push_back(
      {"ECMP own solver vs SimGrid 4K", "two-buildings", "flow", nullptr, 0, "", false, ecmp_solver_agreement(32)});
  all.push_back(
      {"ECMP own solver vs SimGrid 16K", "two-buildings", "flow", nullptr, 0, "", true, ecmp_solver_agreement(128)});
  // Issue 59: an MoE step with all-to-alls between nodes under ECMP, every rail together (what `auto` runs).
  all.push_back({"ECMP MoE 4K exact", "two-buildings", "analytical", nullptr, 0, "", false,
                 ecmp_moe_auto(4096, netsim::Fidelity::analytical)});
  all.push_back({"ECMP MoE 16K exact", "two-buildings", "flow", nullptr, 600, "< 10 min", true,
                 ecmp_moe_auto(16384, netsim::Fidelity::flow)});
  all.push_back({"ECMP MoE 131K 2-region", "two-regions", "flow", nullptr, 600, "< 10 min, 8 GB", true,
                 ecmp_moe_auto(131072, netsim::Fidelity::flow, true)});
  // Issue 37: ECMP's rails apart against every rail together (the table of bench/README.md).
  all.push_back(
      {"ECMP rails apart vs exact", "two-buildings", "analytical", nullptr, 0, "", false, ecmp_error_table(false)});
  all.push_back(
      {"ECMP rails apart vs exact 4K", "two-buildings", "analytical", nullptr, 0, "", true, ecmp_error_table(true)});
  // Issue 33: DeepSeek-V3 on 2,048 GPUs over two buildings, and the MoE optimizer example.
  all.push_back(
      {"DeepSeek-V3 2048 2-bldg", "two-buildings", "analytical", nullptr, 0, "", false, deepseek_2048("analytical")});
  all.push_back(
      {"DeepSeek-V3 2048 2-bldg", "two-buildings", "flow", nullptr, 60, "< 60 s", false, deepseek_2048("flow")});
  all.push_back(
      {"optimize DeepSeek-V3 2048 2-bldg", "two-buildings", "search", nullptr, 300, "< 5 min", false,
       example_search("deepseek-v3-2048-two-buildings.json",
                      [](const optimizer::OptimizeSpec& spec, const optimizer::OptimizeResult& r, Figures& f) {
                        std::snprintf(f.note, sizeof f.note, "%zu points, %zu scored, %d refined at flow", r.points,
                                      r.scored, spec.top_k);
                      })});
  // Issue 18: a 1,024-GPU DLRM step; two 8K-GPU jobs sharing two-buildings.
  all.push_back(
      {"DLRM-DCNv2 1024", "two-buildings", "analytical", nullptr, 10, "< 10 s", false, dlrm_1024("analytical")});
  all.push_back({"DLRM-DCNv2 1024", "two-buildings", "flow", nullptr, 10, "< 10 s", false, dlrm_1024("flow")});
  all.push_back(
      {"two 405B 8K jobs shared", "two-buildings", "analytical", nullptr, 0, "", true, shared_405b("analytical")});
  all.push_back({"two 405B 8K jobs shared", "two-buildings", "flow", nullptr, 60, "< 60 s", true, shared_405b("flow")});
  // Issue 17: SimGrid's LMM update modes on the 8K step at flow fidelity: Lazy (pinned) against Full.
  all.push_back({"405B step 8K lmm Lazy vs Full", "two-buildings", "flow", nullptr, 0, "", false, [](Figures& f) {
                   topology::Topology topo(topology::load_topology_spec("two-buildings"));
                   auto job   = workload::parse_job(job_405b(64), "bench-405b.json");
                   auto graph = workload::build_step_graph(job);
                   placement::Placement place(topo, job, {});
                   netsim::StepOptions o;
                   o.fidelity                     = netsim::Fidelity::flow;
                   o.choose_per_step              = false; // the engine alone, without the analytical trials of `auto`
                   auto start                     = Clock::now();
                   const auto lazy                = netsim::simulate_step(topo, graph, place, o);
                   f.engine_wall                  = seconds_since(start);
                   o.engine.simgrid.network_optim = "Full";
                   start                          = Clock::now();
                   const auto full                = netsim::simulate_step(topo, graph, place, o);
                   const double full_wall         = seconds_since(start);
                   f.simulated                    = lazy.step_time;
                   f.transfers                    = static_cast<long>(lazy.transfers.size());
                   f.gpus                         = static_cast<int>(job.gpus);
                   f.engine_rss                   = std::max(max_rss_mib(RUSAGE_SELF), max_rss_mib(RUSAGE_CHILDREN));
                   std::snprintf(f.note, sizeof f.note, "Full: %.1f s (%.2fx Lazy's wall), step %.9g s (%+.2e rel.)",
                                 full_wall, full_wall / f.engine_wall, full.step_time,
                                 (full.step_time - lazy.step_time) / lazy.step_time);
                 }});
  // Issue 59: hybrid patterns cut to fewer nodes and one rail, against the whole collective.
  all.push_back(
      {"hybrid patterns cut vs whole", "two-buildings", "hybrid", nullptr, 0, "", true, hybrid_cut_vs_whole()});
  // Issue 22: the 8K step at hybrid fidelity (flow level with packet-level corrections per collective pattern).
  all.push_back(
      {"405B step 8K 2-bldg", "two-buildings", "hybrid", nullptr, 600, "< 10 min on 2 cores", true, hybrid_405b()});
  // Issue 14: the same step on an imported copy of two-buildings (lowering includes the import).
  all.push_back({"405B step 16K 2-bldg imported", "two-buildings", "flow", nullptr, 120, "< 2x the preset's", true,
                 step_405b("two-buildings", 128, "flow", true)});
  all.push_back({"405B step 131K 2-region", "two-regions", "analytical", nullptr, 10, "< 10 s", true,
                 step_405b("two-regions", 1024, "analytical")});
  all.push_back({"405B step 131K 2-region", "two-regions", "flow", nullptr, 60, "< 60 s", true,
                 step_405b("two-regions", 1024, "flow")});
  // Issue 17: the 131K step analytical with building symmetry (timed) and without, compared link by link.
  all.push_back(
      {"405B step 131K symmetry vs full", "two-regions", "analytical", nullptr, 0, "", true, [](Figures& f) {
         on_405b_131k([&](const topology::Topology& topo, const workload::JobSpec& job,
                          const workload::StepGraph& graph, const placement::Placement& place) {
           netsim::StepOptions o;
           o.fidelity          = netsim::Fidelity::analytical;
           auto start          = Clock::now();
           auto folded         = netsim::simulate_step(topo, graph, place, o);
           f.engine_wall       = seconds_since(start);
           o.building_symmetry = false;
           start               = Clock::now();
           auto full           = netsim::simulate_step(topo, graph, place, o);
           const double wall   = seconds_since(start);
           double worst        = 0;
           for (std::size_t k = 0; k < full.link_bytes.size(); ++k)
             if (full.link_bytes[k] > 0)
               worst = std::max(worst, std::abs(folded.link_bytes[k] - full.link_bytes[k]) / full.link_bytes[k]);
           f.simulated = folded.step_time;
           f.gpus      = static_cast<int>(job.gpus);
           f.transfers = static_cast<long>(folded.transfers.size());
           std::snprintf(f.note, sizeof f.note, "unfolded: %.1f s, step %.11g s (%+.1e rel.), worst link %.1e rel.",
                         wall, full.step_time, (folded.step_time - full.step_time) / full.step_time, worst);
         });
       }});
  // Issue 17: the 131K step at flow fidelity with slack links left out of SimGrid's routes (timed) and with every
  // link, compared op by op.
  all.push_back(
      {"405B step 131K slack links vs all", "two-regions", "flow", nullptr, 0, "", true, [](Figures& f) {
         on_405b_131k([&](const topology::Topology& topo, const workload::JobSpec& job,
                          const workload::StepGraph& graph, const placement::Placement& place) {
           netsim::StepOptions o;
           o.fidelity                             = netsim::Fidelity::flow;
           double cpu                             = user_cpu_seconds(RUSAGE_CHILDREN);
           auto start                             = Clock::now();
           const auto slack                       = netsim::simulate_step(topo, graph, place, o);
           f.engine_wall                          = seconds_since(start);
           const double slack_cpu                 = user_cpu_seconds(RUSAGE_CHILDREN) - cpu;
           o.engine.simgrid.leave_out_slack_links = false;
           cpu                                    = user_cpu_seconds(RUSAGE_CHILDREN);
           start                                  = Clock::now();
           const auto all_links                   = netsim::simulate_step(topo, graph, place, o);
           const double wall                      = seconds_since(start);
           const double all_cpu                   = user_cpu_seconds(RUSAGE_CHILDREN) - cpu;
           double worst                           = 0;
           for (std::size_t s = 0; s < slack.ops.size(); ++s)
             for (std::size_t i = 0; i < slack.ops[s].size(); ++i)
               worst = std::max(worst, std::abs(slack.ops[s][i].end - all_links.ops[s][i].end) / all_links.step_time);
           f.simulated  = slack.step_time;
           f.gpus       = static_cast<int>(job.gpus);
           f.transfers  = static_cast<long>(slack.transfers.size());
           f.engine_rss = std::max(max_rss_mib(RUSAGE_SELF), max_rss_mib(RUSAGE_CHILDREN));
           std::snprintf(f.note, sizeof f.note,
                         "%d directions left out, SimGrid %.1f s CPU; every link: %.1f s, SimGrid %.1f s CPU, step "
                         "%+.1e rel., worst op end %.1e of the step",
                         slack.engine.value("slack_link_directions_left_out", 0), slack_cpu, wall, all_cpu,
                         (slack.step_time - all_links.step_time) / all_links.step_time, worst);
         });
       }});
  // Issue 13: 1,000 sampled steps at 16K GPUs and 60 days of a 131K-GPU run.
  all.push_back({"variability 1000 steps 405B 16K", "two-buildings", "analytical", nullptr, 60, "< 60 s", false,
                 reliability_405b("two-buildings", 128, 1000, 1)});
  all.push_back({"reliability 60 days 405B 131K", "two-regions", "analytical", nullptr, 60, "< 60 s", true,
                 reliability_405b("two-regions", 1024, 200, 60)});
  // Issue 6: the full search of examples/optimize/llama3-405b-16k-two-buildings.json on every core.
  all.push_back({"optimize 405B 16K 2-bldg", "two-buildings", "search", nullptr, 600, "< 10 min", false,
                 example_search("llama3-405b-16k-two-buildings.json",
                                [](const optimizer::OptimizeSpec&, const optimizer::OptimizeResult&, Figures&) {})});
  // Issue 11: points bounded and scored per second by the optimizer's fast model, on one worker process (the
  // search space of the 16K example; the refinement at flow fidelity is not counted).
  all.push_back({"optimizer scoring 405B 16K", "two-buildings", "search", nullptr, 0, "", false, [](Figures& f) {
                   auto spec     = optimizer::load_optimize_spec(std::string(SPANSIM_SOURCE_DIR) +
                                                                 "/examples/optimize/llama3-405b-16k-two-buildings.json");
                   spec.workers  = 1;
                   spec.top_k    = 1;
                   spec.refine   = netsim::Fidelity::analytical;
                   auto result   = optimizer::optimize(spec);
                   f.engine_wall = result.scoring_seconds;
                   f.simulated   = *result.ranked.front().refined;
                   f.transfers   = static_cast<long>(result.points);
                   f.gpus        = static_cast<int>(spec.base.gpus);
                   f.engine_rss  = std::max(max_rss_mib(RUSAGE_SELF), max_rss_mib(RUSAGE_CHILDREN));
                   std::snprintf(f.note, sizeof f.note,
                                 "%zu points (%zu feasible, %zu scored): %.1f points/s on one worker", result.points,
                                 result.feasible, result.scored,
                                 static_cast<double>(result.points) / result.scoring_seconds);
                 }});
  // Issue 17: tier 1 alone over the million-layout space of 16K GPUs, in this one process (one core).
  all.push_back({"screen 405B 16K 1M", "two-buildings", "search", nullptr, 0, "", false, [](Figures& f) {
                   const auto spec = optimizer::load_optimize_spec(std::string(SPANSIM_SOURCE_DIR) +
                                                                   "/examples/optimize/llama3-405b-16k-million.json");
                   const topology::Topology topo(spec.topology);
                   auto start = Clock::now();
                   const optimizer::IndexedSpace space(spec);
                   optimizer::Screen screen(space, topo);
                   std::size_t distinct = 0, estimated = 0;
                   double best = std::numeric_limits<double>::infinity();
                   std::string reason;
                   for (std::uint64_t i = 0; i < space.size(); ++i) {
                     const auto at = space.decode(i);
                     if (!space.divisible(at) || !space.canonical(at))
                       continue;
                     ++distinct;
                     reason.clear();
                     const double t = screen.estimate(at, reason);
                     if (reason.empty()) {
                       ++estimated;
                       best = std::min(best, t);
                     }
                   }
                   f.engine_wall = seconds_since(start);
                   f.simulated   = best;
                   f.transfers   = static_cast<long>(space.size());
                   f.gpus        = static_cast<int>(spec.base.gpus);
                   f.engine_rss  = max_rss_mib(RUSAGE_SELF);
                   std::snprintf(f.note, sizeof f.note,
                                 "%.0fK combinations/s, %zu distinct, %zu feasible estimated: %.0fK/s on one core "
                                 "(target >= 100K/s)",
                                 space.size() / f.engine_wall / 1e3, distinct, estimated,
                                 estimated / f.engine_wall / 1e3);
                 }});
  // Issue 17: the million-layout optimize, best 20 confirmed at flow fidelity, on every core.
  all.push_back({"optimize 405B 16K 1M", "two-buildings", "search", nullptr, 180, "< 3 min", true,
                 example_search("llama3-405b-16k-million.json", [](const optimizer::OptimizeSpec&,
                                                                   const optimizer::OptimizeResult& r, Figures& f) {
                   f.transfers = static_cast<long>(r.screened);
                   std::snprintf(f.note, sizeof f.note, "screen %.1f s, %zu kept, %zu scored, %zu refined; winner %s",
                                 r.screen_seconds, r.screen_kept, r.scored, r.ranked.size(),
                                 r.ranked.front().point.label().substr(0, 70).c_str());
                 })});
  // Issue 17: how often tier 1's top 1% holds the exhaustive tier-2 best, over spaces of models, sites and sizes.
  all.push_back({"screen top-1% holds tier-2 best", "two-regions", "search", nullptr, 0, "", true, [](Figures& f) {
                   auto start    = Clock::now();
                   const auto r  = screen_containment();
                   f.engine_wall = seconds_since(start);
                   f.transfers   = static_cast<long>(r.spaces);
                   f.engine_rss  = std::max(max_rss_mib(RUSAGE_SELF), max_rss_mib(RUSAGE_CHILDREN));
                   std::snprintf(f.note, sizeof f.note, "%d of %d spaces (worst rank: top %.2f%%); %s", r.contained,
                                 r.spaces, r.worst_percent, r.detail.substr(0, 90).c_str());
                 }});
  // Issue 16: Chakra export (one representative per stage) and import of the 8K-GPU Llama 3 405B job.
  all.push_back(
      {"chakra export 405B 8K", "llama3-24k", "traces", nullptr, 10, "< 10 s", false, [](Figures& f) {
         const std::string job_file = std::string(SPANSIM_SOURCE_DIR) + "/examples/jobs/llama3-405b-8k-h100.json";
         const auto job             = workload::load_job(job_file);
         const auto graph           = workload::build_step_graph(job);
         const auto dir             = "/tmp/spansim-bench-chakra-" + std::to_string(::getpid());
         traces::ExportOptions o;
         o.representatives = true;
         auto start        = Clock::now();
         const auto report = traces::export_chakra(graph, placement::RankLayout(job.parallelism, job.parallelism.order),
                                                   spec::load_json_file(job_file), dir, o);
         f.engine_wall     = seconds_since(start);
         f.transfers       = static_cast<long>(report.nodes); // nodes, in the flows column
         f.gpus            = static_cast<int>(job.gpus);
         start             = Clock::now();
         const auto chakra = traces::load_chakra_job({{"name", "imported"}, {"kind", "chakra"}, {"trace", dir + "/et"}},
                                                     dir + "/job.json", "$");
         const auto back   = traces::import_chakra(chakra);
         const double import_wall = seconds_since(start);
         f.engine_rss             = max_rss_mib(RUSAGE_SELF);
         std::snprintf(f.note, sizeof f.note,
                       "%zu files, %zu nodes; import of %zu stage programs: %.2f s (target < 10 s)",
                       report.files.size(), report.nodes, back.stages.size(), import_wall);
         std::filesystem::remove_all(dir);
       }});
  // Issue 12: spansim validate over the whole dataset at analytical fidelity with leave-one-out, on 2 workers.
  all.push_back(
      {"validate dataset", "two-buildings", "analytical", nullptr, 120, "< 2 min on 2 cores", false, [](Figures& f) {
         const auto dataset = calibration::load_dataset(calibration::default_dataset_path());
         calibration::ValidateOptions o;
         o.workers     = 2;
         auto start    = Clock::now();
         auto report   = calibration::validate(dataset, o);
         f.engine_wall = seconds_since(start);
         f.transfers   = static_cast<long>(report.fit_rows + report.check_rows); // rows, in the flows column
         f.engine_rss  = std::max(max_rss_mib(RUSAGE_SELF), max_rss_mib(RUSAGE_CHILDREN));
         std::snprintf(f.note, sizeof f.note, "%zu rows simulated; MAPE fit %.1f%%, check %.1f%%, leave-one-out %.1f%%",
                       report.fit_rows + report.check_rows, 100 * report.mape_fit, 100 * report.mape_check,
                       100 * report.mape_loo);
       }});
  return all;
}

void run_engine_case(const Case& c, const topology::Topology& t, Figures& f)
{
  netsim::FlowGraph graph;
  auto start = Clock::now();
  c.build(t, graph, f);
  f.lower_wall  = seconds_since(start);
  f.transfers   = static_cast<long>(graph.transfer_count());
  auto fidelity = parse_enum<netsim::Fidelity>(c.fidelity, "fidelity");
  start         = Clock::now();
  auto result   = netsim::run(t, graph, fidelity, netsim::EngineOptions{});
  f.engine_wall = seconds_since(start);
  f.simulated   = result.makespan;
  if (fidelity == netsim::Fidelity::analytical) {
    f.warm_wall = f.engine_wall;
    for (int i = 0; i < 10; ++i) {
      start       = Clock::now();
      auto again  = netsim::run(t, graph, fidelity, netsim::EngineOptions{});
      f.warm_wall = std::min(f.warm_wall, seconds_since(start));
    }
  }
  f.engine_rss = fidelity == netsim::Fidelity::flow ? max_rss_mib(RUSAGE_CHILDREN) : max_rss_mib(RUSAGE_SELF);
}

// The SimGrid platform of the whole topology, as the flow engine builds it, in this (child) process.
void run_platform_case(const topology::Topology& t, Figures& f)
{
  const double before = max_rss_mib(RUSAGE_SELF);
  auto start          = Clock::now();
  int argc            = 1;
  char name[]         = "spansim_bench";
  char* argv[]        = {name, nullptr};
  simgrid::s4u::Engine engine(&argc, argv);
  netsim::detail::configure_engine(engine, netsim::SimgridSettings{});
  netsim::detail::SimgridPlatform platform(t, netsim::SimgridSettings{}.gpu_speed); // every GPU
  f.engine_wall = seconds_since(start);
  f.engine_rss  = max_rss_mib(RUSAGE_SELF) - before;
  f.gpus        = t.gpu_count();
}

std::string human_time(double s)
{
  char buf[32];
  if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else if (s < 1)
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

} // namespace

int main(int argc, char** argv)
{
  std::vector<std::string> filters;
  bool list      = false;
  bool exact     = false;
  bool large     = false;
  double timeout = 600;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--list") == 0)
      list = true;
    else if (std::strcmp(argv[i], "--exact") == 0)
      exact = true;
    else if (std::strcmp(argv[i], "--large") == 0)
      large = true;
    else if (std::strcmp(argv[i], "--timeout") == 0 && i + 1 < argc)
      timeout = std::atof(argv[++i]);
    else
      filters.emplace_back(argv[i]);
  }
  auto all = cases();
  std::vector<const Case*> selected;
  for (const auto& c : all) {
    bool match = filters.empty() && (large || !c.large);
    for (const auto& f : filters)
      match = match || ((large || !c.large) && (c.name + " " + c.fidelity).find(f) != std::string::npos);
    if (match)
      selected.push_back(&c);
  }
  if (list) {
    for (const auto* c : selected)
      std::printf("%s [%s]\n", c->name.c_str(), c->fidelity.c_str());
    return 0;
  }

  std::printf("spansim_bench: one case per forked process; wall = engine call (fork, platform, simulation);\n"
              "rss(engine) = peak of the simulating process; rss(case) = peak of the case process (inherits "
              "the bench's pages)\n\n");
  std::printf("%-34s %-10s %6s %8s %20s %10s %10s %9s %11s %9s  %s\n", "case", "fidelity", "GPUs", "flows",
              "simulated(s)", "wall", "warm", "lowering", "rss(engine)", "rss(case)", "target");
  std::map<std::string, std::unique_ptr<topology::Topology>> topologies;
  std::map<std::string, double> topology_wall;
  for (const auto* c : selected) {
    auto& t = topologies[c->preset];
    if (!t) {
      auto start               = Clock::now();
      t                        = std::make_unique<topology::Topology>(topology::load_topology_spec(c->preset));
      topology_wall[c->preset] = seconds_since(start);
    }
    double case_rss = 0;
    Figures f       = in_child(
        [&](Figures& out) {
          if (c->custom)
            c->custom(out);
          else if (c->fidelity == "platform")
            run_platform_case(*t, out);
          else
            run_engine_case(*c, *t, out);
        },
        timeout, case_rss);
    if (f.error[0] != '\0') {
      std::printf("%-34s %-10s error: %s\n", c->name.c_str(), c->fidelity.c_str(), f.error);
      continue;
    }
    std::string target;
    const double measured = f.warm_wall > 0 ? f.warm_wall : f.engine_wall;
    if (c->target_wall > 0)
      target = c->target_text + (measured < c->target_wall ? " PASS" : " MISS");
    char simulated[32] = "-";
    if (c->fidelity != "platform")
      std::snprintf(simulated, sizeof simulated, exact ? "%.17g" : "%.9f", f.simulated);
    std::printf("%-34s %-10s %6d %8ld %20s %10s %10s %9s %8.0f MiB %5.0f MiB  %s\n", c->name.c_str(),
                c->fidelity.c_str(), f.gpus, f.transfers, simulated, human_time(f.engine_wall).c_str(),
                f.warm_wall > 0 ? human_time(f.warm_wall).c_str() : "-",
                c->fidelity == "platform" ? "-" : human_time(f.lower_wall).c_str(), f.engine_rss, case_rss,
                target.c_str());
    if (f.note[0] != '\0')
      std::printf("%-34s %s\n", "", f.note);
  }
  std::printf("\nbench process: peak RSS %.0f MiB; topology builds:", max_rss_mib(RUSAGE_SELF));
  for (const auto& [preset, wall] : topology_wall)
    std::printf(" %s %s", preset.c_str(), human_time(wall).c_str());
  std::printf("\n");
  return 0;
}
