// Flow fidelity (SimGrid) against closed forms: alpha-beta for single flows, max-min shares for contention,
// and the ring all-reduce formula. Each run forks its own SimGrid process.
#include "common/process.hpp"
#include "netsim/collectives.hpp"
#include "netsim/netsim.hpp"
#include "topology/topology.hpp"

#include "tests/support.hpp"
#include "tests/support_flow.hpp"
#include "tests/support_process.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

using namespace spansim;
using spansim::test::expect_within;
using spansim::test::transfers;
using namespace spansim::netsim;

TEST_CASE("one flow takes the sum of latencies plus size over the bottleneck bandwidth", "[flow]")
{
  auto t             = test::tiny_topology();
  const double bytes = 1e9;
  struct Case {
    int src, dst;
    const char* what;
  };
  for (auto c :
       {Case{0, 1, "NVLink"}, Case{0, 5, "pod spine"}, Case{0, 32, "inter-building"}, Case{0, 64, "inter-region"}}) {
    auto r          = run_flow(t, transfers({{c.src, c.dst}}, bytes));
    auto route      = t.route(c.src, c.dst);
    double expected = t.route_latency(route) + bytes / t.route_bandwidth(route);
    expect_within(std::string("single flow over ") + c.what, expected, r.ops[0].end - r.ops[0].start, 1e-3);
  }
}

TEST_CASE("a flow across the region boundary pays the inter-region latency", "[flow]")
{
  auto t = test::tiny_topology();
  // A small message makes latency dominant; both flows share the same NIC bottleneck.
  double near = run_flow(t, transfers({{0, 32}}, 1000)).makespan;
  double far  = run_flow(t, transfers({{0, 64}}, 1000)).makespan;
  // Far route minus near route: + 2 building uplinks (2 us) + inter-region (510 us) - inter-building (6 us).
  expect_within("extra latency across the region boundary", 4e-6 + 510e-6 - 6e-6, far - near, 1e-3);
}

TEST_CASE("flows on one bottleneck get equal max-min shares", "[flow]")
{
  auto t             = test::tiny_topology();
  const double bytes = 1e9;
  // GPUs 0 and 1 are on different rails (separate NICs and leaves) of one node; both cross the 20 GB/s
  // inter-region link, which is the only shared and the narrowest link: 10 GB/s each.
  auto r          = run_flow(t, transfers({{0, 64}, {1, 65}}, bytes));
  double share    = t.spec().inter_region.bandwidth / 2;
  double expected = t.route_latency(t.route(0, 64)) + bytes / share;
  expect_within("first of two flows sharing the inter-region link", expected, r.ops[0].end, 1e-3);
  expect_within("second of two flows sharing the inter-region link", expected, r.ops[1].end, 1e-3);

  // Three flows on the 20 GB/s link, each on its own 12.5 GB/s NIC: the fair share 20/3 GB/s is below every
  // NIC, so all three get 6.67 GB/s.
  auto r3 = run_flow(t, transfers({{0, 64}, {1, 65}, {2, 66}}, bytes));
  for (int i = 0; i < 3; ++i)
    expect_within("one of three flows on the inter-region link",
                  t.route_latency(t.route(i, 64 + i)) + bytes / (t.spec().inter_region.bandwidth / 3), r3.ops[i].end,
                  1e-3);
}

TEST_CASE("a flow limited elsewhere leaves its unused share to the others (max-min)", "[flow]")
{
  auto t = test::tiny_topology();
  // Two flows leave GPU 0 (one NIC, 12.5 GB/s) and one flow leaves GPU 1; all three cross the 20 GB/s
  // inter-region link. The fair share of the long haul, 20/3 GB/s, is more than the GPU-0 flows can use: their
  // NIC caps them at 6.25 GB/s each, and the GPU-1 flow takes the rest, 20 - 12.5 = 7.5 GB/s. It ends first;
  // the GPU-0 flows stay NIC-bound to the end.
  const double bytes = 1e9;
  auto r             = run_flow(t, transfers({{0, 64}, {0, 68}, {1, 65}}, bytes));
  double lat         = t.route_latency(t.route(0, 64));
  expect_within("NIC-bound flow 1", lat + bytes / 6.25e9, r.ops[0].end, 1e-3);
  expect_within("NIC-bound flow 2", lat + bytes / 6.25e9, r.ops[1].end, 1e-3);
  expect_within("flow taking the leftover share", t.route_latency(t.route(1, 65)) + bytes / 7.5e9, r.ops[2].end, 1e-3);
}

TEST_CASE("a local and an inter-region flow share a NIC equally, whatever their latencies", "[flow]")
{
  // SimGrid's CM02 weighs shares by the inverse of the route latency (TCP's RTT unfairness); spansim models
  // RDMA, where flows share a link equally. Flow A (GPU 0 to GPU 4, a few microseconds) waits until flow B
  // (GPU 0 to GPU 64, across the region boundary) has paid its latency, so that both send their bytes at once
  // through GPU 0's 12.5 GB/s NIC: 6.25 GB/s each, both ending together. With latency-weighted shares flow A
  // would take almost the whole NIC and end twice as early.
  auto t             = test::tiny_topology();
  const double bytes = 1e9;
  const double lat_a = t.route_latency(t.route(0, 4));
  const double lat_b = t.route_latency(t.route(0, 64));
  FlowGraph g;
  int wait           = g.add_delay(lat_b - lat_a);
  int a              = g.add_transfer(0, 4, bytes, {wait});
  int b              = g.add_transfer(0, 64, bytes);
  auto r             = run_flow(t, g);
  const double share = t.spec().pod.nic_rate() / 2;
  expect_within("local flow sharing the NIC with an inter-region flow", lat_b + bytes / share, r.ops[a].end, 1e-3);
  expect_within("inter-region flow sharing the NIC with a local flow", lat_b + bytes / share, r.ops[b].end, 1e-3);
}

TEST_CASE("thousands of transfers in rounds: every round takes the fair share of the long haul", "[flow]")
{
  // 160 rounds of 32 flows from region 0 to region 1 (5,120 transfers: more than one of the engine's mailboxes
  // carries, so mailboxes are replaced and cleared on the way), each round after the previous one. The
  // 20 GB/s inter-region link is the bottleneck: 0.625 GB/s per flow. Each round: latency + bytes / share.
  auto t             = test::tiny_topology();
  const double bytes = 1e7;
  const int flows = 32, rounds = 160;
  FlowGraph g;
  std::vector<int> previous;
  double latency = 0;
  for (int r = 0; r < rounds; ++r) {
    std::vector<int> round;
    for (int i = 0; i < flows; ++i) {
      round.push_back(g.add_transfer(i, 64 + i, bytes, previous));
      latency = std::max(latency, t.route_latency(t.route(i, 64 + i)));
    }
    previous = round;
  }
  const double expected = rounds * (latency + bytes / (t.spec().inter_region.bandwidth / flows));
  auto flow             = run_flow(t, g);
  expect_within("5,120 transfers in 160 rounds at flow fidelity", expected, flow.makespan, 1e-3);
  expect_within("the same rounds, analytical against flow", flow.makespan, run_analytical(t, g).makespan, 1e-6);
}

TEST_CASE("thousands of concurrent transfers run under a worker's data limit: SimGrid's actor stacks are small",
          "[flow]")
{
  // 8,192 transfers ready at once start 128 worker actors (64 comms each). With SimGrid's default 8 MiB stacks
  // that is 1 GiB of mappings, past a limit of 256 MiB over what the worker holds; spansim's 256 KiB stacks take
  // 32 MiB. Closed form: they share one NVLink, so all end at latency + n x bytes / bandwidth.
  const auto config = SimgridSettings{}.config_lines();
  if (std::find(config.begin(), config.end(), "contexts/stack-size:256") == config.end()) {
    WARN("a sanitizer build keeps SimGrid's 8 MiB stacks: nothing to check");
    return;
  }
  auto t             = test::tiny_topology();
  const int n        = 8192;
  const double bytes = 1e5;
  FlowGraph g;
  for (int i = 0; i < n; ++i)
    g.add_transfer(0, 1, bytes);
  const auto route      = t.route(0, 1);
  const double expected = t.route_latency(route) + n * bytes / t.route_bandwidth(route);
  process::MapOptions limited;
  limited.memory_limit = test::data_segment_bytes() + 256.0 * 1024 * 1024;
  const auto out       = process::parallel_map(
            2, 1,
            [&](std::size_t i) {
        SimgridSettings settings;
        if (i == 1)
          settings.actor_stack_kib = 8192;
        try {
          char text[32];
          std::snprintf(text, sizeof text, "%.17g", run_flow(t, g, settings).makespan);
          return std::string(text);
        } catch (const SimulationError& e) {
          return std::string("failed: ") + e.what();
        }
      },
            {}, limited);
  std::cout << "256 KiB stacks: " << out[0] << "\n8 MiB stacks:   " << out[1] << "\n";
  REQUIRE(out[0].rfind("failed", 0) != 0);
  expect_within("8,192 transfers on one NVLink under the data limit", expected, std::stod(out[0]), 1e-3);
  CHECK(out[1].rfind("failed", 0) == 0);
}

TEST_CASE("dependencies and delays order the flow graph", "[flow]")
{
  auto t = test::tiny_topology();
  FlowGraph g;
  int d  = g.add_delay(1e-3);
  int a  = g.add_transfer(0, 1, 1e6, {d});
  int b  = g.add_transfer(1, 0, 1e6, {a});
  auto r = run_flow(t, g);
  CHECK(r.ops[d].end == Approx(1e-3));
  CHECK(r.ops[a].start == Approx(1e-3));
  CHECK(r.ops[b].start == Approx(r.ops[a].end));
  double one = t.route_latency(t.route(0, 1)) + 1e6 / t.route_bandwidth(t.route(0, 1));
  expect_within("delay then two chained transfers", 1e-3 + 2 * one, r.makespan, 1e-6);
}

TEST_CASE("ring all-reduce inside one HGX node and over 16 nodes of one rail matches alpha-beta", "[flow][collective]")
{
  topology::Topology t = test::without_fitted_terms("hgx-h100-pod");
  const auto& spec     = t.spec();
  struct Ring {
    const char* what;
    std::vector<int> gpus;
    double bandwidth, alpha;
  };
  std::vector<int> rail;
  for (int n = 0; n < 16; ++n)
    rail.push_back(n * 8); // GPU 0 of nodes 0..15: rail 0, all under one 32-port leaf
  const Ring rings[] = {
      {"8-GPU NVLink ring", {0, 1, 2, 3, 4, 5, 6, 7}, spec.node.nvlink_rate(), 2 * spec.node.nvlink_latency},
      {"16-node rail ring", rail, spec.pod.nic_rate(), 2 * spec.pod.link_latency}};
  for (const auto& ring : rings)
    for (double s : {1048576.0, 67108864.0, 1073741824.0, 8589934592.0}) {
      FlowGraph g;
      Collective c;
      c.algorithm = Algorithm::ring;
      c.gpus      = ring.gpus;
      c.bytes     = s;
      // Alpha-beta is Simple's form: LL, which NCCL's tuner picks for 1 MiB over 16 nodes, doubles the wire bytes.
      c.nccl.protocol = Protocol::simple;
      int end         = add_collective(g, t, c, {}).end_op;
      auto r          = run_flow(t, g);
      const int k     = static_cast<int>(ring.gpus.size());
      (void)k;
      expect_within(std::string(ring.what) + " all-reduce of " + std::to_string(static_cast<long long>(s)) + " B",
                    test::ring_allreduce_time(t, c, ring.bandwidth, ring.alpha), r.ops[end].end, 0.01);
    }
}

TEST_CASE("the effective SimGrid settings are pinned and reported", "[flow]")
{
  auto t = test::tiny_topology();
  auto r = run_flow(t, transfers({{0, 1}}, 1));
  CHECK(r.settings["config"]["network/model"] == "CM02");
  CHECK(r.settings["config"]["network/crosstraffic"] == "0");
  CHECK(r.settings["config"]["network/TCP-gamma"] == "0");
  CHECK(r.settings["simgrid_version"].get<std::string>().rfind("3.32", 0) == 0);
}

TEST_CASE("two runs of the same graph give identical numbers", "[flow]")
{
  auto t = test::tiny_topology();
  FlowGraph g;
  for (int i = 0; i < 16; ++i)
    g.add_transfer(i, 127 - i, 1e7 * (i + 1));
  test::check_deterministic([&] { return run_flow(t, g); });
}

namespace {

// Whether SimGrid's route for the first pair, slack links left out for a run of all the pairs, crosses the middle
// hop of its topology route (the long link), and whether it crosses its end hops.
std::pair<bool, bool> crosses_long_link(const topology::Topology& t, const std::vector<std::pair<int, int>>& pairs)
{
  const auto hops    = t.route(pairs.front().first, pairs.front().second);
  const auto names   = route_link_names(t, hops);
  const auto simgrid = simgrid_routes(t, pairs, true).front();
  auto in = [&](const std::string& name) { return std::find(simgrid.begin(), simgrid.end(), name) != simgrid.end(); };
  return {in(names[1]), in(names.front()) && in(names.back())};
}

struct SlackCase {
  const char* what;
  const char* capacity;                   ///< of the one long link between w and e
  std::vector<std::pair<int, int>> pairs; ///< transfers of 1 GB, GPUs 0-2 in w and 3-5 in e
  bool slack;                             ///< whether the long link is left out
  double rate;                            ///< each flow's closed-form rate, bytes/s
};

} // namespace

TEST_CASE("slack links: a long link its flows' first or last hops cannot fill is left out, with the same shares",
          "[flow][slack]")
{
  // Three GPUs a side, 400 Gbps links to their switch, one long link. Each transfer moves 1 GB; its time is the
  // route's latency plus 1 GB over its max-min rate, computed by hand. SimGrid's precision is 1e-9 s on times and
  // 1e-5 on shares (pinned); the shares here are exact fractions of the links, so 1e-9 relative holds.
  const double gbps = 1e9 / 8;
  const std::vector<SlackCase> cases{
      {"two NICs (800 Gbps of first hops) under 1 Tbps: left out", "1Tbps", {{0, 3}, {1, 4}}, true, 400 * gbps},
      {"two NICs over 600 Gbps: the long link binds and stays", "600Gbps", {{0, 3}, {1, 4}}, false, 300 * gbps},
      {"three flows from one NIC (400 Gbps counted once) under 500 Gbps: left out",
       "500Gbps",
       {{0, 3}, {0, 4}, {0, 5}},
       true,
       400 * gbps / 3},
      {"two NICs into one (400 Gbps of last hops) under 600 Gbps: left out by the last hops",
       "600Gbps",
       {{0, 3}, {1, 3}},
       true,
       200 * gbps},
      {"three NICs into three (1.2 Tbps either way) over 1 Tbps: stays, shares 1/3 each",
       "1Tbps",
       {{0, 3}, {1, 4}, {2, 5}},
       false,
       1000 * gbps / 3},
  };
  const double bytes = 1e9;
  for (const auto& c : cases) {
    test::TwoSites p;
    p.gpus     = 3;
    p.parallel = 1;
    p.capacity = c.capacity;
    topology::Topology t(test::two_sites(p));
    REQUIRE(t.route(0, 3).size() == 3);
    const auto g       = transfers(c.pairs, bytes);
    auto r             = run_flow(t, g);
    const int left_out = r.settings["slack_link_directions_left_out"].get<int>();
    std::cout << c.what << ": " << left_out << " direction(s) left out\n";
    CHECK(left_out == (c.slack ? 1 : 0));
    const auto [long_link, ends] = crosses_long_link(t, c.pairs);
    CHECK(long_link == !c.slack);
    CHECK(ends);
    SimgridSettings every_link;
    every_link.leave_out_slack_links = false;
    auto all                         = run_flow(t, g, every_link);
    CHECK(all.settings["slack_link_directions_left_out"].get<int>() == 0);
    for (std::size_t i = 0; i < c.pairs.size(); ++i) {
      const auto [src, dst] = c.pairs[i];
      const double expected = t.route_latency(t.route(src, dst)) + bytes / c.rate;
      expect_within(std::string(c.what) + ", flow " + std::to_string(i), expected, r.ops[i].end, 1e-9);
      expect_within(std::string(c.what) + ", flow " + std::to_string(i) + " with every link", expected, all.ops[i].end,
                    1e-9);
    }
  }
}
