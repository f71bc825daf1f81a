// Packet fidelity (ns-3) against closed forms and against the flow engine, with the default RoCE transport and
// with TCP (DCTCP, NewReno). Each run forks its own ns-3 process. The closed forms add what a flow model leaves
// out: headers (RoCE: 9002 bytes on the wire per 8956 of payload; TCP: per 8948) and each packet's
// store-and-forward; for TCP also the handshake (one round trip before the first data byte).
#include "common/error.hpp"
#include "netsim/collectives.hpp"
#include "netsim/netsim.hpp"
#include "topology/topology.hpp"

#include "tests/support.hpp"
#include "tests/support_flow.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <iostream>

using namespace spansim;
using spansim::test::expect_within;
using spansim::test::transfers;
using namespace spansim::netsim;

namespace {

PacketSettings tcp(const std::string& transport = "dctcp")
{
  PacketSettings s;
  s.transport = transport;
  return s;
}

/// Time of one uncontended RoCE transfer: the route's latency, the payload with its headers at the bottleneck
/// rate, and the last packet's store-and-forward on every other hop.
double roce_transfer_time(const topology::Topology& t, int src, int dst, double bytes, const PacketSettings& s = {})
{
  auto route              = t.route(src, dst);
  const double payload    = s.mtu - 44;
  const double frames     = std::ceil(bytes / payload);
  const double wire       = s.mtu + 2;
  const double bottleneck = t.route_bandwidth(route);
  double forward          = -wire / bottleneck;
  for (const auto& h : route)
    forward += wire / t.links()[h.link].bandwidth;
  return t.route_latency(route) + frames * wire / bottleneck + forward;
}

/// Time of one uncontended TCP transfer: handshake and first-byte latency (three one-way latencies), then the
/// payload with its headers at the bottleneck rate.
double tcp_transfer_time(const topology::Topology& t, int src, int dst, double bytes, const PacketSettings& s = {})
{
  auto route          = t.route(src, dst);
  const double frames = std::ceil(bytes / s.segment_size);
  return 3 * t.route_latency(route) + frames * (s.mtu + 2) / t.route_bandwidth(route);
}

RunResult timed_run(const std::string& what, const topology::Topology& t, const FlowGraph& g,
                    const PacketSettings& s = {})
{
  auto begin  = std::chrono::steady_clock::now();
  auto r      = run_packet(t, g, s);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  std::cout << what << ": " << wall << " s of wall time for " << r.makespan << " s simulated\n";
  return r;
}

} // namespace

TEST_CASE("one packet-level flow takes latency plus size with headers over the bottleneck", "[packet]")
{
  auto t             = test::tiny_topology();
  const double bytes = 64.0 * 1048576;
  struct Case {
    int src, dst;
    const char* what;
  };
  for (auto c : {Case{0, 1, "NVLink"}, Case{0, 5, "pod spine"}, Case{0, 32, "inter-building"}}) {
    const auto g = transfers({{c.src, c.dst}}, bytes);
    auto route   = t.route(c.src, c.dst);
    double ideal = t.route_latency(route) + bytes / t.route_bandwidth(route);
    auto r       = timed_run(std::string("64 MiB over ") + c.what + " (RoCE)", t, g);
    std::cout << "  flow-model ideal " << ideal << " s; packet/ideal = " << r.makespan / ideal << "\n";
    expect_within(std::string("64 MiB over ") + c.what + " (RoCE with headers)",
                  roce_transfer_time(t, c.src, c.dst, bytes), r.ops[0].end, 0.001);
    auto tr = timed_run(std::string("64 MiB over ") + c.what + " (DCTCP)", t, g, tcp());
    expect_within(std::string("64 MiB over ") + c.what + " (TCP with headers)",
                  tcp_transfer_time(t, c.src, c.dst, bytes), tr.ops[0].end, 0.03);
  }
}

TEST_CASE("a small packet-level message pays the route's latency: routes follow Topology::route", "[packet]")
{
  auto t = test::tiny_topology();
  // 1,000 bytes. RoCE: one packet of 1,046 bytes on the wire crosses the route. TCP: SYN and SYN-ACK (62 bytes
  // each) and the data segment (1,054 bytes) cross it once each. Every packet is stored and forwarded at every
  // hop. A route through a GPU or any other link than Topology::route's would change the latency sum.
  for (int dst : {1, 5, 32, 64}) {
    const auto g         = transfers({{0, dst}}, 1000);
    auto r               = run_packet(t, g);
    auto tr              = run_packet(t, g, tcp());
    double serialization = 0, tcp_serialization = 0;
    for (const auto& h : t.route(0, dst)) {
      serialization += 1046 / t.links()[h.link].bandwidth;
      tcp_serialization += (62 + 62 + 1054) / t.links()[h.link].bandwidth;
    }
    const double latency = t.route_latency(t.route(0, dst));
    expect_within("1000 B from GPU 0 to GPU " + std::to_string(dst) + " (RoCE: route latency + serialization)",
                  latency + serialization, r.ops[0].end, 0.005);
    expect_within("1000 B from GPU 0 to GPU " + std::to_string(dst) + " (TCP: three route latencies + serialization)",
                  3 * latency + tcp_serialization, tr.ops[0].end, 0.005);
  }
}

TEST_CASE("two packet-level flows sharing a bottleneck each take about twice as long", "[packet]")
{
  auto t             = test::tiny_topology();
  const double bytes = 64.0 * 1048576;
  // GPUs 0 and 8 sit on rail 0 of nodes 0 and 2; both send to GPU 5 (rail 1 of node 1) through the pod spine.
  // The only link they share is GPU 5's NIC (incast): both start at line rate, and its queue takes the excess.
  double single  = run_packet(t, transfers({{0, 5}}, bytes)).ops[0].end;
  const auto two = transfers({{0, 5}, {8, 5}}, bytes);
  auto r         = timed_run("two 64 MiB flows into one NIC", t, two);
  expect_within("first of two flows sharing GPU 5's NIC vs 2x alone", 2 * single, r.ops[0].end, 0.10);
  expect_within("second of two flows sharing GPU 5's NIC vs 2x alone", 2 * single, r.ops[1].end, 0.10);
  // The same through the flow engine: max-min gives exactly half the NIC to each.
  double flow = run_flow(t, two).makespan;
  expect_within("two flows sharing a NIC: packet vs flow fidelity", flow, r.makespan, 0.05);
}

TEST_CASE("packet-level dependencies and delays order the flow graph", "[packet]")
{
  auto t = test::tiny_topology();
  FlowGraph g;
  int d  = g.add_delay(1e-3);
  int a  = g.add_transfer(0, 5, 1e6, {d});
  int b  = g.add_transfer(5, 0, 1e6, {a});
  int c  = g.add_transfer(0, 1, 4e6, {d});
  int e  = g.add_transfer(1, 0, 1e6, {b, c}); // waits for the later of b and c
  auto r = run_packet(t, g);
  std::cout << "delay end " << r.ops[d].end << ", a " << r.ops[a].start << ".." << r.ops[a].end << ", b "
            << r.ops[b].start << ".." << r.ops[b].end << ", c " << r.ops[c].start << ".." << r.ops[c].end << ", e "
            << r.ops[e].start << ".." << r.ops[e].end << "\n";
  CHECK(r.ops[d].end == Approx(1e-3).epsilon(1e-9));
  CHECK(r.ops[a].start == r.ops[d].end);
  CHECK(r.ops[c].start == r.ops[d].end);
  CHECK(r.ops[b].start == r.ops[a].end);
  CHECK(r.ops[e].start == std::max(r.ops[b].end, r.ops[c].end));
  CHECK(r.ops[e].end > r.ops[e].start);
  // RoCE starts at line rate: 1 MB takes its closed form.
  expect_within("1 MB from 0 to 5 after the delay (RoCE)", roce_transfer_time(t, 0, 5, 1e6),
                r.ops[a].end - r.ops[a].start, 0.005);
  // TCP: 1 MB is 112 segments against a 100 kB bandwidth-delay product: slow start from 10 segments (one more
  // per ACK, an ACK per two segments) costs at most two round trips over the closed form.
  auto rt           = run_packet(t, g, tcp());
  const double rtt  = 2 * t.route_latency(t.route(0, 5));
  const double form = tcp_transfer_time(t, 0, 5, 1e6);
  std::cout << "1 MB from 0 to 5 over DCTCP: closed form " << form << " s, at most " << form + 2 * rtt
            << " s with slow start, actual " << rt.ops[a].end - rt.ops[a].start << " s\n";
  CHECK(rt.ops[a].end - rt.ops[a].start >= form);
  CHECK(rt.ops[a].end - rt.ops[a].start <= form + 2 * rtt);
}

TEST_CASE("ring all-reduce over 64 GPUs: packet and flow fidelity agree", "[packet][collective]")
{
  auto t = test::tiny_topology();
  // GPUs 0..63 in order: region r0 with NVLink edges inside nodes, rail-crossing edges through the pod spines,
  // and two inter-building edges. 16 MiB per rank keeps the 64 long-lived flows at 2.1 GB in total.
  std::vector<int> gpus;
  for (int i = 0; i < 64; ++i)
    gpus.push_back(i);
  const double s = 16.0 * 1048576;
  FlowGraph g;
  Collective ring;
  ring.algorithm      = Algorithm::ring;
  ring.gpus           = gpus;
  ring.bytes          = s;
  int end             = add_collective(g, t, ring, {}).end_op;
  auto packet         = timed_run("64-GPU ring all-reduce of 16 MiB", t, g);
  auto flow           = run_flow(t, g);
  double packet_flows = 0, flow_flows = 0;
  for (int i = 0; i < end; ++i) {
    packet_flows = std::max(packet_flows, packet.ops[i].end);
    flow_flows   = std::max(flow_flows, flow.ops[i].end);
  }
  expect_within("ring all-reduce, last of the 64 ring flows: packet vs flow", flow_flows, packet_flows, 0.10);
  expect_within("ring all-reduce, whole collective: packet vs flow", flow.ops[end].end, packet.ops[end].end, 0.10);
}

TEST_CASE("ring all-reduce over one rail of 64 HGX nodes: packet and flow fidelity agree", "[packet][collective]")
{
  topology::Topology t(topology::load_topology_spec("hgx-h100-pod"));
  // GPU 0 of nodes 0..63: rail 0, two 32-port leaves joined through the pod spine, 400 Gbps NICs.
  Collective ring;
  ring.algorithm = Algorithm::ring;
  for (int n = 0; n < 64; ++n)
    ring.gpus.push_back(8 * n);
  ring.bytes = 16.0 * 1048576;
  FlowGraph g;
  int end     = add_collective(g, t, ring, {}).end_op;
  auto packet = timed_run("64-node rail ring all-reduce of 16 MiB", t, g);
  auto flow   = run_flow(t, g);
  const double alpha_beta =
      test::ring_allreduce_time(64, ring.bytes, t.spec().pod.nic_rate(), 2 * t.spec().pod.link_latency);
  std::cout << "alpha-beta " << alpha_beta << " s; queues: " << packet.settings["statistics"].dump() << "\n";
  CHECK(packet.ops[end].end >= flow.ops[end].end);
  expect_within("64-node rail ring all-reduce: packet vs flow", flow.ops[end].end, packet.ops[end].end, 0.10);
  // Over DCTCP every NIC also carries the ACKs of the flow it receives, behind up to K data packets of its own
  // flow (3.6 us at 400 Gbps for K = 20), which slows the ACK clock: the ring ends 6-19% after flow level.
  auto over_tcp = timed_run("64-node rail ring all-reduce of 16 MiB over DCTCP", t, g, tcp());
  expect_within("64-node rail ring all-reduce over DCTCP: packet vs flow", flow.ops[end].end, over_tcp.ops[end].end,
                0.20);
}

TEST_CASE("a long-haul packet-level transfer pays TCP slow start, not RoCE", "[packet]")
{
  auto t = test::tiny_topology();
  // 64 MiB from region r0 to r1: a 1.05 ms round trip and a 13 MB bandwidth-delay product. ns-3 grows the window
  // by one segment per ACK (1.5x per round trip with delayed ACKs) from 10 segments, and DCTCP halves it at the
  // first mark: about 12 round trips before the NIC is full. The flow engine has no such ramp, nor has RoCE.
  const double bytes = 64.0 * 1048576;
  const auto g       = transfers({{0, 64}}, bytes);
  expect_within("64 MiB across regions (RoCE)", roce_transfer_time(t, 0, 64, bytes), run_packet(t, g).makespan, 0.001);
  auto r           = timed_run("64 MiB across regions (DCTCP)", t, g, tcp());
  const double tcp = tcp_transfer_time(t, 0, 64, bytes);
  const double rtt = 2 * t.route_latency(t.route(0, 64));
  std::cout << "64 MiB across regions: closed form " << tcp << " s, flow engine " << run_flow(t, g).makespan
            << " s, packet " << r.ops[0].end << " s = closed form + " << (r.ops[0].end - tcp) / rtt
            << " round trips (bound: 20)\n";
  CHECK(r.ops[0].end >= tcp);
  CHECK(r.ops[0].end <= tcp + 20 * rtt);
}

TEST_CASE("packet level refuses graphs too large for it", "[packet]")
{
  auto t         = test::tiny_topology();
  const auto big = transfers({{0, 5}}, 80.0 * 1073741824);
  CHECK_THROWS_AS(run_packet(t, big), UsageError);
  CHECK_THROWS_WITH(run_packet(t, big), Catch::Contains("--fidelity flow"));

  topology::Topology site(topology::load_topology_spec("two-buildings"));
  FlowGraph wide;
  for (int i = 0; i < 4100; ++i)
    wide.add_transfer(i, (i + 1) % 4100, 1e6);
  CHECK_THROWS_WITH(run_packet(site, wide), Catch::Contains("4100 GPUs") && Catch::Contains("--fidelity flow"));

  PacketSettings bad;
  bad.transport    = "cubic";
  const auto small = transfers({{0, 1}}, 1000);
  CHECK_THROWS_AS(run_packet(t, small, bad), UsageError);
  PacketSettings bad_cc;
  bad_cc.congestion_control = "timely";
  CHECK_THROWS_WITH(run_packet(t, small, bad_cc), Catch::Contains("dcqcn, none"));

  // Queue pairs need routing by flow: TCP's host routes give one path per GPU pair.
  FlowGraph qps(2);
  qps.add_transfer(0, 5, 1e6);
  CHECK_THROWS_WITH(run_packet(t, qps, tcp()), Catch::Contains("roce"));
}

TEST_CASE("packet-level settings are pinned and runs are deterministic", "[packet]")
{
  auto t = test::tiny_topology();
  FlowGraph g;
  for (int i = 0; i < 8; ++i)
    g.add_transfer(i, 127 - i, 1e6 * (i + 1));
  auto a = test::check_deterministic([&] { return run_packet(t, g); });
  CHECK(a.settings["ns3_version"] == "3.37");
  CHECK(a.settings["transport"] == "roce");
  CHECK(a.settings["congestion_control"] == "none");
  CHECK(a.settings["payload_bytes"] == 8956);
  CHECK(a.settings["queue_disc"]["type"] == "FifoQueueDisc");
  CHECK(a.settings["effective"]["gpus"] == 16);
  auto d = run_packet(t, g, tcp());
  CHECK(d.settings["socket_type"] == "ns3::TcpDctcp");
  CHECK(d.settings["segment_size_bytes"] == 8948);
  CHECK(d.settings["queue_disc"]["type"] == "RedQueueDisc");
  std::cout << a.settings.dump(2) << "\n";
}

TEST_CASE("NewReno over drop-tail queues also carries a flow at line rate", "[packet]")
{
  auto t = test::tiny_topology();
  PacketSettings s;
  s.transport        = "newreno";
  const double bytes = 64.0 * 1048576;
  auto r             = run_packet(t, transfers({{0, 5}}, bytes), s);
  CHECK(r.settings["socket_type"] == "ns3::TcpNewReno");
  expect_within("64 MiB over the pod spine with NewReno", tcp_transfer_time(t, 0, 5, bytes, s), r.ops[0].end, 0.03);
}

TEST_CASE("NCCL's layouts at packet level: rings per NIC, the 2-node tree, NVLS and CollNet as flow level has them",
          "[packet][collective][nccl]")
{
  // The closed forms of tests/netsim/test_nccl.cpp hold at flow level; packets add headers and store-and-forward.
  // NVLS and CollNet reduce in the switch: packet level carries them as their link loads (the switches' arithmetic
  // is not simulated), as flow level does.
  const auto t = test::without_fitted_terms("dgx-h100");
  std::vector<int> sixteen, eight;
  for (int i = 0; i < 16; ++i)
    (i < 8 ? eight : sixteen).push_back(i);
  sixteen.insert(sixteen.begin(), eight.begin(), eight.end());
  struct Case {
    const char* what;
    Algorithm algorithm;
    std::vector<int> gpus;
  };
  for (const auto& c :
       {Case{"16-rank rings, one per NIC", Algorithm::ring, sixteen}, Case{"2-node tree", Algorithm::tree, sixteen},
        Case{"8-GPU NVLS", Algorithm::nvls, eight}, Case{"2-node CollNet", Algorithm::collnet_direct, sixteen}}) {
    Collective col;
    col.algorithm     = c.algorithm;
    col.gpus          = c.gpus;
    col.bytes         = 64.0 * 1048576;
    col.nccl.protocol = Protocol::simple;
    col.nccl.collnet  = true;
    FlowGraph g;
    const int end = add_collective(g, t, col, {}).end_op;
    auto packet   = timed_run(c.what, t, g);
    expect_within(std::string(c.what) + " of 64 MiB: packet vs flow", run_flow(t, g).ops[end].end, packet.ops[end].end,
                  0.03);
  }
}
