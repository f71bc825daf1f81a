// Collectives over links of unequal latency as NCCL runs them: the chain of dependent steps (the sum of the edge
// latencies a ring's steps go through, not 2(K-1) times the largest) and each connection's slot window (NCCL_STEPS
// slots per round trip), against the chain-and-window formula of netsim/README.md at analytical and flow fidelity
// (packet fidelity: tests/netsim/test_packet_links.cpp). Also the tuner's choices and the `nccl` block's errors.
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "netsim/collectives.hpp"
#include "netsim/nccl.hpp"
#include "netsim/nccl_tuner.hpp"
#include "netsim/netsim.hpp"
#include "topology/topology.hpp"

#include "tests/netsim/long_link_forms.hpp"
#include "tests/support.hpp"
#include "tests/support_flow.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>

using namespace spansim;
using spansim::test::expect_within;
using namespace spansim::netsim;

namespace {

constexpr double kMiB = 1048576.0;

// tiny.json as one region of two buildings joined by one 10 GB/s link of `latency` one way.
topology::Topology long_pair(double latency)
{
  auto spec          = topology::load_topology_spec(std::string(SPANSIM_SOURCE_DIR) + "/tests/data/tiny.json");
  spec.regions       = {{"campus", {"b0", "b1"}}};
  spec.building.pods = 1;
  spec.building.aggregation_oversubscription = 1;
  spec.inter_building.bandwidth              = 10e9;
  spec.inter_building.latency                = latency;
  spec.inter_region                          = {};
  spec.building_uplink_bandwidth             = 0;
  return topology::Topology(spec);
}

Collective ring(std::vector<int> gpus, double bytes, Protocol protocol, int channels)
{
  Collective c;
  c.op                  = CollectiveOp::all_reduce;
  c.algorithm           = Algorithm::ring;
  c.gpus                = std::move(gpus);
  c.bytes               = bytes;
  c.nccl.protocol       = protocol;
  c.nccl.channels       = channels;
  c.nccl.fixed_channels = channels > 0;
  return c;
}

double simulate(const topology::Topology& t, const Collective& c, Fidelity f)
{
  FlowGraph g;
  auto lowered = add_collective(g, t, c, {});
  return run(t, g, f, EngineOptions{}).ops[lowered.end_op].end;
}

} // namespace

TEST_CASE("a ring over one long link pays the chain of its steps, not 2(K-1) times the long latency",
          "[collective][nccl]")
{
  auto t = long_pair(1e-3);
  // Two GPUs of one node in each building: NVLink edges 0->1 and 16->17, long edges 1->16 and 17->0.
  const std::vector<int> gpus{0, 1, 16, 17};
  const double long_latency = t.route_latency(t.route(1, 16));
  const double nvlink       = t.route_latency(t.route(0, 1));
  // 6 steps around 4 edges: one whole turn and the worst two consecutive edges (one long, one NVLink).
  const auto small = test::ring_form(t, gpus, 4096, 1, 1e300);
  expect_within("chain of a 4-GPU ring over two long edges", 3 * (long_latency + nvlink),
                small.bandwidth_part - 1.5 * 4096 / 10e9, 1e-9);
  for (auto f : {Fidelity::analytical, Fidelity::flow}) {
    const std::string at = " at " + std::string(name_of(f));
    // Simple over 16 channels: 2 steps of 2 MiB in flight per channel, 64 MiB per round trip: bandwidth-bound.
    const double big = 256 * kMiB;
    const auto free  = test::ring_form(t, gpus, big, 1, 16 * 2 * 2 * kMiB);
    CHECK(free.bandwidth_part > free.window_part);
    expect_within("256 MiB ring, Simple over 16 channels (bandwidth and chain)" + at, free.total(),
                  simulate(t, ring(gpus, big, Protocol::simple, 16), f), 0.01);
    // Over 2 channels the 8 MiB window per round trip (4 GB/s) binds.
    const auto held = test::ring_form(t, gpus, big, 1, 2 * 2 * 2 * kMiB);
    CHECK(held.window_part > held.bandwidth_part);
    expect_within("256 MiB ring, Simple over 2 channels (window)" + at, held.total(),
                  simulate(t, ring(gpus, big, Protocol::simple, 2), f), 0.01);
    // LL on one channel: 8 slots of 32 KiB payload (64 KiB on the wire) per round trip.
    const auto ll = test::ring_form(t, gpus, 1 * kMiB, 2, 8 * 32 * 1024 * 2);
    expect_within("1 MiB ring, LL over one channel (window)" + at, ll.total(),
                  simulate(t, ring(gpus, 1 * kMiB, Protocol::ll, 1), f), 0.01);
    // A small message: each ring step fills its slots only partly (1 KiB a step per channel), yet two steps per
    // channel per round trip still bind: 6 steps over a 2 ms round trip take three of them.
    const auto tiny = test::ring_form(t, gpus, 64 * 1024, 1, 16 * 2 * (64 * 1024 / 16 / 4));
    CHECK(tiny.window_part > tiny.bandwidth_part);
    expect_within("64 KiB ring, Simple over 16 channels (two steps per round trip)" + at, tiny.total(),
                  simulate(t, ring(gpus, 64 * 1024, Protocol::simple, 16), f), 0.01);
  }
}

TEST_CASE("a large send over one long link is bound by the window of its channels", "[collective][nccl]")
{
  auto t = long_pair(1e-3);
  // Simple send/recv: slots of NCCL_P2P_NET_CHUNKSIZE (128 KiB), 8 in flight per channel, 2 channels per peer.
  const double bytes = 256 * kMiB, window = 2 * 8 * 128 * 1024;
  const double rtt  = t.route_latency(t.route(0, 16)) + t.route_latency(t.route(16, 0));
  const double form = t.route_latency(t.route(0, 16)) + bytes * rtt / window;
  CHECK(window / rtt < 10e9); // well below the link
  Collective c;
  c.op        = CollectiveOp::send_recv;
  c.algorithm = Algorithm::direct;
  c.gpus      = {0, 16};
  c.bytes     = bytes;
  for (auto f : {Fidelity::analytical, Fidelity::flow})
    expect_within("256 MiB send over a 1 ms link at " + std::string(name_of(f)), form, simulate(t, c, f), 0.01);
  // NCCL_P2P_NET_CHUNKSIZE of 1 MiB: NCCL caps it at NCCL_BUFFSIZE / NCCL_STEPS (512 KiB; init.cc), four times
  // the window, still below the link.
  c.nccl.p2p_chunk = 1 * kMiB;
  expect_within("256 MiB send with 1 MiB chunks (capped at 512 KiB)",
                t.route_latency(t.route(0, 16)) + bytes * rtt / (4 * window), simulate(t, c, Fidelity::analytical),
                0.01);
}

TEST_CASE("a ring over equal links is unchanged by the slot windows", "[collective][nccl]")
{
  topology::Topology t = test::without_fitted_terms("hgx-h100-pod");
  std::vector<int> gpus; // GPU 0 of 16 nodes: one rail, one leaf
  for (int n = 0; n < 16; ++n)
    gpus.push_back(8 * n);
  const double b = t.spec().pod.nic_rate(), a = 2 * t.spec().pod.link_latency;
  for (double s : {kMiB, 256 * kMiB})
    for (auto f : {Fidelity::analytical, Fidelity::flow})
      expect_within("16-rank ring of " + std::to_string(static_cast<long>(s)) + " B at " + std::string(name_of(f)),
                    test::ring_allreduce_time(t, ring(gpus, s, Protocol::simple, 0), b, a),
                    simulate(t, ring(gpus, s, Protocol::simple, 0), f), 0.01);
}

TEST_CASE("1 MiB ring all-reduce over 1,024 GPUs of two-regions: LL, one channel, window-bound", "[collective][nccl]")
{
  topology::Topology t(topology::load_topology_spec("two-regions"));
  std::vector<int> gpus;
  for (int i = 0; i < 1024; ++i)
    gpus.push_back(128 * i);
  Collective c = ring(gpus, kMiB, Protocol::automatic, 0);
  FlowGraph g;
  auto lowered = add_collective(g, t, c, {});
  CHECK(lowered.nccl.protocol == Protocol::ll);
  CHECK(lowered.nccl.channels == 1);
  CHECK(lowered.bound == Bound::window);
  // Each ring step carries 1 KiB per rank: one slot each, 8 slots (8 KiB payload, 16 KiB on the wire) per round trip.
  const auto form = test::ring_form(t, gpus, kMiB, 2, 8 * 1024 * 2);
  double longest  = 0;
  for (std::size_t i = 0; i < gpus.size(); ++i)
    longest = std::max(longest, t.route_latency(t.route(gpus[i], gpus[(i + 1) % gpus.size()])));
  std::cout << "1 MiB over 1,024 ranks of two-regions: chain-and-window formula " << form.total() << " s (2(K-1) x the "
            << longest * 1e3 << " ms long haul would be " << 2046 * longest << " s)\n";
  expect_within("1 MiB LL ring over 1,024 GPUs of two-regions (analytical)", form.total(),
                run(t, g, Fidelity::analytical, EngineOptions{}).ops[lowered.end_op].end, 0.01);
  expect_within("1 MiB LL ring over 1,024 GPUs of two-regions (flow)", form.total(),
                run(t, g, Fidelity::flow, EngineOptions{}).ops[lowered.end_op].end, 0.01);
  CHECK(form.total() < 2046 * longest / 3);
}

TEST_CASE("NCCL's tuner: LL for small multi-node calls, Simple for large ones, fewer channels for small messages",
          "[collective][nccl]")
{
  // 64 ranks on 8 DGX H100 nodes as NCCL 2.27's search finds them: 8 ring channels of 48 GB/s, 16 at run time.
  NcclComm comm;
  comm.ranks                                         = 64;
  comm.nodes                                         = 8;
  comm.local_ranks_most                              = 8;
  comm.graphs[static_cast<int>(NcclAlgorithm::ring)] = {.channels = 8, .bw_intra = 48, .bw_inter = 48};
  comm.graphs[static_cast<int>(NcclAlgorithm::tree)] = {
      .channels = 8, .bw_intra = 48, .bw_inter = 48, .tree_pattern = true};
  comm.channels = 16;
  const NcclAlgorithmSet all;
  CHECK(nccl_pick(comm, CollectiveOp::all_reduce, 4096, all, Protocol::automatic).protocol == Protocol::ll);
  const auto big = nccl_pick(comm, CollectiveOp::all_reduce, 1024 * kMiB, all, Protocol::automatic);
  CHECK(big.protocol == Protocol::simple);
  CHECK(big.algorithm == NcclAlgorithm::ring);
  NcclSettings settings;
  CHECK(nccl_call_channels(comm, big, 1024 * kMiB, settings) == 16);
  // Simple keeps a channel per 32 KiB (512 threads x 64 B).
  CHECK(nccl_call_channels(comm, big, 64 * 1024, settings) == 2);
  settings.channels       = 4;
  settings.fixed_channels = true;
  CHECK(nccl_call_channels(comm, big, 64 * 1024, settings) == 4);
}

TEST_CASE("the nccl block refuses what NCCL would not run", "[collective][nccl][bad-input]")
{
  auto read = [](const std::string& text) {
    const auto holder = nlohmann::json::parse(text);
    spec::ObjectReader root(holder, spec::Location{"scenario.json"});
    auto r = root.object("nccl");
    return read_nccl(r);
  };
  CHECK(read(R"({"nccl": {"protocol": "LL128", "channels": 4}})").channels == 4);
  CHECK(read(R"({"nccl": {"version": "2.21.5", "algorithms": "^NVLS,NVLSTree"}})").version.minor == 21);
  CHECK_THROWS_WITH(read(R"({"nccl": {"version": "2.17"}})"),
                    Catch::Contains("nccl.version") && Catch::Contains("2.18 to 2.30"));
  CHECK_THROWS_WITH(read(R"({"nccl": {"algorithms": "Ring,Butterfly"}})"),
                    Catch::Contains("nccl.algorithms") && Catch::Contains("Butterfly") && Catch::Contains("NVLSTree"));
  CHECK_THROWS_WITH(read(R"({"nccl": {"channels": 0}})"),
                    Catch::Contains("scenario.json") && Catch::Contains("nccl.channels") && Catch::Contains("64"));
  CHECK_THROWS_WITH(read(R"({"nccl": {"protocol": "LL256"}})"),
                    Catch::Contains("nccl.protocol") && Catch::Contains("Simple"));
  CHECK_THROWS_WITH(read(R"({"nccl": {"buffsize": "1KiB"}})"), Catch::Contains("nccl.buffsize"));
  CHECK_THROWS_WITH(read(R"({"nccl": {"slot": 8}})"), Catch::Contains("slot"));
}
