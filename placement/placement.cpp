#include "placement/placement.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/units.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace spansim::placement {

using workload::Axis;
using workload::Dim;

namespace {

std::vector<std::string> names(const std::vector<Dim>& order)
{
  std::vector<std::string> out;
  for (Dim d : order)
    out.emplace_back(name_of(d));
  return out;
}

// The rank order names tp, cp, pp and dp once each; else the placement names why, at `where`.
void check_order(const std::vector<Dim>& order, const workload::JobSpec& job, const spec::Location& where)
{
  std::set<Dim> seen(order.begin(), order.end());
  if (order.size() == workload::kRankDims.size() && seen.size() == order.size() && !seen.contains(Dim::ep))
    return;
  throw InfeasibleError(
      "placement", where.file.empty() ? job.file : where.file, where.file.empty() ? "placement" : where.path,
      order.size() != workload::kRankDims.size() ? "the rank order must name tp, cp, pp and dp"
                                                 : "the rank order must name each of tp, cp, pp and dp once");
}

} // namespace

int& Coordinates::operator[](Dim d)
{
  return d == Dim::tp ? tp : d == Dim::cp ? cp : d == Dim::pp ? pp : dp;
}

int Coordinates::operator[](Dim d) const
{
  return d == Dim::tp ? tp : d == Dim::cp ? cp : d == Dim::pp ? pp : dp;
}

nlohmann::json PlacementSpec::to_json() const
{
  nlohmann::json j = {{"order", names(order)}, {"buildings", buildings}};
  if (first_gpu >= 0)
    j["first_gpu"] = first_gpu;
  if (gpus_per_node > 0)
    j["gpus_per_node"] = gpus_per_node;
  return j;
}

PlacementSpec parse_placement(const nlohmann::json& json, const std::string& file, const std::string& json_path)
{
  PlacementSpec spec;
  spec::ObjectReader r(json, spec::Location{file, json_path});
  if (r.has("order"))
    spec.order = workload::read_rank_order(r, "order");
  if (r.has("buildings")) {
    spec.buildings = r.strings("buildings");
    if (spec.buildings.empty())
      r.fail("buildings", "expected at least one building name (leave the key out to take the first buildings the "
                          "job needs)");
  }
  if (r.has("first_gpu"))
    spec.first_gpu = r.integer("first_gpu", 0, 1LL << 40);
  if (r.has("gpus_per_node"))
    spec.gpus_per_node = static_cast<int>(r.integer("gpus_per_node", 1, 1 << 20));
  if (spec.first_gpu >= 0 && !spec.buildings.empty())
    throw SpecError(file, json_path + ".first_gpu",
                    "give either a GPU range (first_gpu) or buildings, not both: a range decides its buildings");
  r.finish();
  return spec;
}

Placement::Placement(const topology::Topology& topology, const workload::JobSpec& job, const PlacementSpec& spec,
                     const spec::Location& where)
    : topology_(topology), par_(job.parallelism), order_(spec.order.empty() ? par_.order : spec.order),
      layout_((check_order(order_, job, where), par_), order_)
{
  auto fail = [&](const std::string& why) {
    throw InfeasibleError("placement", where.file.empty() ? job.file : where.file,
                          where.file.empty() ? "placement" : where.path, why);
  };
  const std::int64_t ranks = std::int64_t(par_.tp) * par_.cp * par_.pp * par_.dp;
  if (ranks != job.gpus)
    fail("tp x cp x pp x dp = " + std::to_string(ranks) + " ranks, but the job has " + std::to_string(job.gpus) +
         " GPUs");

  const auto& counts = topology.counts();
  const bool shared  = !spec.taken.empty();
  if (shared && spec.taken.size() != static_cast<std::size_t>(counts.gpus))
    throw std::invalid_argument("placement: `taken` must be sized to the topology's GPUs");
  // A node's GPUs beyond gpus_per_node are spares: never given a rank, like GPUs another job holds.
  if (spec.gpus_per_node > 0)
    for (int gpu = 0; gpu < counts.gpus; ++gpu)
      if (spec.gpus_per_node > topology.node_gpus_of(gpu)) {
        fail("gpus_per_node " + std::to_string(spec.gpus_per_node) + " is above the " +
             std::to_string(topology.node_gpus_of(gpu)) + " GPUs of node " +
             topology.vertex_name(gpu).substr(0, topology.vertex_name(gpu).rfind('/')));
      }
  gpus_per_node_ = spec.gpus_per_node;
  auto spare     = [&](int gpu) { return spec.gpus_per_node > 0 && topology.locate(gpu).local >= spec.gpus_per_node; };
  auto held      = [&](int gpu) { return (shared && spec.taken[static_cast<std::size_t>(gpu)] != 0) || spare(gpu); };
  if (spec.first_gpu >= 0) {
    // A contiguous range of GPUs: its buildings are those it touches, in order.
    // With spares the range runs on until it has the job's GPUs in use.
    std::int64_t last = spec.first_gpu, in_use = 0;
    for (; last < counts.gpus && in_use < job.gpus; ++last)
      in_use += spare(static_cast<int>(last)) ? 0 : 1;
    if (in_use < job.gpus)
      fail("GPUs " + std::to_string(spec.first_gpu) + " to " + std::to_string(spec.first_gpu + job.gpus - 1) +
           " are outside topology \"" + topology.spec().name + "\" of " + std::to_string(counts.gpus) + " GPUs");
    for (std::int64_t g = spec.first_gpu; g < last; ++g) {
      const int gpu = static_cast<int>(g);
      if (spare(gpu))
        continue;
      if (held(gpu))
        fail("GPU " + std::to_string(gpu) + " (" + topology.vertex_name(gpu) + ") of the range is already held by " +
             "another job on this network");
      gpus_.push_back(gpu);
      const int b = topology.locate(gpu).building;
      if (buildings_.empty() || buildings_.back() != b)
        buildings_.push_back(b);
    }
  } else if (spec.buildings.empty()) {
    const int needed = topology.buildings_needed(job.gpus, spec.gpus_per_node);
    if (needed > counts.buildings)
      fail("the job needs " + std::to_string(job.gpus) + " GPUs; topology \"" + topology.spec().name + "\" has " +
           std::to_string(counts.gpus) +
           (job.gpus <= counts.gpus ? " but in buildings of unequal size, and a job is spread evenly over its "
                                      "buildings: give \"first_gpu\" to place it on a contiguous range of GPUs"
                                    : std::string()));
    for (int b = 0; b < needed; ++b)
      buildings_.push_back(b);
  } else {
    for (const auto& name : spec.buildings) {
      int found = -1;
      for (int b = 0; b < topology.building_count(); ++b)
        if (topology.building_name(b) == name)
          found = b;
      if (found < 0) {
        std::string list;
        for (int b = 0; b < topology.building_count(); ++b)
          list += (list.empty() ? "" : ", ") + topology.building_name(b);
        fail("unknown building \"" + name + "\" (buildings: " + list + ")");
      }
      if (std::find(buildings_.begin(), buildings_.end(), found) != buildings_.end())
        fail("building \"" + name + "\" is listed twice");
      buildings_.push_back(found);
    }
  }
  const auto nb = static_cast<std::int64_t>(buildings_.size());
  if (spec.first_gpu < 0 && job.gpus % nb != 0)
    fail(std::to_string(job.gpus) + " GPUs do not split evenly over " + std::to_string(nb) + " buildings");
  const std::int64_t in_each = job.gpus / nb;
  gpus_.reserve(static_cast<std::size_t>(job.gpus));
  for (int b : spec.first_gpu >= 0 ? std::vector<int>{} : buildings_) {
    // A building's first GPUs not held by another job (buildings may differ in size).
    const auto mine   = topology.building_gpus(b);
    std::int64_t free = 0;
    for (int gpu : mine)
      free += held(gpu) ? 0 : 1;
    if (in_each > free)
      fail(std::to_string(in_each) + " GPUs per building are needed, building " + topology.building_name(b) + " has " +
           std::to_string(mine.size()) +
           (shared || spec.gpus_per_node > 0
                ? ", " + std::to_string(free) + " of them free" +
                      (spec.gpus_per_node > 0 ? " with " + std::to_string(spec.gpus_per_node) + " GPUs per node in use"
                                              : "")
                : std::string()));
    std::int64_t took = 0;
    for (auto it = mine.begin(); it != mine.end() && took < in_each; ++it)
      if (!held(*it)) {
        gpus_.push_back(*it);
        ++took;
      }
  }
  rank_of_gpu_.assign(static_cast<std::size_t>(counts.gpus), -1);
  for (std::size_t r = 0; r < gpus_.size(); ++r)
    rank_of_gpu_[gpus_[r]] = static_cast<int>(r);

  // Failed elements: no rank on a failed GPU, no traffic over a failed link between buildings (routes are a tree
  // and do not go around it).
  int failed = 0, first = -1;
  for (std::size_t r = 0; r < gpus_.size(); ++r)
    if (!topology.gpu_fault(gpus_[r]).empty() && failed++ == 0)
      first = static_cast<int>(r);
  if (failed > 0)
    fail(std::to_string(failed) + " of the job's GPUs are failed; rank " + std::to_string(first) + " on " +
         topology.vertex_name(gpus_[first]) + ": " + topology.gpu_fault(gpus_[first]));
  const auto& links = topology.links();
  for (std::size_t i = 0; i < buildings_.size(); ++i)
    for (std::size_t j = i + 1; j < buildings_.size(); ++j) {
      const int a = buildings_[i], b = buildings_[j];
      for (int k : topology.building_path(a, b))
        if (k >= 0 && links[k].bandwidth <= 0)
          fail("the job spans " + topology.building_name(a) + " and " + topology.building_name(b) + ", and link " +
               topology.link_name(k) + " between them is failed (routes do not go around it)");
    }

  // A TP group that fits in a node must not straddle two: its all-gathers would leave NVLink. Every stage is
  // laid out alike, so stage 0's groups tell.
  for (int s = 0; s < (topology.imported() ? par_.pp : 1); ++s) // a template's stages are all laid out alike
    for (const auto& g : groups(s, workload::Group{Axis::tp, par_.tp})) {
      // Nodes may differ in size between buildings; with spares a node holds gpus_per_node of the job's.
      const int gpn = spec.gpus_per_node > 0 ? std::min(spec.gpus_per_node, topology.node_gpus_of(g.front()))
                                             : topology.node_gpus_of(g.front());
      if (par_.tp <= gpn)
        for (int gpu : g)
          if (topology.locate(gpu).node != topology.locate(g.front()).node) {
            std::string order;
            for (Dim d : order_)
              order += (order.empty() ? "" : ", ") + std::string(name_of(d));
            fail("TP groups of " + std::to_string(par_.tp) + " straddle nodes of " + std::to_string(gpn) +
                 " GPUs with rank order [" + order + "]: put tp innermost, or make the GPUs per node a multiple of tp");
          }
    }
}

RankLayout::RankLayout(const workload::ParallelismSpec& parallelism, const std::vector<workload::Dim>& order)
    : par_(parallelism), order_(order)
{
  degree_[Dim::tp] = par_.tp;
  degree_[Dim::cp] = par_.cp;
  degree_[Dim::pp] = par_.pp;
  degree_[Dim::dp] = par_.dp;
  degree_[Dim::ep] = 1;
  if (order_.size() != workload::kRankDims.size())
    throw std::invalid_argument("the rank order must name tp, cp, pp and dp");
  int stride = 1, stage_stride = 1;
  for (Dim d : order_) {
    if (d == Dim::ep || stride_[d] != 0)
      throw std::invalid_argument("the rank order must name each of tp, cp, pp and dp once");
    stride_[d] = stride;
    stride *= degree_[d];
    if (d != Dim::pp) {
      stage_stride_[d] = stage_stride;
      stage_stride *= degree_[d];
    }
  }
  ranks_ = stride;
}

Coordinates RankLayout::coordinates(int rank) const
{
  Coordinates c;
  for (Dim d : workload::kRankDims)
    c[d] = (rank / stride_[d]) % degree_[d];
  return c;
}

int RankLayout::rank_of(const Coordinates& c) const
{
  int rank = 0;
  for (Dim d : workload::kRankDims)
    rank += c[d] * stride_[d];
  return rank;
}

int RankLayout::stage_index(const Coordinates& c) const
{
  int index = 0;
  for (Dim d : workload::kRankDims)
    if (d != Dim::pp)
      index += c[d] * stage_stride_[d];
  return index;
}

std::array<int, 4> RankLayout::group_key(const Coordinates& c, workload::AxisSet axes) const
{
  using workload::DataParallelMode;
  const int pp = axes.contains(Axis::pp) ? -1 : c.pp;
  if (axes.contains(Axis::etp) || axes.contains(Axis::ep) || axes.contains(Axis::edp)) {
    // The expert layers fold etp x ep x edp (innermost first) over the stage's GPUs in rank order, whatever the
    // attention layout of those GPUs (Megatron's parallel folding).
    const int index = stage_index(c);
    const int etp = std::max(1, par_.etp), ep = std::max(1, par_.ep);
    // Outermost first, so that groups come in rank order.
    return {pp, axes.contains(Axis::edp) ? -1 : index / (etp * ep), axes.contains(Axis::ep) ? -1 : (index / etp) % ep,
            axes.contains(Axis::etp) ? -1 : index % etp};
  }
  const int shard = par_.dp_mode == DataParallelMode::hsdp && par_.hsdp_shard > 0 ? par_.hsdp_shard : par_.dp;
  // A hierarchical CP group spans the cp ranks of one all-to-all group (same c.cp / a) or of one ring (same
  // c.cp % a); the two are keyed apart from each other and from a plain cp coordinate.
  const int a  = std::max(1, par_.cp_a2a);
  const int cp = axes.contains(Axis::cp)       ? -1
                 : axes.contains(Axis::cp_a2a) ? -2 - c.cp / a
                 : axes.contains(Axis::cp_p2p) ? -2 - par_.cp - c.cp % a
                                               : c.cp;
  std::array<int, 4> key{axes.contains(Axis::tp) ? -1 : c.tp, pp, cp, -1};
  if (axes.contains(Axis::dp))
    key[3] = -1;
  else if (axes.contains(Axis::dp_shard))
    key[3] = c.dp / shard;
  else if (axes.contains(Axis::dp_replicate))
    key[3] = c.dp % shard;
  else
    key[3] = c.dp;
  return key;
}

std::vector<std::vector<int>> RankLayout::groups(int stage, const workload::Group& group) const
{
  if (group.members) {
    // A trace's own sub-groups: each as listed, of the stage's ranks.
    std::vector<std::vector<int>> out;
    for (const auto& listed : *group.members) {
      std::vector<int> members;
      for (int r : listed)
        if (r >= 0 && r < ranks() && (group.axes.contains(Axis::pp) || coordinates(r).pp == stage))
          members.push_back(r);
      if (!members.empty())
        out.push_back(std::move(members));
    }
    return out;
  }
  std::map<std::array<int, 4>, std::vector<int>> by_key;
  for (int r = 0; r < ranks(); ++r) {
    auto c = coordinates(r);
    if (!group.axes.contains(Axis::pp) && c.pp != stage)
      continue;
    by_key[group_key(c, group.axes)].push_back(r);
  }
  std::vector<std::vector<int>> out;
  out.reserve(by_key.size());
  for (auto& [key, members] : by_key)
    out.push_back(std::move(members));
  return out;
}

std::vector<std::vector<int>> Placement::groups(int stage, const workload::Group& group) const
{
  auto out = layout_.groups(stage, group);
  for (auto& members : out)
    for (int& r : members)
      r = gpus_[r];
  return out;
}

std::vector<int> Placement::stage_gpus(int stage) const
{
  std::vector<int> out;
  for (int r = 0; r < ranks(); ++r)
    if (coordinates(r).pp == stage)
      out.push_back(gpus_[r]);
  return out;
}

int Placement::peer_gpu(int gpu_of_rank, int stage) const
{
  int r  = rank_of_gpu_.at(gpu_of_rank);
  auto c = coordinates(r);
  c.pp   = stage;
  return gpus_[rank_of(c)];
}

PlacementReport Placement::report(const workload::StepGraph& graph) const
{
  PlacementReport rep;
  for (int b : buildings_)
    rep.buildings_used.push_back(topology_.building_name(b));
  auto crosses = [&](const std::vector<int>& g, auto level) {
    for (int gpu : g)
      if (level(topology_.locate(gpu)) != level(topology_.locate(g.front())))
        return true;
    return false;
  };
  std::map<std::string, GroupCrossing> rows;
  // A group kind: its axes, or for pipeline pairs the peer stage as well.
  using Kind = std::pair<std::uint32_t, int>;
  std::set<std::pair<int, Kind>> counted; // (stage or -1 for groups spanning pp, kind)
  // Ring edges of a stage's groups (or pipeline pairs) that cross a building / region boundary, per group kind.
  struct Edges {
    double buildings = 0, regions = 0;
    std::vector<double> out_of; ///< per building: edges that leave it
  };
  std::map<Kind, Edges> crossing_edges;
  for (const auto& stage : graph.stages) {
    std::map<Kind, std::vector<std::vector<int>>> cache;
    std::vector<std::vector<int>> pairs_cache;
    crossing_edges.clear();
    for (const auto& op : stage.ops) {
      const bool send = op.kind == workload::OpKind::send;
      if (!op.dim || op.kind == workload::OpKind::recv)
        continue;
      const std::vector<std::vector<int>>* members = nullptr;
      std::string name;
      Kind dims{op.group.key(), -1};
      if (send) {
        dims = Kind{workload::AxisSet(Axis::pp).bits(), op.peer_stage};
        if (crossing_edges.find(dims) == crossing_edges.end()) { // else counted and costed already
          pairs_cache.clear();
          for (int gpu : stage_gpus(stage.stage))
            pairs_cache.push_back({gpu, peer_gpu(gpu, op.peer_stage)});
        }
        members = &pairs_cache;
        name    = "pp";
      } else {
        auto it = cache.find(dims);
        if (it == cache.end())
          it = cache.emplace(dims, groups(stage.stage, op.group)).first;
        members = &it->second;
        name    = workload::group_name(op.group);
      }
      auto& row           = rows[name];
      row.group           = name;
      row.dim             = *op.dim;
      row.size            = send ? 2 : op.group.size;
      const int key_stage = (!send && op.group.axes.contains(Axis::pp)) ? -1 : stage.stage;
      if (counted.insert({key_stage, dims}).second)
        for (const auto& g : *members) {
          row.groups++;
          row.across_nodes += crosses(g, [](const topology::GpuLocation& l) { return l.node; });
          row.across_pods += crosses(g, [](const topology::GpuLocation& l) { return l.pod; });
          row.across_buildings += crosses(g, [](const topology::GpuLocation& l) { return l.building; });
          row.across_regions += crosses(g, [](const topology::GpuLocation& l) { return l.region; });
        }
      // Ring lowering: each member sends wire_bytes_per_rank to its successor; a send goes one way.
      auto edges_it = crossing_edges.find(dims);
      if (edges_it == crossing_edges.end()) {
        Edges n;
        n.out_of.assign(static_cast<std::size_t>(topology_.building_count()), 0);
        for (const auto& g : *members) {
          const std::size_t edges = send ? 1 : g.size();
          for (std::size_t e = 0; e < edges && g.size() > 1; ++e) {
            auto a = topology_.locate(g[e]), b = topology_.locate(g[(e + 1) % g.size()]);
            n.buildings += a.building != b.building ? 1 : 0;
            n.regions += a.region != b.region ? 1 : 0;
            if (a.building != b.building)
              n.out_of[static_cast<std::size_t>(a.building)] += 1;
          }
        }
        edges_it = crossing_edges.emplace(dims, std::move(n)).first;
      }
      const double per_edge = workload::wire_bytes_per_rank(op);
      row.bytes_across_buildings += per_edge * edges_it->second.buildings;
      row.bytes_across_regions += per_edge * edges_it->second.regions;
      const auto& out_of = edges_it->second.out_of;
      for (std::size_t b = 0; b < out_of.size(); ++b)
        if (out_of[b] > 0)
          row.bytes_out_of_building[topology_.building_name(static_cast<int>(b))] += per_edge * out_of[b];
    }
  }
  for (auto& [key, row] : rows)
    rep.groups.push_back(row);
  return rep;
}

nlohmann::json PlacementReport::to_json() const
{
  nlohmann::json j = {{"buildings_used", buildings_used}, {"groups", nlohmann::json::array()}};
  for (const auto& g : groups)
    j["groups"].push_back({{"group", g.group},
                           {"traffic", name_of(g.dim)},
                           {"size", g.size},
                           {"groups", g.groups},
                           {"across_nodes", g.across_nodes},
                           {"across_pods", g.across_pods},
                           {"across_buildings", g.across_buildings},
                           {"across_regions", g.across_regions},
                           {"bytes_across_buildings_per_step", g.bytes_across_buildings},
                           {"bytes_across_regions_per_step", g.bytes_across_regions},
                           {"bytes_out_of_building_per_step", g.bytes_out_of_building}});
  return j;
}

} // namespace spansim::placement

namespace spansim::placement {

// Stage programs differ only in their ops' times and memory, so each GPU type's graph is built whole and its
// stages taken.
namespace {

// The job's step graph with its GPU set to `type`, as a building of that type runs it.
workload::StepGraph graph_for(const workload::JobSpec& job, const std::string& type)
{
  workload::JobSpec j = job;
  if (type != job.gpu.name) {
    j.gpu = workload::load_gpu(type);
    // The dispatch kernels' SMs must leave that building's GPU some for the compute they overlap, as on the job's.
    if (j.dispatch.sms > 0)
      if (const auto problem = workload::dispatch_sms_problem(j.dispatch.sms, j.gpu, type + " (a building of its own)");
          !problem.empty())
        throw SpecError(job.file, job.json_path + ".moe.dispatch_sms", problem);
    // A building whose GPUs lack the job's number format cannot run its stages so (no silent fallback).
    if (!(j.gpu.peak(j.precision) > 0))
      throw SpecError(job.file, job.json_path + ".precision.compute",
                      "GPU " + type + " (a building of its own) has no " + std::string(name_of(j.precision)) +
                          " tensor cores (it has: " + j.gpu.precisions() +
                          "): choose a precision every building's "
                          "GPUs have");
    // The job's profile if it holds for this GPU (or is "none"), else the shipped one that does.
    if (j.calibration.name != "none" && !j.calibration.covers(type))
      j.calibration = workload::default_calibration(j.gpu);
    // The job's attention library where this GPU has rates for it, else the GPU's own default.
    if (j.attention != workload::AttentionKernel::unfused &&
        !(j.gpu.attention[static_cast<std::size_t>(j.attention)].forward > 0))
      j.attention = j.gpu.attention_default;
  }
  // Memory is checked per stage against the stage's own GPU (build_stage_graph): a stage of another type may
  // hold more layers than this GPU could.
  return workload::build_step_graph(j, workload::BuildOptions{false});
}

} // namespace

workload::StepGraph build_stage_graph(const workload::JobSpec& job, const topology::Topology& topology,
                                      const Placement& placement, const spec::Location& where,
                                      const workload::BuildOptions& options)
{
  if (job.dlrm && job.dlrm->towers > 0) {
    // DLRM towers are aligned to a level of the hierarchy: each tower's GPUs in one node, pod or building.
    const auto level = job.dlrm->tower_level;
    for (const auto& tower : placement.groups(0, workload::Group{workload::Axis::ep, job.parallelism.ep})) {
      auto unit = [&](int gpu) {
        const auto& at = topology.locate(gpu);
        return level == workload::TowerLevel::node  ? at.node
               : level == workload::TowerLevel::pod ? at.pod
                                                    : at.building;
      };
      for (int gpu : tower)
        if (unit(gpu) != unit(tower.front()))
          throw InfeasibleError("placement", where.file.empty() ? job.file : where.file,
                                where.file.empty() ? "placement" : where.path,
                                "a DLRM tower of " + std::to_string(tower.size()) + " GPUs spans more than one " +
                                    std::string(name_of(level)) + " (" + topology.vertex_name(tower.front()) + " and " +
                                    topology.vertex_name(gpu) + "): use more towers or a higher level");
    }
  }
  if (job.dispatch.node_limit > 0 && job.parallelism.ep > 1) {
    // Node-limited routing picks among the nodes an EP group spans: a limit above them means nothing.
    int most = 0;
    for (const auto& group : placement.groups(0, workload::Group{workload::Axis::ep, job.parallelism.ep})) {
      std::set<int> nodes;
      for (int gpu : group)
        nodes.insert(topology.locate(gpu).node);
      most = std::max(most, static_cast<int>(nodes.size()));
    }
    if (job.dispatch.node_limit > most)
      throw InfeasibleError(std::string(name_of(workload::JobIssue::ep)), job.file, job.json_path + ".moe.node_limit",
                            "node_limit " + std::to_string(job.dispatch.node_limit) + " is above the " +
                                std::to_string(most) + " node(s) an EP group of " + std::to_string(job.parallelism.ep) +
                                " GPUs spans here (at most " + std::to_string(most) + ")");
  }
  if (!topology.heterogeneous())
    return workload::build_step_graph(job, options);
  const int pp = job.parallelism.pp;
  std::vector<std::string> gpu_of(pp);
  for (int s = 0; s < pp; ++s)
    for (int g : placement.stage_gpus(s)) {
      std::string type = topology.building_gpu(topology.locate(g).building);
      if (type.empty())
        type = job.gpu.name;
      if (!gpu_of[s].empty() && gpu_of[s] != type)
        throw InfeasibleError("placement", where.file.empty() ? job.file : where.file,
                              where.file.empty() ? "placement" : where.path,
                              "pipeline stage " + std::to_string(s) + " runs on " + gpu_of[s] + " and " + type +
                                  " GPUs: a stage's ranks keep in step, so it must stay in buildings of one GPU "
                                  "type (put pp outermost in the rank order to cut the pipeline at the building "
                                  "boundary)");
      gpu_of[s] = type;
    }
  // A job none of whose stages runs on its own GPU would be costed on the buildings' GPUs and reported against its
  // own (MFU, the calibration named in results): that cannot mean anything, so the job must name what it runs on.
  if (std::find(gpu_of.begin(), gpu_of.end(), job.gpu.name) == gpu_of.end()) {
    std::string placed;
    for (const auto& type : std::set<std::string>(gpu_of.begin(), gpu_of.end()))
      placed += (placed.empty() ? "" : " and ") + type;
    throw InfeasibleError("placement", job.file, job.json_path + ".gpu",
                          "the job's GPU is " + job.gpu.name + " but the buildings it is placed in have " + placed +
                              " GPUs (the topology's building_overrides): set \"gpu\" to one of them, or place the "
                              "job in buildings of its GPU");
  }
  auto build_all = [&](const workload::JobSpec& base) {
    std::map<std::string, workload::StepGraph> graphs;
    for (const auto& type : gpu_of)
      if (graphs.count(type) == 0)
        graphs.emplace(type, graph_for(base, type));
    return graphs;
  };
  auto graphs = build_all(job);
  const std::set<std::string> types(gpu_of.begin(), gpu_of.end());
  if (job.parallelism.balance_layers && job.parallelism.stage_layers.empty() && types.size() > 1) {
    // Each type's compute seconds per layer, from a stage of that type away from the embedding and the output
    // layer where there is one; then the layers one by one to the stage that stays fastest with one more, which
    // minimizes the slowest stage's compute when a layer costs the same on every stage of a type.
    std::map<std::string, double> per_layer;
    for (int s = 0; s < pp; ++s) {
      const bool inner = s > 0 && s < pp - 1;
      if (per_layer.count(gpu_of[s]) > 0 && !inner)
        continue;
      const auto& st = graphs.at(gpu_of[s]).stages[s];
      double seconds = 0;
      for (const auto& op : st.ops)
        if (workload::is_compute(op.kind) && op.kind != workload::OpKind::optimizer)
          seconds += op.seconds;
      int layers = 0;
      for (int l : st.chunk_layers)
        layers += l;
      if (layers > 0)
        per_layer[gpu_of[s]] = seconds / layers;
    }
    const int v = job.schedule.virtual_stages; // every stage keeps a layer per model chunk
    std::vector<int> layers(pp, v);
    for (int left = job.model.layers - pp * v; left > 0; --left) {
      int best = 0;
      for (int s = 1; s < pp; ++s)
        if ((layers[s] + 1) * per_layer[gpu_of[s]] < (layers[best] + 1) * per_layer[gpu_of[best]])
          best = s;
      ++layers[best];
    }
    workload::JobSpec balanced        = job;
    balanced.parallelism.stage_layers = layers;
    graphs                            = build_all(balanced);
  }
  workload::StepGraph out = graphs.count(job.gpu.name) ? graphs.at(job.gpu.name) : graphs.begin()->second;
  for (int s = 0; s < pp; ++s) {
    out.stages[s]   = graphs.at(gpu_of[s]).stages[s];
    const auto& gpu = graphs.at(gpu_of[s]).job.gpu;
    const auto& m   = out.stages[s].memory;
    using units::format_size;
    if (options.check_memory && m.total() > gpu.hbm_capacity)
      throw InfeasibleError(std::string(name_of(workload::JobIssue::memory)), job.file, job.json_path,
                            "the job does not fit in GPU memory: pipeline stage " + std::to_string(s) + " needs " +
                                format_size(m.total()) + " per GPU (weights " + format_size(m.weights) +
                                ", gradients " + format_size(m.gradients) + ", optimizer state " +
                                format_size(m.optimizer) + ", activations " + format_size(m.activations) + ") but " +
                                gpu.name + " has " + format_size(gpu.hbm_capacity) +
                                " of HBM; raise tp/pp/dp sharding, recompute more or shrink the micro-batch");
  }
  return out;
}

} // namespace spansim::placement
