// An imported copy of a template topology (spansim topology export) times a step as the template does, at every
// fidelity: same links, same routes, same placement.
#include "scenario/scenario.hpp"
#include "topology/topology.hpp"

#include "tests/support_job.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <iostream>

using nlohmann::json;
namespace sc = spansim::scenario;
namespace tp = spansim::topology;

namespace {

// tests/data/tiny.json: two regions of two buildings, rails, 4-GPU nodes.
json campus()
{
  return json::parse(std::ifstream(std::string(SPANSIM_SOURCE_DIR) + "/tests/data/tiny.json"));
}

json scenario(const json& topology, const std::string& fidelity, const std::vector<std::string>& buildings)
{
  return {{"name", "imported-copy"},
          {"topology", topology},
          {"job", spansim::test::small_job_json(16, {{"tp", 4}, {"pp", 2}, {"dp", 2}, {"data_parallel", "ddp"}})},
          {"placement", {{"order", {"tp", "cp", "dp", "pp"}}, {"buildings", buildings}}},
          {"fidelity", fidelity}};
}

} // namespace

TEST_CASE("an imported copy of a template times a step as the template, at every fidelity", "[scenario][graph]")
{
  const json original = campus();
  const json copy     = tp::Topology(tp::parse_topology_spec(original, "tiny.json")).to_graph_json();
  for (const auto& buildings : {std::vector<std::string>{"r0-b0", "r0-b1"}, {"r0-b1", "r1-b0"}})
    for (const char* fidelity : {"analytical", "flow", "packet"}) {
      const auto a = sc::run_scenario(sc::parse_scenario(scenario(original, fidelity, buildings), "a.json"));
      const auto b = sc::run_scenario(sc::parse_scenario(scenario(copy, fidelity, buildings), "b.json"));
      std::cout << fidelity << " over " << buildings[0] << " + " << buildings[1] << ": template " << a.result.step_time
                << " s, imported copy " << b.result.step_time << " s\n";
      CHECK(b.result.step_time == Approx(a.result.step_time).epsilon(1e-9));
      CHECK(b.result.rails == a.result.rails);
    }
}

TEST_CASE("the torus-of-pods example: its cut is 8 torus links, and one simulated rail times it as all eight",
          "[scenario][graph]")
{
  const std::string dir = std::string(SPANSIM_SOURCE_DIR) + "/examples/";
  // Closed form: the building cut crosses 2 torus columns x 4 rows at 12.8 Tbps, and nothing else.
  const tp::Topology torus(tp::load_topology_spec(dir + "topologies/torus-of-pods.json"));
  REQUIRE(torus.gpu_count() == 2048);
  for (const auto& b : torus.boundary_capacities()) {
    std::cout << b.name << ": boundary links " << b.boundary_links * 8 / 1e12 << " Tbps (expected 102.4), max-flow "
              << b.max_flow * 8 / 1e12 << " Tbps\n";
    CHECK(b.boundary_links == Approx(8 * 12.8e12 / 8).epsilon(1e-12));
    CHECK(b.max_flow == Approx(8 * 12.8e12 / 8).epsilon(1e-9));
  }
  auto scenario             = sc::load_scenario(dir + "scenarios/llama3-70b-torus-of-pods.json");
  scenario.options.fidelity = spansim::netsim::Fidelity::analytical;
  const auto rails          = sc::run_scenario(scenario);
  REQUIRE(rails.result.rails == 8);
  // Without the rail claim every GPU is simulated.
  auto doc                       = nlohmann::json::parse(std::ifstream(dir + "topologies/torus-of-pods.json"));
  doc["graph"]["rail_optimized"] = false;
  doc["graph"]["file"]           = dir + "topologies/torus-of-pods.graphml";
  auto all                       = scenario;
  all.topology                   = tp::parse_topology_spec(doc, "torus-no-rails.json");
  const auto every               = sc::run_scenario(all);
  std::cout << "step: one rail " << rails.result.step_time << " s, every GPU " << every.result.step_time << " s\n";
  CHECK(every.result.rails == 1);
  CHECK(rails.result.step_time == Approx(every.result.step_time).epsilon(1e-9));
}
