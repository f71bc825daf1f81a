// The search tiers: enumerate or screen the space, bound and score the feasible points (tier 2), re-simulate the
// best with the points that explain them at the refine fidelity (tier 3). Points are evaluated in worker processes
// here or on a farm (a Slurm job array); the ranking is the same either way.
#include "common/error.hpp"
#include "common/process.hpp"
#include "optimizer/explain.hpp"
#include "optimizer/screen.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <set>

namespace spansim::optimizer {

namespace {

/// @brief Fewest points per scoring batch: the bound skips points between batches.
constexpr int kScoreBatch = 8;
/// @brief The pruning reason of points whose evaluation failed (OptimizeResult::failed says why).
constexpr const char* kFailed = "failed";

std::vector<Point> enumerate(const OptimizeSpec& spec, std::map<std::string, std::size_t>& pruned)
{
  const IndexedSpace space(spec);
  const auto& s = spec.space;
  std::vector<Point> points;
  std::set<std::string> seen;
  for (std::uint64_t i = 0; i < space.size(); ++i) {
    const Indices at = space.decode(i);
    const auto sched = s.schedule[at[knob_schedule]];
    if (space.experts()[at[knob_expert]].ep_overlap && sched != workload::ScheduleKind::one_f_one_b &&
        sched != workload::ScheduleKind::interleaved_1f1b)
      continue; // DualPipe overlaps its pairs anyway; the others have none
    if (!space.divisible(at)) {
      pruned["gpus not divisible by tp x cp x pp"]++;
      continue;
    }
    // Knobs that do not apply collapse onto one point.
    const Point p = space.point(at);
    Point key     = p;
    key.order     = effective_order(p);
    if (seen.insert(key.label()).second)
      points.push_back(p);
  }
  return points;
}

// Tier 1: every combination of the space screened in closed form, in worker processes over blocks of indices; the
// best points (by estimate, then index: deterministic) are kept for tier 2, in that order.
std::vector<Point> screen_space(const OptimizeSpec& spec, const topology::Topology& topo, int workers,
                                OptimizeResult& result, const Progress& progress)
{
  const auto started = std::chrono::steady_clock::now();
  const IndexedSpace space(spec);
  Screen screen(space, topo);
  result.screened                = space.size();
  constexpr std::uint64_t kBlock = 8192;
  const auto blocks              = static_cast<std::size_t>((space.size() + kBlock - 1) / kBlock);
  const std::size_t cap          = spec.screen.keep_max;
  const std::string phase        = "screening (closed form)";
  // A block's record: points, indivisible, feasible, reasons (name, count), then its best (index, estimate).
  auto screen_block = [&](std::size_t block) {
    const std::uint64_t first = block * kBlock, last = std::min(space.size(), first + kBlock);
    std::map<std::string, std::size_t> reasons;
    std::vector<std::pair<double, std::uint64_t>> best;
    double points = 0, indivisible = 0, feasible = 0;
    std::string reason;
    for (std::uint64_t i = first; i < last; ++i) {
      const auto at = space.decode(i);
      if (!space.divisible(at)) {
        ++indivisible;
        continue;
      }
      if (!space.canonical(at))
        continue;
      ++points;
      reason.clear();
      const double t = screen.estimate(at, reason);
      if (!reason.empty()) {
        reasons[reason]++;
        continue;
      }
      ++feasible;
      best.emplace_back(t, i);
    }
    const std::size_t kept = std::min(cap, best.size());
    std::partial_sort(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(kept), best.end());
    Bytes b;
    b.put(points);
    b.put(indivisible);
    b.put(feasible);
    b.put(static_cast<double>(reasons.size()));
    for (const auto& [name, n] : reasons) {
      b.put(name);
      b.put(static_cast<double>(n));
    }
    b.put(static_cast<double>(kept));
    for (std::size_t k = 0; k < kept; ++k) {
      b.put(static_cast<double>(best[k].second));
      b.put(best[k].first);
    }
    return b.take();
  };
  double best_so_far = 0;
  auto on_done       = [&](std::size_t done, const std::string& record) {
    if (!progress)
      return;
    Reader r(record);
    for (int k = 0; k < 3; ++k)
      r.number();
    const auto reasons = static_cast<std::size_t>(r.number());
    for (std::size_t k = 0; k < reasons; ++k) {
      r.text();
      r.number();
    }
    if (r.number() > 0) {
      r.number();
      const double t = r.number();
      best_so_far    = best_so_far == 0 ? t : std::min(best_so_far, t);
    }
    progress(phase, std::min<std::uint64_t>(space.size(), done * kBlock), space.size(), best_so_far);
  };
  if (progress)
    progress(phase, 0, space.size(), 0);
  const auto records = process::parallel_map(blocks, workers, screen_block, on_done);
  std::vector<std::pair<double, std::uint64_t>> best;
  std::size_t points = 0, feasible = 0;
  for (const auto& record : records) {
    Reader r(record);
    points += static_cast<std::size_t>(r.number());
    const auto indivisible = static_cast<std::size_t>(r.number());
    points += indivisible; // counted among the points, as the plain enumeration does
    if (indivisible > 0)
      result.pruned["gpus not divisible by tp x cp x pp"] += indivisible;
    feasible += static_cast<std::size_t>(r.number());
    const auto reasons = static_cast<std::size_t>(r.number());
    for (std::size_t k = 0; k < reasons; ++k) {
      auto name = r.text();
      result.pruned[name] += static_cast<std::size_t>(r.number());
    }
    const auto kept = static_cast<std::size_t>(r.number());
    for (std::size_t k = 0; k < kept; ++k) {
      const auto index = static_cast<std::uint64_t>(r.number());
      best.emplace_back(r.number(), index);
    }
  }
  const auto keep        = std::clamp<std::size_t>(static_cast<std::size_t>(std::ceil(spec.screen.keep * feasible)),
                                            std::min(spec.screen.keep_min, feasible), spec.screen.keep_max);
  const std::size_t kept = std::min(keep, best.size());
  std::partial_sort(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(kept), best.end());
  std::vector<Point> out;
  for (std::size_t k = 0; k < kept; ++k)
    out.push_back(space.point(space.decode(best[k].second)));
  result.screen_kept    = kept;
  result.screen_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  result.points         = points;
  result.feasible       = feasible;
  return out;
}

double best_score(const std::vector<Evaluation>& scored)
{
  double best = 0;
  for (const auto& e : scored)
    if (best == 0 || e.score < best)
      best = e.score;
  return best;
}

} // namespace

OptimizeResult optimize(const OptimizeSpec& spec, const Progress& progress, const Farm& farm)
{
  const auto started = std::chrono::steady_clock::now();
  topology::Topology topo(spec.topology);
  const int workers     = spec.workers > 0 ? spec.workers : process::available_cores();
  const auto in_workers = worker_options(spec, workers);
  const RunWork run     = [&](Work work, const std::vector<Point>& points) {
    if (farm)
      return farm(work, points);
    return process::parallel_map(
            points.size(), workers, [&](std::size_t i) { return evaluate_point(spec, topo, work, points[i]); }, {},
            in_workers);
  };
  OptimizeResult result;
  result.worker_memory = in_workers.memory_limit;
  const bool tiered    = IndexedSpace(spec).size() > spec.screen.above;
  auto points          = tiered ? screen_space(spec, topo, workers, result, progress) : enumerate(spec, result.pruned);
  if (!tiered) {
    result.points = points.size();
    for (const auto& [reason, n] : result.pruned)
      result.points += n;
  }

  // A point infeasible or failed in `phase` is counted among the pruned (a failed one also listed with why); false:
  // it ran.
  auto dropped = [&](const Outcome& o, const Point& p, const char* phase) {
    if (!o.failure.empty())
      result.failed.push_back({p.label(), phase, o.failure});
    if (o.reason.empty() && o.failure.empty())
      return false;
    result.pruned[o.failure.empty() ? o.reason : kFailed]++;
    return true;
  };

  // Bounds first (cheap, here), then scores in batches in order of bound, skipping what cannot enter the best K.
  auto bounds = process::parallel_map(
      points.size(), workers, [&](std::size_t i) { return encode(bound_point(spec, topo, points[i])); }, {},
      in_workers);
  std::vector<Evaluation> feasible;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto o = decode(bounds[i]);
    if (dropped(o, points[i], "bound")) {
      if (tiered)
        result.feasible--;
      continue;
    }
    Evaluation e;
    e.point       = points[i];
    e.lower_bound = o.lower_bound;
    feasible.push_back(e);
  }
  if (!tiered)
    result.feasible = feasible.size();
  std::stable_sort(feasible.begin(), feasible.end(),
                   [](const Evaluation& a, const Evaluation& b) { return a.lower_bound < b.lower_bound; });
  // A farm scores every feasible point at once (one job array, not one per batch); the batches then read its
  // records, so that the points scored, skipped and ranked are the local run's.
  std::vector<std::string> farmed;
  if (farm) {
    std::vector<Point> all;
    for (const auto& e : feasible)
      all.push_back(e.point);
    farmed = farm(Work::score, all);
  }
  std::vector<Evaluation> scored;
  // Independent of the worker count: the points skipped by bound are the same on every machine.
  const std::size_t batch = static_cast<std::size_t>(std::max(kScoreBatch, spec.top_k));
  if (progress)
    progress("scoring (analytical)", 0, feasible.size(), 0); // the phase's rate counts from here
  for (std::size_t start = 0; start < feasible.size(); start += batch) {
    double kth = std::numeric_limits<double>::infinity();
    if (static_cast<int>(scored.size()) >= spec.top_k) {
      std::vector<double> scores;
      for (const auto& e : scored)
        scores.push_back(e.score);
      std::nth_element(scores.begin(), scores.begin() + spec.top_k - 1, scores.end());
      kth = scores[spec.top_k - 1];
    }
    std::vector<std::size_t> todo;
    for (std::size_t i = start; i < std::min(feasible.size(), start + batch); ++i)
      if (feasible[i].lower_bound < kth)
        todo.push_back(i);
      else
        result.bound_pruned++;
    std::vector<std::string> out;
    if (farm) {
      for (std::size_t i : todo)
        out.push_back(farmed[i]);
    } else {
      std::vector<Point> batch_points;
      for (std::size_t i : todo)
        batch_points.push_back(feasible[i].point);
      out = run(Work::score, batch_points);
    }
    for (std::size_t k = 0; k < todo.size(); ++k) {
      const auto o = decode(out[k]);
      if (dropped(o, feasible[todo[k]].point, "score")) {
        result.feasible--;
        continue;
      }
      Evaluation e = feasible[todo[k]];
      e.score      = o.score;
      e.metrics    = o.metrics;
      scored.push_back(e);
    }
    if (progress)
      progress("scoring (analytical)", std::min(feasible.size(), start + batch), feasible.size(), best_score(scored));
  }
  result.scored          = scored.size();
  result.scoring_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (scored.empty()) {
    std::string reasons;
    for (const auto& [reason, n] : result.pruned)
      reasons += (reasons.empty() ? "" : ", ") + reason + " " + std::to_string(n);
    throw SpecError(spec.file, "$.search", "no feasible configuration in the search space (pruned: " + reasons + ")");
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const Evaluation& a, const Evaluation& b) { return a.score < b.score; });

  // The explanation's points (baseline, single changes, capacity runs) scored, then tier 3: the best K and those
  // re-simulated at the refine fidelity.
  const auto plan = plan_explanation(spec, topo, scored, run);
  std::vector<Evaluation> refine(scored.begin(), scored.begin() + std::min<std::size_t>(scored.size(), spec.top_k));
  const std::size_t ranked_count = refine.size();
  const auto rest                = plan.to_refine();
  refine.insert(refine.end(), rest.begin(), rest.end());
  const std::string phase = "re-simulating the best (" + std::string(name_of(spec.refine)) + ")";
  if (progress)
    progress(phase, 0, refine.size(), 0);
  // Each distinct point once (a capacity candidate is often one of the best K).
  std::map<std::string, std::size_t> first_of;
  std::vector<Point> distinct;
  std::vector<std::size_t> distinct_at;
  for (std::size_t i = 0; i < refine.size(); ++i)
    if (first_of.emplace(refine[i].point.label(), i).second) {
      distinct.push_back(refine[i].point);
      distinct_at.push_back(i);
    }
  const auto refined = run(Work::refine, distinct);
  for (std::size_t k = 0; k < distinct.size(); ++k) {
    auto& e      = refine[distinct_at[k]];
    const auto o = decode(refined[k]);
    if (!o.failure.empty()) {
      // Ranked by its analytical score, and said so: the explanation needs every point it asked for.
      result.failed.push_back({e.point.label(), "refine", o.failure});
      e.failure = o.failure;
      e.refined = e.score;
    } else {
      e.refined = o.score;
      e.metrics = o.metrics;
    }
    if (spec.reliability)
      goodput(spec, topo, e);
  }
  for (std::size_t i = 0; i < refine.size(); ++i) {
    const auto& first  = refine[first_of.at(refine[i].point.label())];
    refine[i].refined  = first.refined;
    refine[i].metrics  = first.metrics;
    refine[i].ettr     = first.ettr;
    refine[i].recovery = first.recovery;
    refine[i].failure  = first.failure;
  }
  if (progress)
    progress(phase, refine.size(), refine.size(),
             *std::min_element(refine.begin(), refine.end(), [](const Evaluation& a, const Evaluation& b) {
                return *a.refined < *b.refined;
              })->refined);
  explain(spec, plan, refine, ranked_count, result);
  // The ranking holds every distinct point re-simulated at the refine fidelity, not only the screen's best K: a
  // baseline or a single change the screen ranked lower can be faster once re-simulated, and the best point known
  // must be first (at 262K GPUs a single change beat the screen's best by 31%). At most top_k of them.
  std::vector<Evaluation> ranked;
  for (std::size_t i : distinct_at)
    ranked.push_back(refine[i]);
  std::stable_sort(ranked.begin(), ranked.end(), [&](const Evaluation& a, const Evaluation& b) {
    return spec.time_to_train ? a.effective_step() < b.effective_step() : *a.refined < *b.refined;
  });
  if (ranked.size() > ranked_count)
    ranked.resize(ranked_count);
  result.ranked       = ranked;
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

} // namespace spansim::optimizer
