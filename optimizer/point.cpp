// Points of the search space: their labels, the typed job they stand for, and the scenario files written for the
// best of them.
#include "common/error.hpp"
#include "common/units.hpp"
#include "optimizer/optimizer.hpp"

#include <algorithm>

namespace spansim::optimizer {

using nlohmann::json;
using workload::Dim;

namespace {

std::string join(const std::vector<Dim>& order)
{
  std::string s;
  for (Dim d : order)
    s += (s.empty() ? "" : ",") + std::string(name_of(d));
  return s;
}

json names(const std::vector<Dim>& order)
{
  json out = json::array();
  for (Dim d : order)
    out.push_back(name_of(d));
  return out;
}

// The HSDP shard: one replica group per building.
int hsdp_shard(const Point& p, int buildings)
{
  return std::max(1, p.dp / std::max(1, buildings));
}

// A job of the point in the job file format, for the scenario files written (`spansim run` reads them back).
json job_json(const OptimizeSpec& spec, const Point& p, int buildings)
{
  json par = {{"tp", p.tp},
              {"cp", p.cp},
              {"pp", p.pp},
              {"dp", p.dp},
              {"ep", p.ep},
              {"data_parallel", name_of(p.data_parallel)},
              {"order", names(p.order)}};
  if (p.etp > 0)
    par["etp"] = p.etp;
  if (p.tp_overlap)
    par["tp_overlap"] = true;
  if (p.cp_comm != workload::CpComm::allgather)
    par["cp_comm"] = name_of(p.cp_comm);
  if (p.cp_comm == workload::CpComm::a2a_p2p)
    par["cp_a2a"] = p.cp_a2a;
  if (p.data_parallel != workload::DataParallelMode::ddp)
    par["reshard_after_forward"] = p.reshard_after_forward;
  if (p.data_parallel == workload::DataParallelMode::hsdp)
    par["hsdp_shard_size"] = hsdp_shard(p, buildings);
  json batch           = spec.batch_ref;
  batch["micro_batch"] = p.micro_batch;
  json schedule        = {{"kind", name_of(p.schedule)}};
  if (p.schedule == workload::ScheduleKind::interleaved_1f1b)
    schedule["virtual_stages"] = p.virtual_stages;
  if (p.ep_overlap)
    schedule["ep_overlap"] = true;
  json job = {
      {"name", spec.base.name}, {"model", spec.model_ref}, {"gpu", spec.gpu_ref},  {"gpus", spec.base.gpus},
      {"parallelism", par},     {"batch", batch},          {"schedule", schedule}, {"recompute", name_of(p.recompute)}};
  // The base job's recompute modules hold where the point recomputes selectively.
  if (p.recompute == workload::Recompute::selective && !spec.base.recompute_modules.empty()) {
    job["recompute_modules"] = json::array();
    for (const auto m : spec.base.recompute_modules)
      job["recompute_modules"].push_back(name_of(m));
  }
  // The base job's number formats and kernels, every key given.
  job["precision"] = workload::precision_spec(spec.base);
  job["kernels"]   = workload::kernels_spec(spec.base);
  if (spec.base.model.moe.experts > 0) {
    // The spec's routing as given, the point's dispatcher and node limit.
    json moe          = spec.moe_ref.is_object() ? spec.moe_ref : json::object();
    moe["dispatcher"] = name_of(p.dispatcher);
    moe.erase("node_limit");
    if (p.node_limit > 0)
      moe["node_limit"] = p.node_limit;
    job["moe"] = moe;
  }
  job.update(workload::calibration_and_effects_json(spec.base));
  return job;
}

} // namespace

std::string Point::label() const
{
  using workload::DataParallelMode;
  std::string s =
      "tp" + std::to_string(tp) + " cp" + std::to_string(cp) + " pp" + std::to_string(pp) + " dp" + std::to_string(dp) +
      (ep > 1 ? " ep" + std::to_string(ep) : "") + " " + std::string(name_of(data_parallel)) +
      (data_parallel != DataParallelMode::ddp && reshard_after_forward ? "(reshard)" : "") + " mb" +
      std::to_string(micro_batch) + " " +
      (schedule == workload::ScheduleKind::interleaved_1f1b ? "i1f1b(v" + std::to_string(virtual_stages) + ")"
                                                            : std::string(name_of(schedule))) +
      " [" + join(order) + "] " + std::string(name_of(recompute)) + " dp:" + std::string(name_of(dp_algorithm));
  if (tp_overlap)
    s += " tp-overlap";
  if (cp_comm != workload::CpComm::allgather)
    s += " cp:" + std::string(name_of(cp_comm)) +
         (cp_comm == workload::CpComm::a2a_p2p ? "(" + std::to_string(cp_a2a) + ")" : "");
  if (etp > 0)
    s += " etp" + std::to_string(etp);
  if (dispatcher != workload::Dispatcher::alltoall)
    s += " " + std::string(name_of(dispatcher));
  if (node_limit > 0)
    s += " nodes<=" + std::to_string(node_limit);
  if (ep_overlap)
    s += " a2a-overlap";
  if (flows_per_pair > 1)
    s += " fpp" + std::to_string(flows_per_pair);
  if (window > 0)
    s += " w" + units::format_size(window);
  if (qps > 1)
    s += " qp" + std::to_string(qps);
  if (!compression.empty())
    s += " comp:" + compression.label();
  if (diloco)
    s += " diloco:" + diloco->label();
  if (inter_building > 0)
    s += " ib:" + units::format_bandwidth(inter_building);
  if (inter_region > 0)
    s += " ir:" + units::format_bandwidth(inter_region);
  return s;
}

json Point::to_json() const
{
  return {{"tp", tp},
          {"cp", cp},
          {"pp", pp},
          {"dp", dp},
          {"ep", ep},
          {"data_parallel", name_of(data_parallel)},
          {"reshard_after_forward", reshard_after_forward},
          {"micro_batch", micro_batch},
          {"schedule", name_of(schedule)},
          {"virtual_stages", virtual_stages},
          {"order", names(order)},
          {"recompute", name_of(recompute)},
          {"tp_overlap", tp_overlap},
          {"cp_comm", name_of(cp_comm)},
          {"cp_a2a", cp_a2a},
          {"dp_algorithm", name_of(dp_algorithm)},
          {"etp", etp},
          {"dispatcher", name_of(dispatcher)},
          {"node_limit", node_limit},
          {"ep_overlap", ep_overlap},
          {"flows_per_pair", flows_per_pair},
          {"window_bytes", window},
          {"qps", qps},
          {"compression", compression.to_json()},
          {"diloco", diloco ? diloco->to_json() : json(nullptr)},
          {"inter_building_Bps", inter_building},
          {"inter_region_Bps", inter_region}};
}

namespace {
// Bandwidths of a long-link kind set to `bandwidth`, its per-pair overrides scaled alike.
void set_long_links(topology::LongLinkSpec& base, std::vector<topology::LinkOverride>& overrides, double bandwidth)
{
  if (bandwidth <= 0 || base.bandwidth <= 0)
    return;
  const double factor = bandwidth / base.bandwidth;
  base.bandwidth      = bandwidth;
  for (auto& o : overrides)
    o.link.bandwidth *= factor;
}

double tier_tbps(const topology::Topology& t, topology::Tier tier)
{
  double sum = 0;
  for (const auto& l : t.links())
    if (l.tier == tier)
      sum += l.bandwidth * 8 / 1e12;
  return sum;
}
} // namespace

topology::TopologySpec topology_of(const OptimizeSpec& spec, const Point& p, bool refine)
{
  auto t = spec.topology;
  // The point's queue pairs, unless the refine routing gives its own and the search does not vary them.
  const bool refined = refine && spec.refine_multipath;
  if (refined)
    t.multipath = *spec.refine_multipath;
  t.window                = p.window;
  const bool searches_qps = spec.space.qps != std::vector<int>{spec.topology.multipath.qps};
  if (!refined || searches_qps)
    t.multipath.qps = p.qps;
  set_long_links(t.inter_building, t.inter_building_overrides, p.inter_building);
  set_long_links(t.inter_region, t.inter_region_overrides, p.inter_region);
  return t;
}

double capacity_cost(const OptimizeSpec& spec, const topology::Topology& site)
{
  return spec.capacity.per_tbps_inter_building * tier_tbps(site, topology::Tier::inter_building) +
         spec.capacity.per_tbps_inter_region * tier_tbps(site, topology::Tier::inter_region);
}

json CapacityCost::to_json() const
{
  return {{"per_tbps_inter_building", per_tbps_inter_building},
          {"per_tbps_inter_region", per_tbps_inter_region},
          {"unit", unit},
          {"within", within},
          {"budget", budget ? json(*budget) : json(nullptr)}};
}

workload::JobSpec job_of(const OptimizeSpec& spec, const Point& p, int buildings)
{
  workload::JobSpec job     = spec.base;
  auto& par                 = job.parallelism;
  par.tp                    = p.tp;
  par.sequence_parallel     = p.tp > 1;
  par.cp                    = p.cp;
  par.pp                    = p.pp;
  par.dp                    = p.dp;
  par.ep                    = p.ep;
  par.etp                   = p.etp > 0 ? p.etp : p.tp;
  par.dp_mode               = p.data_parallel;
  par.reshard_after_forward = p.data_parallel != workload::DataParallelMode::ddp && p.reshard_after_forward;
  par.hsdp_shard            = p.data_parallel == workload::DataParallelMode::hsdp ? hsdp_shard(p, buildings) : 0;
  par.order                 = p.order;
  par.tp_overlap            = p.tp_overlap;
  par.cp_comm               = p.cp_comm;
  par.cp_a2a                = p.cp_comm == workload::CpComm::a2a_p2p ? p.cp_a2a : 1;
  if (p.cp_comm == workload::CpComm::a2a_p2p && p.cp_a2a < 2)
    throw InfeasibleError(std::string(name_of(workload::JobIssue::cp_comm)), spec.file, "$.search.cp_comm",
                          "\"a2a+p2p\" at cp " + std::to_string(p.cp) + " and tp " + std::to_string(p.tp) +
                              ": no all-to-all group of 2 or more cp ranks that divides cp and the " +
                              std::to_string(spec.base.model.heads / p.tp) + " heads per TP rank fits in a node of " +
                              std::to_string(spec.topology.node.gpus) + " GPUs");
  job.batch.micro_batch         = p.micro_batch;
  job.schedule.kind             = p.schedule;
  job.schedule.virtual_stages   = p.schedule == workload::ScheduleKind::interleaved_1f1b ? p.virtual_stages : 1;
  job.schedule.microbatch_group = 0;
  job.recompute                 = p.recompute;
  if (p.recompute != workload::Recompute::selective)
    job.recompute_modules.clear();
  job.schedule.ep_overlap = p.ep_overlap;
  job.dispatch.dispatcher = p.dispatcher;
  job.dispatch.node_limit = p.node_limit;
  // An explicit layer split (or layout) holds for the base job's pipeline only; other points split evenly.
  const bool dual =
      job.schedule.kind == workload::ScheduleKind::dualpipe || job.schedule.kind == workload::ScheduleKind::dualpipev;
  if (par.pp != spec.base.parallelism.pp || job.schedule.virtual_stages != spec.base.schedule.virtual_stages || dual) {
    par.stage_layers.clear();
    par.pipeline_layout.clear();
    par.chunk_layers.clear();
  }
  workload::validate_job(job);
  return job;
}

json Metrics::to_json() const
{
  json exposed_s;
  for (Dim d : workload::kDims)
    exposed_s[std::string(name_of(d))] = exposed[d];
  json m = {{"step_time_s", step_time},
            {"mfu", mfu},
            {"tflops_per_gpu", tflops_per_gpu},
            {"exposed_s", exposed_s},
            {"bubble_s", bubble}};
  if (!collectives_chosen.empty())
    m["collectives_chosen"] = collectives_chosen;
  if (bytes_across_buildings)
    m["bytes_across_buildings"] = *bytes_across_buildings;
  if (bytes_across_regions)
    m["bytes_across_regions"] = *bytes_across_regions;
  return m;
}

json scenario_json(const OptimizeSpec& spec, const Point& p)
{
  topology::Topology topo(spec.topology);
  const int buildings = !spec.buildings.empty() ? static_cast<int>(spec.buildings.size())
                                                : topo.buildings_needed(spec.base.gpus, spec.gpus_per_node);
  json placement      = {{"order", names(p.order)}};
  if (!spec.buildings.empty())
    placement["buildings"] = spec.buildings;
  if (spec.gpus_per_node > 0)
    placement["gpus_per_node"] = spec.gpus_per_node;
  json topology_ref;
  // Presets by name; anything else (a capacity of the search included) inline, so the scenario stands alone.
  auto site      = topology_of(spec, p);
  site.window    = 0; // written as the scenario's transport.window
  site.multipath = {};
  auto presets   = topology::preset_names();
  if (std::find(presets.begin(), presets.end(), spec.topology.name) != presets.end() &&
      spec.topology.file.find("/topology/presets/") != std::string::npos && p.inter_building <= 0 &&
      p.inter_region <= 0)
    topology_ref = spec.topology.name;
  else {
    topology_ref = site.to_json();
    topology_ref.erase("file");
    for (const char* k : {"inter_building", "inter_region"})
      if (topology_ref.contains(k)) {
        topology_ref[k].erase("effective_latency");
        for (auto& o : topology_ref[k]["overrides"])
          o.erase("effective_latency");
      }
  }
  json out = {{"name", spec.name + "-" + std::to_string(std::hash<std::string>{}(p.label()) % 100000)},
              {"description", "from spansim optimize: " + p.label()},
              {"topology", topology_ref},
              {"job", job_json(spec, p, buildings)},
              {"placement", placement},
              {"fidelity", name_of(spec.refine)},
              {"collectives", {{"dp", name_of(p.dp_algorithm)}, {"flows_per_pair", p.flows_per_pair}}}};
  if (!spec.nccl_ref.is_null())
    out["collectives"]["nccl"] = spec.nccl_ref;
  if (p.window > 0)
    out["transport"] = {{"window", std::to_string(static_cast<std::int64_t>(std::llround(p.window))) + "B"}};
  if (!p.compression.empty())
    out["compression"] = p.compression.to_json();
  if (p.diloco)
    out["diloco"] = p.diloco->to_json();
  const auto m = topology_of(spec, p, true).multipath; // the refine fidelity's routing
  if (!m.is_default())
    out["multipath"] = topology::multipath_json(m);
  if (spec.reliability)
    out["reliability"] = spec.reliability_ref;
  return out;
}

} // namespace spansim::optimizer
