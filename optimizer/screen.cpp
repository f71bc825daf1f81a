// Tier 1 of the search: the closed-form step estimate (optimizer/screen.hpp).
#include "optimizer/screen.hpp"

#include "common/error.hpp"
#include "netsim/collectives.hpp"
#include "netsim/nccl_layout.hpp"
#include "netsim/nccl_tuner.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

namespace spansim::optimizer {

using workload::Dim;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The widest boundary a group spans: 0 one node, 1 one pod, 2 one building, 3 one region, 4 several regions.
enum Level { node_level, pod_level, building_level, region_level, world_level };

// What a structure (degrees, data parallelism, micro-batch, schedule, recompute, TP overlap, CP variant) costs,
// from the cost model.
struct Structure {
  std::string reason; ///< non-empty: infeasible
  double t_mb = 0, m = 1, ep_gather_bytes = 0;
  workload::StageCosts stage; ///< the busiest stage's (per micro-batch: of t_mb, its backward and W)
  double tp_bytes = 0, cp_bytes = 0, cp_a2a_bytes = 0, ep_bytes = 0, pp_bytes = 0, gradient_bytes = 4;
  int hsdp_shard = 1, passes = 2, cp_passes = 2; ///< forward passes of the collectives (recompute repeats them)
  int cp_a2a               = 1;                  ///< the CP all-to-all group (Ulysses: cp; a2a+p2p: its inner group)
  bool tp_overlap          = false;
  workload::CpComm cp_comm = workload::CpComm::allgather;
};

// One kind of group under a placement: its size, how many there are, how far it spans, and a hop across its widest
// boundary (two GPUs) whose route gives its bandwidth and latency.
struct GroupShape {
  int n = 1, groups = 1, level = node_level, buildings = 1;
  int src = 0, dst = 0;
  /// @brief Its members as ranks: `stride` apart from rank 0, or `ranks` where they are listed.
  std::int64_t stride = 1;
  std::vector<std::int64_t> ranks;
  std::uint64_t members = 0; ///< a hash of n and the members (kept sets it)
};

// Hashes a group's members once, when its shape is made (FNV-1a): the screen looks its communicator up per point.
GroupShape kept(GroupShape g)
{
  std::uint64_t key = 1469598103934665603ull;
  auto mix          = [&](std::uint64_t x) { key = (key ^ x) * 1099511628211ull; };
  mix(static_cast<std::uint64_t>(g.n));
  if (g.ranks.empty())
    mix(static_cast<std::uint64_t>(g.stride));
  for (auto r : g.ranks)
    mix(static_cast<std::uint64_t>(r));
  g.members = key;
  return g;
}

// A group's communicator as NCCL lays it out on one variant's site, and its tuner's times by call (memoized: a
// screen asks the same call of many points).
struct Tuned {
  netsim::NcclComm comm;
  netsim::NcclSettings settings; ///< the search's `nccl` (channels per peer for groups of sends)
  /// @brief A call as NCCL's tuner picks it: its time, and the wire bytes its channels may have in flight on one
  /// edge (NCCL's slots, netsim/nccl.hpp; 0: no window).
  struct Call {
    double seconds = 0, window = 0, wire = 1;
  };
  std::unordered_map<std::uint64_t, Call> calls;

  /// @brief The call under `algorithm` (none: NCCL's own pick among all); an algorithm NCCL has no model for here (a
  /// tree for a gather) runs as the lowering runs it, as NCCL's ring.
  const Call& call(CollectiveOp op, double bytes, std::optional<netsim::NcclAlgorithm> algorithm)
  {
    using netsim::NcclAlgorithm;
    std::uint64_t bits = 0;
    std::memcpy(&bits, &bytes, sizeof bits);
    const std::uint64_t key = (bits * 31 + static_cast<std::uint64_t>(op)) * 17 +
                              (algorithm ? static_cast<std::uint64_t>(*algorithm) + 1 : 0);
    auto [it, fresh] = calls.try_emplace(key);
    if (!fresh)
      return it->second;
    const auto only = [](NcclAlgorithm a) { return netsim::NcclAlgorithmSet{1u << static_cast<unsigned>(a)}; };
    netsim::NcclAlgorithmSet allowed;
    if (algorithm) {
      bool modelled = false;
      for (auto p : {netsim::Protocol::ll, netsim::Protocol::ll128, netsim::Protocol::simple})
        modelled = modelled || netsim::nccl_time(comm, op, bytes, *algorithm, p) >= 0;
      allowed = only(modelled ? *algorithm : NcclAlgorithm::ring);
    }
    const auto pick = netsim::nccl_pick(comm, op, bytes, allowed, netsim::Protocol::automatic);
    const auto plan = netsim::nccl_call(comm, pick, op, bytes, settings);
    it->second      = {1e-6 * pick.time_us, plan.window * plan.channels, plan.wire};
    return it->second;
  }
};

// A group's alpha-beta terms on one network variant.
struct Wire {
  double bandwidth = kInf; ///< one flow alone, shared with the other groups on a long link
  double latency   = 0;
  int level        = node_level;
  int groups       = 1;
  double hier      = 1; ///< members per building (hierarchical algorithms cross with 1/hier of the bytes)
  /// @brief The group's communicator as NCCL lays it out on the variant's site (its tuner times gathers and
  /// all-reduces); null for a group of one.
  Tuned* nccl = nullptr;
  /// @brief A group of sends over the widest hop (all-to-all): the hop's path type and the step latency
  /// topology/fabrics.json fits for it, beyond NCCL's tables (netsim/README.md, "Send/recv and all-to-all").
  netsim::NcclPath path = netsim::NcclPath::nvlink;
  double step_latency   = 0;
  /// @brief Inside a node: what one channel of a send moves, Simple and LL (the node's p2p_channel_rate and
  /// p2p_ll_channel_rate; 0: no bound).
  double p2p_rate = 0, p2p_ll_rate = 0;
};

// The groups of every kind under one placement (degrees and rank order; DiLoCo keeps DP inside regions).
struct Shapes {
  GroupShape tp, cp, pp, ep, dp, dp_shard, dp_replicate, edp;
  int regions_spanned    = 1; ///< by the full data-parallel dimension
  std::int64_t cp_stride = 1; ///< ranks between CP neighbours (a2a+p2p's groups are shaped from it)
};

// A network variant's site and the facts the estimate reads from it.
struct Site {
  std::unique_ptr<topology::Topology> topo;
  double building_link = kInf, region_link = kInf, pod_uplink_share = kInf;
  double qps = 1;
};

} // namespace

struct Screen::Impl {
  const IndexedSpace& space;
  const OptimizeSpec& spec;
  const topology::Topology& topo;
  std::vector<int> buildings;
  std::vector<std::vector<int>> building_gpus;
  std::int64_t per_building = 0, node = 8, pod = 8, region = 0;
  std::unordered_map<std::uint64_t, Structure> structures;
  std::unordered_map<std::uint64_t, Shapes> shapes;
  std::vector<std::unique_ptr<Site>> sites;
  std::unordered_map<std::uint64_t, Wire> wires;
  std::unordered_map<std::uint64_t, Tuned> comms; ///< by members and variant

  Impl(const IndexedSpace& s, const topology::Topology& t) : space(s), spec(s.spec()), topo(t)
  {
    if (!spec.buildings.empty()) {
      for (const auto& name : spec.buildings)
        for (int b = 0; b < topo.building_count(); ++b)
          if (topo.building_name(b) == name)
            buildings.push_back(b);
    } else {
      for (int b = 0; b < std::min(topo.building_count(), topo.buildings_needed(spec.base.gpus, spec.gpus_per_node));
           ++b)
        buildings.push_back(b);
    }
    if (buildings.empty())
      buildings.push_back(0);
    per_building = std::max<std::int64_t>(1, spec.base.gpus / static_cast<std::int64_t>(buildings.size()));
    for (int b : buildings)
      building_gpus.push_back(topo.building_gpus(b, spec.gpus_per_node));
    node = spec.gpus_per_node > 0 ? std::min(spec.gpus_per_node, topo.node_gpus()) : topo.node_gpus();
    pod  = std::max<std::int64_t>(node, topo.counts().gpus / std::max<std::int64_t>(1, topo.counts().pods));
    pod  = std::min(pod, per_building);
    std::int64_t same_region = 0;
    for (int b : buildings)
      same_region += topo.region_of_building(b) == topo.region_of_building(buildings.front()) ? 1 : 0;
    region = per_building * same_region;
    sites.resize(space.networks().size());
  }

  int gpu_of(std::int64_t rank) const
  {
    const auto b = static_cast<std::size_t>(std::min<std::int64_t>(rank / per_building, building_gpus.size() - 1));
    const auto k = static_cast<std::size_t>(rank % per_building);
    return k < building_gpus[b].size() ? building_gpus[b][k] : building_gpus[b].back();
  }

  // A group of `n` members `stride` ranks apart (the first group: rank 0 upward).
  GroupShape shape(int n, std::int64_t stride) const
  {
    GroupShape g;
    g.n                     = std::max(1, n);
    g.groups                = static_cast<int>(spec.base.gpus / g.n);
    g.stride                = stride;
    const std::int64_t span = stride * g.n;
    g.level                 = span <= node           ? node_level
                              : span <= pod          ? pod_level
                              : span <= per_building ? building_level
                              : span <= region       ? region_level
                                                     : world_level;
    g.buildings =
        span > per_building
            ? static_cast<int>(std::min<std::int64_t>(buildings.size(), (span + per_building - 1) / per_building))
            : 1;
    if (g.n <= 1)
      return kept(std::move(g));
    // The hop across the widest boundary: from the last member before it to the first after it.
    const std::int64_t boundary = g.level == node_level       ? 0
                                  : g.level == pod_level      ? node
                                  : g.level == building_level ? pod
                                  : g.level == region_level   ? per_building
                                                              : region;
    const std::int64_t after    = boundary > 0 ? std::min<std::int64_t>(g.n - 1, (boundary + stride - 1) / stride) : 1;
    g.src                       = gpu_of((after - 1) * stride);
    g.dst                       = gpu_of(after * stride);
    return kept(std::move(g));
  }

  // The widest boundary a group of member ranks spans, and a hop across it (members in rank order).
  GroupShape members_shape(const std::vector<std::int64_t>& ranks) const
  {
    GroupShape g;
    g.n      = std::max<int>(1, static_cast<int>(ranks.size()));
    g.groups = static_cast<int>(spec.base.gpus / g.n);
    g.ranks  = ranks;
    if (g.n <= 1)
      return kept(std::move(g));
    const std::int64_t units[] = {node, pod, per_building, region > 0 ? region : per_building};
    for (int level = world_level; level > node_level; --level) {
      const std::int64_t unit = units[level - 1];
      for (std::size_t k = 1; k < ranks.size(); ++k)
        if (ranks[k] / unit != ranks[k - 1] / unit) {
          g.level     = level;
          g.src       = gpu_of(ranks[k - 1]);
          g.dst       = gpu_of(ranks[k]);
          g.buildings = level >= region_level
                            ? static_cast<int>(std::min<std::int64_t>(
                                  buildings.size(), (ranks.back() - ranks.front()) / per_building + 1))
                            : 1;
          return kept(std::move(g));
        }
    }
    g.src = gpu_of(ranks[0]);
    g.dst = gpu_of(ranks[1]);
    return kept(std::move(g));
  }

  // Expert groups fold over a stage's ranks in rank order (placement::RankLayout): the first group of `n` members
  // `step` stage positions apart, as ranks.
  GroupShape folded(int n, int step, const std::vector<Dim>& order, const workload::DimArray<std::int64_t>& stride,
                    const workload::DimArray<int>& degree) const
  {
    std::vector<std::int64_t> ranks;
    for (int j = 0; j < n; ++j) {
      std::int64_t local = std::int64_t(j) * step, rank = 0;
      for (Dim d : order)
        if (d != Dim::pp) {
          rank += (local % degree[d]) * stride[d];
          local /= degree[d];
        }
      ranks.push_back(rank);
    }
    return members_shape(ranks);
  }

  const Structure& structure(const Indices& at)
  {
    // Mixed radix over the structure's knobs: unique, and it fits since the whole space's size does.
    std::uint64_t key = 0;
    for (int k : {knob_tp, knob_cp, knob_pp, knob_ep, knob_data_parallel, knob_reshard, knob_micro_batch, knob_schedule,
                  knob_virtual_stages, knob_recompute, knob_tp_overlap, knob_cp_comm, knob_expert})
      key = key * space.radix(k) + at[k];
    auto [it, fresh] = structures.try_emplace(key);
    if (!fresh)
      return it->second;
    Structure& s = it->second;
    try {
      const Point p = space.point(at);
      const auto job =
          job_of(spec, p, static_cast<int>(!spec.buildings.empty() ? spec.buildings.size() : buildings.size()));
      const auto costs = workload::job_costs(job);
      s.m              = costs.micro_batches;
      double busiest   = -1;
      for (const auto& st : costs.stages) {
        const double t_mb = st.forward + st.backward + st.recompute;
        if (s.m * t_mb + st.optimizer <= busiest)
          continue;
        busiest = s.m * t_mb + st.optimizer;
        s.t_mb  = t_mb;
        s.stage = st;
      }
      s.tp_bytes        = costs.tp_bytes;
      s.cp_bytes        = costs.cp_bytes;
      s.cp_a2a_bytes    = costs.cp_a2a_bytes;
      s.cp_a2a          = costs.cp_a2a;
      s.tp_overlap      = job.parallelism.tp_overlap;
      s.cp_comm         = job.parallelism.cp_comm;
      s.ep_bytes        = costs.ep_bytes;
      s.ep_gather_bytes = costs.ep_gather_bytes;
      s.pp_bytes        = costs.pp_bytes;
      s.gradient_bytes  = job.gradient_reduce_bytes;
      s.hsdp_shard      = std::max(1, job.parallelism.hsdp_shard);
      s.passes          = job.recompute == workload::Recompute::full ? 3 : 2;
      s.cp_passes = s.passes + (job.recompute == workload::Recompute::selective && job.parallelism.cp > 1 ? 1 : 0);
    } catch (const InfeasibleError& e) {
      s.reason = e.reason();
    }
    return s;
  }

  const Shapes& placement(const Indices& at, bool within_regions)
  {
    const auto& sp    = spec.space;
    std::uint64_t key = 0;
    for (int k : {knob_tp, knob_cp, knob_pp, knob_ep, knob_order, knob_expert})
      key = key * space.radix(k) + at[k];
    key              = key * 2 + (within_regions ? 1 : 0);
    auto [it, fresh] = shapes.try_emplace(key);
    if (!fresh)
      return it->second;
    Shapes& s    = it->second;
    const int tp = sp.tp[at[knob_tp]], cp = sp.cp[at[knob_cp]], pp = sp.pp[at[knob_pp]], ep = sp.ep[at[knob_ep]];
    const int dp = static_cast<int>(spec.base.gpus / (std::int64_t(tp) * cp * pp));
    workload::DimArray<std::int64_t> stride{};
    std::int64_t next = 1;
    for (Dim d : sp.order[at[knob_order]]) {
      stride[d] = next;
      next *= d == Dim::tp ? tp : d == Dim::cp ? cp : d == Dim::pp ? pp : dp;
    }
    s.tp        = shape(tp, stride[Dim::tp]);
    s.cp        = shape(cp, stride[Dim::cp]);
    s.cp_stride = stride[Dim::cp];
    s.pp        = shape(pp, stride[Dim::pp]);
    // Data-parallel groups span cp too when cp > 1 (sharding over cp x dp); their widest hop is data parallelism's.
    int dp_n               = dp;
    const GroupShape whole = shape(dp, stride[Dim::dp]);
    s.regions_spanned      = whole.level == world_level && region > 0
                                 ? static_cast<int>((std::int64_t(dp) * stride[Dim::dp] + region - 1) / region)
                                 : 1;
    std::int64_t dp_stride = stride[Dim::dp];
    if (within_regions && s.regions_spanned > 1)
      dp_n = std::max(1, dp / s.regions_spanned);
    s.dp        = shape(dp_n, dp_stride);
    s.dp.n      = dp_n * cp;
    s.dp.groups = static_cast<int>(spec.base.gpus / s.dp.n);
    if (cp > 1) {
      for (int c = 0; c < cp; ++c)
        for (int d = 0; d < dp_n; ++d)
          s.dp.ranks.push_back(c * stride[Dim::cp] + d * dp_stride);
      std::sort(s.dp.ranks.begin(), s.dp.ranks.end());
    }
    s.dp            = kept(std::move(s.dp));
    const Point& ex = space.experts()[at[knob_expert]];
    const int etp   = ex.etp > 0 ? ex.etp : tp;
    workload::DimArray<int> degree{};
    degree[Dim::tp] = tp;
    degree[Dim::cp] = cp;
    degree[Dim::pp] = pp;
    degree[Dim::dp] = dp;
    s.ep            = folded(ep, etp, sp.order[at[knob_order]], stride, degree);
    s.edp = folded(std::max(1, tp * cp * dp / (etp * ep)), etp * ep, sp.order[at[knob_order]], stride, degree);
    const int shard = std::max(1, dp_n / std::max(1, static_cast<int>(buildings.size())));
    s.dp_shard      = shape(shard, dp_stride);
    s.dp_replicate  = shape(std::max(1, dp_n / shard), dp_stride * shard);
    return s;
  }

  Site& site(std::uint32_t variant)
  {
    auto& slot = sites[variant];
    if (slot)
      return *slot;
    slot           = std::make_unique<Site>();
    const Point& v = space.networks()[variant];
    slot->topo     = std::make_unique<topology::Topology>(topology_of(spec, v));
    const auto& t  = *slot->topo;
    slot->qps      = std::max(1, v.qps);
    for (std::size_t i = 0; i < buildings.size(); ++i)
      for (std::size_t j = i + 1; j < buildings.size(); ++j) {
        const int ib = t.inter_building_link(buildings[i], buildings[j]);
        if (ib >= 0)
          slot->building_link = std::min(slot->building_link, t.links()[ib].bandwidth);
        const int ri = t.region_of_building(buildings[i]), rj = t.region_of_building(buildings[j]);
        if (ri != rj) {
          const int ir = t.inter_region_link(ri, rj);
          if (ir >= 0)
            slot->region_link = std::min(slot->region_link, t.links()[ir].bandwidth);
          for (int b : {buildings[i], buildings[j]})
            if (t.building_uplink(b) >= 0)
              slot->region_link = std::min(slot->region_link, t.links()[t.building_uplink(b)].bandwidth);
        }
      }
    if (!t.imported() && t.counts().pods > 0)
      slot->pod_uplink_share = t.links()[t.pod_uplink(0)].bandwidth / static_cast<double>(pod);
    return *slot;
  }

  Wire wire(const GroupShape& g, std::uint32_t variant)
  {
    // By members (which fix the widest hop) and variant: one lookup per group and point.
    auto [it, fresh] = wires.try_emplace((g.members ^ variant) * 1099511628211ull);
    if (fresh && g.n > 1) {
      Wire& w           = it->second;
      w.nccl            = &comm(g, variant);
      Site& s           = site(variant);
      const auto route  = s.topo->route(g.src, g.dst);
      w.bandwidth       = s.topo->route_bandwidth(route);
      w.latency         = s.topo->route_latency(route);
      w.bandwidth       = std::min(w.bandwidth, s.qps * s.topo->window_rate(g.src, g.dst));
      const bool inside = s.topo->locate(g.src).node == s.topo->locate(g.dst).node;
      w.path            = inside ? netsim::NcclPath::nvlink : netsim::NcclPath::net;
      w.step_latency    = s.topo->step_latency(g.src, g.dst);
      if (inside) {
        const auto& node = *s.topo->spec().site_of(s.topo->building_name(s.topo->locate(g.src).building)).node;
        w.p2p_rate       = node.p2p_channel_rate;
        w.p2p_ll_rate    = node.p2p_ll_channel_rate;
      }
      if (g.level >= building_level)
        w.bandwidth = std::min(w.bandwidth, s.pod_uplink_share);
    }
    Wire w   = it->second;
    w.level  = g.level;
    w.groups = g.groups;
    w.hier   = g.buildings > 1 ? static_cast<double>(g.n) / g.buildings : 1;
    if (g.level == region_level)
      w.bandwidth = std::min(w.bandwidth, site(variant).building_link / g.groups);
    if (g.level == world_level)
      w.bandwidth = std::min(w.bandwidth, site(variant).region_link / g.groups);
    return w;
  }

  // How many hops between consecutive members cross the group's widest boundary (a pipeline's stages in order: of
  // PP 8 over 3 + 3 + 2 buildings in three regions, 2 hops cross a region and the other 5 a building or less).
  int wide_hops(const GroupShape& g) const
  {
    const auto unit = [&](std::int64_t rank) {
      const auto l = topo.locate(gpu_of(rank));
      return g.level == world_level      ? l.region
             : g.level == region_level   ? l.building
             : g.level == building_level ? l.pod
                                         : l.node;
    };
    const auto rank = [&](int j) { return g.ranks.empty() ? j * g.stride : g.ranks[static_cast<std::size_t>(j)]; };
    int hops        = 0;
    for (int j = 1; j < g.n; ++j)
      hops += unit(rank(j)) != unit(rank(j - 1)) ? 1 : 0;
    return std::max(1, hops);
  }

  // The group's communicator as NCCL's graph search lays it out on the variant's site, cached by members.
  Tuned& comm(const GroupShape& g, std::uint32_t variant)
  {
    auto [it, fresh] = comms.try_emplace((g.members ^ variant) * 1099511628211ull);
    if (fresh) {
      std::vector<int> gpus;
      for (int j = 0; j < g.n; ++j)
        gpus.push_back(gpu_of(g.ranks.empty() ? j * g.stride : g.ranks[static_cast<std::size_t>(j)]));
      it->second.comm     = netsim::nccl_layout(*site(variant).topo, gpus, spec.nccl).comm;
      it->second.settings = spec.nccl;
    }
    return it->second;
  }

  double estimate(const Indices& at, std::string& reason);
};

namespace {

netsim::Boundary boundary_of(int level)
{
  return level == world_level    ? netsim::Boundary::region
         : level == region_level ? netsim::Boundary::building
                                 : netsim::Boundary::none;
}

// Bytes each rank sends over a long link per step, by boundary, to charge the links with (a lower bound on the step).
struct Charge {
  double building = 0, region = 0;
  void add(const Wire& w, double per_rank)
  {
    if (w.level == region_level)
      building += w.groups * per_rank;
    if (w.level == world_level)
      region += w.groups * per_rank;
  }
};

enum class Pattern { gather, all_reduce, all_to_all };

// The least time `wire_bytes` take over a hop of one-way `latency` when at most `window` bytes may be in flight per
// round trip (NCCL's slots, as the engines bound a long hop); 0 where no window applies.
double slotted(double latency, double wire_bytes, double window)
{
  return window > 0 && latency > 0 ? latency + wire_bytes * 2 * latency / window : 0;
}

// One collective of `bytes` (its buffer) on a group: alpha-beta time; its wire bytes charged to the long links.
double collective(const Wire& w, int n, Pattern pattern, double bytes, netsim::Algorithm algorithm,
                  const netsim::CompressionRule* rule, double calls, Charge& charge)
{
  if (n <= 1 || bytes <= 0 || calls <= 0)
    return 0;
  double extra = 0;
  if (rule) {
    extra = rule->cost(bytes);
    bytes /= rule->ratio;
  }
  const double share  = double(n - 1) / n;
  const double volume = (pattern == Pattern::all_reduce ? 2 : 1) * share * bytes;
  double steps        = pattern == Pattern::all_to_all ? 1 : (pattern == Pattern::all_reduce ? 2.0 : 1.0) * (n - 1);
  double crossing     = volume;
  using netsim::Algorithm;
  const bool crosses = w.level >= region_level && w.hier > 1 && pattern != Pattern::all_to_all;
  auto hierarchical  = [&] { return crosses ? volume / w.hier : volume; };
  switch (algorithm) {
  case Algorithm::hierarchical:
    crossing = hierarchical();
    break;
  case Algorithm::halving_doubling:
  case Algorithm::tree:
    steps = (pattern == Pattern::all_reduce ? 2 : 1) * std::ceil(std::log2(n));
    break;
  case Algorithm::automatic:
    crossing = std::min(volume, hierarchical());
    steps    = std::min(steps, (pattern == Pattern::all_reduce ? 2 : 1) * std::ceil(std::log2(n)) + 2);
    break;
  default:
    break;
  }
  charge.add(w, calls * crossing);
  const double bw   = crossing < volume ? w.bandwidth * volume / crossing : w.bandwidth;
  double alpha_beta = steps * w.latency + volume / bw;
  if (pattern == Pattern::all_to_all && w.nccl) {
    // NCCL's point-to-point, as the engines charge it: the ring's launch, then one step per wave of peers; each send
    // under the protocol and over the channels NCCL plans for it (LL's sends carry twice their bytes on the wire),
    // inside a node no faster than its channels' rate.
    const auto& comm = w.nccl->comm;
    const auto plan =
        netsim::p2p_plan(netsim::p2p_comm(comm.channels, n, comm.nodes, true, w.nccl->settings), bytes / n);
    const auto protocol = plan.protocol;
    const auto tables   = netsim::nccl_p2p_latency(comm.version, protocol, w.path);
    const double waves  = netsim::p2p_waves(n - 1, n, w.nccl->settings);
    const double wire   = netsim::wire_factor(protocol);
    charge.add(w, calls * crossing * (wire - 1)); // the LL flags' share of the wire
    double moving = wire * volume / bw;
    if (const double per_channel = protocol == netsim::Protocol::ll ? w.p2p_ll_rate : w.p2p_rate; per_channel > 0)
      moving = std::max(moving, wire * (bytes / n) / (plan.channels * per_channel));
    alpha_beta =
        std::max(w.latency, 1e-6 * (tables.base_us + waves * tables.step_us) + waves * w.step_latency) + moving;
    // Over a long hop each send moves no faster than NCCL's p2p window per round trip (netsim::p2p_window, the
    // engines' bound), the sends to every peer at once.
    if (w.level >= building_level)
      alpha_beta = std::max(alpha_beta, slotted(w.latency, wire * (bytes / n),
                                                netsim::p2p_window(bytes / n, n - 1, n, w.nccl->settings)));
  }
  const auto nccl  = netsim::nccl_algorithm(algorithm);
  const bool tuned = w.nccl && pattern != Pattern::all_to_all && (algorithm == Algorithm::automatic || nccl);
  if (!tuned)
    return calls * (alpha_beta + extra);
  // NCCL's tuner for the call on the group as NCCL lays it out (its rings and trees per NIC, NVLS, its latencies);
  // a group across buildings or regions also moves its bytes over the long link's share, which the tuner never sees.
  const auto op    = pattern == Pattern::all_reduce ? CollectiveOp::all_reduce : CollectiveOp::all_gather;
  const auto& call = w.nccl->call(op, bytes, nccl);
  double t         = call.seconds;
  if (w.level >= region_level)
    t = std::max(t, alpha_beta);
  // Over a long hop NCCL's slots bound the call as the engines bound it: the edge across moves its volume at no more
  // than the channels' window per round trip (a ring of many ranks steps in small pieces, so its window is small).
  if (w.level >= building_level)
    t = std::max(t, slotted(w.latency, call.wire * volume, call.window));
  return calls * (t + extra);
}

} // namespace

double Screen::Impl::estimate(const Indices& at, std::string& reason)
{
  const Structure& s = structure(at);
  if (!s.reason.empty()) {
    reason = s.reason;
    return kInf;
  }
  const auto& sp     = spec.space;
  const Point& net   = space.networks()[at[knob_network]];
  const Shapes& sh   = placement(at, net.diloco.has_value());
  const int pp       = sp.pp[at[knob_pp]];
  const auto dpm     = sp.data_parallel[at[knob_data_parallel]];
  const bool inter   = sp.schedule[at[knob_schedule]] == workload::ScheduleKind::interleaved_1f1b;
  const int v        = inter ? sp.virtual_stages[at[knob_virtual_stages]] : 1;
  const bool reshard = dpm != workload::DataParallelMode::ddp && sp.reshard_after_forward[at[knob_reshard]];
  const auto algo    = sp.dp_algorithm[at[knob_dp_algorithm]];
  const auto& comp   = net.compression;
  auto rule          = [&](Dim d, workload::Purpose p, const Wire& w) {
    return comp.empty() ? nullptr : comp.rule_for(d, p, boundary_of(w.level));
  };
  using netsim::Algorithm;
  using workload::Purpose;
  Charge charge;
  const std::uint32_t variant = at[knob_network];

  // Per micro-batch: compute and the exposed per-layer collectives of every pass.
  const Wire tp = wire(sh.tp, variant), ep = wire(sh.ep, variant);
  const Point& ex       = space.experts()[at[knob_expert]];
  const auto kind       = sp.schedule[at[knob_schedule]];
  const bool dual       = kind == workload::ScheduleKind::dualpipe || kind == workload::ScheduleKind::dualpipev;
  const double ep_calls = 2 * s.stage.moe_layers * s.passes;
  double expert_time    = 0;
  if (ex.dispatcher == workload::Dispatcher::allgather) {
    expert_time = collective(ep, sh.ep.n, Pattern::gather, s.ep_gather_bytes, Algorithm::automatic,
                             rule(Dim::ep, Purpose::ep_dispatch, ep), ep_calls, charge);
  } else {
    double bytes = s.ep_bytes;
    if (ex.dispatcher == workload::Dispatcher::deepep && sh.ep.level > node_level && sh.ep.n > 1) {
      // DeepEP crosses the scale-out network once per token and destination node: the flat all-to-all's remote
      // bytes scaled to that.
      const auto& moe     = spec.base.model.moe;
      const int nodes     = std::max<int>(2, static_cast<int>((sh.ep.n + node - 1) / node));
      const auto rates    = workload::dispatch_rates(moe.experts, moe.experts_per_token, sh.ep.n, nodes, ex.node_limit);
      const double remote = double(sh.ep.n - sh.ep.n / nodes) / sh.ep.n;
      bytes *= std::min(1.0, (nodes - 1) * rates.node / (moe.experts_per_token * remote));
    }
    expert_time = collective(ep, sh.ep.n, Pattern::all_to_all, bytes, Algorithm::ring,
                             rule(Dim::ep, Purpose::ep_dispatch, ep), ep_calls, charge);
  }
  // Overlapped forward-backward pairs hide the all-to-alls under compute, overlapped TP collectives the GEMMs they
  // feed, a ring's K/V passes the attention: optimistic here (under the whole micro-batch's compute); tier 2 times
  // them op by op. Ulysses' two all-to-alls per layer and pass are exposed; a2a+p2p runs them among its inner group
  // (cp_a2a ranks, CP neighbours) and its ring among the cp / cp_a2a groups that hold one head share.
  const auto hidden    = [&](bool overlapped, double t) { return overlapped ? std::max(0.0, t - s.t_mb) : t; };
  expert_time          = hidden(ex.ep_overlap || dual, expert_time);
  const double tp_time = hidden(s.tp_overlap, collective(tp, sh.tp.n, Pattern::gather, s.tp_bytes, Algorithm::automatic,
                                                         rule(Dim::tp, Purpose::tp_activations, tp),
                                                         4 * s.stage.layers * s.passes, charge));
  double cp_time       = 0;
  if (sh.cp.n > 1) {
    const bool pair     = s.cp_comm == workload::CpComm::a2a_p2p;
    const GroupShape a2 = pair ? shape(s.cp_a2a, sh.cp_stride) : sh.cp;
    const GroupShape rg = pair ? shape(sh.cp.n / s.cp_a2a, sh.cp_stride * s.cp_a2a) : sh.cp;
    if (s.cp_a2a > 1) {
      const Wire w = wire(a2, variant);
      cp_time += collective(w, a2.n, Pattern::all_to_all, s.cp_a2a_bytes, Algorithm::ring,
                            rule(Dim::cp, Purpose::cp_kv, w), s.stage.layers * s.cp_passes, charge);
    }
    if (s.cp_comm != workload::CpComm::a2a && rg.n > 1) {
      const Wire w = wire(rg, variant);
      cp_time += hidden(s.cp_comm != workload::CpComm::allgather,
                        collective(w, rg.n, Pattern::gather, s.cp_bytes, Algorithm::ring,
                                   rule(Dim::cp, Purpose::cp_kv, w), s.stage.layers * (s.cp_passes + 1), charge));
    }
  }
  const double per_mb = s.t_mb + tp_time + cp_time + expert_time;
  // Those charges are per micro-batch: scale them to the step.
  charge.building *= s.m;
  charge.region *= s.m;

  // Pipeline: fill and drain by the schedule formula, each hop of the fill paying a message.
  double message = 0;
  if (pp > 1) {
    const Wire w   = wire(sh.pp, variant);
    const auto* r  = rule(Dim::pp, Purpose::pp_activations, w);
    const double b = r ? s.pp_bytes / r->ratio : s.pp_bytes;
    // A send over the widest hop moves no faster than NCCL's p2p slots allow per round trip (netsim::p2p_window),
    // as the engines send; the pipeline's other hops cross narrower boundaries, at the rate alone. `message` is the
    // mean over the pp - 1 hops.
    const double across =
        std::max(w.latency + b / w.bandwidth, slotted(w.latency, b, netsim::p2p_window(b, 1, 2, spec.nccl)));
    const double cost = r ? r->cost(s.pp_bytes) : 0;
    const int wide    = std::min(pp - 1, wide_hops(sh.pp));
    message           = (wide * (across + cost) + (pp - 1 - wide) * (b / w.bandwidth + cost)) / (pp - 1);
    // Every micro-batch crosses each boundary once per chunk and direction.
    Charge pipe;
    pipe.add(w, s.m * v * b);
    charge.building += pipe.building;
    charge.region += pipe.region;
  }
  // The bubble by the schedule's formula (workload/README.md): interleaved (pp - 1) / v of a micro-batch; ZB-H1
  // (pp - 1)(F + B - W) with B the input gradients; DualPipe (pp/2 - 1)(F&B + B - 3W) per chunk, DualPipeV the
  // same with 2 pp stages of half a stage each; a DualPipe stage runs each micro-batch through one of its two chunks.
  const double extra = per_mb - s.t_mb, w = s.stage.wgrad, b = s.stage.backward;
  double core = 0;
  switch (kind) {
  case workload::ScheduleKind::zb_h1:
    core = s.m * per_mb + (pp - 1) * std::max(0.0, per_mb - 2 * w);
    break;
  case workload::ScheduleKind::dualpipe:
    core = s.m * per_mb / 2 + (pp / 2.0 - 1) * std::max(0.0, (s.t_mb + extra) / 2 + (b - 3 * w) / 2);
    break;
  case workload::ScheduleKind::dualpipev:
    core = s.m * per_mb + (pp - 1) * std::max(0.0, (s.t_mb + extra) / 2 + (b - 3 * w) / 2);
    break;
  default:
    core = (s.m + double(pp - 1) / v) * per_mb;
  }
  core += 2.0 * (pp - 1) * message + s.stage.optimizer;

  // Data parallelism: hidden under compute but for its first unit.
  const double gathers = reshard ? 2 * s.m : 1, reduces = reshard ? s.m : 1;
  double dp_time = 0;
  Charge dp_charge;
  auto add = [&](const GroupShape& g, Pattern pattern, double bytes, double calls, Purpose purpose) {
    const Wire w = wire(g, variant);
    dp_time += collective(w, g.n, pattern, bytes, algo, rule(Dim::dp, purpose, w), calls, dp_charge);
  };
  const double gb = s.gradient_bytes;
  switch (dpm) {
  case workload::DataParallelMode::ddp:
    add(sh.dp, Pattern::all_reduce, gb * s.stage.dense_params, 1, Purpose::grad_reduce);
    add(sh.edp, Pattern::all_reduce, gb * s.stage.expert_params, 1, Purpose::grad_reduce);
    break;
  case workload::DataParallelMode::fsdp:
    add(sh.dp, Pattern::gather, s.stage.dense_gather_bytes, gathers, Purpose::param_gather);
    add(sh.dp, Pattern::gather, gb * s.stage.dense_params, reduces, Purpose::grad_reduce);
    add(sh.edp, Pattern::gather, s.stage.expert_gather_bytes, gathers, Purpose::param_gather);
    add(sh.edp, Pattern::gather, gb * s.stage.expert_params, reduces, Purpose::grad_reduce);
    break;
  case workload::DataParallelMode::hsdp:
    add(sh.dp_shard, Pattern::gather, s.stage.dense_gather_bytes, gathers, Purpose::param_gather);
    add(sh.dp_shard, Pattern::gather, gb * s.stage.dense_params, reduces, Purpose::grad_reduce);
    add(sh.dp_replicate, Pattern::all_reduce, gb * s.stage.dense_params / s.hsdp_shard, reduces, Purpose::grad_reduce);
    add(sh.edp, Pattern::gather, s.stage.expert_gather_bytes, gathers, Purpose::param_gather);
    add(sh.edp, Pattern::gather, gb * s.stage.expert_params, reduces, Purpose::grad_reduce);
    break;
  }
  const double once = dp_time / (reshard ? s.m : 1);
  double step       = core + s.stage.lead_share * once + std::max(0.0, dp_time - core);
  charge.building += dp_charge.building;
  charge.region += dp_charge.region;
  Site& site_facts = site(variant);
  step = std::max({step, charge.building / site_facts.building_link, charge.region / site_facts.region_link});

  // DiLoCo: the outer synchronization of each rank's pseudo-gradient share, amortized over H inner steps.
  if (net.diloco && sh.regions_spanned > 1) {
    const auto& d    = *net.diloco;
    const int r      = sh.regions_spanned;
    const double per = std::max(1, sh.dp.n / sp.cp[at[knob_cp]]);
    double shard     = (s.stage.dense_params + s.stage.expert_params) * gb / per;
    double cost      = 0;
    shard /= d.fragments; // an exchange moves one fragment
    if (d.compression) {
      cost = d.compression->cost(shard);
      shard /= d.compression->ratio;
    } else if (d.quantization) {
      shard /= gb * 8 / d.quantization->bits;
    }
    const double volume = 2.0 * (r - 1) / r * shard;
    const double ranks  = static_cast<double>(spec.base.gpus);
    const double outer  = volume * ranks / r / site_facts.region_link + cost;
    step += d.fragments * std::max(0.0, outer - d.overlap_steps * step) / std::max(1, d.every);
  }
  return step;
}

ScreenRank screen_rank(const IndexedSpace& space, const topology::Topology& topo, const std::string& label)
{
  Screen screen(space, topo);
  std::vector<std::pair<double, std::string>> estimates;
  for (std::uint64_t i = 0; i < space.size(); ++i) {
    const auto at = space.decode(i);
    if (!space.divisible(at) || !space.canonical(at))
      continue;
    std::string reason;
    const double t = screen.estimate(at, reason);
    if (reason.empty())
      estimates.emplace_back(t, space.point(at).label());
  }
  std::sort(estimates.begin(), estimates.end());
  ScreenRank r;
  r.feasible = estimates.size();
  while (r.rank < estimates.size() && estimates[r.rank].second != label)
    ++r.rank;
  return r;
}

Screen::Screen(const IndexedSpace& space, const topology::Topology& topo) : impl_(std::make_unique<Impl>(space, topo))
{
}

Screen::~Screen() = default;

double Screen::estimate(const Indices& at, std::string& reason)
{
  return impl_->estimate(at, reason);
}

} // namespace spansim::optimizer
