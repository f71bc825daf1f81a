// Datasets of published runs: reading them, turning a published figure into a step time, and the cluster each
// run is simulated on.
#include "calibration/calibration.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/units.hpp"
#include "scenario/scenario.hpp"

#include <array>
#include <cmath>
#include <cstdio>

#ifndef SPANSIM_DATA_DIR
#error "SPANSIM_DATA_DIR must point at the source tree"
#endif

namespace spansim::calibration {

using nlohmann::json;

std::string default_dataset_path()
{
  return std::string(SPANSIM_DATA_DIR) + "/validation/published-runs.json";
}

std::string recorded_path(const std::string& path)
{
  const std::string root = std::string(SPANSIM_DATA_DIR) + "/";
  return path.rfind(root, 0) == 0 ? path.substr(root.size()) : path;
}

namespace {

/// @brief What a MoE row's `conditions` state.
constexpr std::array<std::string_view, 6> kConditionKeys{"dispatcher", "routing_balance",  "drop_policy",
                                                         "overlap",    "precision_recipe", "flop_convention"};

Cluster read_cluster(spec::ObjectReader r)
{
  Cluster c;
  c.gpus_per_node     = static_cast<int>(r.integer("gpus_per_node", 1, 1024));
  c.nvlink_bandwidth  = r.bandwidth("nvlink_bandwidth");
  c.nvlink_efficiency = r.number("nvlink_nccl_efficiency", 0.05, 1);
  c.nic_bandwidth     = r.bandwidth("nic_bandwidth");
  c.nic_efficiency    = r.number("nic_nccl_efficiency", 0.05, 1);
  c.fabric            = r.choice("fabric", {"ib", "roce"});
  c.rail_optimized    = r.boolean("rail_optimized");
  r.string("source");
  r.finish();
  return c;
}

Published read_published(spec::ObjectReader r, const workload::JobSpec* job)
{
  Published p;
  p.metric = r.enumeration<Metric>("metric");
  p.value  = r.number("value", 1e-12, 1e18);
  // How the figure counted FLOPs: spansim's three (computed when the row gives no count), the formulas of SC'21
  // (Narayanan et al. eq. 3, recompute counted), MosaicML's llm-foundry, NeMo's callback and 6 N D (the row's
  // flops_per_step), or "none" for a time, token rate or utilization.
  p.flop_convention = r.choice("flop_convention", {"causal", "megatron", "torchtitan", "megatron-sc21", "mosaicml",
                                                   "nemo", "6n", "unstated", "none"});
  const bool rate   = p.metric == Metric::tflops_per_gpu || p.metric == Metric::mfu;
  if (rate == (p.flop_convention == "none"))
    r.fail("flop_convention", rate ? "a TFLOP/s or MFU figure names the formula its source counted FLOPs with "
                                     "(causal, megatron, torchtitan, megatron-sc21, mosaicml, nemo, 6n)"
                                   : "a step time, token rate or utilization counts no FLOPs: \"none\"");
  const bool simulated = job != nullptr;
  if (simulated && p.flop_convention == "unstated")
    r.fail("flop_convention", "a figure whose FLOP formula is unstated cannot be converted to a step time: exclude "
                              "the row with that reason");
  if (simulated && rate) {
    // spansim computes the conventions it knows; another source's own formula gives its count per step.
    const auto known = parse_name<workload::FlopConvention>(p.flop_convention);
    if (known && !r.has("flops_per_step")) {
      const auto c   = *known;
      const double s = job->batch.sequence_length;
      const auto flops =
          workload::model_flop_counts(*job, job->tokens_per_step() * workload::causal_flops_per_token(job->model, s));
      p.flops_per_step = flops.get(c);
    } else {
      p.flops_per_step = r.number("flops_per_step", 1, 1e30);
    }
  }
  if (simulated && p.metric == Metric::mfu)
    p.peak = units::parse_flop_rate(r.string("peak"));
  if ((p.metric == Metric::mfu || p.metric == Metric::compute_utilization) && !(p.value <= 1))
    r.fail("value", "an MFU or a compute utilization is a fraction (at most 1)");
  if (auto t = r.optional_time("inner_step")) {
    if (p.metric != Metric::compute_utilization || !(*t > 0))
      r.fail("inner_step", "a positive inner step is given only with metric compute_utilization");
    p.inner_step = *t;
  }
  r.optional_string("notes");
  r.finish();
  return p;
}

} // namespace

double PublishedRun::published_step_time(double inner_step) const
{
  const double gpus = static_cast<double>(job->gpus);
  switch (published.metric) {
  case Metric::compute_utilization:
    return inner_step / published.value;
  case Metric::step_time:
    return published.value;
  case Metric::tokens_per_second_per_gpu:
    return job->tokens_per_step() / (published.value * gpus);
  case Metric::tflops_per_gpu:
    return published.flops_per_step / (published.value * 1e12 * gpus);
  case Metric::mfu:
    return published.flops_per_step / (published.value * published.peak * gpus);
  }
  return published.value;
}

double PublishedRun::in_published_metric(double step_time, double inner_step) const
{
  // Every metric is a step time or proportional to its inverse: scale the published figure.
  const double ratio = published_step_time(inner_step) / step_time;
  return published.metric == Metric::step_time ? step_time : published.value * ratio;
}

Dataset load_dataset(const std::string& path)
{
  Dataset d;
  d.file         = path;
  const auto doc = spec::load_json_file(path);
  spec::ObjectReader r(doc, spec::Location{path});
  r.optional_string("about");
  for (auto row : r.objects("runs", true)) {
    PublishedRun run;
    run.name             = row.name("name");
    run.role             = row.enumeration<Role>("role");
    run.source           = row.string("source");
    const bool simulated = run.role != Role::excluded;
    const auto section   = row.has("section") ? row.choice("section", {"single-site", "cross-site"}) : "single-site";
    if (simulated) {
      run.confidence = row.choice("confidence", {"high", "medium", "low"});
      run.job        = workload::parse_job(row.raw("job"), path, row.where().member("job").path);
      if (row.has("site"))
        run.site = topology::parse_topology_spec(row.raw("site"), path, row.where().member("site").path);
      else
        run.cluster = read_cluster(row.object("cluster"));
      if (row.has("placement"))
        run.placement = placement::parse_placement(row.raw("placement"), path, row.where().member("placement").path);
      if (auto d = row.optional_object("diloco"))
        run.diloco = sync::read_diloco(*d);
      if (!run.site && run.diloco)
        row.fail("diloco", "a DiLoCo row needs its \"site\" (an inline topology of its sites), not a \"cluster\"");
      if (run.cross_site() != (section == "cross-site"))
        row.fail("section", run.cross_site() ? "a row with a site or a DiLoCo block belongs to section \"cross-site\""
                                             : "a \"cross-site\" row needs its \"site\" (an inline topology)");
      if (run.cross_site() && run.role == Role::fit)
        row.fail("role", "a cross-site row is a check: the fit calibrates compute on single-site rows");
      row.string("network");
      row.strings("assumptions");
      if (auto cond = row.optional_object("conditions")) {
        for (const auto& key : kConditionKeys)
          if (cond->has(key))
            run.conditions[std::string(key)] = cond->string(key);
        cond->finish();
      }
      // A MoE figure depends on how tokens were dispatched and balanced: a row that cannot say is not a check.
      if (run.job->model.moe.experts > 0)
        for (const auto& key : kConditionKeys)
          if (!run.conditions.contains(std::string(key)))
            row.fail("conditions", "a mixture-of-experts row must state its " + std::string(key) +
                                       " as published (conditions: dispatcher, routing_balance, drop_policy, "
                                       "overlap, precision_recipe, flop_convention); exclude it with the reason "
                                       "if the source does not say");
    } else {
      run.excluded_because = row.string("excluded_because");
    }
    run.published = read_published(row.object("published"), run.job ? &*run.job : nullptr);
    if (simulated && run.published.metric == Metric::compute_utilization && !run.diloco)
      row.fail("published", "compute_utilization is a DiLoCo row's figure: give the row its \"diloco\" block");
    row.finish();
    for (const auto& other : d.runs)
      if (other.name == run.name)
        row.fail("name", "duplicate run name \"" + run.name + "\"");
    d.runs.push_back(std::move(run));
  }
  r.finish();
  return d;
}

topology::TopologySpec cluster_topology(const PublishedRun& run)
{
  auto exact = [](double bytes_per_second) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17gB/s", bytes_per_second);
    return std::string(buf);
  };
  const Cluster& c = run.cluster;
  const auto nodes = static_cast<int>((run.job->gpus + c.gpus_per_node - 1) / c.gpus_per_node);
  // A leaf of radix 64 at 1:1 has 32 downlinks: rails need one leaf port per node and rail; without rails a whole
  // node sits under a leaf, so the radix grows to fit it.
  const int radix = std::max(64, 2 * c.gpus_per_node);
  // The NVLink generation is the GPU's (A100: 3, Hopper: 4, Blackwell: 5); NCCL uses NVLS where the switch reduces.
  const std::string& gpu   = run.job->gpu.name;
  const std::string nvlink = gpu.rfind("a100", 0) == 0 ? "nvlink3" : gpu.rfind("h", 0) == 0 ? "nvlink4" : "nvlink5";
  json spec                = {{"name", run.name + "-cluster"},
                              {"node",
                               {{"gpus", c.gpus_per_node},
                                {"nvlink_bandwidth", exact(c.nvlink_bandwidth)},
                                {"nvlink_latency", "0.5us"},
                                {"nccl_efficiency", c.nvlink_efficiency},
                                {"nvlink", nvlink},
                                {"nvls", nvlink != "nvlink3"}}},
                              {"pod",
                               {{"nodes", nodes},
                                {"rail_optimized", c.rail_optimized},
                                {"fabric", c.fabric},
                                {"nic_bandwidth", exact(c.nic_bandwidth)},
                                {"nccl_efficiency", c.nic_efficiency},
                                {"leaf_radix", radix},
                                {"spine_radix", radix},
                                {"oversubscription", 1},
                                {"link_latency", "1us"}}},
                              {"building", {{"pods", 1}, {"aggregation_oversubscription", 1}, {"aggregation_latency", "1us"}}},
                              {"regions", json::array({{{"name", "cluster"}, {"buildings", json::array({"b0"})}}})}};
  return topology::parse_topology_spec(spec, run.name + " (cluster)");
}

SimulatedStep simulate_run(const PublishedRun& run, const workload::Calibration& calibration, netsim::Fidelity fidelity)
{
  scenario::Scenario sc;
  sc.name             = run.name;
  sc.file             = run.name;
  sc.topology         = run.site ? *run.site : cluster_topology(run);
  sc.placement        = run.placement;
  sc.job              = *run.job;
  sc.job.calibration  = calibration;
  sc.options.fidelity = fidelity;
  sc.check_memory     = false; // the run happened: it fitted, whatever the estimate says
  if (run.diloco) {
    sc.diloco                    = run.diloco;
    sc.options.dp_within_regions = true;
  }
  const auto whole = scenario::run_scenario(sc);
  const auto& r    = whole.result;
  SimulatedStep out;
  out.step_time  = r.step_time;
  out.inner_step = r.step_time;
  if (whole.diloco) {
    // A source that fixed its inner step is compared on the synchronization alone: the same average, its step.
    const auto& d  = *whole.diloco;
    out.inner_step = run.published.inner_step > 0 ? run.published.inner_step : d.inner_step;
    out.step_time  = sync::average(d.spec, {out.inner_step, 0, sc.job.tokens_per_step()}, d.outer).mean_step;
  }
  for (const auto& st : r.stages)
    for (std::size_t k = 0; k < netsim::kParts.size(); ++k)
      out.parts[k] += st.part(netsim::kParts[k]) / static_cast<double>(r.stages.size());
  return out;
}

double simulate_step_time(const PublishedRun& run, const workload::Calibration& calibration, netsim::Fidelity fidelity)
{
  return simulate_run(run, calibration, fidelity).step_time;
}

} // namespace spansim::calibration
