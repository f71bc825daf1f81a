// Topology counts, routes and boundary capacities against values computed by hand from the spec.
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "tests/support.hpp"
#include "topology/topology.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>

using namespace spansim;
using namespace spansim::topology;
using spansim::test::expect_within;

namespace {

TopologySpec tiny_spec()
{
  return load_topology_spec(std::string(SPANSIM_SOURCE_DIR) + "/tests/data/tiny.json");
}

std::int64_t tier_count(const Topology& t, Tier tier)
{
  return std::count_if(t.links().begin(), t.links().end(), [&](const Link& l) { return l.tier == tier; });
}

// Every route must be a connected walk from the source GPU to the destination GPU.
void check_walk(const Topology& t, int src, int dst, const std::vector<Hop>& route)
{
  int at = src;
  for (const auto& h : route) {
    const auto& l = t.links()[h.link];
    int from      = h.forward ? l.a : l.b;
    int to        = h.forward ? l.b : l.a;
    REQUIRE(from == at);
    at = to;
  }
  REQUIRE(at == dst);
}

} // namespace

TEST_CASE("tiny topology: element counts per tier match the spec arithmetic", "[topology]")
{
  Topology t(tiny_spec());
  const auto& c = t.counts();
  // 2 regions x 2 buildings x 2 pods x 4 nodes x 4 GPUs.
  CHECK(c.gpus == 128);
  CHECK(c.nodes == 32);
  CHECK(c.pods == 8);
  CHECK(c.buildings == 4);
  CHECK(c.regions == 2);
  // Leaf radix 4 at 1:1 gives 2 down and 2 up ports; rails: 4 rails x ceil(4 nodes / 2) leaves per pod.
  CHECK(c.leaf_down_ports == 2);
  CHECK(c.leaf_up_ports == 2);
  CHECK(c.leaves_per_pod == 8);
  CHECK(c.leaves == 64);
  // 8 leaves x 2 uplinks = 16 spine ports per pod, spine radix 4: 4 spines per pod.
  CHECK(c.physical_spines == 32);
  CHECK(tier_count(t, Tier::nvlink) == 128);
  CHECK(tier_count(t, Tier::nic) == 128);
  CHECK(tier_count(t, Tier::leaf_spine) == 64);
  CHECK(tier_count(t, Tier::pod_aggregation) == 8);
  CHECK(tier_count(t, Tier::inter_building) == 2); // one pair per region
  CHECK(tier_count(t, Tier::building_uplink) == 4);
  CHECK(tier_count(t, Tier::inter_region) == 1);
  // Vertices: GPUs + NVSwitches + leaves + one spine per pod + one aggregation per building + 2 gateways.
  CHECK(t.vertex_kinds().size() == 128u + 32 + 64 + 8 + 4 + 2);
}

TEST_CASE("tiny topology: link bandwidths and latencies follow the spec", "[topology]")
{
  Topology t(tiny_spec());
  const auto& s    = t.spec();
  const double nic = 100e9 / 8;
  expect_within("leaf uplink (2 ports x 12.5 GB/s)", 2 * nic, t.links()[t.leaf_uplink(0)].bandwidth, 1e-9);
  expect_within("pod uplink (8 leaves x 25 GB/s / 2)", 8 * 2 * nic / 2, t.links()[t.pod_uplink(0)].bandwidth, 1e-9);
  expect_within("inter-building latency (1 km x 5 us/km + 1 us)", 6e-6, t.links()[t.inter_building_link(0, 1)].latency,
                1e-9);
  expect_within("inter-region latency (100 km x 5 us/km + 10 us)", 510e-6, t.links()[t.inter_region_link(0, 1)].latency,
                1e-9);
  CHECK(s.inter_region.distance == Approx(100e3));
}

TEST_CASE("tiny topology: hop counts of routes at every level", "[topology]")
{
  Topology t(tiny_spec());
  struct Case {
    int src, dst;
    std::size_t hops;
    const char* what;
  };
  // GPU g: node g/4, rail g%4; 4 nodes per pod, 2 nodes per leaf of a rail; 16 GPUs per pod, 32 per building.
  const Case cases[] = {
      {0, 1, 2, "same node: NVLink up and down"},
      {0, 4, 2, "same rail, same leaf: NIC up and down"},
      {0, 8, 4, "same rail, other leaf: through the pod spine"},
      {0, 5, 4, "other rail, other node: through the pod spine"},
      {0, 16, 6, "other pod: through the aggregation layer"},
      {0, 32, 7, "other building: one inter-building link"},
      {0, 64, 9, "other region: building uplinks and the inter-region link"},
  };
  for (const auto& c : cases) {
    auto r = t.route(c.src, c.dst);
    INFO(c.what << ": " << c.src << " -> " << c.dst << " expected " << c.hops << " hops, got " << r.size());
    CHECK(r.size() == c.hops);
    check_walk(t, c.src, c.dst, r);
    auto back = t.route(c.dst, c.src);
    CHECK(back.size() == r.size());
    check_walk(t, c.dst, c.src, back);
  }
  // Cross-region path latency: 2 NIC + 2 leaf uplinks (1 us each) + 2 pod uplinks (3 us) + 2 building uplinks
  // (2 us) + 510 us of long haul.
  expect_within("cross-region path latency", 4e-6 + 6e-6 + 4e-6 + 510e-6, t.route_latency(t.route(0, 64)), 1e-9);
  CHECK(t.route_bandwidth(t.route(0, 64)) == Approx(100e9 / 8));
}

TEST_CASE("every route of a topology is a connected walk (exhaustive on tiny)", "[topology]")
{
  Topology t(tiny_spec());
  for (int s = 0; s < t.gpu_count(); ++s)
    for (int d = 0; d < t.gpu_count(); ++d)
      check_walk(t, s, d, t.route(s, d));
}

TEST_CASE("a partly filled leaf keeps the oversubscription ratio on its uplinks", "[topology]")
{
  auto spec      = tiny_spec();
  spec.pod.nodes = 3; // rail leaves: nodes {0, 1} and {2}
  Topology t(spec);
  const double nic = 100e9 / 8;
  CHECK(t.counts().leaves_per_pod == 8);
  expect_within("full leaf uplink (2 GPUs x 12.5 GB/s x 2 up / 2 down)", 2 * nic, t.links()[t.leaf_uplink(0)].bandwidth,
                1e-9);
  expect_within("half leaf uplink (1 GPU)", nic, t.links()[t.leaf_uplink(1)].bandwidth, 1e-9);
  // Pod uplink: 4 rails x (25 + 12.5) GB/s / aggregation oversubscription 2.
  expect_within("pod uplink", 4 * 3 * nic / 2, t.links()[t.pod_uplink(0)].bandwidth, 1e-9);
}

TEST_CASE("non-rail-optimized pods put whole nodes under one leaf", "[topology]")
{
  auto spec               = tiny_spec();
  spec.pod.rail_optimized = false;
  spec.pod.leaf_radix     = 16; // 8 down: two 4-GPU nodes per leaf
  Topology t(spec);
  CHECK(t.counts().leaves_per_pod == 2);
  CHECK(t.route(0, 5).size() == 2); // node 0 and node 1 share a leaf: NIC up, NIC down
  CHECK(t.route(0, 8).size() == 4); // node 2 is under the other leaf
}

TEST_CASE("capacity across building and region boundaries: max-flow equals the formula", "[topology]")
{
  // Formula from the spec: out of building b, min(b's pod uplinks, b's inter-building links + its uplink to
  // the region gateway); out of region r, min(sum over its buildings of min(pod uplinks, building uplink),
  // its inter-region links). The receiving side is never narrower in these cases.
  auto formula = [](const TopologySpec& s) {
    const double nic = s.pod.nic_bandwidth;
    const int down =
        static_cast<int>(std::lround(s.pod.leaf_radix * s.pod.oversubscription / (1 + s.pod.oversubscription)));
    const int up          = s.pod.leaf_radix - down;
    const double leaves   = s.node.gpus * std::ceil(double(s.pod.nodes) / down);
    const double pod_up   = leaves * up * nic / s.building.aggregation_oversubscription;
    const double egress   = s.building.pods * pod_up;
    const double building = std::min(egress, s.inter_building.bandwidth + s.building_uplink_bandwidth);
    const double region   = std::min(2 * std::min(egress, s.building_uplink_bandwidth), s.inter_region.bandwidth);
    return std::pair{building, region};
  };
  auto check = [&](const TopologySpec& spec, const char* label) {
    Topology t(spec);
    auto [building, region] = formula(spec);
    for (const auto& b : t.boundary_capacities()) {
      std::cout << label << " " << b.kind << " " << b.name << ": ";
      expect_within("max-flow vs formula", b.kind == "building" ? building : region, b.max_flow, 1e-9);
    }
  };
  auto spec = tiny_spec();
  check(spec, "links bound:");
  // Narrow pod uplinks: now the aggregation layer inside the building is the bottleneck.
  spec.building.aggregation_oversubscription = 20;
  spec.inter_region.bandwidth                = 100e9;
  check(spec, "aggregation bound:");
}

TEST_CASE("presets load and have the published sizes", "[topology][presets]")
{
  struct Preset {
    const char* name;
    std::int64_t gpus, buildings, regions;
  };
  const Preset presets[] = {{"hgx-h100-pod", 3072, 1, 1},
                            {"llama3-24k", 24576, 1, 1},
                            {"two-buildings", 32768, 2, 1},
                            {"h100-b200-campus", 32768, 2, 1},
                            {"two-regions", 131072, 4, 2}};
  for (const auto& p : presets) {
    Topology t(load_topology_spec(p.name));
    INFO(p.name << ": " << t.counts().gpus << " GPUs");
    CHECK(t.counts().gpus == p.gpus);
    CHECK(t.counts().buildings == p.buildings);
    CHECK(t.counts().regions == p.regions);
  }
  Topology pod(load_topology_spec("hgx-h100-pod"));
  // 384 nodes per rail / 32 down ports = 12 leaves per rail, 8 rails; 96 x 32 uplinks / 64-port spines = 48.
  CHECK(pod.counts().leaves == 96);
  CHECK(pod.counts().physical_spines == 48);
  CHECK(pod.spec().node.nvlink_bandwidth == Approx(450e9));
  CHECK(pod.spec().pod.nic_bandwidth == Approx(50e9));
  Topology llama(load_topology_spec("llama3-24k"));
  // Pods join the aggregation layer at 1:7: 3,072 GPUs x 50 GB/s / 7 per pod.
  expect_within("llama3-24k pod uplink", 3072 * 50e9 / 7, llama.links()[llama.pod_uplink(0)].bandwidth, 1e-9);
}

TEST_CASE("the canonical JSON of a spec reads back into the same topology", "[topology]")
{
  auto spec = tiny_spec();
  auto j    = spec.to_json();
  // The effective latency and the file are outputs, not inputs.
  j.erase("file");
  for (const char* key : {"inter_building", "inter_region"}) {
    j[key].erase("effective_latency");
  }
  auto again = parse_topology_spec(j, "roundtrip");
  Topology a(spec), b(again);
  REQUIRE(a.links().size() == b.links().size());
  for (std::size_t i = 0; i < a.links().size(); ++i) {
    CHECK(a.links()[i].bandwidth == Approx(b.links()[i].bandwidth));
    CHECK(a.links()[i].latency == Approx(b.links()[i].latency));
  }
}

TEST_CASE("unknown preset names list the presets", "[topology]")
{
  CHECK_THROWS_WITH(load_topology_spec("no-such-topology"),
                    Catch::Contains("not a preset name") && Catch::Contains("two-regions"));
}

TEST_CASE("every route is a shortest path of the Boost graph in which GPUs do not forward", "[topology]")
{
  // An independent check of the hierarchical routing: breadth-first search over the explicit graph.
  Topology t(tiny_spec());
  const Graph g = t.to_graph();
  const auto n  = boost::num_vertices(g);
  for (int src = 0; src < t.gpu_count(); ++src) {
    std::vector<int> dist(n, -1);
    std::vector<std::size_t> queue{static_cast<std::size_t>(src)};
    dist[src] = 0;
    for (std::size_t head = 0; head < queue.size(); ++head) {
      auto v = queue[head];
      if (t.vertex_kinds()[v] == VertexKind::gpu && static_cast<int>(v) != src)
        continue; // a GPU ends a path, it never forwards
      for (auto [e, end] = boost::out_edges(v, g); e != end; ++e) {
        auto w = boost::target(*e, g);
        if (dist[w] < 0) {
          dist[w] = dist[v] + 1;
          queue.push_back(w);
        }
      }
    }
    for (int dst = 0; dst < t.gpu_count(); ++dst) {
      INFO(src << " -> " << dst << ": route " << t.route(src, dst).size() << " hops, shortest " << dist[dst]);
      REQUIRE(static_cast<int>(t.route(src, dst).size()) == dist[dst]);
    }
  }
}

TEST_CASE("faults: a failed link lowers a boundary's max-flow by exactly its capacity", "[topology][faults]")
{
  // In tiny, a building's boundary is link-bound (inter-building link + building uplink): failing the
  // inter-building link of region east takes exactly its capacity off both of east's buildings.
  Topology t(tiny_spec());
  const int k           = t.inter_building_link(0, 1);
  const double capacity = t.links()[k].bandwidth;
  FaultSpec f;
  f.links.push_back({t.link_name(k), 0, {}});
  Topology broken = t.with_faults(f);
  CHECK(broken.failed_links() == 1);
  const auto before = t.boundary_capacities(), after = broken.boundary_capacities();
  for (std::size_t i = 0; i < before.size(); ++i) {
    std::cout << before[i].kind << " " << before[i].name << ": ";
    const bool touched =
        before[i].kind == "building" && (before[i].name == t.building_name(0) || before[i].name == t.building_name(1));
    expect_within("max-flow with the link failed", before[i].max_flow - (touched ? capacity : 0), after[i].max_flow,
                  1e-9);
  }
  // Degraded to a quarter: three quarters of it lost.
  f.links[0].bandwidth = 0.25;
  Topology degraded    = t.with_faults(f);
  CHECK(degraded.degraded_links() == 1);
  expect_within("max-flow with the link at a quarter", before[0].max_flow - 0.75 * capacity,
                degraded.boundary_capacities()[0].max_flow, 1e-9);
}

TEST_CASE("faults: what a failed element cuts off, and names that do not exist", "[topology][faults]")
{
  Topology t(tiny_spec());
  const std::string leaf = t.vertex_name(t.leaf_vertex(1));
  FaultSpec f;
  f.switches.push_back({leaf, {}});
  f.nodes.push_back({"r0-b0/pod1/node2", {}});
  Topology broken = t.with_faults(f);
  int cut = 0, node = 0;
  for (int g = 0; g < t.gpu_count(); ++g) {
    const auto loc = t.locate(g);
    if (loc.leaf == 1) {
      ++cut;
      CHECK(broken.gpu_fault(g).find("switch " + leaf + " failed") != std::string::npos);
    } else if (broken.vertex_name(g).rfind("r0-b0/pod1/node2/", 0) == 0) {
      ++node;
      CHECK(broken.gpu_fault(g) == "node r0-b0/pod1/node2 failed");
    } else {
      CHECK(broken.gpu_fault(g).empty());
    }
  }
  CHECK(cut > 0);
  CHECK(node == t.spec().node.gpus);
  FaultSpec bad;
  bad.links.push_back(
      {"r0-b0/aggregation -- mars/aggregation", 0, spansim::spec::Location{"f.json", "$.faults.links[0]"}});
  CHECK_THROWS_WITH(t.with_faults(bad), Catch::Contains("$.faults.links[0].name") && Catch::Contains("unknown link"));
  FaultSpec bad_node;
  bad_node.nodes.push_back({"r0-b0/pod9/node0", spansim::spec::Location{"f.json", "$.faults.nodes[0]"}});
  CHECK_THROWS_WITH(t.with_faults(bad_node), Catch::Contains("unknown node"));
  // Random faults are seeded: the same seed, the same links.
  FaultSpec r;
  r.random_links = 0.2;
  r.seed         = 4;
  CHECK(t.with_faults(r).failed_links() == t.with_faults(r).failed_links());
  CHECK(t.with_faults(r).failed_links() > 0);
}

TEST_CASE("a node's NVLS warp rate: its NVLink generation's unless stated and read back from the effective JSON",
          "[topology]")
{
  // dgx-h100 states none: Hopper's fitted rate (topology/fabrics.json); a stated one replaces it and reads back.
  auto spec = load_topology_spec("dgx-h100");
  std::cout << "  dgx-h100: NVLS warp rate " << spec.node.nvls_warp_rate / 1e9 << " GB/s (nvlink4's "
            << nvlink_nvls_warp_rate(NvLink::nvlink4) / 1e9 << ")\n";
  CHECK(spec.node.nvls_warp_rate == nvlink_nvls_warp_rate(NvLink::nvlink4));
  auto j                      = spec.to_json();
  j["node"]["nvls_warp_rate"] = "2.5GBps";
  j.erase("file");
  for (const char* key : {"inter_building", "inter_region"})
    if (j.contains(key))
      j[key].erase("effective_latency");
  auto stated = parse_topology_spec(j, "stated");
  expect_within("stated NVLS warp rate (bytes/s)", 2.5e9, stated.node.nvls_warp_rate, 1e-12);
  auto again = parse_topology_spec(
      [&] {
        auto k = stated.to_json();
        k.erase("file");
        for (const char* key : {"inter_building", "inter_region"})
          if (k.contains(key))
            k[key].erase("effective_latency");
        return k;
      }(),
      "again");
  expect_within("NVLS warp rate read back (bytes/s)", 2.5e9, again.node.nvls_warp_rate, 1e-12);
  j["node"]["nvls_warp_rate"] = "0GBps";
  CHECK_THROWS_WITH(parse_topology_spec(j, "zero"),
                    Catch::Contains("nvls_warp_rate") && Catch::Contains("greater than zero"));
}

TEST_CASE("a node's send/recv channel rates: its NVLink generation's unless stated", "[topology]")
{
  // dgx-b200 states none: Blackwell's fitted rates (topology/fabrics.json); stated ones replace them.
  auto spec = load_topology_spec("dgx-b200");
  std::cout << "  dgx-b200: send/recv channel " << spec.node.p2p_channel_rate / 1e9 << " GB/s, LL "
            << spec.node.p2p_ll_channel_rate / 1e9 << " GB/s (nvlink5's "
            << nvlink_p2p_channel_rate(NvLink::nvlink5) / 1e9 << ", "
            << nvlink_p2p_ll_channel_rate(NvLink::nvlink5) / 1e9 << ")\n";
  CHECK(spec.node.p2p_channel_rate == nvlink_p2p_channel_rate(NvLink::nvlink5));
  CHECK(spec.node.p2p_ll_channel_rate == nvlink_p2p_ll_channel_rate(NvLink::nvlink5));
  auto j = spec.to_json();
  j.erase("file");
  for (const char* key : {"inter_building", "inter_region"})
    if (j.contains(key))
      j[key].erase("effective_latency");
  j["node"]["p2p_channel_rate"]    = "25GBps";
  j["node"]["p2p_ll_channel_rate"] = "10GBps";
  const auto stated                = parse_topology_spec(j, "stated");
  expect_within("stated send/recv channel rate (bytes/s)", 25e9, stated.node.p2p_channel_rate, 1e-12);
  expect_within("stated LL channel rate (bytes/s)", 10e9, stated.node.p2p_ll_channel_rate, 1e-12);
}
