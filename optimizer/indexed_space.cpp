// The search space as mixed-radix indices (optimizer/indexed_space.hpp).
#include "optimizer/indexed_space.hpp"

#include "common/error.hpp"
#include "placement/placement.hpp"
#include "topology/topology.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <tuple>
#include <utility>

namespace spansim::optimizer {

using workload::Dim;

namespace {

// A knob of a group: its values in the space and the member of a point it sets.
template <class V>
struct GroupKnob {
  std::vector<V> SearchSpace::*values;
  V Point::*member;
};
template <class V>
constexpr GroupKnob<V> group_knob(std::vector<V> SearchSpace::*values, V Point::*member)
{
  return {values, member};
}

// The network-layer and expert-layer knobs, outermost first: stated once for both the variants and the copies.
constexpr auto kNetworkKnobs = std::tuple{group_knob(&SearchSpace::window, &Point::window),
                                          group_knob(&SearchSpace::qps, &Point::qps),
                                          group_knob(&SearchSpace::compression, &Point::compression),
                                          group_knob(&SearchSpace::diloco, &Point::diloco),
                                          group_knob(&SearchSpace::inter_building, &Point::inter_building),
                                          group_knob(&SearchSpace::inter_region, &Point::inter_region)};
constexpr auto kExpertKnobs  = std::tuple{
    group_knob(&SearchSpace::etp, &Point::etp), group_knob(&SearchSpace::dispatcher, &Point::dispatcher),
    group_knob(&SearchSpace::node_limit, &Point::node_limit), group_knob(&SearchSpace::ep_overlap, &Point::ep_overlap)};

// Each point once per value of one more knob, that knob varying fastest.
template <class V>
void widen(std::vector<Point>& points, const std::vector<V>& values, V Point::*member)
{
  std::vector<Point> out;
  out.reserve(points.size() * values.size());
  for (const Point& p : points)
    for (const auto& v : values) {
      out.push_back(p);
      out.back().*member = v;
    }
  points = std::move(out);
}

// Every combination of the knobs' values, the first knob outermost and the last varying fastest, as points whose
// other knobs are the defaults.
template <class Knobs>
std::vector<Point> variants(const SearchSpace& s, const Knobs& knobs)
{
  std::vector<Point> out{Point{}};
  std::apply([&](const auto&... k) { (widen(out, s.*(k.values), k.member), ...); }, knobs);
  return out;
}

// Copies the knobs' members of `from` into `to`.
template <class Knobs>
void copy_knobs(const Knobs& knobs, const Point& from, Point& to)
{
  std::apply([&](const auto&... k) { ((to.*(k.member) = from.*(k.member)), ...); }, knobs);
}

} // namespace

std::vector<Point> network_variants(const SearchSpace& s)
{
  return variants(s, kNetworkKnobs);
}

std::vector<Point> expert_variants(const SearchSpace& s)
{
  return variants(s, kExpertKnobs);
}

void copy_expert(const Point& from, Point& to)
{
  copy_knobs(kExpertKnobs, from, to);
}

void copy_network(const Point& from, Point& to)
{
  copy_knobs(kNetworkKnobs, from, to);
}

int node_cp_a2a(int cp, int tp, int node_gpus, int heads)
{
  for (int a = cp / 2; a >= 2; --a)
    if (cp % a == 0 && std::int64_t(tp) * a <= node_gpus && heads % a == 0)
      return a;
  return 0;
}

void settle_model_comm(const OptimizeSpec& spec, Point& p)
{
  p.tp_overlap = p.tp > 1 && p.tp_overlap;
  if (p.cp == 1)
    p.cp_comm = workload::CpComm::allgather;
  p.cp_a2a = p.cp_comm == workload::CpComm::a2a_p2p
                 ? node_cp_a2a(p.cp, p.tp, spec.topology.node.gpus, spec.base.model.heads / p.tp)
                 : 0;
}

std::vector<Dim> effective_order(const std::vector<Dim>& order, int tp, int cp, int pp, int dp)
{
  std::vector<Dim> out;
  for (Dim d : order)
    if ((d == Dim::tp ? tp : d == Dim::cp ? cp : d == Dim::pp ? pp : dp) > 1)
      out.push_back(d);
  return out;
}

std::vector<Dim> effective_order(const Point& p)
{
  return effective_order(p.order, p.tp, p.cp, p.pp, p.dp);
}

IndexedSpace::IndexedSpace(const OptimizeSpec& spec)
    : spec_(spec), networks_(network_variants(spec.space)), experts_(expert_variants(spec.space))
{
  const auto& s               = spec.space;
  const std::size_t lengths[] = {s.tp.size(),
                                 s.cp.size(),
                                 s.pp.size(),
                                 s.ep.size(),
                                 s.data_parallel.size(),
                                 s.reshard_after_forward.size(),
                                 s.micro_batch.size(),
                                 s.schedule.size(),
                                 s.virtual_stages.size(),
                                 s.order.size(),
                                 s.recompute.size(),
                                 s.tp_overlap.size(),
                                 s.cp_comm.size(),
                                 s.dp_algorithm.size(),
                                 experts_.size(),
                                 s.flows_per_pair.size(),
                                 networks_.size()};
  static_assert(std::size(lengths) == kKnobCount, "a length per knob, in the Knob enum's order");
  for (int k = 0; k < kKnobCount; ++k)
    radix_[k] = static_cast<std::uint32_t>(lengths[k]);
  for (auto r : radix_)
    size_ *= r;
}

Indices IndexedSpace::decode(std::uint64_t i) const
{
  Indices at{};
  for (int k = kKnobCount - 1; k >= 0; --k) {
    at[k] = static_cast<std::uint32_t>(i % radix_[k]);
    i /= radix_[k];
  }
  return at;
}

bool IndexedSpace::divisible(const Indices& at) const
{
  const auto& s                  = spec_.space;
  const std::int64_t model_ranks = std::int64_t(s.tp[at[knob_tp]]) * s.cp[at[knob_cp]] * s.pp[at[knob_pp]];
  return spec_.base.gpus % model_ranks == 0;
}

bool IndexedSpace::canonical(const Indices& at) const
{
  const auto& s = spec_.space;
  if (s.schedule[at[knob_schedule]] != workload::ScheduleKind::interleaved_1f1b && at[knob_virtual_stages] != 0)
    return false;
  if (s.data_parallel[at[knob_data_parallel]] == workload::DataParallelMode::ddp && at[knob_reshard] != 0)
    return false;
  const int tp = s.tp[at[knob_tp]], cp = s.cp[at[knob_cp]], pp = s.pp[at[knob_pp]];
  if ((tp == 1 && at[knob_tp_overlap] != 0) || (cp == 1 && at[knob_cp_comm] != 0))
    return false;
  // Expert knobs that do not apply: a node limit without DeepEP's deduplication, expert TP stated as the point's tp.
  const Point& ex = experts_[at[knob_expert]];
  // A node limit only changes DeepEP's deduplicated bytes: the other dispatchers take the list's first value.
  if (ex.dispatcher != workload::Dispatcher::deepep && ex.node_limit != s.node_limit.front())
    return false;
  const auto kind = s.schedule[at[knob_schedule]];
  if (ex.ep_overlap && kind != workload::ScheduleKind::one_f_one_b && kind != workload::ScheduleKind::interleaved_1f1b)
    return false;
  if (ex.etp == tp && std::find(s.etp.begin(), s.etp.end(), 0) != s.etp.end())
    return false;
  const int dp   = static_cast<int>(spec_.base.gpus / (std::int64_t(tp) * cp * pp));
  const auto own = effective_order(s.order[at[knob_order]], tp, cp, pp, dp);
  for (std::uint32_t j = 0; j < at[knob_order]; ++j)
    if (effective_order(s.order[j], tp, cp, pp, dp) == own)
      return false;
  // Limits that act alike (every one at or above the nodes an EP group spans acts as none) are one point: the first.
  if (ex.dispatcher == workload::Dispatcher::deepep && ex.node_limit > 0) {
    const int acts = node_limit(at, ex.node_limit);
    for (int v : s.node_limit)
      if (node_limit(at, v) == acts)
        return v == ex.node_limit;
  }
  return true;
}

int IndexedSpace::node_limit(const Indices& at, int limit) const
{
  if (experts_[at[knob_expert]].dispatcher != workload::Dispatcher::deepep || limit <= 0)
    return 0;
  const int nodes = ep_nodes(at);
  return nodes > 0 && limit >= nodes ? 0 : limit;
}

int IndexedSpace::node_limit(const Point& p) const
{
  if (p.dispatcher != workload::Dispatcher::deepep || p.node_limit <= 0)
    return 0;
  const int nodes = ep_nodes(p.tp, p.cp, p.pp, p.ep, p.etp > 0 ? p.etp : p.tp, p.order);
  return nodes > 0 && p.node_limit >= nodes ? 0 : p.node_limit;
}

int IndexedSpace::ep_nodes(const Indices& at) const
{
  const auto& s = spec_.space;
  const int tp  = s.tp[at[knob_tp]];
  return ep_nodes(tp, s.cp[at[knob_cp]], s.pp[at[knob_pp]], s.ep[at[knob_ep]],
                  experts_[at[knob_expert]].etp > 0 ? experts_[at[knob_expert]].etp : tp, s.order[at[knob_order]]);
}

int IndexedSpace::ep_nodes(int tp, int cp, int pp, int ep, int etp, const std::vector<workload::Dim>& order) const
{
  const std::int64_t model_ranks = std::int64_t(tp) * cp * pp;
  const std::int64_t stage_ranks = spec_.base.gpus / pp;
  if (spec_.base.gpus % model_ranks != 0 || stage_ranks % (std::int64_t(etp) * ep) != 0)
    return 0;
  if (ep == 1)
    return 1;
  const auto key = std::tuple{tp, cp, pp, ep, etp, order};
  if (auto it = ep_nodes_.find(key); it != ep_nodes_.end())
    return it->second;
  const auto& node_of_rank = rank_nodes();
  int most                 = 0;
  if (static_cast<std::int64_t>(node_of_rank.size()) == spec_.base.gpus) {
    workload::ParallelismSpec par;
    par.tp  = tp;
    par.cp  = cp;
    par.pp  = pp;
    par.dp  = static_cast<int>(spec_.base.gpus / model_ranks);
    par.ep  = ep;
    par.etp = etp;
    const placement::RankLayout layout(par, order);
    // Each rank's EP group (its key, the stage included) with its node; a group's nodes are then its distinct pairs.
    std::vector<std::pair<std::array<int, 4>, int>> members;
    members.reserve(node_of_rank.size());
    for (int r = 0; r < layout.ranks(); ++r)
      members.emplace_back(layout.group_key(layout.coordinates(r), workload::Axis::ep), node_of_rank[r]);
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    for (std::size_t i = 0, run = 0; i < members.size(); ++i) {
      run  = i > 0 && members[i].first == members[i - 1].first ? run + 1 : 1;
      most = std::max(most, static_cast<int>(run));
    }
  }
  ep_nodes_[key] = most;
  return most;
}

const std::vector<int>& IndexedSpace::rank_nodes() const
{
  if (nodes_known_)
    return node_of_rank_;
  nodes_known_ = true;
  // Rank i runs on the i-th GPU of the job: each building's first GPUs, as many in each (placement::Placement).
  const topology::Topology topo(spec_.topology);
  std::vector<int> buildings;
  for (const auto& name : spec_.buildings)
    for (int b = 0; b < topo.building_count(); ++b)
      if (topo.building_name(b) == name)
        buildings.push_back(b);
  if (spec_.buildings.empty())
    for (int b = 0; b < topo.buildings_needed(spec_.base.gpus, spec_.gpus_per_node) && b < topo.building_count(); ++b)
      buildings.push_back(b);
  const auto count = static_cast<std::int64_t>(buildings.size());
  if (count == 0 || spec_.base.gpus % count != 0 ||
      topo.buildings_needed(spec_.base.gpus, spec_.gpus_per_node) > topo.building_count())
    return node_of_rank_; // the search refuses such a job; nothing is known
  const std::int64_t each = spec_.base.gpus / count;
  for (int b : buildings) {
    const auto gpus = topo.building_gpus(b, spec_.gpus_per_node);
    if (static_cast<std::int64_t>(gpus.size()) < each) {
      node_of_rank_.clear();
      break;
    }
    for (std::int64_t k = 0; k < each; ++k)
      node_of_rank_.push_back(topo.locate(gpus[static_cast<std::size_t>(k)]).node);
  }
  return node_of_rank_;
}

Point IndexedSpace::point(const Indices& at) const
{
  const auto& s   = spec_.space;
  Point p         = networks_[at[knob_network]];
  p.tp            = s.tp[at[knob_tp]];
  p.cp            = s.cp[at[knob_cp]];
  p.pp            = s.pp[at[knob_pp]];
  p.dp            = static_cast<int>(spec_.base.gpus / (std::int64_t(p.tp) * p.cp * p.pp));
  p.ep            = s.ep[at[knob_ep]];
  p.data_parallel = s.data_parallel[at[knob_data_parallel]];
  p.reshard_after_forward =
      p.data_parallel != workload::DataParallelMode::ddp && s.reshard_after_forward[at[knob_reshard]];
  p.micro_batch = s.micro_batch[at[knob_micro_batch]];
  p.schedule    = s.schedule[at[knob_schedule]];
  p.virtual_stages =
      p.schedule == workload::ScheduleKind::interleaved_1f1b ? s.virtual_stages[at[knob_virtual_stages]] : 1;
  p.order      = s.order[at[knob_order]];
  p.recompute  = s.recompute[at[knob_recompute]];
  p.tp_overlap = s.tp_overlap[at[knob_tp_overlap]];
  p.cp_comm    = s.cp_comm[at[knob_cp_comm]];
  settle_model_comm(spec_, p);
  p.dp_algorithm = s.dp_algorithm[at[knob_dp_algorithm]];
  copy_expert(experts_[at[knob_expert]], p);
  if (p.etp == p.tp)
    p.etp = 0;
  p.node_limit     = node_limit(at, p.node_limit);
  p.flows_per_pair = s.flows_per_pair[at[knob_flows_per_pair]];
  return p;
}

} // namespace spansim::optimizer
