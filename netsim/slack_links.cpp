// Slack links. A link direction L that is not the end hop of any flow, with F the distinct first hops of the
// flows through L: each of those flows crosses a link of F, so the flows through L carry at most the sum of F's
// loads, which the constraints of F keep under the sum of F's capacities. When that sum is at most L's capacity,
// the max-min shares computed without L's constraint satisfy it; being max-min fair on a larger set of allocations
// that contains them, they are the max-min fair shares with it too. The same holds of the last hops. A rail's
// leaf uplinks are the common case: 32 NICs of 376 Gbps under 12.8 Tbps of uplinks.
#include "netsim/slack_links.hpp"

#include "netsim/simgrid_platform.hpp"

#include <unordered_set>

namespace spansim::netsim::detail {

std::vector<bool> slack_links(const topology::Topology& topology, const FlowGraph& graph)
{
  const auto& links     = topology.links();
  const auto directions = static_cast<std::uint64_t>(2 * links.size());
  std::vector<bool> end_hop(directions, false);
  std::vector<double> first_sum(directions, 0), last_sum(directions, 0);
  std::unordered_set<std::uint64_t> pairs;      // (src, dst, qp) already routed
  std::unordered_set<std::uint64_t> first_seen; // (direction, first hop) already added
  std::unordered_set<std::uint64_t> last_seen;  // (direction, last hop) already added
  const auto gpus = static_cast<std::uint64_t>(topology.gpu_count());
  for (const auto& o : graph.ops()) {
    if (o.kind != Op::Kind::transfer || o.bytes <= 0 || o.src == o.dst)
      continue;
    const std::uint64_t key = (static_cast<std::uint64_t>(o.qp) * gpus + static_cast<std::uint64_t>(o.src)) * gpus +
                              static_cast<std::uint64_t>(o.dst);
    if (!pairs.insert(key).second)
      continue;
    const auto route = topology.route(o.src, o.dst, o.qp);
    if (route.empty())
      continue;
    const auto first = direction_index(route.front());
    const auto last  = direction_index(route.back());
    end_hop[first] = end_hop[last] = true;
    for (std::size_t i = 1; i + 1 < route.size(); ++i) {
      const auto d = direction_index(route[i]);
      if (first_seen.insert(d * directions + first).second)
        first_sum[d] += topology.hop_bandwidth(route.front().link, route.front().forward);
      if (last_seen.insert(d * directions + last).second)
        last_sum[d] += topology.hop_bandwidth(route.back().link, route.back().forward);
    }
  }
  std::vector<bool> slack(directions, false);
  for (std::uint64_t d = 0; d < directions; ++d) {
    // No first hop: no transfer crosses it. A margin keeps a link whose feeders add up to its capacity but for
    // rounding (it could fill with them).
    const double capacity = topology.hop_bandwidth(static_cast<int>(d / 2), d % 2 == 0) * (1 - 1e-9);
    slack[d]              = first_sum[d] > 0 && !end_hop[d] && (first_sum[d] <= capacity || last_sum[d] <= capacity) &&
               hop_routed(topology, static_cast<int>(d / 2));
  }
  return slack;
}

bool slack_links_apply(const SimgridSettings& settings)
{
  return settings.network_model == "CM02" && !settings.crosstraffic && settings.weight_s == 0;
}

} // namespace spansim::netsim::detail
