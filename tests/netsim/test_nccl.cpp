// NCCL's tuner, graph search and layouts against hand counts from NCCL's own tables and rules, and the collectives
// NCCL lays out against their closed forms at analytical and flow fidelity (packet level: test_packet.cpp).
#include "netsim/collectives.hpp"
#include "netsim/nccl_layout.hpp"
#include "netsim/netsim.hpp"
#include "topology/topology.hpp"

#include "tests/support.hpp"
#include "tests/support_flow.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <tuple>
#include <utility>

using namespace spansim;
using namespace spansim::netsim;
using spansim::test::expect_within;

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

std::vector<int> first(int n)
{
  std::vector<int> v;
  for (int i = 0; i < n; ++i)
    v.push_back(i);
  return v;
}

const NcclGraph& graph(const NcclLayout& l, NcclAlgorithm a)
{
  return l.comm.graphs[static_cast<int>(a)];
}

double simulate(const topology::Topology& t, const Collective& c, Fidelity f, Lowered* lowered = nullptr)
{
  FlowGraph g;
  const auto l = add_collective(g, t, c, {});
  if (lowered)
    *lowered = l;
  return run(t, g, f, EngineOptions{}).ops[l.end_op].end;
}

Collective make(Algorithm a, std::vector<int> gpus, double bytes, Protocol p = Protocol::simple)
{
  Collective c;
  c.algorithm     = a;
  c.gpus          = std::move(gpus);
  c.bytes         = bytes;
  c.nccl.protocol = p;
  return c;
}

/// A preset without fitted terms whose send/recv channels (every node's) move at most `rate` bytes/s each.
topology::TopologySpec at_p2p_channel_rate(const std::string& preset, double rate)
{
  auto spec                  = test::without_fitted_terms(preset).spec();
  spec.node.p2p_channel_rate = rate;
  for (auto& b : spec.building_overrides)
    b.node.p2p_channel_rate = rate;
  return spec;
}

} // namespace

TEST_CASE("NCCL's graph search: channels and speeds of the systems NCCL's logs and rules give", "[nccl]")
{
  NcclSettings s; // 2.27
  // DGX H100, two nodes: 8 search channels at 48 GB/s (PCIe Gen5 x16 below the 50 GB/s NIC), each NIC in and out once
  // ("Pattern 4, crossNic 2, nChannels 8, bw 48/48" in public logs); not duplicated (48 < 50 on Hopper with more
  // than 4 channels); Postset doubles them to 16 ("Channel xx/16", NVIDIA/nccl #1453).
  const auto dgx = topology::Topology(topology::load_topology_spec("dgx-h100"));
  auto two       = nccl_layout(dgx, first(16), s);
  CHECK(graph(two, NcclAlgorithm::ring).channels == 8);
  CHECK(graph(two, NcclAlgorithm::ring).bw_inter == 48);
  CHECK(two.comm.channels == 16);
  CHECK(two.nic_members.front().size() == 8);
  // The tree's pass 2 steps bwIntra up NCCL's inter-node ladder (48 is its top on Hopper): it stays at 48.
  CHECK(graph(two, NcclAlgorithm::tree).bw_intra == 48);
  // One node: the intra-node ladder from 60 GB/s: 6 channels x 60 over 370.8 GB/s of NVLink (18 x 20.6), doubled to
  // 12 x 30, then 24 ("24 coll channels" in public logs); NVLS 16 channels, 8 heads of 40 GB/s ((8 + 1) x 40 <= 370.8).
  auto one = nccl_layout(dgx, first(8), s);
  CHECK(graph(one, NcclAlgorithm::ring).channels == 12);
  CHECK(graph(one, NcclAlgorithm::ring).bw_intra == 30);
  CHECK(one.comm.channels == 24);
  CHECK(graph(one, NcclAlgorithm::nvls).channels == 8);
  CHECK(graph(one, NcclAlgorithm::nvls).bw_intra == 40);
  CHECK(one.comm.nvls_channels == 16);
  // p4de-like: 4 NICs of 100 Gb/s, two A100 behind each: 4 channels of 12 GB/s (12.5 GB/s a NIC), not duplicated
  // (below 25 GB/s), 8 at run time.
  const auto p4 = topology::Topology(topology::load_topology_spec("p4de"));
  auto a100     = nccl_layout(p4, first(16), s);
  CHECK(graph(a100, NcclAlgorithm::ring).channels == 4);
  CHECK(graph(a100, NcclAlgorithm::ring).bw_inter == 12);
  CHECK(a100.comm.channels == 8);
  CHECK(a100.nics_shared);
  // One GPU per node: one NIC, 1 x 48 duplicated to 2 x 24, 4 at run time; PAT from 2.23.
  std::vector<int> rail;
  for (int n = 0; n < 4; ++n)
    rail.push_back(8 * n);
  auto single = nccl_layout(dgx, rail, s);
  CHECK(graph(single, NcclAlgorithm::ring).channels == 2);
  CHECK(single.comm.channels == 4);
  CHECK(single.comm.pat);
  // GB200 NVL72 racks: 16 x 45.1 (NVLink-bound: 71/72 of a channel's 45.1 GB/s on each of 721.8 GB/s), 32 at run
  // time; NVLS 32 channels across racks.
  const auto nvl = topology::Topology(topology::load_topology_spec("gb200-nvl72"));
  auto racks     = nccl_layout(nvl, first(144), s);
  CHECK(graph(racks, NcclAlgorithm::ring).channels == 16);
  CHECK(graph(racks, NcclAlgorithm::ring).bw_inter == 45.1);
  CHECK(racks.comm.channels == 32);
  CHECK(racks.comm.nvls_channels == 32);
  // NCCL 2.19 duplicated Hopper's multi-node channels to 32 (2n <= MAXCHANNELS).
  s.version = NcclVersion::parse("2.19");
  CHECK(nccl_layout(dgx, first(16), s).comm.channels == 32);
}

TEST_CASE("NCCL's tuner: latencies and bandwidths by hand from its tables", "[nccl]")
{
  const auto dgx = topology::Topology(topology::load_topology_spec("dgx-h100"));
  NcclSettings s;
  NcclPick p;
  // Ring all-reduce on one node, Simple: baseLat 8.4 + 14 steps x NVLink's 3.4 us.
  const auto one = nccl_layout(dgx, first(8), s);
  REQUIRE(nccl_time(one.comm, CollectiveOp::all_reduce, kGiB, NcclAlgorithm::ring, Protocol::simple, &p) > 0);
  expect_within("ring, one node, Simple: latency (us)", 8.4 + 14 * 3.4, p.latency_us, 1e-12);
  // ... and its bandwidth: 12 channels x 30 GB/s, algBw = busBw x 8 / 14.
  expect_within("ring, one node, Simple: algBw (GB/s)", 12 * 30.0 * 8 / 14, p.algbw, 1e-12);
  // NVLS (2.27): latency = NVLink's hwLat 25 us; bandwidth = 8 heads x min(40, 60) x 5/6.
  REQUIRE(nccl_time(one.comm, CollectiveOp::all_reduce, kGiB, NcclAlgorithm::nvls, Protocol::simple, &p) > 0);
  expect_within("NVLS latency (us)", 25, p.latency_us, 1e-12);
  expect_within("NVLS algBw (GB/s)", 8 * 40.0 * 5 / 6, p.algbw, 1e-12);
  // Tree on two nodes, LL128: baseLat 14 + 2 x ((8 - 1) x 1.25 + log2(2) x 8.5).
  const auto two = nccl_layout(dgx, first(16), s);
  REQUIRE(nccl_time(two.comm, CollectiveOp::all_reduce, 1 << 20, NcclAlgorithm::tree, Protocol::ll128, &p) > 0);
  expect_within("tree, two nodes, LL128: latency (us)", 14 + 2 * (7 * 1.25 + 8.5), p.latency_us, 1e-12);
  // Its bandwidth: min(min(8 x 48 x 0.92, Hopper's 2-node tree cap 8 x 41.4) x LL128's 120/128, the per-channel
  // LL128 cap 8 x 36.7) x 0.85 (TREE pattern) x 0.5, x the tree correction of 1 MiB (log2(2^20 >> 6) = 14: 0.6).
  const double tree_bw = std::min(std::min(8 * 48.0 * 0.92, 8 * 41.4) * 120 / 128, 8 * 36.7) * 0.85 * 0.5 * 0.6;
  expect_within("tree, two nodes, LL128: algBw at 1 MiB (GB/s)", tree_bw, p.algbw, 1e-12);
  // PAT (2.27), 4 ranks on 4 nodes: 8 + log2(4) x 14/3.5 + 4 x 2.8 us.
  std::vector<int> rail{0, 8, 16, 24};
  const auto pat = nccl_layout(dgx, rail, s);
  REQUIRE(nccl_time(pat.comm, CollectiveOp::all_gather, kGiB, NcclAlgorithm::pat, Protocol::simple, &p) > 0);
  expect_within("PAT latency (us)", 8 + 2 * 14 / 3.5 + 4 * 2.8, p.latency_us, 1e-12);
  // NCCL 2.18 (v2.18.6-1's tables): NVLS's latency is its baseLat, 23 us, on one node; NVLSTree on two adds
  // 2 x (nodes - 1) x the network's NVLSTree hwLat of 19 us.
  NcclSettings old;
  old.version = NcclVersion::parse("2.18");
  REQUIRE(nccl_time(nccl_layout(dgx, first(8), old).comm, CollectiveOp::all_reduce, kGiB, NcclAlgorithm::nvls,
                    Protocol::simple, &p) > 0);
  expect_within("NVLS latency, 2.18 (us)", 23, p.latency_us, 1e-12);
  REQUIRE(nccl_time(nccl_layout(dgx, first(16), old).comm, CollectiveOp::all_reduce, kGiB, NcclAlgorithm::nvls_tree,
                    Protocol::simple, &p) > 0);
  expect_within("NVLSTree latency, 2.18, two nodes (us)", 23 + 2 * 1 * 19, p.latency_us, 1e-12);
  // Picks: NVLS for a large all-reduce on one node; NVLSTree across two; a ring over many nodes of one GPU each.
  CHECK(nccl_pick(one.comm, CollectiveOp::all_reduce, kGiB, {}, Protocol::automatic).algorithm == NcclAlgorithm::nvls);
  CHECK(nccl_pick(two.comm, CollectiveOp::all_reduce, kGiB, {}, Protocol::automatic).algorithm ==
        NcclAlgorithm::nvls_tree);
  // NCCL_ALGO leaves NVLS out: the ring.
  CHECK(nccl_pick(one.comm, CollectiveOp::all_reduce, kGiB, NcclAlgorithmSet::parse("^NVLS,NVLSTree"),
                  Protocol::automatic)
            .algorithm == NcclAlgorithm::ring);
  CHECK_THROWS_WITH(nccl_pick(one.comm, CollectiveOp::all_reduce, kGiB, NcclAlgorithmSet::parse("CollNetDirect"),
                              Protocol::automatic),
                    Catch::Contains("no algorithm") && Catch::Contains("CollNetDirect"));
}

TEST_CASE("each algorithm steps by the chunk NCCL's enqueue.cc gives it: NVLS, NVLSTree, CollNet and tree LL128",
          "[nccl]")
{
  const auto dgx  = topology::Topology(topology::load_topology_spec("dgx-h100"));
  const auto step = [&](const NcclSettings& s, int ranks, double bytes, NcclAlgorithm a, Protocol p) {
    const auto layout = nccl_layout(dgx, first(ranks), s);
    NcclPick pick;
    REQUIRE(nccl_time(layout.comm, CollectiveOp::all_reduce, bytes, a, p, &pick) > 0);
    pick.algorithm = a;
    pick.protocol  = p;
    return nccl_call(layout.comm, pick, CollectiveOp::all_reduce, bytes, s).step_bytes;
  };
  NcclSettings s;
  // NVLS on one node: 16 channels x 8 heads = 128 operations in flight. NCCL_NVLS_CHUNKSIZE (128 KiB) at 1 GiB
  // (not below 64 x 128 x 128 KiB); at 8 MiB below 64 x 128 x 128 KiB (64 KiB) and 8 x 128 x 64 KiB (32 KiB), not
  // below 2 x 128 x 32 KiB.
  expect_within("NVLS, 8 GPUs, 1 GiB: chunk (bytes)", 131072, step(s, 8, kGiB, NcclAlgorithm::nvls, Protocol::simple),
                0);
  expect_within("NVLS, 8 GPUs, 8 MiB: chunk (bytes)", 32768, step(s, 8, 8 << 20, NcclAlgorithm::nvls, Protocol::simple),
                0);
  // NVLSTree: 128 KiB on two nodes, at most 64 KiB on four (NCCL_NVLSTREE_MAX_CHUNKSIZE's default).
  expect_within("NVLSTree, 2 nodes, 1 GiB: chunk (bytes)", 131072,
                step(s, 16, kGiB, NcclAlgorithm::nvls_tree, Protocol::simple), 0);
  expect_within("NVLSTree, 4 nodes, 1 GiB: chunk (bytes)", 65536,
                step(s, 32, kGiB, NcclAlgorithm::nvls_tree, Protocol::simple), 0);
  // NCCL 2.20's NVLSTree starts from the Simple step (4 MiB / 8 = 512 KiB) and halves it below 32 x 128 x 512 KiB.
  NcclSettings old;
  old.version = NcclVersion::parse("2.20");
  expect_within("NVLSTree, 2 nodes, 1 GiB, NCCL 2.20: chunk (bytes)", 262144,
                step(old, 16, kGiB, NcclAlgorithm::nvls_tree, Protocol::simple), 0);
  // CollNet chain: at most 256 KiB, kept while every channel has 64 x depth (8 GPUs a node) chunks.
  NcclSettings sharp;
  sharp.collnet = true;
  expect_within("CollNet chain, 2 nodes, 16 GiB: chunk (bytes)", 262144,
                step(sharp, 16, 16 * kGiB, NcclAlgorithm::collnet_chain, Protocol::simple), 0);
  // Tree LL128 on two nodes at 1 MiB over 32 channels: LL128's step (4,915,200 / 8 x 120/128 = 576,000 payload
  // bytes) halves while fewer than (1 + log2 2 + 0.1 x 8) x 64 / 8 chunks a channel (to 72,000, below 128 KiB),
  // then while fewer than 2.8 x 16 / 8 (to 18,000, below 32 KiB).
  expect_within("tree LL128, 2 nodes, 1 MiB: chunk (bytes)", 18000,
                step(s, 16, 1 << 20, NcclAlgorithm::tree, Protocol::ll128), 0);
}

TEST_CASE("rings over whole nodes leave each node by every NIC: 16 ranks reach the 8-NIC bound", "[nccl][collective]")
{
  // hgx-h100-pod (8 x 400G a node, RoCE at 0.94): rings one per NIC, each carrying S/8, rail-local between nodes. Bus
  // bandwidth 8 x 47 GB/s where one ring through one NIC gave 47 (issue 61's figure); NVLink carries 7/8 of it.
  const auto t   = test::without_fitted_terms("hgx-h100-pod");
  const double b = t.spec().pod.nic_rate();
  for (double s : {1 * kGiB, 8 * kGiB})
    for (auto f : {Fidelity::analytical, Fidelity::flow}) {
      Lowered l;
      const auto c       = make(Algorithm::ring, first(16), s);
      const double time  = simulate(t, c, f, &l);
      const double chain = std::max(30 * 2 * t.spec().pod.link_latency, test::nccl_floor(t, c));
      const double form  = 2.0 * 15 / 16 * s / (8 * b) + chain;
      expect_within("16-rank ring of " + std::to_string(static_cast<long>(s)) + " B at " + std::string(name_of(f)) +
                        " against 2(K-1)/K S / (8 NICs x " + std::to_string(b / 1e9) + " GB/s)",
                    form, time, 0.01);
      CHECK(l.nics == 8);
      std::cout << "  bus bandwidth " << 2.0 * 15 / 16 * s / time / 1e9 << " GB/s\n";
    }
}

TEST_CASE("NCCL's tree on two nodes: chains inside bound it, or its kernels' per-channel cap", "[nccl][collective]")
{
  // Each NIC's tree and mirror carry S/8 between the nodes (S/8 a NIC each way: S / (8 x 47 GB/s)); inside, each of
  // the 8 chains (one per NIC, from its own head) moves 2 x 7/8 S over every GPU's NVLink (1.75 S / 369 GB/s); the
  // tree kernels reach at most 8 channels x 41.4 GB/s (Hopper, 2 nodes) x 0.5 of algBw (the tuner's 0.85 for the
  // TREE pattern is the NICs' sharing, which the engines simulate, not a kernel limit).
  const auto t     = test::without_fitted_terms("hgx-h100-pod");
  const double nic = 8 * t.spec().pod.nic_rate(), nv = t.spec().node.nvlink_rate();
  const double cap = 8 * 41.4e9 * 0.5;
  for (auto f : {Fidelity::analytical, Fidelity::flow}) {
    const double s    = 4 * kGiB;
    const auto c      = make(Algorithm::tree, first(16), s);
    const double form = std::max({s / nic, 1.75 * s / nv, s / cap}) + test::nccl_floor(t, c, NcclAlgorithm::tree);
    expect_within("2-node tree all-reduce at " + std::string(name_of(f)), form, simulate(t, c, f), 0.01);
  }
}

TEST_CASE("NVLS: the NVSwitch reduces, each GPU moves S (k+1)/k each way at NCCL's NVLS efficiency",
          "[nccl][collective]")
{
  const auto t      = test::without_fitted_terms("dgx-h100");
  const double rate = t.spec().node.nvlink_rate() * 0.85; // tuning.cc 2.28+: nvlsEfficiency, Hopper
  const int nc      = nccl_layout(t, first(8), {}).comm.nvls_channels;
  REQUIRE(nc == 16); // the chunks below are counted for 16 channels of 8 heads
  // NCCL's chunk (enqueue.cc): 128 KiB, 64 KiB below 64 x 16 x 8 chunks. Each channel's loop (a chunk per head)
  // passes scatter, the heads' reduction and gather in turn: the pipeline waits for all but the longest once,
  // (k-1)/k + 1/k of a loop's time through a GPU's NVLink at the channel's share.
  for (auto [s, chunk] : {std::pair{64.0 * 1024 * 1024, 65536.0}, {8 * kGiB, 131072.0}})
    for (auto f : {Fidelity::analytical, Fidelity::flow}) {
      const auto c      = make(Algorithm::nvls, first(8), s);
      const double loop = std::min(8 * chunk, s / nc);
      const double fill = loop * nc / rate;
      const double form = s * 9 / 8 / rate + test::nccl_floor(t, c, NcclAlgorithm::nvls) + fill;
      Lowered l;
      const double time = simulate(t, c, f, &l);
      expect_within("8-GPU NVLS all-reduce of " + std::to_string(s / 1024 / 1024) + " MiB at " +
                        std::string(name_of(f)) + " (pipeline fill " + std::to_string(fill * 1e6) + " us)",
                    form, time, 0.01);
      std::cout << "  bus bandwidth " << 1.75 * s / time / 1e9 << " GB/s (ring: " << t.spec().node.nvlink_rate() / 1e9
                << ")\n";
      CHECK(l.algorithm == Algorithm::nvls);
    }
  // NVLS where the switch does not reduce: refused.
  const auto a100 = test::without_fitted_terms("p4de");
  FlowGraph g;
  CHECK_THROWS_WITH(add_collective(g, a100, make(Algorithm::nvls, first(8), kGiB), {}),
                    Catch::Contains("nvls does not apply") && Catch::Contains("NVSwitch that reduces"));
}

TEST_CASE("NVLSTree on two nodes: NVLS inside, each NIC's double tree carries S/8 each way, and the pipeline fills",
          "[nccl][collective]")
{
  // dgx-h100, 16 GPUs: inside each node NVLS moves S (k+1)/k over each GPU's NVLink at NCCL's NVLS efficiency; between
  // the nodes each of the 8 NICs' heads carries its S/8 in two trees of S/16, one rooted on each node, so S/8 crosses
  // each NIC each way. A channel's loop (k chunks of 128 KiB, NCCL's NVLSTree chunk on two nodes) also waits once for
  // its stages other than the longest: scatter (k-1)/k, reduce 1/k and gather (k-1)/k of a loop through a GPU's
  // NVLink at the channel's share, and one tree level (up over the NIC, the head's combination, down) and the
  // heads' multicast.
  const auto t      = test::without_fitted_terms("dgx-h100");
  const double nv   = t.spec().node.nvlink_rate() * 0.85; // tuning.cc 2.28+: nvlsEfficiency, Hopper
  const double nic  = t.spec().pod.nic_rate();
  const double k    = 8;
  const double head = 131072; // NCCL_NVLSTREE_MAX_CHUNKSIZE's default on two nodes (the chunk test above)
  for (double s : {64.0 * 1024 * 1024, 4 * kGiB})
    for (auto f : {Fidelity::analytical, Fidelity::flow}) {
      const auto c = make(Algorithm::nvls_tree, first(16), s);
      Lowered l;
      const double time = simulate(t, c, f, &l);
      REQUIRE(l.algorithm == Algorithm::nvls_tree);
      REQUIRE(l.nccl.channels == 16); // NCCL's NVLS channels on Hopper, as the NVLS test above counts them
      const double nc       = l.nccl.channels;
      const double loop     = std::min(k * head, s / nc);
      const double t_inside = loop * nc / nv;
      const double t_net    = loop / k * nc / nic;
      const double stages[] = {
          t_inside * (k - 1) / k, t_inside / k, t_inside * (k - 1) / k, t_net, t_inside / k, t_net, t_inside / k};
      double sum = 0, longest = 0;
      for (double x : stages) {
        sum += x;
        longest = std::max(longest, x);
      }
      const double fill = sum - longest;
      const double form =
          std::max(s * (k + 1) / k / nv, s / (8 * nic)) + test::nccl_floor(t, c, NcclAlgorithm::nvls_tree) + fill;
      expect_within("2-node NVLSTree all-reduce of " + std::to_string(s / 1024 / 1024) + " MiB at " +
                        std::string(name_of(f)) + " (" + std::to_string(static_cast<int>(nc)) +
                        " channels, pipeline fill " + std::to_string(fill * 1e6) + " us)",
                    form, time, 0.01);
    }
}

TEST_CASE("NVLS warps: a channel's gather warps bound NVLS (7 of 20) and NVLSTree (5 of 20) below the link's share",
          "[nccl][collective]")
{
  // NCCL's NVLS all-reduce kernels (src/device/all_reduce.h) give each channel's gather 7 of its 20 warps on one
  // node of 8 GPUs and 5 in NVLSTree; every byte of a GPU passes them once. With a warp rate w the NVLink moves
  // (k+1)/k of the bytes at min(NVLS efficiency x link, channels x warps x w x (k+1)/k); the pipeline fill as above at
  // that rate. The rates are chosen to bind: 16 x 7 x 2 GB/s and 16 x 5 x 3 GB/s, against 0.85 x 369 GB/s.
  auto spec            = test::without_fitted_terms("dgx-h100").spec();
  const double nv_link = spec.node.nvlink_rate();
  const double nv      = nv_link * 0.85;
  const double k       = 8;
  for (auto [ranks, warps, w] : {std::tuple{8, 7.0, 2e9}, {16, 5.0, 3e9}}) {
    spec.node.nvls_warp_rate = w;
    for (auto& b : spec.building_overrides)
      b.node.nvls_warp_rate = w;
    const topology::Topology t(spec);
    const double nic = t.spec().pod.nic_rate();
    const auto a     = ranks == 8 ? Algorithm::nvls : Algorithm::nvls_tree;
    const auto na    = ranks == 8 ? NcclAlgorithm::nvls : NcclAlgorithm::nvls_tree;
    const double s   = 4 * kGiB;
    for (auto f : {Fidelity::analytical, Fidelity::flow}) {
      const auto c = make(a, first(ranks), s);
      Lowered l;
      const double time = simulate(t, c, f, &l);
      REQUIRE(l.algorithm == a);
      const double nc   = l.nccl.channels;
      const double rate = std::min(nv, nc * warps * w * (k + 1) / k);
      REQUIRE(rate < nv); // the warps bind
      const double loop     = std::min(k * 131072, s / nc);
      const double t_inside = loop * nc / rate;
      std::vector<double> stages{t_inside * (k - 1) / k, t_inside / k, t_inside * (k - 1) / k};
      if (ranks > 8)
        for (double x : {loop / k * nc / nic, t_inside / k, loop / k * nc / nic, t_inside / k})
          stages.push_back(x);
      double sum = 0, longest = 0;
      for (double x : stages) {
        sum += x;
        longest = std::max(longest, x);
      }
      const double form =
          std::max(s / (nc * warps * w), ranks > 8 ? s / (8 * nic) : 0.0) + test::nccl_floor(t, c, na) + sum - longest;
      expect_within(std::to_string(ranks) + "-GPU " + std::string(name_of(a)) + " all-reduce of 4 GiB at " +
                        std::string(name_of(f)) + ", " + std::to_string(static_cast<int>(warps)) + " gather warps of " +
                        std::to_string(w / 1e9) + " GB/s (bus bandwidth " +
                        std::to_string(2 * (ranks - 1.0) / ranks * s / time / 1e9) + " GB/s)",
                    form, time, 0.01);
    }
  }
  // The shipped Hopper rate (topology/fabrics.json, fitted on the network section's fit rows) binds NVLSTree, not NVLS.
  const topology::Topology shipped(topology::load_topology_spec("dgx-h100"));
  const double w = shipped.spec().node.nvls_warp_rate;
  std::cout << "  shipped NVLS warp rate " << w / 1e9 << " GB/s: NVLS bound " << 16 * 7 * w * 9 / 8 / 1e9
            << " GB/s, NVLSTree " << 16 * 5 * w * 9 / 8 / 1e9 << " GB/s, against " << nv / 1e9 << " GB/s\n";
  CHECK(16 * 7 * w * 9 / 8 > nv);
  CHECK(16 * 5 * w * 9 / 8 < nv);
}

TEST_CASE("CollNet: the switches reduce, each node puts S on the network once", "[nccl][collective]")
{
  // dgx-h100 has SHARP switches; with CollNet enabled each NIC's head sends S/8 once, the nodes' GPUs reduce to their
  // heads and spread the result (a ring's NVLink volume, 2 (k-1)/k S).
  const auto t = test::without_fitted_terms("dgx-h100");
  for (auto f : {Fidelity::analytical, Fidelity::flow}) {
    const double s    = 4 * kGiB;
    auto c            = make(Algorithm::collnet_direct, first(16), s);
    c.nccl.collnet    = true;
    const double form = std::max(1.75 * s / t.spec().node.nvlink_rate(), s / (8 * t.spec().pod.nic_rate())) +
                        test::nccl_floor(t, c, NcclAlgorithm::collnet_direct);
    expect_within("2-node CollNet all-reduce at " + std::string(name_of(f)), form, simulate(t, c, f), 0.01);
  }
  // Without CollNet enabled, or on a fabric without SHARP: refused.
  FlowGraph g;
  CHECK_THROWS_WITH(add_collective(g, t, make(Algorithm::collnet_direct, first(16), kGiB), {}),
                    Catch::Contains("CollNet needs SHARP, CollNet enabled"));
}

TEST_CASE("PXN: a send to another node leaves by the destination's rail, relayed by a rank of the group",
          "[nccl][collective]")
{
  const auto t   = test::without_fitted_terms("hgx-h100-pod");
  auto transfers = [&](const Collective& c) {
    FlowGraph g;
    add_collective(g, t, c, {});
    std::vector<std::pair<int, int>> hops;
    for (const auto& op : g.ops())
      if (op.kind == Op::Kind::transfer)
        hops.emplace_back(op.src, op.dst);
    return hops;
  };
  // An all-to-all over GPUs 1 and 2 of node 0 and GPU 2 of node 1 (GPU 10) where only GPU 1 sends, to GPU 10:
  // over NVLink to GPU 2 of node 0, a rank of the group on rail 2, then out of its NIC.
  Collective c;
  c.op        = CollectiveOp::all_to_all;
  c.algorithm = Algorithm::direct;
  c.gpus      = {1, 2, 10};
  c.bytes     = kGiB;
  c.matrix    = {{0, 0, kGiB}, {0, 0, 0}, {0, 0, 0}};
  CHECK(transfers(c) == std::vector<std::pair<int, int>>{{1, 2}, {2, 10}});
  // A send between two ranks only (a pipeline's communicator): GPU 2 of node 0 is not a rank, so NCCL sends
  // directly from GPU 1's own NIC.
  Collective p;
  p.op    = CollectiveOp::send_recv;
  p.gpus  = {1, 10};
  p.bytes = kGiB;
  CHECK(transfers(p) == std::vector<std::pair<int, int>>{{1, 10}});
  // PXN off: directly, whoever is in the group.
  c.nccl.pxn = false;
  CHECK(transfers(c) == std::vector<std::pair<int, int>>{{1, 10}});
}

TEST_CASE("every step pays the step latency of its path: NVLink's inside a node, the fabric's between nodes",
          "[nccl][collective]")
{
  // The 8-GPU ring all-reduce of 1 MiB on one node: one loop of 14 steps (24 channels, a step of 1 MiB / 192), each
  // paying the node's step latency on top of NCCL's own latency for the call.
  auto spec              = topology::load_topology_spec("hgx-h100-pod");
  const double step      = 2e-6;
  spec.node.step_latency = step;
  const auto with        = topology::Topology(spec);
  const auto without     = test::without_fitted_terms("hgx-h100-pod");
  const auto c           = make(Algorithm::ring, first(8), 1 << 20);
  for (auto f : {Fidelity::analytical, Fidelity::flow})
    expect_within("14 steps x " + std::to_string(step * 1e6) + " us at " + std::string(name_of(f)),
                  simulate(without, c, f) + 14 * step, simulate(with, c, f), 1e-9);
}

TEST_CASE("NCCL's send/recv channels and protocol by size: addP2pToPlan by hand", "[nccl]")
{
  // One node of 8 GPUs whose collectives run 32 channels (a B200 node): p2pnChannels 32, every NVLink peer takes
  // all 32 (p2pnChannelsPerPeer), halved to 4 so that 8 ranks' peers fit the 32 channels once; the NVLink step is
  // NCCL_P2P_NVL_CHUNKSIZE, 512 KiB: parts of at least 64 KiB, doubled while above 16 MiB. LL up to 32 x 16 KiB,
  // its step NCCL_LL_BUFFSIZE / 8 = 64 KiB: parts of at least 8 KiB (16 KiB takes 2 channels).
  const NcclSettings s;
  const auto one = p2p_comm(32, 8, 1, true, s);
  CHECK(one.channels == 32);
  CHECK(one.per_peer == 32);
  expect_within("NVLink step (bytes)", 524288, one.step, 0);
  const double MiB = 1048576;
  for (auto [bytes, channels, protocol] : {std::tuple{16384.0, 2, Protocol::ll},
                                           {512 * 1024.0, 4, Protocol::ll},
                                           {MiB, 4, Protocol::simple},
                                           {64 * MiB, 4, Protocol::simple},
                                           {128 * MiB, 8, Protocol::simple},
                                           {256 * MiB, 16, Protocol::simple},
                                           {512 * MiB, 32, Protocol::simple},
                                           {1024 * MiB, 32, Protocol::simple}}) {
    const auto plan = p2p_plan(one, bytes);
    std::cout << "  one node, " << bytes / MiB << " MiB: expected " << channels << " channel(s) " << name_of(protocol)
              << ", actual " << plan.channels << " " << name_of(plan.protocol) << "\n";
    CHECK(plan.channels == channels);
    CHECK(plan.protocol == protocol);
  }
  // Two nodes of 8, 16 channels: a network peer takes 2 (2 x 16 ranks <= 4 x 16), so every peer does; the net
  // step (128 KiB) makes parts of 64 KiB to 128 KiB: LL up to 32 KiB, 1 MiB over 2 channels (1 to fit 16 ranks,
  // doubled once). 128 ranks: 1 channel a peer (2 x 128 > 4 x 16), LL up to 16 KiB.
  const auto two = p2p_comm(16, 16, 2, false, s);
  CHECK(two.per_peer == 2);
  CHECK(p2p_plan(two, 32768).protocol == Protocol::ll);
  CHECK(p2p_plan(two, 65536).protocol == Protocol::simple);
  CHECK(p2p_plan(two, MiB).channels == 2);
  // A send far larger than any buffer still takes at most the peer's channels.
  CHECK(p2p_plan(one, 1e15).channels == 32);
  const auto many = p2p_comm(16, 128, 16, false, s);
  CHECK(many.per_peer == 1);
  CHECK(p2p_plan(many, 16384).protocol == Protocol::ll);
  CHECK(p2p_plan(many, 16385).protocol == Protocol::simple);
}

TEST_CASE("a send/recv ring inside one node moves at its channels' rate: 4 channels to 64 MiB then 8",
          "[nccl][collective]")
{
  // 8 B200 of one node, each sending to the next (nccl-tests' sendrecv_perf), at a channel rate of 20 GB/s: the
  // channels above (4 for 64 MiB, 8 for 128 MiB) bound each send below its NVLink, and the call pays NCCL's Simple
  // ring launch and one NVLink step (8.4 + 3.4 us) beyond its bytes.
  const topology::Topology t(at_p2p_channel_rate("dgx-b200", 20e9));
  Collective c;
  c.op   = CollectiveOp::send_recv;
  c.gpus = first(8);
  REQUIRE(nccl_layout(t, c.gpus, c.nccl).comm.channels == 32);
  for (auto [mib, channels] : {std::pair{64.0, 4}, {128.0, 8}})
    for (auto f : {Fidelity::analytical, Fidelity::flow}) {
      c.bytes           = mib * 1048576;
      const double form = c.bytes / (channels * 20e9) + (8.4 + 3.4) * 1e-6;
      const double time = simulate(t, c, f);
      expect_within("8-GPU send/recv ring of " + std::to_string(static_cast<int>(mib)) + " MiB at " +
                        std::string(name_of(f)) + " (" + std::to_string(channels) + " channels, " +
                        std::to_string(c.bytes / time / 1e9) + " GB/s)",
                    form, time, 0.01);
    }
}

TEST_CASE("sends that share a channel share its rate: 64 GPUs of one NVLink domain move 32 channels' worth",
          "[nccl][collective]")
{
  // 64 GPUs of one GB200 NVL72 rack, 32 channels: each of a rank's 63 sends takes 1 channel (32 / 64 rounds down to
  // 1), so 63 sends share the 32 channels, whose warps NCCL splits among their works: the rank moves at most 32 x
  // 20 GB/s = 640 GB/s, below its NVLink. An all-to-all of 1 GiB then takes 63/64 S / 640 GB/s beyond NCCL's Simple
  // ring launch and one NVLink step (8.4 + 3.4 us).
  const topology::Topology t(at_p2p_channel_rate("gb200-nvl72", 20e9));
  Collective c;
  c.op    = CollectiveOp::all_to_all;
  c.gpus  = first(64);
  c.bytes = kGiB;
  REQUIRE(nccl_layout(t, c.gpus, c.nccl).comm.channels == 32);
  REQUIRE(t.spec().node.nvlink_rate() > 640e9);
  for (auto f : {Fidelity::analytical, Fidelity::flow}) {
    const double form = 63.0 / 64 * c.bytes / (32 * 20e9) + (8.4 + 3.4) * 1e-6;
    expect_within("64-GPU all-to-all of 1 GiB at " + std::string(name_of(f)), form, simulate(t, c, f), 0.01);
  }
}

TEST_CASE("a group of sends pays NCCL's ring launch once and one step per wave of peers", "[nccl][collective]")
{
  // NCCL's tables (src/graph/tuning.cc, every series 2.18 to 2.30): baseLat of Ring 6.6 us (LL) and 8.4 us
  // (Simple); hwLat of Ring 0.6 / 3.4 us over NVLink and 2.7 / 14 us over the network.
  const auto v = NcclVersion::parse("2.27");
  struct Row {
    Protocol protocol;
    NcclPath path;
    double base, step;
  };
  for (const auto& r :
       {Row{Protocol::simple, NcclPath::nvlink, 8.4, 3.4}, Row{Protocol::ll, NcclPath::nvlink, 6.6, 0.6},
        Row{Protocol::simple, NcclPath::net, 8.4, 14.0}, Row{Protocol::ll, NcclPath::net, 6.6, 2.7}}) {
    const auto l = nccl_p2p_latency(v, r.protocol, r.path);
    expect_within("baseLat", r.base, l.base_us, 1e-12);
    expect_within("hwLat", r.step, l.step_us, 1e-12);
  }
  // Waves: 16 channels (DGX H100), 8 peers per channel's batch; 2 channels per peer up to 32 ranks, 1 above.
  NcclSettings s;
  CHECK(p2p_waves(31, 32, s) == 1);   // 8 channels' batches of 8: 64 peers at once
  CHECK(p2p_waves(127, 128, s) == 1); // 16 x 8 = 128 at once
  CHECK(p2p_waves(255, 256, s) == 2);
  CHECK(p2p_waves(1023, 1024, s) == 8);
  // An all-to-all of 4 GPUs of one node, 1 MiB (256 KiB a peer: LL, at most p2pnChannelsPerPeer x 16 KiB with 16
  // or more channels a peer on one node): the NVLink time of its 3 sends' wire bytes (LL's twice the data), then
  // LL's baseLat + hwLat + the node's step latency, at analytical and flow fidelity.
  auto spec              = topology::load_topology_spec("hgx-h100-pod");
  spec.node.step_latency = 1e-6;
  const auto t           = topology::Topology(spec);
  Collective c;
  c.op                = CollectiveOp::all_to_all;
  c.algorithm         = Algorithm::automatic;
  c.gpus              = first(4);
  c.bytes             = 1 << 20;
  const double nvlink = t.spec().node.nvlink_rate();
  const double form   = 2 * 3.0 / 4 * c.bytes / nvlink + (6.6 + 0.6) * 1e-6 + 1e-6;
  for (auto f : {Fidelity::analytical, Fidelity::flow})
    expect_within("4-GPU all-to-all of 1 MiB at " + std::string(name_of(f)), form, simulate(t, c, f), 0.01);
  // 64 KiB (16 KiB a peer: LL) over 4 nodes, one GPU each: the network's LL step, and LL's lines of 8 data bytes
  // and 8 flag bytes put twice the data on the wire.
  c.gpus           = {0, 8, 16, 24};
  c.bytes          = 65536;
  const double nic = t.spec().pod.nic_rate();
  const double net = 2 * 3.0 / 4 * c.bytes / nic + (6.6 + 2.7) * 1e-6 + t.spec().pod.net_latency;
  for (auto f : {Fidelity::analytical, Fidelity::flow})
    expect_within("4-node all-to-all of 64 KiB at " + std::string(name_of(f)), net, simulate(t, c, f), 0.01);
}
