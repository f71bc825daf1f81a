// How a step used the network: bytes and utilisation per tier, across each building's boundary, the busiest link
// directions, and boundary links over time.
#include "report/report.hpp"

#include <algorithm>
#include <map>

namespace spansim::report {

namespace {

std::string direction_name(const topology::Topology& topo, const topology::Link& link, bool forward)
{
  return topo.vertex_name(forward ? link.a : link.b) + " -> " + topo.vertex_name(forward ? link.b : link.a);
}

} // namespace

NetworkReport network_report(const scenario::ScenarioRun& run)
{
  using topology::Tier;
  const auto& topo  = run.placed->topology();
  const auto& r     = run.result;
  const auto& links = topo.links();
  NetworkReport out;

  std::vector<double> tier_bytes(topology::kTierCount, 0), tier_capacity(topology::kTierCount, 0);
  std::vector<int> tier_links(topology::kTierCount, 0);
  std::vector<std::pair<double, int>> busiest; // (utilisation, directed link)
  for (std::size_t l = 0; l < links.size(); ++l) {
    const int t = static_cast<int>(links[l].tier);
    // Utilisation is over the links the job used: a 64-GPU job on a 131K-GPU topology leaves most idle.
    if (r.link_bytes[2 * l] + r.link_bytes[2 * l + 1] > 0) {
      tier_capacity[t] += 2 * links[l].bandwidth;
      tier_links[t]++;
    }
    for (int dir = 0; dir < 2; ++dir) {
      const double bytes = r.link_bytes[2 * l + dir];
      tier_bytes[t] += bytes;
      if (bytes > 0 && r.step_time > 0)
        busiest.emplace_back(bytes / (links[l].bandwidth * r.step_time), static_cast<int>(2 * l + dir));
    }
  }
  for (int t = 0; t < topology::kTierCount; ++t)
    if (tier_capacity[t] > 0)
      out.tiers.push_back({static_cast<Tier>(t), tier_bytes[t], tier_links[t],
                           r.step_time > 0 ? tier_bytes[t] / (tier_capacity[t] * r.step_time) : 0});

  // NVLinks are listed apart: inside a node they are almost always the busiest, and the question is usually
  // which scale-out or boundary links saturate.
  std::sort(busiest.begin(), busiest.end(), std::greater<>());
  for (const auto& [util, directed] : busiest) {
    const auto& link = links[directed / 2];
    auto& list       = link.tier == Tier::nvlink ? out.busiest_nvlinks : out.busiest;
    if (list.size() < 10)
      list.push_back({direction_name(topo, link, directed % 2 == 0), link.tier, r.link_bytes[directed], util});
  }

  for (int b = 0; b < topo.building_count() && topo.building_count() > 1; ++b) {
    BoundaryUse use{"building", topo.building_name(b)};
    double capacity = 0;
    for (std::size_t l = 0; l < links.size(); ++l) {
      const auto& link = links[l];
      // The links with one end in the building (an imported graph may have several per building).
      const bool a_in = topo.vertex_building(link.a) == b, b_in = topo.vertex_building(link.b) == b;
      if (a_in == b_in)
        continue;
      const bool outward = a_in;
      use.bytes_out += r.link_bytes[2 * l + (outward ? 0 : 1)];
      use.bytes_in += r.link_bytes[2 * l + (outward ? 1 : 0)];
      capacity += link.bandwidth;
    }
    use.mean_utilisation_out = r.step_time > 0 ? use.bytes_out / (capacity * r.step_time) : 0;
    out.boundaries.push_back(use);
  }

  // Parallel links (the same two ends): the busiest against the mean shows how evenly hashing spread the flows.
  std::map<std::pair<int, int>, std::vector<int>> parallel;
  for (std::size_t l = 0; l < links.size(); ++l)
    parallel[std::minmax(links[l].a, links[l].b)].push_back(static_cast<int>(l));
  for (const auto& [ends, group] : parallel) {
    if (group.size() < 2)
      continue;
    ParallelUse p{topo.vertex_name(ends.first) + " -- " + topo.vertex_name(ends.second), static_cast<int>(group.size()),
                  0, 0};
    for (int l : group) {
      const double bytes = r.link_bytes[2 * l] + r.link_bytes[2 * l + 1];
      p.max_bytes        = std::max(p.max_bytes, bytes);
      p.mean_bytes += bytes / static_cast<double>(group.size());
    }
    out.parallel.push_back(p);
  }
  // A leaf's uplinks to its pod's spines are an ECMP group too (explicit spines): the ten most uneven that carried
  // bytes, since a large pod has thousands.
  std::map<int, std::vector<int>> uplinks; // leaf -> its leaf-spine links
  for (std::size_t l = 0; l < links.size(); ++l)
    if (links[l].tier == Tier::leaf_spine)
      uplinks[links[l].a].push_back(static_cast<int>(l));
  std::vector<ParallelUse> leaves;
  for (const auto& [leaf, group] : uplinks) {
    if (group.size() < 2)
      continue;
    ParallelUse p{topo.vertex_name(leaf) + " -- spines", static_cast<int>(group.size()), 0, 0};
    for (int l : group) {
      const double bytes = r.link_bytes[2 * l] + r.link_bytes[2 * l + 1];
      p.max_bytes        = std::max(p.max_bytes, bytes);
      p.mean_bytes += bytes / static_cast<double>(group.size());
    }
    if (p.mean_bytes > 0)
      leaves.push_back(p);
  }
  std::stable_sort(leaves.begin(), leaves.end(),
                   [](const ParallelUse& x, const ParallelUse& y) { return x.imbalance() > y.imbalance(); });
  if (leaves.size() > 10)
    leaves.resize(10);
  out.parallel.insert(out.parallel.end(), leaves.begin(), leaves.end());

  // Boundary links over time: each transfer's bytes spread evenly over its lifetime, in 50 bins.
  const int bins = 50;
  std::map<int, std::vector<double>> series; // directed link -> bytes per bin
  if (r.step_time > 0)
    for (const auto& t : r.transfers) {
      if (topo.locate(t.src).building == topo.locate(t.dst).building)
        continue;
      for (const auto& h : topo.route(t.src, t.dst, t.qp)) {
        const auto tier = links[h.link].tier;
        if (tier != Tier::inter_building && tier != Tier::inter_region && tier != Tier::building_uplink)
          continue;
        auto& v = series[2 * h.link + (h.forward ? 0 : 1)];
        v.resize(bins, 0);
        const double width = r.step_time / bins;
        const double span  = std::max(t.end - t.start, 1e-12);
        for (int k = std::max(0, static_cast<int>(t.start / width)); k < bins && k * width < t.end; ++k) {
          const double overlap = std::min(t.end, (k + 1) * width) - std::max(t.start, k * width);
          if (overlap > 0)
            v[k] += t.bytes * r.rails * overlap / span; // one simulated transfer per rail
        }
      }
    }
  for (auto& [directed, v] : series) {
    const auto& link = links[directed / 2];
    LinkSeries s{direction_name(topo, link, directed % 2 == 0), link.tier, r.step_time / bins, {}};
    for (double bytes : v)
      s.utilisation.push_back(bytes / (link.bandwidth * r.step_time / bins));
    out.over_time.push_back(std::move(s));
  }
  return out;
}

} // namespace spansim::report
