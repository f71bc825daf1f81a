// Topology Zoo graphs as published (tests/data/foreign/zoo, CC BY 4.0): imported with GPU buildings at two routers,
// their links' latencies are the great-circle distances at 5 us/km plus the equipment's, compared link by link
// with distances computed independently (the CSV next to each graph: haversine, R = 6,371 km, by a research
// script); a job's GPUs reach each other across the Zoo's routers.
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/units.hpp"
#include "topology/topology.hpp"

#include "tests/support.hpp"

#include <catch2/catch.hpp>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <unistd.h>

using namespace spansim;

namespace {

const std::string kZoo = std::string(SPANSIM_SOURCE_DIR) + "/tests/data/foreign/zoo/";

// One edge of the CSV: its ends' Zoo ids, LinkSpeedRaw (bits/s) and great-circle km (NaN where empty).
struct CsvEdge {
  std::string source, target;
  double bits_per_second, km;
};

std::vector<CsvEdge> csv_edges(const std::string& name)
{
  std::vector<CsvEdge> out;
  std::ifstream in(kZoo + name + ".edges_km.csv");
  std::string line;
  std::getline(in, line); // header: edge_index,source_id,target_id,source_label,target_label,key,LinkSpeedRaw,km
  auto number = [](const std::string& cell) { return cell.empty() ? std::nan("") : std::stod(cell); };
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream s(line);
    std::string cell;
    while (std::getline(s, cell, ','))
      f.push_back(cell);
    f.resize(8);
    out.push_back({f[1], f[2], number(f[6]), number(f[7])});
  }
  return out;
}

// The imported links between routers, by their ends' Zoo ids: latency and bandwidth.
std::multimap<std::pair<std::string, std::string>, std::pair<double, double>> zoo_links(const nlohmann::json& topo)
{
  std::multimap<std::pair<std::string, std::string>, std::pair<double, double>> out;
  for (const auto& l : topo["graph"]["links"]) {
    const auto a = l["a"].get<std::string>(), b = l["b"].get<std::string>();
    if (a.rfind("zoo/", 0) == 0 && b.rfind("zoo/", 0) == 0)
      out.emplace(std::pair{a.substr(4), b.substr(4)},
                  std::pair{units::parse_time(l["latency"].get<std::string>()),
                            units::parse_bandwidth(l["bandwidth"].get<std::string>())});
  }
  return out;
}

} // namespace

TEST_CASE("a Topology Zoo graph imports as published: latencies from great-circle distances", "[topology][zoo]")
{
  topology::ZooOptions o;
  o.sites            = {"New York", "Los Angeles"};
  const auto abilene = topology::import_zoo(kZoo + "Abilene.graphml", o);
  CHECK(abilene.routers == 11);
  CHECK(abilene.links == 14);
  // Abilene's links are "OC-192" labels without LinkSpeedRaw: the stated default.
  CHECK(abilene.notes ==
        std::vector<std::string>{"14 of 14 links have no LinkSpeedRaw or LinkSpeed: 100 Gbps (--default-speed)"});
  const auto edges = csv_edges("Abilene");
  const auto links = zoo_links(abilene.topology);
  REQUIRE(links.size() == edges.size());
  for (const auto& e : edges) {
    const std::pair ends{e.source, e.target};
    const double d = e.km;
    const auto it  = links.find(ends);
    REQUIRE(it != links.end());
    // The CSV gives km to 6 decimals (half a millimetre): 1e-7 of a link of a few km.
    test::expect_within("Abilene " + ends.first + "-" + ends.second + " latency", d * 5e-6 + o.equipment_latency,
                        it->second.first, 1e-7);
    CHECK(it->second.second == o.default_bandwidth);
  }
  // New York - Chicago, 1,145.84 km: 5.73 ms of fiber plus 20 us.
  test::expect_within("New York - Chicago", 1145.837189 * 5e-6 + 20e-6, links.find({"0", "1"})->second.first, 1e-7);

  // The file it wrote loads as any topology: 128 GPUs in two buildings, each reaching the other over the routers.
  const auto path = (std::filesystem::temp_directory_path() / ("abilene-" + std::to_string(::getpid()) + ".json"));
  std::ofstream(path) << abilene.topology.dump();
  const topology::Topology t(topology::load_topology_spec(path.string()));
  CHECK(t.counts().gpus == 128);
  CHECK(t.building_count() == 2);
  const auto route = t.route(0, 127);
  // GPU 0 in New York, GPU 127 in Los Angeles (the file's coordinates): no fiber path is shorter than the great
  // circle between them, so the route's latency is at least 5 us/km over it, plus 20 us per Zoo link it takes.
  int zoo_hops = 0;
  for (const auto& hop : route)
    zoo_hops += t.links()[static_cast<std::size_t>(hop.link)].tier == topology::Tier::inter_region;
  CHECK(zoo_hops >= 1);
  const double bound = topology::great_circle_km(40.71427, -74.00597, 34.05223, -118.24368) * 5e-6 + zoo_hops * 20e-6;
  INFO("route latency " << t.route_latency(route) << " s, great-circle bound " << bound << " s");
  CHECK(t.route_latency(route) >= bound);
  std::filesystem::remove(path);
}

TEST_CASE("Topology Zoo quirks: LinkSpeedRaw as bits/s, isolated and unlocated nodes, parallel edges",
          "[topology][zoo]")
{
  topology::ZooOptions o;
  o.sites            = {"0", "1"};
  const auto kreonet = topology::import_zoo(kZoo + "Kreonet.graphml", o);
  const auto links   = zoo_links(kreonet.topology);
  CHECK(kreonet.notes.empty()); // LinkSpeedRaw on every edge, coordinates on every node
  // Every edge's bandwidth is its LinkSpeedRaw in bits/s, over 8; its latency 5 us/km plus 20 us.
  int checked = 0;
  for (const auto& e : csv_edges("Kreonet")) {
    const auto it = links.find({e.source, e.target});
    REQUIRE(it != links.end());
    test::expect_within("Kreonet link " + e.source + "-" + e.target + " bandwidth", e.bits_per_second / 8,
                        it->second.second, 1e-12);
    test::expect_within("Kreonet link " + e.source + "-" + e.target + " latency", e.km * 5e-6 + 20e-6, it->second.first,
                        1e-7);
    ++checked;
  }
  CHECK(checked == 12);
  // Garr: no LinkSpeedRaw anywhere; 55 of its 74 edges state LinkSpeed with LinkSpeedUnits (34 Mb/s to 10 Gb/s),
  // which the CSV's research script turned into bits/s on its own; the other 19 state nothing.
  o.sites         = {"0", "1"};
  const auto garr = topology::import_zoo(kZoo + "Garr.graphml", o);
  CHECK(garr.notes == std::vector<std::string>{
                          "55 of 74 links at the speed their LinkSpeed and LinkSpeedUnits state (no LinkSpeedRaw)",
                          "19 of 74 links have no LinkSpeedRaw or LinkSpeed: 100 Gbps (--default-speed)",
                          "74 links join a node without coordinates: equipment latency only"});
  const auto garr_links = zoo_links(garr.topology);
  std::map<std::pair<std::string, std::string>, int> seen;
  int stated = 0;
  for (const auto& e : csv_edges("Garr")) {
    // Parallel edges between the same ends come out in file order, as the CSV lists them.
    const std::pair ends{e.source, e.target};
    auto it = garr_links.lower_bound(ends);
    std::advance(it, seen[ends]++);
    REQUIRE(it != garr_links.end());
    REQUIRE(it->first == ends);
    const double expected = std::isnan(e.bits_per_second) ? o.default_bandwidth : e.bits_per_second / 8;
    test::expect_within("Garr link " + e.source + "-" + e.target + " bandwidth", expected, it->second.second, 1e-9);
    stated += std::isnan(e.bits_per_second) ? 0 : 1;
  }
  CHECK(stated == 55);
  // KentmanApr2007: an isolated node is left out, a link to an external node without coordinates keeps only the
  // equipment's latency, one link lacks LinkSpeedRaw, and a parallel pair stays two links.
  o.sites            = {"0", "5"};
  const auto kentman = topology::import_zoo(kZoo + "KentmanApr2007.graphml", o);
  CHECK(kentman.routers == 22);
  CHECK(kentman.links == 24);
  CHECK(kentman.notes ==
        std::vector<std::string>{"isolated node \"CCCU-C\" left out",
                                 "1 of 24 links have no LinkSpeedRaw or LinkSpeed: 100 Gbps (--default-speed)",
                                 "2 links join a node without coordinates: equipment latency only"});
  // An unknown site names the nodes; an isolated one is refused.
  o.sites = {"Atlantis"};
  CHECK_THROWS_WITH(topology::import_zoo(kZoo + "KentmanApr2007.graphml", o),
                    Catch::Contains("--site \"Atlantis\": no node of") && Catch::Contains("CCCU-C"));
  o.sites = {"CCCU-C"};
  CHECK_THROWS_WITH(topology::import_zoo(kZoo + "KentmanApr2007.graphml", o), Catch::Contains("isolated"));
  // Read as a spansim GraphML, the Zoo's file says how to import it.
  CHECK_THROWS_WITH(topology::load_topology_spec(kZoo + "Abilene.graphml"),
                    Catch::Contains("a Topology Zoo graph") && Catch::Contains("spansim topology import-zoo"));
}

namespace {

// A Zoo-style GraphML of nodes a, b, c, d (labels A-D) and the given edges "x-y" (with LinkSpeedRaw when
// `speed` is not empty), a's latitude and d's longitude as given; written to a temporary file.
std::string zoo_file(const std::string& name, const std::vector<std::string>& edges, const std::string& speed,
                     const std::string& latitude = "0", const std::string& longitude = "1")
{
  const auto path =
      std::filesystem::temp_directory_path() / ("spansim-zoo-" + std::to_string(::getpid()) + "-" + name + ".graphml");
  std::ofstream g(path);
  g << R"(<?xml version="1.0" encoding="utf-8"?><graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key attr.name="label" attr.type="string" for="node" id="d1" />
  <key attr.name="Latitude" attr.type="double" for="node" id="d2" />
  <key attr.name="Longitude" attr.type="double" for="node" id="d3" />
  <key attr.name="LinkSpeedRaw" attr.type="double" for="edge" id="d4" />
  <graph edgedefault="undirected">
)";
  for (const char* n : {"a", "b", "c", "d"}) {
    const std::string id = n;
    g << "<node id=\"" << id << "\"><data key=\"d1\">" << static_cast<char>(std::toupper(n[0]))
      << "</data><data key=\"d2\">" << (id == "a" ? latitude : "10") << "</data><data key=\"d3\">"
      << (id == "d" ? longitude : "1") << "</data></node>\n";
  }
  for (const auto& e : edges) {
    g << "<edge source=\"" << e.substr(0, 1) << "\" target=\"" << e.substr(2) << "\">";
    if (!speed.empty())
      g << "<data key=\"d4\">" << speed << "</data>";
    g << "</edge>\n";
  }
  g << "</graph></graphml>\n";
  return path.string();
}

} // namespace

TEST_CASE("Topology Zoo values present but malformed or out of range are refused, naming the node or edge",
          "[topology][zoo]")
{
  topology::ZooOptions o;
  o.sites = {"A", "D"};
  const std::vector<std::string> chain{"a-b", "b-c", "c-d"};
  // LinkSpeedRaw: not a number, negative, zero, NaN or above 1 Ebps is no speed, and not a missing one either.
  for (const char* speed : {"fast", "-1000000000", "0", "nan", "1e300", "inf"}) {
    const auto file = zoo_file("speed", chain, speed);
    INFO("LinkSpeedRaw " << speed);
    CHECK_THROWS_WITH(topology::import_zoo(file, o),
                      Catch::Contains(file + ": at edge \"a\" -- \"b\" (\"A\" -- \"B\")") &&
                          Catch::Contains(std::string("LinkSpeedRaw \"") + speed) &&
                          Catch::Contains("allowed: bits/s above 0, at most 1e18"));
    std::filesystem::remove(file);
  }
  // Coordinates off the globe, or not numbers.
  const std::pair<const char*, const char*> coordinates[] = {{"forty", "1"}, {"140.7", "1"}, {"0", "200"}};
  for (const auto& [latitude, longitude] : coordinates) {
    const auto file = zoo_file("coordinates", chain, "1e10", latitude, longitude);
    INFO("latitude " << latitude << ", longitude " << longitude);
    const bool bad_latitude = std::string(latitude) != "0";
    CHECK_THROWS_WITH(
        topology::import_zoo(file, o),
        Catch::Contains(bad_latitude ? "at node \"a\" (\"A\"): Latitude" : "at node \"d\" (\"D\"): Longitude") &&
            Catch::Contains(bad_latitude ? "allowed: degrees from -90 to 90" : "allowed: degrees from -180 to 180"));
    std::filesystem::remove(file);
  }
  // An empty value is an absent one: the default applies and the note says so.
  const auto empty      = zoo_file("empty", chain, " ", "");
  const auto with_empty = topology::import_zoo(empty, o);
  const auto expected =
      std::vector<std::string>{"3 of 3 links have no LinkSpeedRaw or LinkSpeed: 100 Gbps (--default-speed)",
                               "1 links join a node without coordinates: equipment latency only"};
  CHECK(with_empty.notes == expected);
  std::filesystem::remove(empty);
}

TEST_CASE("Topology Zoo import: options and sites that could only fail once written are refused first",
          "[topology][zoo]")
{
  topology::ZooOptions o;
  // Two components: A-B and C-D. A site in each could never exchange a byte.
  const auto two = zoo_file("two", {"a-b", "c-d"}, "1e10");
  o.sites        = {"A", "C"};
  CHECK_THROWS_WITH(topology::import_zoo(two, o),
                    Catch::Contains("--site \"C\" cannot reach --site \"A\"") && Catch::Contains("disconnected"));
  o.sites = {"B", "A"}; // one component: fine
  CHECK(topology::import_zoo(two, o).sites == 2);
  std::filesystem::remove(two);

  const auto chain    = zoo_file("chain", {"a-b", "b-c", "c-d"}, "");
  o.sites             = {"A", "D"};
  o.default_bandwidth = 0;
  CHECK_THROWS_WITH(topology::import_zoo(chain, o), Catch::Contains("--default-speed") && Catch::Contains("above 0"));
  o.default_bandwidth = 100e9 / 8;
  o.uplink_bandwidth  = 0;
  CHECK_THROWS_WITH(topology::import_zoo(chain, o), Catch::Contains("--uplink") && Catch::Contains("above 0"));
  std::filesystem::remove(chain);
}

TEST_CASE("Topology Zoo sites keep the order of --site: regions, buildings and GPU numbers", "[topology][zoo]")
{
  // Abilene's ids: Chicago 1, Indianapolis 10, Los Angeles 5; as strings they sort Chicago, Indianapolis, LA.
  topology::ZooOptions o;
  o.sites           = {"Los Angeles", "Indianapolis", "Chicago"};
  const auto import = topology::import_zoo(kZoo + "Abilene.graphml", o);
  std::vector<std::string> regions;
  for (const auto& r : import.topology["regions"])
    regions.push_back(r["name"]);
  CHECK(regions == std::vector<std::string>{"los-angeles", "indianapolis", "chicago"});
  const topology::Topology t(topology::parse_topology_spec(import.topology, "abilene-order.json"));
  REQUIRE(t.counts().gpus == 192);
  // Each building holds 64 GPUs, numbered in the order the sites were given.
  for (int gpu : {0, 63, 64, 127, 128, 191}) {
    INFO("GPU " << gpu);
    CHECK(t.building_name(t.locate(gpu).building) == regions[static_cast<std::size_t>(gpu / 64)]);
  }
}

TEST_CASE("Topology Zoo labels several nodes share name them all, and a network name keeps no trailing hyphen",
          "[topology][zoo]")
{
  const auto path =
      std::filesystem::temp_directory_path() / ("spansim-zoo-" + std::to_string(::getpid()) + "-labels.graphml");
  {
    std::ofstream g(path);
    g << R"(<?xml version="1.0" encoding="utf-8"?><graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key attr.name="label" attr.type="string" for="node" id="d1" />
  <key attr.name="Network" attr.type="string" for="graph" id="d0" />
  <graph edgedefault="undirected"><data key="d0">Kentucky Datalink </data>
  <node id="a"><data key="d1">None</data></node><node id="b"><data key="d1">None</data></node>
  <node id="c"><data key="d1">None</data></node><node id="d"><data key="d1">Hub</data></node>
  <edge source="a" target="d"/><edge source="b" target="d"/><edge source="c" target="d"/>
  </graph></graphml>
)";
  }
  topology::ZooOptions o;
  o.sites = {"None", "Hub"};
  CHECK_THROWS_WITH(topology::import_zoo(path.string(), o),
                    Catch::Contains("--site \"None\": 3 nodes of") && Catch::Contains("name one by id (a, b or c)"));
  o.sites             = {"b", "Hub"}; // an id names one node, whatever the labels
  const auto imported = topology::import_zoo(path.string(), o);
  CHECK(imported.topology["name"] == "kentucky-datalink");
  std::filesystem::remove(path);
}
