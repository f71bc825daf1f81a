// Building and region symmetry: a run folded onto one building gives the whole run's op timings, step, breakdown
// and bytes on every link (issue 17). Checked against the unfolded simulation at analytical and flow fidelity.
#include "netsim/step.hpp"
#include "netsim/symmetry.hpp"
#include "placement/placement.hpp"
#include "topology/symmetry.hpp"
#include "topology/topology.hpp"

#include "tests/support.hpp"
#include "tests/support_job.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <iostream>
#include <random>
#include <set>

using namespace spansim;
using spansim::test::job;
using workload::Dim;

namespace {

constexpr double kTolerance = 1e-9;

void check_same_run(const netsim::RunResult& full, const netsim::RunResult& folded)
{
  INFO("makespan: full " << full.makespan << " s, folded " << folded.makespan << " s");
  CHECK(folded.makespan == Approx(full.makespan).epsilon(kTolerance));
  REQUIRE(folded.ops.size() == full.ops.size());
  for (std::size_t i = 0; i < full.ops.size(); ++i)
    if (folded.ops[i].end != Approx(full.ops[i].end).epsilon(kTolerance).margin(1e-15))
      FAIL("op " << i << " ends at " << folded.ops[i].end << " folded, " << full.ops[i].end << " in full");
  REQUIRE(folded.link_bytes.size() == full.link_bytes.size());
  for (std::size_t k = 0; k < full.link_bytes.size(); ++k)
    if (folded.link_bytes[k] != Approx(full.link_bytes[k]).epsilon(kTolerance))
      FAIL("link " << k / 2 << " direction " << k % 2 << ": " << folded.link_bytes[k] << " folded, "
                   << full.link_bytes[k] << " in full");
}

void check_same_step(const topology::Topology& topo, const netsim::StepResult& full, const netsim::StepResult& folded)
{
  std::cout << "  step: full " << full.step_time << " s, folded " << folded.step_time << " s ("
            << folded.engine["building_symmetry"] << ")\n";
  CHECK(folded.step_time == Approx(full.step_time).epsilon(kTolerance));
  REQUIRE(folded.stages.size() == full.stages.size());
  for (std::size_t s = 0; s < full.stages.size(); ++s) {
    CHECK(folded.stages[s].bubble == Approx(full.stages[s].bubble).epsilon(kTolerance).margin(1e-12));
    CHECK(folded.stages[s].idle == Approx(full.stages[s].idle).epsilon(kTolerance).margin(1e-12));
    for (auto d : workload::kDims)
      CHECK(folded.stages[s].exposed[d] == Approx(full.stages[s].exposed[d]).epsilon(kTolerance).margin(1e-12));
  }
  REQUIRE(folded.link_bytes.size() == full.link_bytes.size());
  int differ = 0;
  for (std::size_t k = 0; k < full.link_bytes.size(); ++k)
    if (folded.link_bytes[k] != Approx(full.link_bytes[k]).epsilon(kTolerance) && ++differ <= 5)
      std::cout << "  link " << topo.link_name(static_cast<int>(k / 2)) << " direction " << k % 2 << ": "
                << folded.link_bytes[k] << " folded, " << full.link_bytes[k] << " in full\n";
  CHECK(differ == 0);
}

/// @brief A random graph that every element of `sym` maps onto itself: base transfers from the base buildings to
/// anywhere, each copied to every element with its dependencies moved alike, and a delay waiting for all.
netsim::FlowGraph symmetric_graph(const topology::Topology& topo, const topology::BuildingSymmetry& sym,
                                  std::uint32_t seed, int base_ops)
{
  std::mt19937 rng(seed);
  std::vector<int> base_gpus, moving; // the regions a partial symmetry fixes are left alone
  for (int g = 0; g < topo.gpu_count(); ++g) {
    if (sym.in_base(g))
      base_gpus.push_back(g);
    if (!sym.fixed(g))
      moving.push_back(g);
  }
  netsim::FlowGraph graph;
  const int order = sym.order();
  // copies[k][e]: op index of base op k's copy under element e.
  std::vector<std::vector<int>> copies;
  for (int k = 0; k < base_ops; ++k) {
    const int src   = base_gpus[rng() % base_gpus.size()];
    int dst         = moving[rng() % moving.size()];
    const double mb = 1 + rng() % 64;
    // Up to two earlier ops, each seen from another building (a relative element).
    std::vector<std::pair<int, int>> deps;
    for (int d = 0; d < 2 && k > 0; ++d)
      if (rng() % 2)
        deps.push_back({static_cast<int>(rng() % k), static_cast<int>(rng() % order)});
    copies.emplace_back(order);
    for (int e = 0; e < order; ++e) {
      std::vector<int> after;
      for (auto [op, rel] : deps)
        after.push_back(copies[op][sym.compose(e, rel)]);
      copies[k][e] = graph.add_transfer(sym.move(src, e), sym.move(dst, e), mb * 1e6, after);
    }
  }
  std::vector<int> all;
  for (const auto& c : copies)
    all.insert(all.end(), c.begin(), c.end());
  const int barrier = graph.add_delay(1e-4, all);
  // A second wave after the barrier, from every building.
  for (int e = 0; e < order; ++e)
    graph.add_transfer(sym.move(base_gpus[0], e), sym.move(base_gpus.back(), e), 8e6, {barrier});
  return graph;
}

/// @brief tests/data/tiny.json with three regions of 2, 1 and 2 buildings: r0 and r2 alike, r1 between them.
topology::Topology uneven_topology()
{
  std::ifstream in(std::string(SPANSIM_SOURCE_DIR) + "/tests/data/tiny.json");
  auto doc       = nlohmann::json::parse(in);
  doc["regions"] = {
      {{"name", "r0"}, {"buildings", 2}}, {{"name", "r1"}, {"buildings", 1}}, {{"name", "r2"}, {"buildings", 2}}};
  return topology::Topology(topology::parse_topology_spec(doc, "tiny-uneven.json"));
}

} // namespace

TEST_CASE("building symmetry: the site's shifts map links to links of the same kind", "[symmetry]")
{
  auto topo = test::tiny_topology();
  auto both = topology::BuildingSymmetry::find(topo, {true, true});
  REQUIRE(both);
  CHECK(both->order() == 4);
  CHECK(both->describe() == "2 regions x 2 buildings per region alike");
  // Every GPU has one base image; moving it by its element gives it back.
  for (int g = 0; g < topo.gpu_count(); ++g) {
    const int e    = both->element_of(g);
    const int base = both->move(g, both->inverse(e));
    REQUIRE(both->in_base(base));
    REQUIRE(both->move(base, e) == g);
  }
  // The long-haul link is fixed by the shift of buildings inside the regions; a NIC by nothing.
  const int long_haul = topo.inter_region_link(0, 1);
  CHECK(both->stabilizer()[long_haul] == 2);
  CHECK(both->stabilizer()[topo.nic_link(0)] == 1);
  // A folded route from the base building to another building comes down the base building's own links.
  auto folded   = topo.with_folded_routes(both->canonical_hops(), both->stabilizer());
  const int far = both->move(5, 3);
  for (const auto& h : folded.route(5, far))
    if (topo.links()[h.link].tier == topology::Tier::nic)
      CHECK(both->in_base(topo.links()[h.link].a));
  CHECK(folded.links()[long_haul].bandwidth == Approx(topo.links()[long_haul].bandwidth / 2));

  std::vector<double> factors(topo.links().size(), 1.0);
  factors[topo.nic_link(40)] = 0.5; // one degraded NIC breaks every shift that moves it
  CHECK_FALSE(topology::BuildingSymmetry::find(topo.with_links_scaled(factors), {true, true}));
}

TEST_CASE("building symmetry: random symmetric graphs folded run as the whole graph", "[symmetry]")
{
  auto topo = test::tiny_topology();
  for (auto axes :
       {topology::SymmetryAxes{true, true}, topology::SymmetryAxes{true, false}, topology::SymmetryAxes{false, true}}) {
    auto sym = topology::BuildingSymmetry::find(topo, axes);
    REQUIRE(sym);
    for (std::uint32_t seed = 1; seed <= 3; ++seed) {
      auto graph  = symmetric_graph(topo, *sym, seed, 60);
      auto folded = netsim::detail::fold_graph(topo, graph);
      REQUIRE(folded);
      INFO(sym->describe() << ", seed " << seed << ": " << folded->description);
      CHECK(folded->images >= sym->order());
      CHECK(folded->graph.transfer_count() * static_cast<std::size_t>(folded->images) == graph.transfer_count());
      for (auto fidelity : {netsim::Fidelity::analytical, netsim::Fidelity::flow}) {
        auto full = netsim::run(topo, graph, fidelity, {});
        auto mine = netsim::detail::unfold_run(*folded, netsim::run(folded->topology, folded->graph, fidelity, {}));
        check_same_run(full, mine);
      }
    }
  }
}

TEST_CASE("building symmetry: a graph one element does not map onto itself is not folded by it", "[symmetry]")
{
  auto topo = test::tiny_topology();
  auto sym  = topology::BuildingSymmetry::find(topo, {true, true});
  REQUIRE(sym);
  auto graph = symmetric_graph(topo, *sym, 7, 30);
  // One more transfer in the last building alone: no shift maps the graph onto itself.
  netsim::FlowGraph extra = graph;
  extra.add_transfer(sym->move(0, 3), sym->move(9, 3), 1e6);
  CHECK_FALSE(netsim::detail::fold_graph(topo, extra));
  // A copy of different size.
  netsim::FlowGraph sized;
  for (int e = 0; e < sym->order(); ++e)
    sized.add_transfer(sym->move(0, e), sym->move(20, e), e == 2 ? 2e6 : 1e6);
  CHECK_FALSE(netsim::detail::fold_graph(topo, sized));
  // A delay waiting for two buildings that no shift swaps (each shift moves one of them out of the pair).
  netsim::FlowGraph half;
  std::vector<int> ops;
  for (int e = 0; e < sym->order(); ++e)
    ops.push_back(half.add_transfer(sym->move(0, e), sym->move(20, e), 1e6));
  half.add_delay(0, {ops[0], ops[3]});
  CHECK_FALSE(netsim::detail::fold_graph(topo, half));
}

TEST_CASE("building symmetry: training steps folded onto one building equal the whole step", "[symmetry][step]")
{
  struct Case {
    const char* what;
    topology::Topology topo;
    std::vector<std::string> buildings;
    int dp;
    std::string expect; ///< the symmetry used ("" : none)
  };
  std::vector<Case> cases;
  // DP outermost: each building holds whole pipelines, DP groups span the buildings.
  cases.push_back({"two buildings, DP across them",
                   topology::Topology(topology::load_topology_spec("two-buildings")),
                   {"bldg-a", "bldg-b"},
                   4,
                   "2 buildings alike"});
  // Four buildings in two regions: a DP ring is a symmetry of the regions' shift only (r0's second building to
  // r1's first has no image under the shift of buildings).
  auto tiny = test::tiny_topology();
  std::vector<std::string> all;
  for (int b = 0; b < tiny.building_count(); ++b)
    all.push_back(tiny.building_name(b));
  cases.push_back({"two regions of two buildings, DP across all", tiny, all, 8, "2 regions alike"});
  // Three regions of 2, 1 and 2 buildings, the job on the two alike: the shift of r0 and r2 fixes r1.
  auto uneven = uneven_topology();
  std::vector<std::string> alike;
  for (int b = 0; b < uneven.building_count(); ++b)
    if (uneven.region_of_building(b) != 1)
      alike.push_back(uneven.building_name(b));
  cases.push_back({"regions of 2, 1 and 2 buildings, DP across the alike two", uneven, alike, 8,
                   "2 regions alike, 1 region fixed"});
  for (auto& c : cases) {
    auto j = job(
        {{"tp", 4}, {"cp", 1}, {"pp", 2}, {"dp", c.dp}, {"data_parallel", "fsdp"}, {"reshard_after_forward", false}},
        {{"kind", "1f1b"}}, 16, 1024);
    if (c.topo.node_gpus() == 8)
      j = job(
          {{"tp", 8}, {"cp", 1}, {"pp", 2}, {"dp", c.dp}, {"data_parallel", "fsdp"}, {"reshard_after_forward", false}},
          {{"kind", "1f1b"}}, 16, 1024);
    auto graph = workload::build_step_graph(j);
    placement::Placement place(c.topo, j, {{Dim::tp, Dim::cp, Dim::pp, Dim::dp}, c.buildings});
    for (auto f : {netsim::Fidelity::analytical, netsim::Fidelity::flow}) {
      std::cout << c.what << ", " << name_of(f) << ":\n";
      netsim::StepOptions o;
      o.fidelity          = f;
      o.building_symmetry = false;
      auto full           = netsim::simulate_step(c.topo, graph, place, o);
      o.building_symmetry = true;
      auto folded         = netsim::simulate_step(c.topo, graph, place, o);
      CHECK(full.engine["building_symmetry"] == false);
      INFO(folded.engine.dump());
      REQUIRE(folded.engine["building_symmetry"].is_string());
      CHECK(folded.engine["building_symmetry"].get<std::string>().rfind(c.expect, 0) == 0);
      check_same_step(c.topo, full, folded);
    }
  }
}

TEST_CASE("building symmetry: a pipeline across buildings is not folded", "[symmetry][step]")
{
  // Stage 0 in bldg-a, stage 1 in bldg-b: the buildings run different programs.
  topology::Topology topo(topology::load_topology_spec("two-buildings"));
  auto j     = job({{"tp", 8}, {"cp", 1}, {"pp", 2}, {"dp", 4}, {"data_parallel", "ddp"}}, {{"kind", "1f1b"}}, 8, 1024);
  auto graph = workload::build_step_graph(j);
  placement::Placement place(topo, j, {{Dim::tp, Dim::cp, Dim::dp, Dim::pp}, {"bldg-a", "bldg-b"}});
  netsim::StepOptions o;
  o.fidelity = netsim::Fidelity::analytical;
  auto r     = netsim::simulate_step(topo, graph, place, o);
  CHECK(r.engine["building_symmetry"] == false);
}

TEST_CASE("building symmetry: regions of unequal size, the alike ones move and the others stay", "[symmetry]")
{
  auto topo = uneven_topology();
  CHECK_FALSE(topology::BuildingSymmetry::find(topo, {true, true}));    // every region moving: they differ
  CHECK_FALSE(topology::BuildingSymmetry::find(topo, {true, true, 1})); // r1 alone: a group of one
  auto sym = topology::BuildingSymmetry::find(topo, {true, true, 2});
  REQUIRE(sym);
  CHECK(sym->order() == 4);
  CHECK(sym->describe() == "2 regions x 2 buildings per region alike, 1 region fixed");
  int fixed = 0;
  for (int g = 0; g < topo.gpu_count(); ++g) {
    const bool in_r1 = topo.region_of_building(topo.locate(g).building) == 1;
    REQUIRE(sym->fixed(g) == in_r1);
    if (in_r1) {
      ++fixed;
      for (int e = 0; e < sym->order(); ++e)
        REQUIRE(sym->move(g, e) == g);
      continue;
    }
    const int e    = sym->element_of(g);
    const int base = sym->move(g, sym->inverse(e));
    REQUIRE(sym->in_base(base));
    REQUIRE(sym->move(base, e) == g);
    // The region shift takes r0 to r2 and back, over r1.
    const int r = topo.region_of_building(topo.locate(g).building);
    CHECK(topo.region_of_building(topo.locate(sym->move(g, 2)).building) == 2 - r);
  }
  CHECK(fixed == topo.gpu_count() / 5);
  // Counted as hops in the forward direction: a link of r1 is fixed by every element; r0-r2 by the building shifts
  // (the region shift flips its direction); r0-r1 moves to r2-r1, the two in one orbit.
  CHECK(sym->stabilizer()[topo.nic_link(topo.gpu_count() / 2)] == 4);
  CHECK(sym->stabilizer()[topo.inter_region_link(0, 2)] == 2);
  const int l01 = topo.inter_region_link(0, 1), l21 = topo.inter_region_link(2, 1);
  CHECK(sym->stabilizer()[l01] == 2);
  const auto& c = sym->canonical_hops();
  CHECK(std::set<int>{c[2 * l01], c[2 * l01 + 1]} == std::set<int>{c[2 * l21], c[2 * l21 + 1]});
}

TEST_CASE("building symmetry: partial symmetry folds graphs on the alike regions exactly", "[symmetry]")
{
  auto topo = uneven_topology();
  auto sym  = topology::BuildingSymmetry::find(topo, {true, true, 2});
  REQUIRE(sym);
  for (std::uint32_t seed = 1; seed <= 3; ++seed) {
    auto graph  = symmetric_graph(topo, *sym, seed, 60);
    auto folded = netsim::detail::fold_graph(topo, graph);
    REQUIRE(folded);
    INFO("seed " << seed << ": " << folded->description);
    CHECK(folded->description.find("1 region fixed") != std::string::npos);
    CHECK(folded->images == 4);
    CHECK(folded->graph.transfer_count() * 4 == graph.transfer_count());
    for (auto fidelity : {netsim::Fidelity::analytical, netsim::Fidelity::flow}) {
      auto full = netsim::run(topo, graph, fidelity, {});
      auto mine = netsim::detail::unfold_run(*folded, netsim::run(folded->topology, folded->graph, fidelity, {}));
      check_same_run(full, mine);
    }
    // One transfer into the fixed region, copied from every moving building alike: still not folded (its links
    // would be divided among images that the fixed region's own traffic does not have).
    auto touching = graph;
    const int r1  = topo.gpu_count() / 2;
    REQUIRE(sym->fixed(r1));
    for (int e = 0; e < sym->order(); ++e)
      touching.add_transfer(sym->move(0, e), r1, 1e6);
    CHECK_FALSE(netsim::detail::fold_graph(topo, touching));
  }
}
