// Failed and degraded elements. The graph is a tree of aggregate links (a pod's spine is one vertex standing for
// its physical spines under ideal ECMP), so a degraded link is a bundle that lost part of its capacity, and a
// failed one cuts off everything below it: those GPUs are marked, and placement refuses them.
#include "common/error.hpp"
#include "common/random.hpp"
#include "topology/topology.hpp"

#include <algorithm>
#include <map>

namespace spansim::topology {

namespace {

const std::string kHealthy;

} // namespace

FaultSpec read_faults(spec::ObjectReader r)
{
  FaultSpec f;
  for (auto l : r.objects("links", false)) {
    FaultSpec::LinkFault lf;
    lf.where = l.where();
    lf.name  = l.string("name");
    if (l.has("failed") == l.has("bandwidth"))
      l.fail("bandwidth", "give exactly one of \"failed\": true and \"bandwidth\" (the fraction left, 0 to 1)");
    if (l.has("failed")) {
      if (!l.boolean("failed"))
        l.fail("failed", "only true is meaningful (leave a healthy link out)");
      lf.bandwidth = 0;
    } else {
      lf.bandwidth = l.number("bandwidth", 0, 1);
    }
    l.finish();
    f.links.push_back(lf);
  }
  for (const char* kind : {"switches", "nodes"}) {
    if (!r.has(kind))
      continue;
    const auto names = r.strings(kind);
    for (std::size_t i = 0; i < names.size(); ++i)
      (std::string(kind) == "switches" ? f.switches : f.nodes).push_back({names[i], r.where().member(kind).element(i)});
  }
  if (auto x = r.optional_object("random")) {
    f.seed             = static_cast<std::uint64_t>(x->integer("seed", 0, std::int64_t{1} << 53));
    f.random_links     = x->number("links", 0, 1);
    f.random_bandwidth = x->optional_number("bandwidth", 0, 1).value_or(0);
    x->finish();
  }
  r.finish();
  return f;
}

std::string Topology::link_name(int k) const
{
  return vertex_name(links_[k].a) + " -- " + vertex_name(links_[k].b);
}

const std::string& Topology::gpu_fault(int gpu) const
{
  return gpu_fault_.empty() ? kHealthy : gpu_fault_[gpu];
}

Topology Topology::with_faults(const FaultSpec& faults) const
{
  Topology t = *this;
  t.altered_ = true;
  t.gpu_fault_.assign(counts_.gpus, "");
  std::vector<double> left(links_.size(), 1.0);
  std::vector<std::string> why(links_.size());
  // Names are looked up once: vertices by name, then links by their ends.
  std::map<std::string, int> vertex;
  for (std::size_t v = 0; v < vertex_kind_.size(); ++v)
    vertex[vertex_name(static_cast<int>(v))] = static_cast<int>(v);
  auto example = [&](VertexKind kind) {
    for (std::size_t v = 0; v < vertex_kind_.size(); ++v)
      if (vertex_kind_[v] == kind)
        return vertex_name(static_cast<int>(v));
    return std::string("?");
  };
  // A link by its ends' names, through the vertex map: no name rebuilt per link.
  auto find_link = [&](const std::string& name) {
    const auto sep = name.find(" -- ");
    if (sep == std::string::npos)
      return -1;
    const auto a = vertex.find(name.substr(0, sep)), b = vertex.find(name.substr(sep + 4));
    if (a == vertex.end() || b == vertex.end())
      return -1;
    for (std::size_t k = 0; k < links_.size(); ++k)
      if ((links_[k].a == a->second && links_[k].b == b->second) ||
          (links_[k].a == b->second && links_[k].b == a->second))
        return static_cast<int>(k);
    return -1;
  };
  std::vector<const spec::Location*> listed(links_.size(), nullptr); // where each link was listed first
  for (const auto& l : faults.links) {
    const int k = find_link(l.name);
    if (k < 0)
      l.where.member("name").fail(
          "unknown link \"" + l.name + "\" (links are named \"A -- B\" by their ends, as in " + "results, e.g. \"" +
          link_name(static_cast<int>(std::min<std::int64_t>(counts_.gpus, std::int64_t(links_.size()) - 1))) + "\")");
    if (listed[k] != nullptr)
      l.where.member("name").fail("link \"" + link_name(k) + "\" is listed twice (first at " + listed[k]->path +
                                  "): list each link once, with the fraction of its bandwidth left");
    listed[k] = &l.where;
    if (l.bandwidth < left[k]) {
      left[k] = l.bandwidth;
      why[k]  = "link " + l.name + (l.bandwidth > 0 ? " degraded" : " failed");
    }
  }
  for (const auto& s : faults.switches) {
    auto it = vertex.find(s.name);
    if (it == vertex.end() || vertex_kind_[it->second] == VertexKind::gpu)
      s.where.fail("unknown switch \"" + s.name + "\" (e.g. \"" + example(VertexKind::leaf) + "\", \"" +
                   example(VertexKind::spine) + "\", \"" + example(VertexKind::aggregation) + "\")");
    for (std::size_t k = 0; k < links_.size(); ++k)
      if (links_[k].a == it->second || links_[k].b == it->second) {
        left[k] = 0;
        why[k]  = "switch " + s.name + " failed";
      }
  }
  for (const auto& n : faults.nodes) {
    if (imported()) {
      // An imported graph names its nodes itself.
      const auto it = std::find(node_names_.begin(), node_names_.end(), n.name);
      if (it == node_names_.end())
        n.where.fail("unknown node \"" + n.name + "\" (the graph's nodes, e.g. \"" + node_names_.front() + "\")");
      const int node = static_cast<int>(it - node_names_.begin());
      for (int g = 0; g < counts_.gpus; ++g)
        if (gpu_location_[g].node == node)
          t.gpu_fault_[g] = "node " + n.name + " failed";
      continue;
    }
    const std::string nvswitch = n.name + "/nvswitch";
    auto it                    = vertex.find(nvswitch);
    if (it == vertex.end())
      n.where.fail("unknown node \"" + n.name + "\" (e.g. \"" +
                   example(VertexKind::nvswitch).substr(0, example(VertexKind::nvswitch).size() - 9) + "\")");
    for (std::int64_t g = 0; g < counts_.gpus; ++g)
      if (links_[nvlink_link(static_cast<int>(g))].b == it->second)
        t.gpu_fault_[g] = "node " + n.name + " failed";
  }
  if (faults.random_links > 0) {
    Random random(faults.seed);
    for (std::size_t k = 0; k < links_.size(); ++k)
      if (links_[k].tier != Tier::nvlink && random.uniform() < faults.random_links &&
          faults.random_bandwidth < left[k]) {
        left[k] = faults.random_bandwidth;
        why[k]  = "link " + link_name(static_cast<int>(k)) + (faults.random_bandwidth > 0 ? " degraded" : " failed") +
                 " (drawn with seed " + std::to_string(faults.seed) + ")";
      }
  }
  // Apply, and mark what a failed link cuts off.
  for (std::size_t k = 0; k < links_.size(); ++k) {
    if (left[k] >= 1)
      continue;
    t.links_[k].bandwidth = links_[k].bandwidth * left[k];
    (left[k] > 0 ? t.degraded_links_ : t.failed_links_) += 1;
    if (left[k] > 0 || imported())
      continue;
    const auto& link = links_[k];
    for (std::int64_t g = 0; g < counts_.gpus; ++g) {
      if (!t.gpu_fault_[g].empty())
        continue;
      const auto loc = locate(static_cast<int>(g));
      bool cut       = false;
      switch (link.tier) {
      case Tier::nvlink:
      case Tier::nic:
        cut = link.a == static_cast<int>(g);
        break;
      case Tier::leaf_spine:
        cut = link.a == leaf_vertex(loc.leaf) || link.b == leaf_vertex(loc.leaf);
        break;
      case Tier::pod_aggregation:
        cut = link.a == spine_vertex(loc.pod) || link.b == spine_vertex(loc.pod);
        break;
      default:
        break; // links between buildings and regions: placement refuses a job that needs them
      }
      if (cut)
        t.gpu_fault_[g] = why[k] + (link.tier == Tier::nvlink || link.tier == Tier::nic ? "" : ", which cuts it off");
    }
  }
  if (imported()) {
    // Routes go around what failed; what no route reaches is cut off.
    t.build_routes();
    t.mark_cut_off("the failed elements");
  }
  return t;
}

} // namespace spansim::topology
