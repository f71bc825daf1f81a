// DiLoCo's workers and its outer exchange: which GPUs make a worker, the rings over the overlaps of the workers'
// shards, each worker's uplink, and the run.
#include "sync/sync.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "netsim/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace spansim::sync {

namespace {

/// @brief The data-parallel group the outer step synchronizes (CP folded in, as gradients are reduced over both).
workload::Group outer_group(const workload::JobSpec& job)
{
  using workload::Axis;
  const int cp = job.parallelism.cp;
  return {cp > 1 ? Axis::cp | Axis::dp : workload::AxisSet(Axis::dp), cp * job.parallelism.dp};
}

std::string gpu_text(int gpu)
{
  return "GPU " + std::to_string(gpu);
}

} // namespace

Workers resolve_workers(const topology::Topology& topology, const workload::StepGraph& graph,
                        const placement::Placement& placement, const DilocoSpec& spec, const spec::Location& where)
{
  Workers w;
  w.of_gpu.assign(static_cast<std::size_t>(topology.gpu_count()), -1);
  std::set<int> job;
  for (std::size_t s = 0; s < graph.stages.size(); ++s)
    for (int g : placement.stage_gpus(static_cast<int>(s)))
      job.insert(g);
  if (spec.workers == WorkerLevel::ranges) {
    const auto at = where.member("workers");
    for (std::size_t k = 0; k < spec.ranges.size(); ++k) {
      const auto& r = spec.ranges[k];
      w.names.push_back(r.name);
      w.uplink.push_back(r.uplink > 0 ? r.uplink : spec.uplink);
      w.gpus.push_back(0);
      for (auto [a, b] : r.gpus)
        for (int g = a; g <= b; ++g) {
          const auto here = at.element(k).member("gpus");
          if (g >= topology.gpu_count())
            here.fail(gpu_text(g) + " is outside the site (" + std::to_string(topology.gpu_count()) + " GPUs)");
          if (!job.count(g))
            here.fail(gpu_text(g) +
                      " is not one of the job's GPUs: workers partition the job's data-parallel replicas");
          int& owner = w.of_gpu[static_cast<std::size_t>(g)];
          if (owner >= 0)
            here.fail(gpu_text(g) + " is already in worker \"" + w.names[static_cast<std::size_t>(owner)] +
                      "\": workers must not overlap");
          owner = static_cast<int>(k);
          ++w.gpus.back();
        }
    }
    for (int g : job)
      if (w.of_gpu[static_cast<std::size_t>(g)] < 0)
        at.fail(gpu_text(g) + " of the job is in no worker: workers must cover every replica");
  } else {
    auto level_id = [&](int g) {
      const auto l = topology.locate(g);
      return spec.workers == WorkerLevel::region     ? l.region
             : spec.workers == WorkerLevel::building ? l.building
             : spec.workers == WorkerLevel::pod      ? l.pod
                                                     : l.node;
    };
    std::map<int, int> index; // level id -> worker
    for (int g : job)
      index.emplace(level_id(g), 0);
    int k = 0;
    for (auto& [id, worker] : index) {
      worker = k++;
      w.names.push_back(spec.workers == WorkerLevel::region ? topology.region_name(id)
                        : spec.workers == WorkerLevel::building
                            ? topology.building_name(id)
                            : std::string(name_of(spec.workers)) + " " + std::to_string(id));
      w.uplink.push_back(spec.uplink);
      w.gpus.push_back(0);
    }
    for (int g : job) {
      const int k                           = index.at(level_id(g));
      w.of_gpu[static_cast<std::size_t>(g)] = k;
      ++w.gpus[static_cast<std::size_t>(k)];
    }
  }
  // Whole replicas: in each stage, the rank at one position of every data-parallel group (one per tensor and
  // expert shard) sits in the same worker.
  const auto group = outer_group(graph.job);
  for (std::size_t s = 0; s < graph.stages.size(); ++s) {
    std::vector<int> first;
    for (const auto& members : placement.groups(static_cast<int>(s), group)) {
      std::vector<int> mine;
      for (int g : members)
        mine.push_back(w.of_gpu[static_cast<std::size_t>(g)]);
      if (first.empty()) {
        first = mine;
        continue;
      }
      for (std::size_t d = 0; d < mine.size() && d < first.size(); ++d)
        if (mine[d] != first[d])
          where.member("workers").fail(
              "worker \"" + w.names[static_cast<std::size_t>(mine[d])] + "\" holds " + gpu_text(members[d]) +
              " but not the rest of its data-parallel replicas (replica " + std::to_string(d) + " of stage " +
              std::to_string(s) + " is also in \"" + w.names[static_cast<std::size_t>(first[d])] +
              "\"): a worker holds whole replicas, so tensor and expert shards stay together");
    }
  }
  // An outer step averages what two or more workers trained apart; each trains whole replicas, every stage of them.
  // Both are the placement's doing: a search reads them as an infeasible layout.
  const auto at = where.member("workers");
  auto refuse   = [&](const std::string& what) { throw InfeasibleError("diloco_workers", at.file, at.path, what); };
  if (w.names.size() < 2)
    refuse("the job's GPUs make " + std::to_string(w.names.size()) + " worker at level \"" +
           std::string(name_of(spec.workers)) + "\" (\"" + (w.names.empty() ? std::string() : w.names.front()) +
           "\"): DiLoCo needs at least 2 workers (allowed: a level the job spans twice or more, or a list of GPU "
           "ranges)");
  for (std::size_t s = 0; s < graph.stages.size(); ++s) {
    std::set<int> held;
    for (int g : placement.stage_gpus(static_cast<int>(s)))
      held.insert(w.of_gpu[static_cast<std::size_t>(g)]);
    for (std::size_t k = 0; k < w.names.size(); ++k)
      if (!held.count(static_cast<int>(k)))
        refuse("worker \"" + w.names[k] + "\" holds no GPU of pipeline stage " + std::to_string(s) +
               ": each worker trains whole replicas, every stage of them (data parallelism " +
               std::to_string(graph.job.parallelism.dp) + ")");
  }
  return w;
}

OuterSync simulate_outer_sync(const topology::Topology& topology, const workload::StepGraph& graph,
                              const placement::Placement& placement, const DilocoSpec& spec,
                              const OuterSyncParams& params)
{
  const auto& job    = graph.job;
  const auto dp      = outer_group(job);
  const auto workers = resolve_workers(topology, graph, placement, spec, spec::Location{params.file, params.path});
  const double wide  = job.gradient_reduce_bytes;
  const double ratio = spec.compression    ? spec.compression->ratio
                       : spec.quantization ? wide * 8 / spec.quantization->bits
                                           : 1.0;
  const bool gather  = job.parallelism.dp_mode != workload::DataParallelMode::fsdp;
  const double share = 1.0 / spec.fragments;
  OuterSync out;

  // One ring per segment where the workers' shards overlap: [cut_i, cut_i+1) of the stage's pseudo-gradient.
  struct Ring {
    std::vector<int> gpus;
    std::vector<int> worker;
    double bytes; ///< payload before compression
    int start;    ///< index into starts
  };
  std::vector<Ring> rings;
  struct Group {
    std::map<int, std::vector<int>> parts;
    double pseudo_gradient;
  };
  std::vector<Group> groups;
  for (std::size_t s = 0; s < graph.stages.size(); ++s) {
    const double pseudo_gradient = graph.stages[s].params * wide * share;
    if (dp.size <= 1 || pseudo_gradient <= 0)
      continue;
    for (const auto& members : placement.groups(static_cast<int>(s), dp)) {
      Group g{{}, pseudo_gradient};
      std::set<int> regions;
      for (int gpu : members) {
        g.parts[workers.of_gpu[static_cast<std::size_t>(gpu)]].push_back(gpu);
        regions.insert(topology.locate(gpu).region);
      }
      if (g.parts.size() < 2)
        continue; // the group stays in one worker: its inner steps already synchronize it
      out.workers = std::max(out.workers, static_cast<int>(g.parts.size()));
      out.regions = std::max(out.regions, static_cast<int>(regions.size()));
      std::vector<double> cuts{0, 1};
      std::size_t fewest = members.size();
      for (const auto& [worker, part] : g.parts) {
        out.members_per_worker = std::max(out.members_per_worker, static_cast<int>(part.size()));
        fewest                 = std::min(fewest, part.size());
        for (std::size_t i = 1; i < part.size(); ++i)
          cuts.push_back(static_cast<double>(i) / static_cast<double>(part.size()));
      }
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end(), [](double a, double b) { return b - a < 1e-12; }), cuts.end());
      out.segments    = std::max(out.segments, static_cast<int>(cuts.size()) - 1);
      out.shard_bytes = std::max(out.shard_bytes, pseudo_gradient / static_cast<double>(fewest));
      for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
        const double mid = 0.5 * (cuts[i] + cuts[i + 1]);
        Ring r{{}, {}, (cuts[i + 1] - cuts[i]) * pseudo_gradient, static_cast<int>(groups.size())};
        for (const auto& [worker, part] : g.parts) {
          const auto n = static_cast<double>(part.size());
          r.gpus.push_back(part[std::min(part.size() - 1, static_cast<std::size_t>(std::floor(mid * n)))]);
          r.worker.push_back(worker);
        }
        rings.push_back(std::move(r));
      }
      groups.push_back(std::move(g));
    }
  }
  if (rings.empty()) {
    out.engine = {{"engine", "none"}, {"reason", "no data-parallel group spans workers"}};
    return out;
  }

  // GPU cost of the largest shard: compression as its rule says; quantization memory-bound, the shard quantized
  // and dequantized once, and each of the W - 1 reduce hops dequantizing, adding and requantizing its 1/W.
  double compress = 0, decompress = 0;
  if (spec.compression) {
    if (spec.compression->compress_rate > 0)
      compress = out.shard_bytes / spec.compression->compress_rate;
    if (spec.compression->decompress_rate > 0)
      decompress = out.shard_bytes / spec.compression->decompress_rate;
  } else if (spec.quantization) {
    const double rate     = spec.quantization->rate > 0 ? spec.quantization->rate : job.gpu.hbm_bandwidth;
    const double elements = out.shard_bytes / wide;
    const double pass     = elements * (wide + spec.quantization->bits / 8.0) / rate;
    const double w        = out.workers;
    compress              = pass * (1 + (w - 1) / w);
    decompress            = pass * (1 + (w - 1) / w);
  }
  out.compression_seconds = compress + decompress;

  // Each worker's uplink, shared by its rings in proportion to their bytes (they then all end together).
  std::vector<double> payload(workers.names.size(), 0.0);
  for (const auto& r : rings)
    for (int w : r.worker)
      payload[static_cast<std::size_t>(w)] += r.bytes;
  netsim::FlowGraph flows(topology.spec().multipath.qps);
  std::vector<int> starts;
  std::vector<std::vector<int>> ends(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g)
    starts.push_back(flows.add_delay(compress));
  for (const auto& r : rings) {
    netsim::Collective c;
    c.op        = CollectiveOp::all_reduce;
    c.algorithm = netsim::Algorithm::ring;
    c.bytes     = r.bytes / ratio;
    c.gpus      = r.gpus;
    c.nccl      = params.nccl;
    for (int w : r.worker) {
      const double uplink = workers.uplink[static_cast<std::size_t>(w)];
      c.send_rate.push_back(uplink > 0 ? uplink * r.bytes / payload[static_cast<std::size_t>(w)] : 0.0);
    }
    const auto g = static_cast<std::size_t>(r.start);
    ends[g].push_back(netsim::add_collective(flows, topology, c, {starts[g]}).end_op);
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const int done = flows.add_delay(decompress, ends[g]);
    if (gather)
      for (const auto& [worker, part] : groups[g].parts)
        if (part.size() > 1) {
          netsim::Collective c;
          c.op        = CollectiveOp::all_gather;
          c.algorithm = netsim::Algorithm::ring;
          c.bytes     = groups[g].pseudo_gradient; // every rank ends with the stage's parameters
          c.gpus      = part;
          c.nccl      = params.nccl;
          netsim::add_collective(flows, topology, c, {done});
        }
  }

  // Bytes through each worker's uplink (both ways), from the transfers themselves.
  out.traffic.resize(workers.names.size());
  for (std::size_t w = 0; w < workers.names.size(); ++w)
    out.traffic[w] = {workers.names[w], workers.gpus[w], 0, 0, workers.uplink[w]};
  for (const auto& op : flows.ops())
    if (op.kind == netsim::Op::Kind::transfer) {
      const int a = workers.of_gpu[static_cast<std::size_t>(op.src)];
      const int b = workers.of_gpu[static_cast<std::size_t>(op.dst)];
      if (a != b && a >= 0 && b >= 0) {
        out.traffic[static_cast<std::size_t>(a)].bytes_out += op.bytes;
        out.traffic[static_cast<std::size_t>(b)].bytes_in += op.bytes;
      }
    }
  out.transfers              = flows.transfer_count();
  const auto f               = params.fidelity == netsim::Fidelity::hybrid ? netsim::Fidelity::flow : params.fidelity;
  auto run                   = netsim::run(topology, flows, f, params.engine);
  out.seconds                = run.makespan;
  out.engine                 = run.settings;
  const auto across          = netsim::boundary_bytes(topology, run.link_bytes);
  out.bytes_across_buildings = across.buildings;
  out.bytes_across_regions   = across.regions;
  return out;
}

} // namespace spansim::sync
