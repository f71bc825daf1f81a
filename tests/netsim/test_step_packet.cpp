// A training step at packet fidelity (ns-3): the same lowered graph as flow fidelity, on real TCP. The model is
// large enough that bandwidth, not TCP handshakes and slow start, dominates (a model half as wide measured 17%).
#include "netsim/step.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>

using namespace spansim;
using nlohmann::json;

TEST_CASE("a two-stage, two-replica step across two buildings runs at packet fidelity close to flow", "[step][packet]")
{
  topology::Topology topo(topology::load_topology_spec("two-buildings"));
  json j     = {{"name", "small-pp2"},
                {"model",
                 {{"name", "small"},
                  {"layers", 4},
                  {"hidden", 2048},
                  {"ffn", 8192},
                  {"heads", 16},
                  {"kv_heads", 16},
                  {"vocab", 32000},
                  {"mlp", "swiglu"}}},
                {"gpu", "h100"},
                {"gpus", 4},
                {"parallelism", {{"tp", 1}, {"pp", 2}, {"dp", 2}, {"data_parallel", "ddp"}}},
                {"batch", {{"global_sequences", 8}, {"sequence_length", 2048}, {"micro_batch", 1}}},
                {"schedule", {{"kind", "1f1b"}}}};
  auto job   = workload::parse_job(j, "small-pp2.json");
  auto graph = workload::build_step_graph(job);
  placement::Placement place(
      topo, job, {{workload::Dim::tp, workload::Dim::cp, workload::Dim::dp, workload::Dim::pp}, {"bldg-a", "bldg-b"}});
  netsim::StepOptions o;
  o.fidelity  = netsim::Fidelity::flow;
  auto flow   = netsim::simulate_step(topo, graph, place, o);
  o.fidelity  = netsim::Fidelity::packet;
  auto packet = netsim::simulate_step(topo, graph, place, o);
  double rel  = std::fabs(packet.step_time - flow.step_time) / flow.step_time;
  std::cout << "step at flow fidelity " << flow.step_time << " s, at packet fidelity " << packet.step_time
            << " s (rel. difference " << rel << ", tolerance 0.15)\n";
  CHECK(rel <= 0.15);
  // TCP adds handshakes, slow start and headers: packet level is never faster than the fluid model here.
  CHECK(packet.step_time >= flow.step_time * (1 - 1e-6));
  CHECK(packet.engine["engine"] == "ns-3");
}
