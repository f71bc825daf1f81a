#include "topology/symmetry.hpp"

#include <unordered_map>

namespace spansim::topology {

namespace {

std::uint64_t pair_key(int a, int b)
{
  if (a > b)
    std::swap(a, b);
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

} // namespace

std::optional<BuildingSymmetry> BuildingSymmetry::find(const Topology& topology, SymmetryAxes axes)
{
  const auto& counts = topology.counts();
  if (topology.imported() || topology.heterogeneous() || topology.failed_links() > 0 || topology.degraded_links() > 0 ||
      !topology.spec().multipath.is_default() || counts.buildings < 2 || counts.gpus % counts.buildings != 0 ||
      topology.folded())
    return std::nullopt;
  for (int g = 0; g < topology.gpu_count(); ++g)
    if (!topology.gpu_fault(g).empty())
      return std::nullopt;
  BuildingSymmetry s;
  const int regions = static_cast<int>(counts.regions);
  s.building_region_.resize(counts.buildings);
  s.building_local_.resize(counts.buildings);
  s.buildings_of_.resize(regions);
  for (int b = 0; b < counts.buildings; ++b) {
    s.building_region_[b] = topology.region_of_building(b);
    s.building_local_[b]  = static_cast<int>(s.buildings_of_[s.building_region_[b]].size());
    s.buildings_of_[s.building_region_[b]].push_back(b);
  }
  // The moving regions: all of them (which must then have one building count), or those of the count asked for.
  const int count = axes.region_buildings > 0 ? axes.region_buildings : static_cast<int>(s.buildings_of_[0].size());
  s.region_class_.assign(regions, -1);
  for (int r = 0; r < regions; ++r) {
    if (static_cast<int>(s.buildings_of_[r].size()) == count) {
      s.region_class_[r] = static_cast<int>(s.moving_regions_.size());
      s.moving_regions_.push_back(r);
    } else if (axes.region_buildings == 0) {
      return std::nullopt;
    }
  }
  s.moving_               = static_cast<int>(s.moving_regions_.size());
  s.buildings_per_region_ = count;
  s.region_factor_        = axes.regions ? s.moving_ : 1;
  s.building_factor_      = axes.buildings ? s.buildings_per_region_ : 1;
  s.gpus_per_building_    = counts.gpus / counts.buildings;
  if (s.moving_ == 0 || s.order() < 2)
    return std::nullopt;

  // Each element as a map of vertices (blocks of one kind, each building's share of a block contiguous), then of
  // links by their ends: an element must take every link to one of the same tier, bandwidth and latency.
  const auto& kinds = topology.vertex_kinds();
  const auto& links = topology.links();
  std::unordered_map<std::uint64_t, int> link_of;
  link_of.reserve(links.size() * 2);
  for (std::size_t l = 0; l < links.size(); ++l)
    if (!link_of.emplace(pair_key(links[l].a, links[l].b), static_cast<int>(l)).second)
      return std::nullopt; // parallel links: not a template's tree
  const std::int64_t nodes_per_building  = counts.nodes / counts.buildings;
  const std::int64_t leaves_per_building = counts.leaves / counts.buildings;
  const std::int64_t pods_per_building   = counts.pods / counts.buildings;
  const int nvswitch0 = topology.nvswitch_vertex(0), leaf0 = topology.leaf_vertex(0), spine0 = topology.spine_vertex(0),
            aggregation0 = topology.aggregation_vertex(0);
  const int gateway0     = topology.region_gateway_vertex(0);
  const int hops         = static_cast<int>(2 * links.size());
  s.canonical_.resize(hops);
  for (int h = 0; h < hops; ++h)
    s.canonical_[h] = h;
  std::vector<int> fixed(hops, 1); // the identity fixes every hop
  std::vector<int> vertex(kinds.size());
  for (int e = 1; e < s.order(); ++e) {
    const int dr = e / s.building_factor_, db = e % s.building_factor_;
    auto building_to = [&](int b) { return s.building_to(b, dr, db); };
    auto shift       = [&](int v, int base, std::int64_t per_building) {
      const std::int64_t i = v - base, b = i / per_building;
      return static_cast<int>(base + (building_to(static_cast<int>(b)) - b) * per_building + i);
    };
    for (std::size_t v = 0; v < kinds.size(); ++v) {
      const int iv = static_cast<int>(v);
      switch (kinds[v]) {
      case VertexKind::gpu:
        vertex[v] = s.move(iv, e);
        break;
      case VertexKind::nvswitch:
        vertex[v] = shift(iv, nvswitch0, nodes_per_building);
        break;
      case VertexKind::leaf:
        vertex[v] = shift(iv, leaf0, leaves_per_building);
        break;
      case VertexKind::spine:
        vertex[v] = shift(iv, spine0, pods_per_building);
        break;
      case VertexKind::aggregation:
        vertex[v] = aggregation0 + building_to(iv - aggregation0);
        break;
      case VertexKind::region_gateway: {
        const int r = iv - gateway0, c = s.region_class_[r];
        vertex[v] = gateway0 + (c < 0 ? r : s.moving_regions_[(c + dr) % s.moving_]);
        break;
      }
      case VertexKind::nic: // shared NICs are an expanded graph's, never a template's blocks
        return std::nullopt;
      }
    }
    for (std::size_t l = 0; l < links.size(); ++l) {
      const auto& from = links[l];
      auto it          = link_of.find(pair_key(vertex[from.a], vertex[from.b]));
      if (it == link_of.end())
        return std::nullopt;
      const auto& to = links[it->second];
      if (to.tier != from.tier || to.bandwidth != from.bandwidth || to.latency != from.latency)
        return std::nullopt;
      const int flip = to.a == vertex[from.a] ? 0 : 1;
      for (int dir = 0; dir < 2; ++dir) {
        const int h = static_cast<int>(2 * l) + dir, image = 2 * it->second + (dir ^ flip);
        s.canonical_[h] = std::min(s.canonical_[h], image);
        fixed[h] += image == h ? 1 : 0;
      }
    }
  }
  s.stabilizer_.resize(links.size());
  for (std::size_t l = 0; l < links.size(); ++l)
    s.stabilizer_[l] = fixed[2 * l];
  return s;
}

int BuildingSymmetry::building_to(int b, int dr, int db) const
{
  const int c = region_class_[building_region_[b]];
  if (c < 0)
    return b;
  return buildings_of_[moving_regions_[(c + dr) % moving_]][(building_local_[b] + db) % buildings_per_region_];
}

int BuildingSymmetry::element_of(int gpu) const
{
  const int b = building_of(gpu), c = region_class_[building_region_[b]];
  if (c < 0)
    return 0;
  return (region_factor_ > 1 ? c : 0) * building_factor_ + (building_factor_ > 1 ? building_local_[b] : 0);
}

int BuildingSymmetry::move(int gpu, int e) const
{
  const int b = building_of(gpu);
  return static_cast<int>(gpu + (building_to(b, e / building_factor_, e % building_factor_) - b) * gpus_per_building_);
}

int BuildingSymmetry::inverse(int e) const
{
  const int dr = e / building_factor_, db = e % building_factor_;
  return ((region_factor_ - dr) % region_factor_) * building_factor_ + (building_factor_ - db) % building_factor_;
}

int BuildingSymmetry::compose(int a, int b) const
{
  return ((a / building_factor_ + b / building_factor_) % region_factor_) * building_factor_ +
         (a % building_factor_ + b % building_factor_) % building_factor_;
}

std::string BuildingSymmetry::describe() const
{
  std::string out;
  if (region_factor_ > 1)
    out = std::to_string(region_factor_) + " regions";
  if (building_factor_ > 1)
    out += (out.empty() ? "" : " x ") + std::to_string(building_factor_) + " buildings" +
           (region_factor_ > 1 || region_class_.size() > 1 ? " per region" : "");
  out += " alike";
  const auto fixed = region_class_.size() - moving_regions_.size();
  if (fixed > 0)
    out += ", " + std::to_string(fixed) + (fixed == 1 ? " region" : " regions") + " fixed";
  return out;
}

} // namespace spansim::topology
