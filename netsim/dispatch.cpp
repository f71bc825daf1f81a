// A MoE dispatch or combine as a size matrix on its EP group (netsim/dispatch.hpp).
#include "netsim/dispatch.hpp"

#include <algorithm>
#include <map>

namespace spansim::netsim::detail {

std::vector<std::vector<double>> dispatch_matrix(const topology::Topology& topology, const std::vector<int>& gpus,
                                                 const workload::JobSpec& job, const workload::Op& op, int hot_member)
{
  const std::size_t k = gpus.size();
  std::vector<std::vector<double>> m(k, std::vector<double>(k, 0));
  if (k < 2)
    return m;
  const double buffer = op.bytes * op.count;
  // Relative load of each member: the busiest gets op.imbalance times the mean, the others share the rest.
  const double hot = std::clamp(op.imbalance, 1.0, double(k));
  std::vector<double> load(k, (double(k) - hot) / double(k - 1));
  load[static_cast<std::size_t>(hot_member) % k] = hot;
  const bool combine                             = op.purpose == workload::Purpose::ep_combine;
  auto put                                       = [&](std::size_t from, std::size_t to, double bytes, double weight) {
    // The dispatch's receiver computes the tokens it gets; the combine returns them from there.
    if (combine)
      m[to][from] += bytes * weight;
    else
      m[from][to] += bytes * weight;
  };
  if (job.dispatch.dispatcher != workload::Dispatcher::deepep) {
    for (std::size_t i = 0; i < k; ++i)
      for (std::size_t j = 0; j < k; ++j)
        if (i != j)
          put(i, j, buffer / double(k), load[j]);
    return m;
  }
  // Members by node, in rank order; a member's local index is its position among its node's members.
  std::map<int, std::vector<std::size_t>> by_node;
  for (std::size_t i = 0; i < k; ++i)
    by_node[topology.locate(gpus[i]).node].push_back(i);
  std::vector<std::size_t> local(k), node_of(k);
  std::vector<std::vector<std::size_t>> nodes;
  for (auto& [node, members] : by_node) {
    for (std::size_t l = 0; l < members.size(); ++l) {
      local[members[l]]   = l;
      node_of[members[l]] = nodes.size();
    }
    nodes.push_back(members);
  }
  const auto& moe    = job.model.moe;
  const auto rates   = workload::dispatch_rates(moe.experts, moe.experts_per_token, static_cast<int>(k),
                                                static_cast<int>(nodes.size()), job.dispatch.node_limit);
  const double token = buffer / moe.experts_per_token; // a member's tokens, one copy each
  // Where the group's nodes hold different numbers of its members (an EP group across two NVL72 racks, 8 + 56), a
  // node receives a token as often as its share of the experts makes it: experts / k per member. Equal nodes keep
  // dispatch_rates' figure.
  std::vector<double> node_rate(nodes.size(), rates.node);
  for (std::size_t n = 0; n < nodes.size(); ++n)
    if (nodes[n].size() * nodes.size() != k) {
      const int held   = static_cast<int>(double(moe.experts) / double(k) * double(nodes[n].size()));
      const int limit  = job.dispatch.node_limit;
      const auto count = static_cast<int>(nodes.size());
      node_rate[n]     = limit <= 0 || limit >= count
                             ? workload::hit_probability(moe.experts, moe.experts_per_token, held)
                             : double(limit) / count *
                               workload::hit_probability(moe.experts * limit / count, moe.experts_per_token, held);
    }
  // Over the scale-out network: one copy per token and destination node, to the member of the same local index.
  // Over NVLink: from that member (or the source itself on its own node) to every other GPU the token reaches.
  std::vector<double> sources(k, 1); // tokens' origins each member forwards for: itself and its remote partners
  for (std::size_t i = 0; i < k; ++i)
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      if (n == node_of[i])
        continue;
      const std::size_t entry = nodes[n][local[i] % nodes[n].size()];
      double node_load        = 0;
      for (std::size_t g : nodes[n])
        node_load += load[g];
      put(i, entry, token * node_rate[n], node_load / double(nodes[n].size()));
      sources[entry] += 1;
    }
  for (const auto& members : nodes)
    for (std::size_t e : members)
      for (std::size_t g : members)
        if (g != e)
          put(e, g, sources[e] * token * rates.gpu, load[g]);
  return m;
}

} // namespace spansim::netsim::detail
