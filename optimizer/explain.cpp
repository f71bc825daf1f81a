// Why the winner won (optimizer/explain.hpp): the production default, single changes and the capacity front.
#include "optimizer/explain.hpp"

#include "common/error.hpp"
#include "common/units.hpp"
#include "optimizer/indexed_space.hpp"

#include <algorithm>
#include <limits>
#include <optional>

namespace spansim::optimizer {

using workload::Dim;

namespace {

/// @brief One knob of the baseline moved to another value of the space.
struct Change {
  std::string description; ///< e.g. "schedule = interleaved-1f1b (v4)"
  Point point;
  SearchDimension dimension = SearchDimension::placement;
};

std::vector<Change> single_changes(const OptimizeSpec& spec, const Point& b)
{
  const auto& s = spec.space;
  std::vector<Change> changes;
  using enum SearchDimension;
  auto degree = [&](const char* knob, int v, int Point::*field) {
    Point p                  = b;
    const std::int64_t total = std::int64_t(b.tp) * b.cp * b.pp * b.dp;
    p.*field                 = v;
    const std::int64_t model = std::int64_t(p.tp) * p.cp * p.pp;
    if (total % model != 0)
      return; // the GPU budget does not divide
    p.dp = static_cast<int>(total / model);
    settle_model_comm(spec, p);
    changes.push_back({std::string(knob) + " = " + std::to_string(v), p, placement});
  };
  for (int v : s.tp)
    if (v != b.tp)
      degree("tp", v, &Point::tp);
  for (int v : s.pp)
    if (v != b.pp)
      degree("pp", v, &Point::pp);
  for (int v : s.cp)
    if (v != b.cp)
      degree("cp", v, &Point::cp);
  auto add = [&](SearchDimension dim, const std::string& description, auto edit) {
    Point p = b;
    edit(p);
    changes.push_back({description, p, dim});
  };
  // A knob whose change is its value alone: each other value of the space, named by `text`.
  auto each = [&](SearchDimension dim, const char* knob, const auto& values, auto field, auto text) {
    for (const auto& v : values)
      if (v != b.*field)
        add(dim, std::string(knob) + " = " + text(v), [&](Point& p) { p.*field = v; });
  };
  const auto number = [](auto v) { return std::to_string(v); };
  const auto named  = [](auto v) { return std::string(name_of(v)); };
  each(placement, "data_parallel", s.data_parallel, &Point::data_parallel, named);
  each(scheduling, "micro_batch", s.micro_batch, &Point::micro_batch, number);
  for (auto v : s.schedule)
    for (int vs : s.virtual_stages) {
      const bool interleaved = v == workload::ScheduleKind::interleaved_1f1b;
      if (v != b.schedule && (interleaved || vs == s.virtual_stages.front()))
        add(scheduling, "schedule = " + std::string(name_of(v)) + (interleaved ? " (v" + std::to_string(vs) + ")" : ""),
            [&](Point& p) {
              p.schedule       = v;
              p.virtual_stages = interleaved ? vs : 1;
            });
    }
  for (const auto& v : s.order) {
    Point p = b;
    p.order = v;
    if (effective_order(p) != effective_order(b)) {
      std::string text;
      for (Dim d : v)
        text += (text.empty() ? "" : ",") + std::string(name_of(d));
      changes.push_back({"order = [" + text + "]", p, placement});
    }
  }
  each(scheduling, "recompute", s.recompute, &Point::recompute, named);
  // The model-parallel overlaps apply at tp (cp) 2 or more only.
  if (b.tp > 1)
    each(scheduling, "tp_overlap", s.tp_overlap, &Point::tp_overlap,
         [](bool v) { return std::string(v ? "true" : "false"); });
  if (b.cp > 1)
    for (auto v : s.cp_comm)
      if (v != b.cp_comm)
        add(scheduling, "cp_comm = " + named(v), [&](Point& p) {
          p.cp_comm = v;
          settle_model_comm(spec, p);
        });
  each(network, "dp_algorithm", s.dp_algorithm, &Point::dp_algorithm, named);
  for (int v : s.etp)
    if (v != b.etp && !(v == b.tp && b.etp == 0))
      add(placement, "etp = " + (v > 0 ? std::to_string(v) : std::string("tp")), [&](Point& p) { p.etp = v; });
  // A node limit at or above the nodes an EP group spans does nothing (the search merges such points): it is no
  // limit here too, so that a change is named by what it changes.
  const IndexedSpace space(spec);
  for (auto v : s.dispatcher)
    if (v != b.dispatcher)
      add(network, "dispatcher = " + std::string(name_of(v)), [&](Point& p) {
        p.dispatcher = v;
        p.node_limit = v == workload::Dispatcher::deepep ? s.node_limit.front() : 0;
        p.node_limit = space.node_limit(p);
      });
  for (int v : s.node_limit) {
    Point limited      = b;
    limited.dispatcher = workload::Dispatcher::deepep;
    limited.node_limit = v;
    if (v != b.node_limit && v > 0 && space.node_limit(limited) == v &&
        !(b.dispatcher != workload::Dispatcher::deepep && v == s.node_limit.front()))
      add(network, "dispatcher = deepep, at most " + std::to_string(v) + " nodes per token", [&](Point& p) {
        p.dispatcher = workload::Dispatcher::deepep;
        p.node_limit = v;
      });
  }
  each(scheduling, "ep_overlap", s.ep_overlap, &Point::ep_overlap,
       [](bool v) { return std::string(v ? "true" : "false"); });
  each(network, "flows_per_pair", s.flows_per_pair, &Point::flows_per_pair, number);
  each(network, "window", s.window, &Point::window,
       [](double v) { return v > 0 ? units::format_size(v) : std::string("none"); });
  each(network, "qps", s.qps, &Point::qps, number);
  each(network, "compression", s.compression, &Point::compression,
       [](const netsim::CompressionSpec& v) { return v.label(); });
  each(network, "diloco", s.diloco, &Point::diloco,
       [](const std::optional<sync::DilocoSpec>& v) { return v ? v->label() : std::string("none"); });
  // Capacity is bought, not configured: a change to it explains what more (or less) of it buys.
  const auto capacity = [](double v) { return v > 0 ? units::format_bandwidth(v) : std::string("as built"); };
  each(network, "inter_building", s.inter_building, &Point::inter_building, capacity);
  each(network, "inter_region", s.inter_region, &Point::inter_region, capacity);
  return changes;
}

// The network-layer knobs of the production default: as built (no compression, every step synchronous, the
// topology's queue pairs, window and capacity) where the space holds that value, else the first value listed.
Point production_network(const OptimizeSpec& spec)
{
  const auto& s = spec.space;
  auto pick     = [](const auto& values, const auto& preferred) {
    return std::find(values.begin(), values.end(), preferred) != values.end() ? preferred : values.front();
  };
  Point p;
  p.window         = pick(s.window, spec.topology.window);
  p.qps            = pick(s.qps, spec.topology.multipath.qps);
  p.compression    = pick(s.compression, netsim::CompressionSpec{});
  p.diloco         = pick(s.diloco, std::optional<sync::DilocoSpec>{});
  p.inter_building = pick(s.inter_building, 0.0);
  p.inter_region   = pick(s.inter_region, 0.0);
  // A MoE job's production default: Megatron's alltoall dispatcher without overlap, expert TP as TP.
  p.etp        = pick(s.etp, 0);
  p.dispatcher = pick(s.dispatcher, workload::Dispatcher::alltoall);
  p.node_limit = pick(s.node_limit, 0);
  p.ep_overlap = pick(s.ep_overlap, false);
  // Without TP overlap, K/V all-gathered (Llama 3's), where the space holds them.
  p.tp_overlap = pick(s.tp_overlap, false);
  p.cp_comm    = pick(s.cp_comm, workload::CpComm::allgather);
  if (p.dispatcher != workload::Dispatcher::deepep)
    p.node_limit = 0;
  return p;
}

// Orders the capacity choices by cost, marks the Pareto front (faster than every cheaper choice) and answers the
// spec's two questions.
void capacity_front(const OptimizeSpec& spec, OptimizeResult& result)
{
  auto& c = result.capacity;
  std::stable_sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.cost < b.cost || (a.cost == b.cost && a.best.effective_step() < b.best.effective_step());
  });
  double fastest_so_far = std::numeric_limits<double>::infinity(), fastest = fastest_so_far;
  for (auto& p : c) {
    p.on_front     = p.best.effective_step() < fastest_so_far;
    fastest_so_far = std::min(fastest_so_far, p.best.effective_step());
    fastest        = std::min(fastest, p.best.effective_step());
  }
  for (std::size_t k = 0; k < c.size(); ++k) {
    if (!result.cheapest_within && c[k].best.effective_step() <= fastest * (1 + spec.capacity.within))
      result.cheapest_within = k;
    if (spec.capacity.budget && c[k].cost <= *spec.capacity.budget &&
        (!result.best_in_budget || c[k].best.effective_step() < c[*result.best_in_budget].best.effective_step()))
      result.best_in_budget = k;
  }
}

} // namespace

std::vector<Evaluation> Explanation::to_refine() const
{
  std::vector<Evaluation> out{baseline};
  for (const auto& [dim, list] : per_dimension)
    for (const auto& change : list)
      out.push_back(change.second);
  out.insert(out.end(), capacity_runs.begin(), capacity_runs.end());
  return out;
}

Explanation plan_explanation(const OptimizeSpec& spec, const topology::Topology& topo,
                             const std::vector<Evaluation>& scored, const RunWork& run)
{
  Explanation x;
  // The production default: order [tp, cp, pp, dp] (DP across the boundary), 1F1B, the network as built (no
  // compression, every step synchronous); the best such point scored.
  const std::vector<Dim> production(workload::kProductionOrder.begin(), workload::kProductionOrder.end());
  const Point network = production_network(spec);
  auto is_default     = [&](const Point& p) {
    Point default_order = p;
    default_order.order = production;
    Point own_network   = p;
    copy_network(network, own_network);
    copy_expert(network, own_network);
    if (own_network.etp == own_network.tp)
      own_network.etp = 0;
    Point own_comm      = p;
    own_comm.tp_overlap = network.tp_overlap;
    own_comm.cp_comm    = network.cp_comm;
    settle_model_comm(spec, own_comm);
    return effective_order(p) == effective_order(default_order) && p.schedule == workload::ScheduleKind::one_f_one_b &&
           p.dp_algorithm == netsim::Algorithm::automatic && own_network == p && own_comm == p;
  };
  const auto found =
      std::find_if(scored.begin(), scored.end(), [&](const Evaluation& e) { return is_default(e.point); });
  if (found != scored.end()) {
    x.baseline = *found;
  } else {
    Point p          = scored.front().point;
    p.order          = production;
    p.schedule       = workload::ScheduleKind::one_f_one_b;
    p.virtual_stages = 1;
    p.dp_algorithm   = netsim::Algorithm::automatic;
    p.tp_overlap     = network.tp_overlap;
    p.cp_comm        = network.cp_comm;
    settle_model_comm(spec, p);
    copy_network(network, p);
    copy_expert(network, p);
    auto o = score_point(spec, topo, p);
    if (!o.reason.empty()) {
      // DP across the boundary may be impossible (a site of two GPU generations): 1F1B on the best point's order.
      p.order = scored.front().point.order;
      o       = score_point(spec, topo, p);
    }
    if (!o.reason.empty())
      throw UsageError("the production default (1F1B, order [tp, cp, pp, dp] or the best point's) of the best "
                       "point is infeasible: " +
                       o.reason);
    x.baseline = Evaluation{p, o.lower_bound, o.score, std::nullopt, o.metrics, std::nullopt, {}};
  }

  // The best single change from it: one knob at a time, over the values of the space. Per dimension the two best
  // by score are re-simulated (the collapsed score misses contention on a saturated long haul), and the best
  // single change overall is the best of those.
  const auto changes = single_changes(spec, x.baseline.point);
  std::vector<Point> change_points;
  for (const auto& c : changes)
    change_points.push_back(c.point);
  const auto change_scores = run(Work::score, change_points);
  for (std::size_t i = 0; i < changes.size(); ++i) {
    const auto o = decode(change_scores[i]);
    if (!o.reason.empty())
      continue;
    x.per_dimension[changes[i].dimension].push_back(
        {changes[i].description,
         Evaluation{changes[i].point, o.lower_bound, o.score, std::nullopt, o.metrics, std::nullopt, {}}});
  }
  constexpr std::size_t kRefinedPerDimension = 2;
  for (auto& [dim, list] : x.per_dimension) {
    std::stable_sort(list.begin(), list.end(),
                     [](const auto& a, const auto& b) { return a.second.score < b.second.score; });
    if (list.size() > kRefinedPerDimension)
      list.resize(kRefinedPerDimension);
  }

  // The capacity front: every structure (a point but for its capacity) that scored best or second best at some
  // capacity, evaluated at every capacity, so that each capacity's best is chosen at the refine fidelity among the
  // same candidates (more capacity can then never look slower for want of a candidate).
  if (spec.space.inter_building.size() <= 1 && spec.space.inter_region.size() <= 1)
    return x;
  std::vector<Point> structures;
  auto structure_of = [](Point p) {
    p.inter_building = 0;
    p.inter_region   = 0;
    return p;
  };
  for (double ib : spec.space.inter_building)
    for (double ir : spec.space.inter_region) {
      std::vector<const Evaluation*> at;
      for (const auto& e : scored)
        if (e.point.inter_building == ib && e.point.inter_region == ir)
          at.push_back(&e);
      std::stable_sort(at.begin(), at.end(), [](auto* a, auto* b) { return a->score < b->score; });
      for (std::size_t k = 0; k < std::min<std::size_t>(2, at.size()); ++k) {
        const Point s = structure_of(at[k]->point);
        if (std::find(structures.begin(), structures.end(), s) == structures.end())
          structures.push_back(s);
      }
    }
  if (structures.empty())
    structures.push_back(structure_of(scored.front().point));
  for (double ib : spec.space.inter_building)
    for (double ir : spec.space.inter_region) {
      ++x.capacity_choices;
      for (const auto& s : structures) {
        Evaluation e;
        e.point                = s;
        e.point.inter_building = ib;
        e.point.inter_region   = ir;
        x.capacity_runs.push_back(e);
      }
    }
  return x;
}

void explain(const OptimizeSpec& spec, const Explanation& plan, const std::vector<Evaluation>& refined,
             std::size_t ranked, OptimizeResult& result)
{
  auto faster = [&](const Evaluation& a, const Evaluation& b) {
    return spec.time_to_train ? a.effective_step() < b.effective_step() : *a.refined < *b.refined;
  };
  result.baseline  = refined[ranked];
  std::size_t next = ranked + 1;
  for (const auto& [dim, list] : plan.per_dimension) {
    std::optional<OptimizeResult::DimensionChange> best;
    for (const auto& change : list) {
      const auto& e = refined[next++];
      if (!best || faster(e, best->evaluation))
        best = OptimizeResult::DimensionChange{dim, change.first, e};
    }
    result.by_dimension.push_back(*best);
    if (result.single_change.empty() || faster(best->evaluation, result.best_single_change)) {
      result.single_change      = best->change;
      result.best_single_change = best->evaluation;
    }
  }
  for (std::size_t c = 0; c < plan.capacity_choices; ++c) {
    const std::size_t per = plan.capacity_runs.size() / plan.capacity_choices;
    std::optional<Evaluation> best;
    for (std::size_t k = 0; k < per; ++k) {
      const auto& e = refined[next++];
      if (!best || faster(e, *best))
        best = e;
    }
    for (std::size_t k = 0; k < ranked; ++k) // the best K re-simulated at this capacity count too
      if (refined[k].point.inter_building == best->point.inter_building &&
          refined[k].point.inter_region == best->point.inter_region && faster(refined[k], *best))
        best = refined[k];
    OptimizeResult::CapacityPoint point;
    point.inter_building = best->point.inter_building;
    point.inter_region   = best->point.inter_region;
    const topology::Topology site(topology_of(spec, best->point));
    point.cost = capacity_cost(spec, site);
    point.best = *best;
    result.capacity.push_back(point);
  }
  capacity_front(spec, result);
}

} // namespace spansim::optimizer
