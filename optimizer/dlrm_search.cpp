// Searching a DLRM's sharding plan and towers: few candidates, each simulated in full.
#include "optimizer/dlrm_search.hpp"

#include "common/error.hpp"
#include "common/ranking.hpp"
#include "common/version.hpp"

#include <algorithm>
#include <numeric>

namespace spansim::optimizer {

using nlohmann::json;
using workload::Sharding;
using workload::TowerLevel;

namespace {

DlrmCandidate simulate_candidate(scenario::Scenario sc, DlrmCandidate c)
{
  auto& d               = *sc.job.dlrm;
  d.sharding            = c.sharding;
  d.towers              = c.towers;
  d.tower_level         = c.level;
  sc.job.parallelism.ep = c.towers > 0 ? static_cast<int>(sc.job.gpus / c.towers) : 1;
  try {
    workload::dlrm_plan(sc.job);
    const auto run       = scenario::simulate(sc, std::make_shared<const scenario::PlacedStep>(sc));
    const auto& r        = run.result;
    c.step_time          = r.step_time;
    c.samples_per_second = r.tokens_per_second;
    for (const auto& s : r.stages)
      c.exposed_ep += s.exposed[workload::Dim::ep] / static_cast<double>(r.stages.size());
    const auto& topo = run.placed->topology();
    for (std::size_t l = 0; l < topo.links().size(); ++l) {
      const auto tier = topo.links()[l].tier;
      if (tier == topology::Tier::inter_building || tier == topology::Tier::inter_region ||
          tier == topology::Tier::building_uplink)
        c.boundary_bytes += r.link_bytes[2 * l] + r.link_bytes[2 * l + 1];
    }
  } catch (const InfeasibleError& e) {
    c.refused = e.what();
  }
  return c;
}

} // namespace

DlrmSearch search_dlrm(const scenario::Scenario& scenario,
                       const std::function<void(std::size_t, std::size_t)>& progress)
{
  if (!scenario.job.dlrm)
    throw UsageError(scenario.file + ": the job is not a DLRM (\"kind\": \"dlrm\"); optimize specs search LLM jobs");
  DlrmSearch search;
  search.scenario = scenario.name;
  const int gpus  = static_cast<int>(scenario.job.gpus);
  const int g     = std::gcd(gpus, scenario.job.dlrm->model.table_count());
  std::vector<DlrmCandidate> todo;
  for (auto s : {Sharding::table_wise, Sharding::column_wise, Sharding::row_wise}) {
    todo.push_back({s, 0});
    for (int towers = 2; towers <= g; ++towers)
      if (g % towers == 0)
        for (auto level : {TowerLevel::node, TowerLevel::pod, TowerLevel::building}) {
          DlrmCandidate c{s, towers, level};
          todo.push_back(c);
        }
  }
  // A tower count is tried at each level; the lowest that places it is kept (the graph is the same at every
  // level that holds it).
  std::vector<DlrmCandidate> done;
  try_candidates(todo.size(), progress, [&](std::size_t i) {
    const auto& c     = todo[i];
    const bool placed = std::any_of(done.begin(), done.end(), [&](const DlrmCandidate& d) {
      return d.towers > 0 && d.towers == c.towers && d.sharding == c.sharding && d.refused.empty();
    });
    if (placed)
      return;
    auto r = simulate_candidate(scenario, c);
    if (c.towers > 0 && !r.refused.empty()) {
      // A level that cannot hold the towers is not a candidate of its own: the next level may. A plan refused for
      // its sharding is listed once per tower count.
      const bool placement = r.refused.find("spans more than one") != std::string::npos;
      const bool listed    = std::any_of(done.begin(), done.end(), [&](const DlrmCandidate& d) {
        return d.towers == c.towers && d.sharding == c.sharding;
      });
      if ((placement && c.level != TowerLevel::building) || (!placement && listed))
        return;
    }
    done.push_back(std::move(r));
  });
  rank_candidates(done, [](const DlrmCandidate& c) { return c.step_time; });
  search.candidates = std::move(done);
  return search;
}

json to_json(const DlrmSearch& search)
{
  auto describe = [](const DlrmCandidate& c) {
    json j = {{"sharding", name_of(c.sharding)}, {"towers", c.towers}};
    if (c.towers > 0)
      j["tower_level"] = name_of(c.level);
    return j;
  };
  auto figures = [](const DlrmCandidate& c, json& j) {
    j["step_time_s"]        = c.step_time;
    j["samples_per_second"] = c.samples_per_second;
    j["exposed_ep_s"]       = c.exposed_ep;
    j["boundary_bytes"]     = c.boundary_bytes;
  };
  return {{"provenance", provenance()},
          {"scenario", search.scenario},
          {"searched", "sharding x towers (count and level); ranked by step time"},
          {"candidates", candidates_json(search.candidates, describe, figures)}};
}

} // namespace spansim::optimizer
