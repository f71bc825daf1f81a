// Folding a flow graph by a building symmetry. Each op gets a signature that an element of the symmetry leaves
// unchanged: a transfer's ends seen from its source's building (both moved back by the element that took the base
// there), its size, queue pair and its dependencies' signatures with their buildings relative to its own; a delay
// belongs to the one building all its dependencies are in, or else to none (fixed). The graph is symmetric when
// every building holds the same multiset of signatures and every fixed delay waits for the same multiset in each
// building; ops of equal signature then have equal timings, so each stands for its image in the base buildings.
// Node-local groups the lowering ran once for all (their representative in the base buildings, netsim/step.hpp)
// stand for every building already: their transfers are fixed ops, counted once.
#include "netsim/symmetry.hpp"

#include <algorithm>
#include <bit>
#include <numeric>
#include <unordered_map>

namespace spansim::netsim::detail {

namespace {

constexpr int kFixed = -1; ///< an op no element moves

std::uint64_t mix(std::uint64_t x)
{
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t mix(std::uint64_t h, std::uint64_t v)
{
  return mix(h ^ mix(v));
}

/// @brief Signatures and buildings (symmetry elements) of every op; empty when the graph is not symmetric.
struct Signatures {
  std::vector<std::uint64_t> sig;
  std::vector<int> element; ///< kFixed, or the element taking the base to the op's building
};

/// @brief Whether a transfer stays inside one node (over NVLink).
bool node_local(const topology::Topology& topology, const Op& op)
{
  return op.kind == Op::Kind::transfer && op.src != op.dst &&
         topology.locate(op.src).node == topology.locate(op.dst).node;
}

Signatures sign(const topology::Topology& topology, const topology::BuildingSymmetry& sym, const FlowGraph& graph)
{
  const auto& ops = graph.ops();
  // Node-local transfers in the base buildings alone are representatives (fixed); anywhere else, ordinary ops.
  bool representatives = true;
  for (const auto& op : ops)
    if (node_local(topology, op) && !sym.in_base(op.src)) {
      representatives = false;
      break;
    }
  const int order = sym.order();
  Signatures s;
  s.sig.resize(ops.size());
  s.element.resize(ops.size());
  std::vector<std::uint64_t> per_element(order);
  std::vector<std::uint64_t> total(order, 0);
  std::vector<std::int64_t> count(order, 0);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const auto& op = ops[i];
    int e          = kFixed;
    std::uint64_t h;
    if (representatives && node_local(topology, op)) {
      h = mix(mix(mix(mix(3, std::bit_cast<std::uint64_t>(op.bytes * op.stretch)), static_cast<std::uint64_t>(op.qp)),
                  static_cast<std::uint64_t>(op.src)),
              static_cast<std::uint64_t>(op.dst));
    } else if (op.kind == Op::Kind::transfer) {
      // A transfer in a region no element moves would run on links divided among images it does not have.
      if (sym.fixed(op.src) || sym.fixed(op.dst))
        return {};
      e              = sym.element_of(op.src);
      const int back = sym.inverse(e);
      h = mix(mix(mix(mix(1, std::bit_cast<std::uint64_t>(op.bytes * op.stretch)), static_cast<std::uint64_t>(op.qp)),
                  static_cast<std::uint64_t>(sym.move(op.src, back))),
              static_cast<std::uint64_t>(sym.move(op.dst, back)));
    } else {
      for (std::size_t k = 0; k < op.deps.size(); ++k) {
        const int de = s.element[op.deps[k]];
        if (de == kFixed || (k > 0 && de != e)) {
          e = kFixed;
          break;
        }
        e = de;
      }
      h = mix(2, std::bit_cast<std::uint64_t>(op.duration));
    }
    // Dependencies as a multiset (a sum of mixed values): the lowering lists them in building order.
    std::uint64_t deps = 0;
    std::fill(per_element.begin(), per_element.end(), 0);
    for (int d : op.deps) {
      const int de = s.element[d];
      if (de == kFixed) {
        deps += mix(s.sig[d], 0x5eedULL);
      } else if (e == kFixed) {
        deps += mix(s.sig[d], 0xf1fedULL);
        per_element[de] += mix(s.sig[d]);
      } else {
        deps += mix(s.sig[d], 0x100ULL + static_cast<std::uint64_t>(sym.compose(de, sym.inverse(e))));
      }
    }
    // A fixed op must wait for the same ops in every building, or an element would move it.
    if (e == kFixed)
      for (int k = 1; k < order; ++k)
        if (per_element[k] != per_element[0])
          return {};
    s.sig[i]     = mix(h, deps);
    s.element[i] = e;
    if (e != kFixed) {
      total[e] += mix(s.sig[i]);
      ++count[e];
    }
  }
  for (int k = 1; k < order; ++k)
    if (total[k] != total[0] || count[k] != count[0])
      return {};
  if (count[0] == 0)
    return {};
  return s;
}

std::optional<FoldedGraph> fold_with(const topology::Topology& topology, const topology::BuildingSymmetry& sym,
                                     const FlowGraph& graph)
{
  const auto s = sign(topology, sym, graph);
  if (s.sig.empty())
    return std::nullopt;
  const auto& ops = graph.ops();
  const auto n    = ops.size();
  // The base buildings' op of each signature stands for the ops of that signature in every building.
  std::unordered_map<std::uint64_t, int> base_of;
  base_of.reserve(n / static_cast<std::size_t>(sym.order()) + 16);
  for (std::size_t i = 0; i < n; ++i)
    if (s.element[i] == 0)
      base_of.emplace(s.sig[i], static_cast<int>(i));
  std::vector<int> image(n);
  std::vector<int> depth(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    if (s.element[i] == kFixed || s.element[i] == 0) {
      image[i] = static_cast<int>(i);
    } else {
      auto it = base_of.find(s.sig[i]);
      if (it == base_of.end())
        return std::nullopt;
      image[i] = it->second;
    }
    for (int d : ops[i].deps)
      depth[i] = std::max(depth[i], depth[d] + 1);
  }
  // An op's image may come after it in the whole graph, never at a lower depth than its dependencies' images
  // (equal signatures, equal depths): ordering by depth keeps dependencies first.
  std::vector<int> kept;
  for (std::size_t i = 0; i < n; ++i)
    if (image[i] == static_cast<int>(i))
      kept.push_back(static_cast<int>(i));
  std::stable_sort(kept.begin(), kept.end(), [&](int a, int b) { return depth[a] < depth[b]; });
  std::vector<int> folded_index(n, -1);
  for (std::size_t k = 0; k < kept.size(); ++k)
    folded_index[kept[k]] = static_cast<int>(k);

  FoldedGraph f{
      topology.with_folded_routes(sym.canonical_hops(), sym.stabilizer()), FlowGraph{}, {}, {}, {}, 1, {}, {}, ""};
  for (int i : kept) {
    Op op = ops[i];
    for (int& d : op.deps)
      d = folded_index[image[d]];
    std::sort(op.deps.begin(), op.deps.end());
    op.deps.erase(std::unique(op.deps.begin(), op.deps.end()), op.deps.end());
    f.graph.add_op(std::move(op));
  }
  f.op_of.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    f.op_of[i] = folded_index[image[i]];
  // The fixed transfers' bytes are their own, not an image's.
  FlowGraph fixed;
  for (std::size_t i = 0; i < n; ++i)
    if (s.element[i] == kFixed && ops[i].kind == Op::Kind::transfer)
      fixed.add_op({Op::Kind::transfer, ops[i].src, ops[i].dst, ops[i].bytes, 0, ops[i].qp, {}, ops[i].stretch});
  if (fixed.transfer_count() > 0) {
    f.fixed_full   = link_bytes(topology, fixed);
    f.fixed_folded = link_bytes(f.topology, fixed);
  }
  f.canonical   = sym.canonical_hops();
  f.stabilizer  = sym.stabilizer();
  f.images      = sym.order();
  f.description = sym.describe() + ", " + std::to_string(kept.size()) + " of " + std::to_string(n) + " ops simulated";
  return f;
}

} // namespace

std::optional<FoldedGraph> fold_graph(const topology::Topology& topology, const FlowGraph& graph)
{
  // Every region moving first; where regions differ in building count, the regions of one count at a time (the
  // largest group first), the others fixed.
  std::vector<int> buildings(topology.counts().regions, 0);
  for (int b = 0; b < topology.counts().buildings; ++b)
    ++buildings[topology.region_of_building(b)];
  std::vector<std::pair<int, int>> classes; // (group order, building count)
  for (int n : buildings) {
    const auto alike = std::count(buildings.begin(), buildings.end(), n);
    if (std::none_of(classes.begin(), classes.end(), [n](const auto& c) { return c.second == n; }))
      classes.push_back({static_cast<int>(alike) * n, n});
  }
  std::vector<int> counts{0};
  if (classes.size() > 1) {
    // A partial symmetry must move every region the transfers touch: only a class holding all of them can fold.
    std::vector<char> touched(buildings.size(), 0);
    for (const auto& op : graph.ops())
      if (op.kind == Op::Kind::transfer)
        for (int g : {op.src, op.dst})
          touched[topology.region_of_building(topology.locate(g).building)] = 1;
    std::stable_sort(classes.begin(), classes.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& c : classes) {
      bool holds = true;
      for (std::size_t r = 0; r < buildings.size(); ++r)
        holds = holds && (!touched[r] || buildings[r] == c.second);
      if (holds)
        counts.push_back(c.second);
    }
  }
  for (int count : counts) {
    // A class of one region: shifting the regions is the identity, so buildings alone is the first group again.
    const bool one = count > 0 && std::count(buildings.begin(), buildings.end(), count) == 1;
    for (auto axes : {topology::SymmetryAxes{true, true, count}, topology::SymmetryAxes{true, false, count},
                      topology::SymmetryAxes{false, true, count}}) {
      if (one && !axes.regions)
        continue;
      if (auto sym = topology::BuildingSymmetry::find(topology, axes))
        if (auto folded = fold_with(topology, *sym, graph))
          return folded;
    }
  }
  return std::nullopt;
}

RunResult unfold_run(const FoldedGraph& folded, RunResult run)
{
  RunResult out;
  out.makespan = run.makespan;
  out.settings = std::move(run.settings);
  out.ops.resize(folded.op_of.size());
  for (std::size_t i = 0; i < folded.op_of.size(); ++i)
    out.ops[i] = run.ops[folded.op_of[i]];
  out.link_bytes.assign(folded.canonical.size(), 0);
  if (run.link_bytes.empty())
    return out;
  for (std::size_t h = 0; h < folded.canonical.size(); ++h) {
    const int c       = folded.canonical[h];
    const double mine = folded.fixed_full.empty() ? 0 : folded.fixed_full[h];
    const double seen = folded.fixed_folded.empty() ? 0 : folded.fixed_folded[c];
    out.link_bytes[h] = (run.link_bytes[c] - seen) * folded.stabilizer[h / 2] + mine;
  }
  return out;
}

} // namespace spansim::netsim::detail
