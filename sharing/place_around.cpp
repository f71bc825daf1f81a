// Placing one job around the others on a shared network: every even split over a set of buildings, run
// together with the rest, ranked by the interference it causes and suffers.
#include "sharing/sharing.hpp"

#include "common/error.hpp"
#include "common/ranking.hpp"
#include "common/version.hpp"

#include <algorithm>
#include <limits>

namespace spansim::sharing {

using nlohmann::json;

namespace {

constexpr std::size_t kMaxSets = 256;

// Sets of `k` of `n` buildings, in lexicographic order of their indices.
void combinations(int n, int k, std::vector<int>& current, std::vector<std::vector<int>>& out)
{
  if (static_cast<int>(current.size()) == k) {
    out.push_back(current);
    return;
  }
  for (int b = current.empty() ? 0 : current.back() + 1; b < n && out.size() <= kMaxSets; ++b) {
    current.push_back(b);
    combinations(n, k, current, out);
    current.pop_back();
  }
}

} // namespace

PlacementSearch place_around(const SharedSpec& spec, const std::string& job,
                             const std::function<void(std::size_t done, std::size_t total)>& progress)
{
  PlacementSearch search;
  search.job         = job;
  std::size_t target = spec.jobs.size();
  for (std::size_t j = 0; j < spec.jobs.size(); ++j) {
    if (spec.jobs[j].scenario.name == job)
      target = j;
    else
      search.fixed.push_back(spec.jobs[j].scenario.name);
  }
  if (target == spec.jobs.size()) {
    std::string names;
    for (const auto& j : spec.jobs)
      names += (names.empty() ? "" : ", ") + j.scenario.name;
    throw UsageError("--place: no job \"" + job + "\" in " + spec.file + " (jobs: " + names + ")");
  }
  const topology::Topology topo(spec.topology);
  const auto gpus = spec.jobs[target].scenario.job.gpus;
  std::vector<std::vector<int>> sets;
  for (int k = 1; k <= topo.building_count(); ++k)
    if (gpus % k == 0) {
      std::vector<int> current;
      combinations(topo.building_count(), k, current, sets);
    }
  if (sets.size() > kMaxSets)
    throw UsageError("--place: job \"" + job + "\" has more than " + std::to_string(kMaxSets) +
                     " sets of buildings to try on " + spec.topology.name + "; name its buildings instead");

  // The job placed is moved last: the others are placed as the file says, without it.
  SharedSpec trial = spec;
  std::rotate(trial.jobs.begin() + static_cast<std::ptrdiff_t>(target),
              trial.jobs.begin() + static_cast<std::ptrdiff_t>(target) + 1, trial.jobs.end());
  auto& placed = trial.jobs.back().scenario.placement;
  try_candidates(sets.size(), progress, [&](std::size_t i) {
    PlacementOption option;
    for (int b : sets[i])
      option.buildings.push_back(topo.building_name(b));
    placed.buildings = option.buildings;
    placed.first_gpu = -1;
    try {
      const auto run    = run_shared(trial);
      option.step       = run.jobs.back().shared_step;
      option.slowdown   = run.jobs.back().slowdown;
      option.alone_step = run.jobs.back().alone_step;
      // Back to file order.
      option.slowdowns.resize(run.jobs.size());
      for (std::size_t j = 0; j < run.jobs.size(); ++j) {
        const std::size_t in_file = j + 1 == run.jobs.size() ? target : (j < target ? j : j + 1);
        option.slowdowns[in_file] = run.jobs[j].slowdown;
      }
    } catch (const Error& e) { // a set that cannot be placed or run is listed, not fatal
      option.refused = e.what();
    }
    search.options.push_back(std::move(option));
  });
  double best_alone = std::numeric_limits<double>::infinity();
  for (const auto& o : search.options)
    if (o.refused.empty())
      best_alone = std::min(best_alone, o.alone_step);
  double gpu_sum = 0;
  for (const auto& j : spec.jobs)
    gpu_sum += static_cast<double>(j.scenario.job.gpus);
  for (auto& o : search.options) {
    if (!o.refused.empty())
      continue;
    for (std::size_t j = 0; j < o.slowdowns.size(); ++j) {
      const double s = j == target ? o.step / best_alone : o.slowdowns[j];
      o.weighted_slowdown += s * static_cast<double>(spec.jobs[j].scenario.job.gpus) / gpu_sum;
    }
  }
  rank_candidates(search.options, [](const PlacementOption& o) { return std::make_pair(o.weighted_slowdown, o.step); });
  return search;
}

json to_json(const PlacementSearch& search)
{
  auto figures = [](const PlacementOption& o, json& j) {
    j["step_s"]            = o.step;
    j["slowdown"]          = o.slowdown;
    j["slowdowns"]         = o.slowdowns;
    j["weighted_slowdown"] = o.weighted_slowdown;
  };
  json options = candidates_json(
      search.options,
      [](const PlacementOption& o) {
        return json{{"buildings", o.buildings}};
      },
      figures);
  return {{"provenance", provenance()},
          {"job", search.job},
          {"fixed", search.fixed},
          {"objective", "GPU-weighted mean slowdown of all jobs, then the placed job's step"},
          {"options", options}};
}

} // namespace spansim::sharing
