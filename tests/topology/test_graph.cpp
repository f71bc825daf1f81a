// Imported graphs: least-cost routes against Boost.Graph's shortest paths, exported copies that route as their
// originals, failed links routed around, and bad graphs refused with their file and path.
#include "common/error.hpp"
#include "topology/topology.hpp"

#include <boost/graph/dijkstra_shortest_paths.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>

using nlohmann::json;
namespace tp = spansim::topology;

namespace {

// A 3 x 3 torus of pods (not a tree: every pod switch has four neighbours and pairs have several least-cost
// routes), two nodes of two GPUs per pod, every GPU on its NVSwitch and on its pod's switch. Columns 0-1 are
// building "west", column 2 building "east".
json torus(int n = 3)
{
  json vertices = json::array(), links = json::array();
  auto pod_name = [&](int x, int y) { return "p" + std::to_string(x) + std::to_string(y); };
  auto building = [&](int x) { return x < n - 1 ? "west" : "east"; };
  for (int x = 0; x < n; ++x)
    for (int y = 0; y < n; ++y) {
      const std::string p = pod_name(x, y);
      for (int node = 0; node < 2; ++node) {
        const std::string nn = p + "/n" + std::to_string(node);
        vertices.push_back({{"id", nn + "/nvs"}, {"kind", "nvswitch"}, {"building", building(x)}});
        for (int g = 0; g < 2; ++g) {
          const std::string gpu = nn + "/g" + std::to_string(g);
          vertices.push_back({{"id", gpu}, {"kind", "gpu"}, {"building", building(x)}, {"pod", p}, {"node", nn}});
          links.push_back({{"a", gpu}, {"b", nn + "/nvs"}, {"bandwidth", "400GBps"}, {"latency", "0.5us"}});
          links.push_back({{"a", gpu}, {"b", p + "/sw"}, {"bandwidth", "400Gbps"}, {"latency", "1us"}});
        }
      }
      vertices.push_back({{"id", p + "/sw"}, {"kind", "spine"}, {"building", building(x)}});
    }
  for (int x = 0; x < n; ++x)
    for (int y = 0; y < n; ++y) {
      links.push_back({{"a", pod_name(x, y) + "/sw"},
                       {"b", pod_name((x + 1) % n, y) + "/sw"},
                       {"bandwidth", "3.2Tbps"},
                       {"latency", "5us"}});
      links.push_back({{"a", pod_name(x, y) + "/sw"},
                       {"b", pod_name(x, (y + 1) % n) + "/sw"},
                       {"bandwidth", "3.2Tbps"},
                       {"latency", "5us"}});
    }
  return {{"name", "torus"},
          {"regions", json::array({{{"name", "r"}, {"buildings", {"west", "east"}}}})},
          {"graph", {{"vertices", vertices}, {"links", links}}}};
}

tp::Topology load(const json& doc)
{
  return tp::Topology(tp::parse_topology_spec(doc, "graph.json"));
}

// A small hierarchical template with rails, two pods per building, two buildings in one region and a second region.
json template_topology()
{
  return {
      {"name", "small-campus"},
      {"node", {{"gpus", 4}, {"nvlink_bandwidth", "450GBps"}, {"nvlink_latency", "0.5us"}, {"nccl_efficiency", 0.8}}},
      {"pod",
       {{"nodes", 3},
        {"rail_optimized", true},
        {"nic_bandwidth", "400Gbps"},
        {"leaf_radix", 4},
        {"spine_radix", 8},
        {"oversubscription", 1},
        {"link_latency", "1us"},
        {"nccl_efficiency", 0.9}}},
      {"building", {{"pods", 2}, {"aggregation_oversubscription", 3}, {"aggregation_latency", "2us"}}},
      {"regions",
       json::array({{{"name", "east"}, {"buildings", {"e-a", "e-b"}}}, {{"name", "west"}, {"buildings", 1}}})},
      {"inter_building", {{"bandwidth", "10Tbps"}, {"distance", "3km"}, {"equipment_latency", "2us"}}},
      {"inter_region",
       {{"bandwidth", "5Tbps"},
        {"distance", "800km"},
        {"equipment_latency", "20us"},
        {"building_uplink", "20Tbps"},
        {"building_uplink_latency", "2us"}}}};
}

} // namespace

TEST_CASE("graph: routes on a torus of pods are Boost.Graph's shortest paths, and every tie is kept",
          "[topology][graph]")
{
  const auto t = load(torus());
  REQUIRE(t.imported());
  REQUIRE(t.gpu_count() == 36);
  // Boost's Dijkstra from each GPU over the graph without the other GPUs (GPUs do not forward): unit costs.
  const int n = static_cast<int>(t.vertex_kinds().size());
  int checked = 0, with_ties = 0;
  for (int src = 0; src < t.gpu_count(); ++src) {
    tp::Graph g(n);
    for (std::size_t k = 0; k < t.links().size(); ++k) {
      const auto& l   = t.links()[k];
      const bool a_ok = l.a >= t.gpu_count() || l.a == src, b_ok = l.b >= t.gpu_count() || l.b == src;
      // Edges into other GPUs are kept (a route ends there), edges out of them are not.
      if (a_ok)
        boost::add_edge(l.a, l.b, tp::EdgeProperties{static_cast<int>(k), true, 1.0}, g);
      if (b_ok)
        boost::add_edge(l.b, l.a, tp::EdgeProperties{static_cast<int>(k), false, 1.0}, g);
    }
    std::vector<double> dist(n);
    std::vector<int> pred(n);
    boost::dijkstra_shortest_paths(
        g, src,
        boost::weight_map(boost::get(&tp::EdgeProperties::capacity, g))
            .distance_map(boost::make_iterator_property_map(dist.begin(), boost::get(boost::vertex_index, g)))
            .predecessor_map(boost::make_iterator_property_map(pred.begin(), boost::get(boost::vertex_index, g))));
    // Shortest-path counts by dynamic programming over Boost's distances, vertices in distance order.
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return dist[a] < dist[b]; });
    std::vector<double> paths(n, 0);
    paths[src] = 1;
    for (int v : order)
      if (v == src || v >= t.gpu_count())
        for (auto [e, end] = boost::out_edges(v, g); e != end; ++e) {
          const int u = static_cast<int>(boost::target(*e, g));
          if (dist[u] == dist[v] + 1)
            paths[u] += paths[v];
        }
    for (int dst = 0; dst < t.gpu_count(); ++dst) {
      if (dst == src)
        continue;
      const auto route = t.route(src, dst);
      const auto all   = t.equal_cost_routes(src, dst, 1000);
      CHECK(static_cast<double>(route.size()) == dist[dst]);
      CHECK(static_cast<double>(all.size()) == paths[dst]);
      CHECK(all.front() == route);
      // A walk from src to dst.
      int at = src;
      for (const auto& h : route) {
        const auto& l = t.links()[h.link];
        CHECK((h.forward ? l.a : l.b) == at);
        at = h.forward ? l.b : l.a;
      }
      CHECK(at == dst);
      ++checked;
      with_ties += all.size() > 1;
    }
  }
  std::cout << "routes checked " << checked << ", with several least-cost routes " << with_ties << "\n";
  CHECK(with_ties > 0);
}

TEST_CASE("graph: an exported template imports as the same graph with the same routes (JSON and GraphML)",
          "[topology][graph]")
{
  const tp::Topology original(tp::parse_topology_spec(template_topology(), "small.json"));
  const auto from_json = load(original.to_graph_json());
  const auto path      = (std::filesystem::temp_directory_path() / "spansim-test-export.graphml").string();
  {
    std::ofstream out(path);
    original.write_graphml(out);
  }
  const tp::Topology from_graphml(tp::load_topology_spec(path));
  std::filesystem::remove(path);
  for (const auto* copy : {&from_json, &from_graphml}) {
    REQUIRE(copy->gpu_count() == original.gpu_count());
    REQUIRE(copy->links().size() == original.links().size());
    for (std::size_t k = 0; k < original.links().size(); ++k) {
      CHECK(copy->links()[k].bandwidth == original.links()[k].bandwidth);
      CHECK(copy->links()[k].latency == original.links()[k].latency);
      CHECK(copy->links()[k].tier == original.links()[k].tier);
    }
    int differ = 0;
    for (int s = 0; s < original.gpu_count(); ++s)
      for (int d = 0; d < original.gpu_count(); ++d)
        differ += copy->route(s, d) != original.route(s, d);
    CHECK(differ == 0);
    for (int g = 0; g < original.gpu_count(); ++g) {
      CHECK(copy->locate(g).building == original.locate(g).building);
      CHECK(copy->locate(g).local == original.locate(g).local);
      CHECK(copy->vertex_name(g) == original.vertex_name(g));
    }
    const auto a = original.boundary_capacities(), b = copy->boundary_capacities();
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(b[i].boundary_links == a[i].boundary_links);
      CHECK(b[i].max_flow == Approx(a[i].max_flow).epsilon(1e-12));
    }
  }
}

TEST_CASE("graph: an exported template keeps its NICs: shared NIC vertices and fused ports per GPU",
          "[topology][graph][nccl]")
{
  // 4-GPU nodes with 2 NICs (GPUs 0-1 and 2-3 behind one each), and with 8 ports (two fused per GPU).
  for (int nics : {2, 8}) {
    auto doc            = template_topology();
    doc["node"]["nics"] = nics;
    const tp::Topology original(tp::parse_topology_spec(doc, "small.json"));
    const auto copy = load(original.to_graph_json());
    const auto &a = original.spec().node, &b = copy.spec().node;
    INFO("nics " << nics);
    std::cout << "nics " << nics << ": original " << a.nic_count() << " NICs at " << original.spec().pod.nic_rate()
              << " B/s per port, imported " << b.nic_count() << " at " << copy.spec().pod.nic_bandwidth << "\n";
    CHECK(b.nic_count() == a.nic_count());
    CHECK(b.nic_gpus == a.nic_gpus);
    CHECK(b.ports_per_gpu() == a.ports_per_gpu());
    for (int local = 0; local < a.gpus; ++local)
      CHECK(b.nic_of(local) == a.nic_of(local));
    CHECK(copy.spec().pod.nic_bandwidth == Approx(original.spec().pod.nic_rate()).epsilon(1e-12));
  }
  // A block that says fewer NICs than GPUs where the links give every GPU its own port: refused.
  auto doc                     = load(template_topology()).to_graph_json();
  doc["graph"]["nccl"]["nics"] = 2;
  CHECK_THROWS_WITH(load(doc), Catch::Contains("graph.json") && Catch::Contains("NIC vertices"));
}

TEST_CASE("graph: a failed torus link is routed around, a GPU whose links all fail is cut off",
          "[topology][graph][faults]")
{
  const auto t = load(torus());
  // p00 to p10 is one hop on the torus; with that link failed, two.
  const int src = 0; // p00/n0/g0
  int dst       = -1;
  for (int g = 0; g < t.gpu_count(); ++g)
    if (t.vertex_name(g) == "p10/n0/g0")
      dst = g;
  REQUIRE(dst >= 0);
  CHECK(t.route(src, dst).size() == 3); // GPU -> p00/sw -> p10/sw -> GPU
  tp::FaultSpec f;
  f.links.push_back({"p00/sw -- p10/sw", 0, {}});
  const auto broken = t.with_faults(f); // t has cached the direct route: the copy must walk afresh
  CHECK(broken.failed_links() == 1);
  const auto detour = broken.route(src, dst);
  CHECK(detour.size() == 4); // the other way round the ring of three: p00 -> p20 -> p10
  for (const auto& h : detour)
    CHECK(broken.links()[h.link].bandwidth > 0);
  CHECK(broken.gpu_fault(dst).empty());

  tp::FaultSpec cut;
  cut.links.push_back({"p00/n0/g0 -- p00/n0/nvs", 0, {}});
  cut.links.push_back({"p00/n0/g0 -- p00/sw", 0, {}});
  const auto isolated = t.with_faults(cut);
  CHECK_THAT(isolated.gpu_fault(0), Catch::Contains("cut off"));
  CHECK(isolated.gpu_fault(1).empty());
}

TEST_CASE("graph: bad graphs are refused with the file, the path and what is wrong", "[topology][graph][errors]")
{
  auto refused = [](json doc, const std::string& what) {
    INFO(what);
    CHECK_THROWS_WITH(load(doc), Catch::Contains("graph.json") && Catch::Contains(what));
  };
  {
    auto d                              = torus();
    d["graph"]["links"][1]["bandwidth"] = "0Gbps";
    refused(d, "greater than zero");
  }
  {
    auto d = torus();
    d["graph"]["links"][1].erase("bandwidth");
    refused(d, "$.graph.links[1]");
  }
  {
    auto d                                = torus();
    d["graph"]["vertices"][1]["building"] = "north";
    refused(d, "unknown building \"north\"");
  }
  {
    auto d                      = torus();
    d["graph"]["links"][0]["b"] = "nowhere";
    refused(d, "unknown vertex \"nowhere\"");
  }
  {
    auto d                            = torus();
    d["graph"]["vertices"][0]["kind"] = "router";
    refused(d, "allowed: \"gpu\", \"nvswitch\"");
  }
  {
    auto d                            = torus();
    d["graph"]["vertices"][1]["rack"] = 3;
    refused(d, "rack");
  }
  {
    auto d = torus();
    d["graph"]["links"].push_back({{"a", "p00/n0/g0"}, {"b", "p00/n0/g1"}, {"bandwidth", "1Gbps"}, {"latency", "1us"}});
    refused(d, "not directly");
  }
  {
    // A pod whose switch has no torus links: its GPUs reach nothing outside the pod.
    auto d    = torus();
    auto& ls  = d["graph"]["links"];
    json keep = json::array();
    for (const auto& l : ls)
      if (l["a"].get<std::string>().rfind("p22/sw", 0) != 0 && l["b"].get<std::string>() != "p22/sw")
        keep.push_back(l);
      else if (l["a"].get<std::string>().find("/g") != std::string::npos)
        keep.push_back(l);
    ls = keep;
    refused(d, "disconnected");
  }
  {
    auto d                            = torus();
    d["graph"]["vertices"][1]["node"] = "p01/n0"; // a GPU of pod p00 in a node of pod p01
    refused(d, "has GPUs in two places");
  }
  {
    auto d                       = torus();
    d["graph"]["rail_optimized"] = true;
    refused(d, "rail_optimized");
  }
  {
    auto d    = torus();
    d["node"] = {{"gpus", 8}};
    refused(d, "node");
  }
  // GraphML: an attribute spansim does not know.
  const auto path = (std::filesystem::temp_directory_path() / "spansim-test-bad.graphml").string();
  {
    std::ofstream out(path);
    out << "<?xml version=\"1.0\"?>\n<graphml xmlns=\"http://graphml.graphdrawing.org/xmlns\">\n"
           "<key id=\"k\" for=\"node\" attr.name=\"colour\" attr.type=\"string\"/>\n"
           "<graph edgedefault=\"undirected\"><node id=\"a\"><data key=\"k\">red</data></node></graph></graphml>\n";
  }
  CHECK_THROWS_WITH(tp::load_topology_spec(path),
                    Catch::Contains(path) && Catch::Contains("unknown GraphML attribute \"colour\""));
  std::filesystem::remove(path);
}

TEST_CASE("per-building counts: the template expanded building by building is the template", "[topology][graph]")
{
  // The expansion (used when buildings differ in counts) against the arithmetic template on a uniform spec:
  // the same links by name, with the same speeds, and the same routes.
  auto spec = tp::parse_topology_spec(template_topology(), "small.json");
  const tp::Topology arithmetic(spec);
  spec.graph = std::make_shared<const tp::GraphSpec>(tp::expand_template(spec));
  const tp::Topology expanded(spec);
  REQUIRE(expanded.imported());
  REQUIRE(expanded.links().size() == arithmetic.links().size());
  std::map<std::string, tp::Link> by_name;
  for (std::size_t k = 0; k < expanded.links().size(); ++k)
    by_name[expanded.link_name(static_cast<int>(k))] = expanded.links()[k];
  for (std::size_t k = 0; k < arithmetic.links().size(); ++k) {
    const auto name = arithmetic.link_name(static_cast<int>(k));
    REQUIRE(by_name.count(name) == 1);
    CHECK(by_name[name].bandwidth == arithmetic.links()[k].bandwidth);
    CHECK(by_name[name].latency == arithmetic.links()[k].latency);
    CHECK(by_name[name].tier == arithmetic.links()[k].tier);
  }
  int differ = 0;
  for (int s = 0; s < arithmetic.gpu_count(); ++s)
    for (int d = 0; d < arithmetic.gpu_count(); ++d) {
      std::vector<std::string> a, e;
      for (const auto& h : arithmetic.route(s, d))
        a.push_back(arithmetic.link_name(h.link));
      for (const auto& h : expanded.route(s, d))
        e.push_back(expanded.link_name(h.link));
      differ += a != e;
    }
  CHECK(differ == 0);
}

TEST_CASE("per-building counts: an 8-GPU-node building next to 4-GPU ones", "[topology][graph]")
{
  auto doc                  = template_topology();
  doc["building_overrides"] = json::array(
      {{{"building", "e-b"}, {"gpu", "b200"}, {"node", {{"gpus", 8}}}, {"pod", {{"nodes", 2}}}, {"pods", 1}}});
  const auto t = load(doc);
  REQUIRE(t.imported());
  // e-a and west-b0: 2 pods x 3 nodes x 4 GPUs; e-b: 1 pod x 2 nodes x 8 GPUs.
  CHECK(t.gpu_count() == 24 + 16 + 24);
  CHECK(t.counts().nodes == 6 + 2 + 6);
  // Leaves: 4 rails x ceil(3 / 2 down ports) per pod of e-a and west (2 pods each), 8 rails x 1 in e-b.
  CHECK(t.counts().leaves == 16 + 8 + 16);
  int in_b = 0, widest = 0;
  for (int g = 0; g < t.gpu_count(); ++g)
    if (t.locate(g).building == 1) {
      ++in_b;
      widest = std::max(widest, t.locate(g).local + 1);
      CHECK(t.building_gpu(1) == "b200");
    }
  CHECK(in_b == 16);
  CHECK(widest == 8);
  // The placer takes a building's own GPUs, and as many buildings as an even split needs: 24, 16 and 24 GPUs.
  const auto mine = t.building_gpus(1);
  REQUIRE(mine.size() == 16);
  CHECK(mine.front() == 24);
  CHECK(mine.back() == 39);
  CHECK(t.buildings_needed(24) == 1);
  CHECK(t.buildings_needed(48) == 3); // two buildings would need 24 of e-b's 16
  CHECK(t.buildings_needed(64) == 4); // does not fit
  // Two GPUs of one 8-GPU node talk over NVLink: two hops through their NVSwitch.
  const int first = 24;
  REQUIRE(t.vertex_name(first) == "e-b/pod0/node0/gpu0");
  const auto r = t.route(first, first + 7);
  REQUIRE(r.size() == 2);
  CHECK(t.links()[r[0].link].tier == tp::Tier::nvlink);

  // A building without rails: whole nodes under a leaf, and no rail symmetry for the site.
  auto no_rails                            = doc;
  no_rails["building_overrides"][0]["pod"] = {{"rail_optimized", false}, {"leaf_radix", 16}};
  CHECK_FALSE(load(no_rails).rail_optimized());
  CHECK(t.rail_optimized());
  CHECK(t.node_gpus() == 4);
  CHECK(t.node_gpus_of(first) == 8);
  // A node too large for the template's leaves is refused where its size is given.
  auto big                     = template_topology();
  big["pod"]["rail_optimized"] = false;
  big["pod"]["leaf_radix"]     = 16;
  big["building_overrides"]    = json::array({{{"building", "e-b"}, {"node", {{"gpus", 72}}}}});
  CHECK_THROWS_WITH(load(big), Catch::Contains("$.building_overrides[0].node.gpus") &&
                                   Catch::Contains("fewer than the 72 GPUs of a node"));

  doc["building_overrides"][0]["pod"] = {{"rail_optimized", false}, {"leaf_radix", 8}};
  CHECK_THROWS_WITH(load(doc), Catch::Contains("$.building_overrides[0].pod.leaf_radix") &&
                                   Catch::Contains("fewer than the 8 GPUs of a node"));
}

TEST_CASE("region overrides: every building of the region, under its own building overrides", "[topology][graph]")
{
  auto doc = template_topology();
  doc["region_overrides"] =
      json::array({{{"region", "east"}, {"gpu", "b200"}, {"pod", {{"nic_bandwidth", "800Gbps"}}}}});
  doc["building_overrides"] = json::array({{{"building", "e-b"}, {"node", {{"gpus", 8}}}}});
  const auto t              = load(doc);
  CHECK(t.building_gpu(0) == "b200");
  CHECK(t.building_gpu(1) == "b200");
  CHECK(t.building_gpu(2).empty());
  for (int g = 0; g < t.gpu_count(); ++g) {
    const auto b        = t.locate(g).building;
    const double nic    = t.links()[t.nic_link(g)].bandwidth;
    const double expect = (b == 2 ? 400e9 : 800e9) / 8 * 0.9; // the template's NCCL efficiency
    CHECK(nic == Approx(expect).epsilon(1e-12));
  }
  // e-b's nodes have 8 GPUs, the others 4: 24 + (2 pods x 3 nodes x 8) + 24.
  CHECK(t.gpu_count() == 24 + 48 + 24);

  doc["region_overrides"][0]["region"] = "north";
  CHECK_THROWS_WITH(load(doc),
                    Catch::Contains("$.region_overrides[0].region") && Catch::Contains("unknown region \"north\""));
}

TEST_CASE("explicit spines: the template's physical spines, every leaf's uplink split over them", "[topology][graph]")
{
  auto spec = tp::parse_topology_spec(template_topology(), "small.json");
  const tp::Topology aggregate(spec);
  spec.multipath.ecmp            = true;
  spec.multipath.explicit_spines = true;
  const tp::Topology explicit_spines(spec);
  REQUIRE(explicit_spines.imported());
  // Radix 4 at 1:1: 2 up ports per leaf, 8 leaves per pod: ceil(16 / 8) = 2 spines per pod, as the template counts.
  CHECK(explicit_spines.counts().physical_spines == aggregate.counts().physical_spines);
  // Each leaf's uplinks add up to the aggregate leaf uplink, and so do each pod's spine uplinks.
  std::map<std::string, double> up, agg;
  for (const auto& l : explicit_spines.links()) {
    const auto a = explicit_spines.vertex_name(l.a);
    if (l.tier == tp::Tier::leaf_spine)
      up[a] += l.bandwidth;
    if (l.tier == tp::Tier::pod_aggregation)
      agg[a.substr(0, a.rfind('/'))] += l.bandwidth;
  }
  for (const auto& l : aggregate.links()) {
    const auto a = aggregate.vertex_name(l.a);
    if (l.tier == tp::Tier::leaf_spine)
      CHECK(up[a] == Approx(l.bandwidth).epsilon(1e-12));
    if (l.tier == tp::Tier::pod_aggregation)
      CHECK(agg[a.substr(0, a.rfind('/'))] == Approx(l.bandwidth).epsilon(1e-12));
  }
  // Two GPUs of one rail under different leaves of a pod: one route per spine.
  const int src = 0, dst = 8; // e-a/pod0/node0/gpu0 (leaf0) and e-a/pod0/node2/gpu0 (leaf1)
  REQUIRE(explicit_spines.vertex_name(dst) == "e-a/pod0/node2/gpu0");
  CHECK(explicit_spines.equal_cost_routes(src, dst).size() == 2);
  CHECK(aggregate.equal_cost_routes(src, dst).size() == 1);
}

TEST_CASE("explicit spines under ECMP: routes cached by source, destination and queue pair", "[topology][graph]")
{
  auto spec                      = tp::parse_topology_spec(template_topology(), "small.json");
  spec.multipath.ecmp            = true;
  spec.multipath.explicit_spines = true;
  spec.multipath.seed            = 7;
  const tp::Topology asked_forward(spec), asked_backward(spec);
  // The same routes whatever was asked before (each topology walks and caches its own, in opposite orders), and
  // queue pairs of one GPU pair hashed apart (the key holds the queue pair).
  const int gpus = asked_forward.gpu_count();
  std::vector<std::vector<tp::Hop>> forward;
  for (int src = 0; src < gpus; src += 3)
    for (int dst = 1; dst < gpus; dst += 5)
      for (int qp = 0; qp < 4; ++qp)
        forward.push_back(asked_forward.route(src, dst, qp));
  std::size_t i = forward.size(), qp_apart = 0;
  for (int src = (gpus - 1) / 3 * 3; src >= 0; src -= 3)
    for (int dst = 1 + (gpus - 2) / 5 * 5; dst >= 1; dst -= 5)
      for (int qp = 3; qp >= 0; --qp) {
        const auto route = asked_backward.route(src, dst, qp);
        CHECK(route == forward[--i]);
        CHECK(route == asked_forward.route(src, dst, qp)); // asked again: from the cache
        qp_apart += qp > 0 && route != asked_backward.route(src, dst, 0);
      }
  CHECK(i == 0);
  std::cout << "explicit spines, ECMP: " << forward.size() << " routes, " << qp_apart
            << " of them hashed apart from queue pair 0's\n";
  CHECK(qp_apart > 0);
}
