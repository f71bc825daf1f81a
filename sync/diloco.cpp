// DiLoCo's outer synchronization: its flow graph, its run, and the step averaged over an outer step.
#include "sync/sync.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/units.hpp"
#include "netsim/collectives.hpp"

#include <algorithm>
#include <map>
#include <sstream>

namespace spansim::sync {

using nlohmann::json;

json DilocoSpec::to_json() const
{
  json out = {{"every", every}, {"overlap_steps", overlap_steps}};
  if (compression) {
    out["compression"] = compression->to_json();
    out["compression"].erase("dim");
    out["compression"].erase("across");
    out["compression"].erase("purposes");
  }
  return out;
}

std::string DilocoSpec::label() const
{
  std::string s = "H" + std::to_string(every);
  if (overlap_steps > 0)
    s += " overlap" + std::to_string(overlap_steps);
  if (compression) {
    std::ostringstream r;
    r << compression->ratio;
    s += " x" + r.str();
  }
  return s;
}

DilocoSpec read_diloco(spec::ObjectReader& r)
{
  DilocoSpec s;
  s.every         = static_cast<int>(r.integer("every", 1, 100000));
  s.overlap_steps = static_cast<int>(r.optional_integer("overlap_steps", 0, 100000).value_or(0));
  if (s.overlap_steps >= s.every && s.overlap_steps > 0)
    r.fail("overlap_steps", "must be below \"every\" (" + std::to_string(s.every) +
                                "): the next outer step starts after the next " + std::to_string(s.every) +
                                " inner steps");
  if (auto c = r.optional_object("compression")) {
    netsim::CompressionRule rule;
    rule.ratio = c->number("ratio", 1, 1e6);
    for (auto [key, field] :
         {std::pair{"compress_rate", &rule.compress_rate}, std::pair{"decompress_rate", &rule.decompress_rate}})
      if (auto b = c->optional_bandwidth(key)) {
        if (*b <= 0)
          c->fail(key, "expected a positive rate such as \"500GBps\" (leave it out for free)");
        *field = *b;
      }
    c->finish();
    s.compression = rule;
  }
  r.finish();
  return s;
}

OuterSync simulate_outer_sync(const topology::Topology& topology, const workload::StepGraph& graph,
                              const placement::Placement& placement, const DilocoSpec& spec, netsim::Fidelity fidelity,
                              const netsim::EngineOptions& engine)
{
  using workload::Axis;
  const auto& job = graph.job;
  const int cp    = job.parallelism.cp;
  const workload::Group dp_group{cp > 1 ? Axis::cp | Axis::dp : workload::AxisSet(Axis::dp), cp * job.parallelism.dp};
  const double ratio = spec.compression ? spec.compression->ratio : 1.0;
  const bool gather  = job.parallelism.dp_mode != workload::DataParallelMode::fsdp;
  OuterSync out;
  netsim::FlowGraph flows(topology.spec().multipath.qps);
  for (std::size_t s = 0; s < graph.stages.size(); ++s) {
    const double pseudo_gradient = graph.stages[s].params * job.gradient_reduce_bytes;
    if (dp_group.size <= 1 || pseudo_gradient <= 0)
      continue;
    for (const auto& members : placement.groups(static_cast<int>(s), dp_group)) {
      std::map<int, std::vector<int>> by_region;
      for (int gpu : members)
        by_region[topology.locate(gpu).region].push_back(gpu);
      if (by_region.size() < 2)
        continue; // the group stays in one region: its inner steps already synchronize it
      const std::size_t m = by_region.begin()->second.size();
      for (const auto& [region, part] : by_region)
        if (part.size() != m)
          throw UsageError("diloco: a data-parallel group of stage " + std::to_string(s) + " has " + std::to_string(m) +
                           " ranks in region \"" + topology.region_name(by_region.begin()->first) + "\" but " +
                           std::to_string(part.size()) + " in \"" + topology.region_name(region) +
                           "\"; outer steps pair each rank with one counterpart per region");
      out.regions            = static_cast<int>(by_region.size());
      out.members_per_region = static_cast<int>(m);
      const double shard     = pseudo_gradient / static_cast<double>(m);
      out.shard_bytes        = std::max(out.shard_bytes, shard);
      double compress = 0, decompress = 0;
      if (spec.compression) {
        if (spec.compression->compress_rate > 0)
          compress = shard / spec.compression->compress_rate;
        if (spec.compression->decompress_rate > 0)
          decompress = shard / spec.compression->decompress_rate;
      }
      out.compression_seconds = std::max(out.compression_seconds, compress + decompress);
      const int start         = flows.add_delay(compress);
      std::vector<int> ends;
      for (std::size_t k = 0; k < m; ++k) {
        netsim::Collective c;
        c.op        = CollectiveOp::all_reduce;
        c.algorithm = netsim::Algorithm::ring;
        c.bytes     = shard / ratio;
        for (const auto& [region, part] : by_region)
          c.gpus.push_back(part[k]);
        ends.push_back(netsim::add_collective(flows, topology, c, {start}).end_op);
      }
      int done = flows.add_delay(decompress, ends);
      if (gather && m > 1)
        for (const auto& [region, part] : by_region) {
          netsim::Collective c;
          c.op        = CollectiveOp::all_gather;
          c.algorithm = netsim::Algorithm::ring;
          c.bytes     = pseudo_gradient; // the total buffer: every rank ends with the stage's parameters
          c.gpus      = part;
          netsim::add_collective(flows, topology, c, {done});
        }
    }
  }
  out.transfers = flows.transfer_count();
  if (out.transfers == 0) {
    out.engine = {{"engine", "none"}, {"reason", "no data-parallel group spans regions"}};
    return out;
  }
  const auto f               = fidelity == netsim::Fidelity::hybrid ? netsim::Fidelity::flow : fidelity;
  auto run                   = netsim::run(topology, flows, f, engine);
  out.seconds                = run.makespan;
  out.engine                 = run.settings;
  const auto across          = netsim::boundary_bytes(topology, run.link_bytes);
  out.bytes_across_buildings = across.buildings;
  out.bytes_across_regions   = across.regions;
  return out;
}

DilocoResult average(const DilocoSpec& spec, double inner_step, const OuterSync& outer, double tokens_per_step)
{
  DilocoResult r;
  r.spec                          = spec;
  r.inner_step                    = inner_step;
  r.outer                         = outer;
  r.exposed_outer                 = std::max(0.0, outer.seconds - spec.overlap_steps * inner_step);
  r.mean_step                     = inner_step + r.exposed_outer / spec.every;
  r.tokens_per_second             = r.mean_step > 0 ? tokens_per_step / r.mean_step : 0;
  r.bytes_across_regions_per_step = outer.bytes_across_regions / spec.every;
  return r;
}

json DilocoResult::to_json() const
{
  return {{"spec", spec.to_json()},
          {"inner_step_s", inner_step},
          {"outer_sync_s", outer.seconds},
          {"exposed_outer_s", exposed_outer},
          {"mean_step_s", mean_step},
          {"tokens_per_second", tokens_per_second},
          {"bytes_across_regions_per_step", bytes_across_regions_per_step},
          {"outer",
           {{"bytes_across_regions", outer.bytes_across_regions},
            {"bytes_across_buildings", outer.bytes_across_buildings},
            {"regions", outer.regions},
            {"members_per_region", outer.members_per_region},
            {"shard_bytes", outer.shard_bytes},
            {"compression_s", outer.compression_seconds},
            {"transfers", outer.transfers},
            {"engine", outer.engine}}},
          {"note", "time only: what synchronizing every " + std::to_string(spec.every) +
                       " steps costs in convergence is outside a network simulator"}};
}

} // namespace spansim::sync
