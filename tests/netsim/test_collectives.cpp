// Every collective algorithm against its alpha-beta closed form on uncontended groups (one node, one rail
// fabric, two buildings over one link), at analytical and flow fidelity; contention on a shared link;
// flow counts; channels; size matrices.
#include "netsim/collectives.hpp"
#include "netsim/nccl_layout.hpp"
#include "netsim/netsim.hpp"
#include "topology/topology.hpp"

#include "tests/support.hpp"
#include "tests/support_flow.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>

using namespace spansim;
using spansim::test::expect_within;
using namespace spansim::netsim;

namespace {

// The closed forms below are those of NCCL's algorithms with NCCL's own latency: the fitted per-step latencies
// (test "every step pays the step latency of its path") are left out.
topology::Topology preset(const char* name)
{
  return test::without_fitted_terms(name);
}

// tiny.json reshaped into one region of two buildings, so that one inter-building link joins them.
topology::Topology two_buildings(double link_bandwidth, int nodes, int gpus_per_node)
{
  auto spec          = topology::load_topology_spec(std::string(SPANSIM_SOURCE_DIR) + "/tests/data/tiny.json");
  spec.regions       = {{"campus", {"b0", "b1"}}};
  spec.node.gpus     = gpus_per_node;
  spec.pod.nodes     = nodes;
  spec.building.pods = 1;
  spec.building.aggregation_oversubscription = 1; // pods never the bottleneck: only the link is
  spec.inter_building.bandwidth              = link_bandwidth;
  spec.inter_region                          = {};
  spec.building_uplink_bandwidth             = 0;
  return topology::Topology(spec);
}

Collective make(CollectiveOp op, Algorithm algorithm, std::vector<int> gpus, double bytes)
{
  Collective c;
  c.op        = op;
  c.algorithm = algorithm;
  c.gpus      = std::move(gpus);
  c.bytes     = bytes;
  // The closed forms are those of NCCL's Simple protocol (payload bytes at the links' rate).
  c.nccl.protocol = Protocol::simple;
  return c;
}

double simulate(const topology::Topology& t, const Collective& c, Fidelity f)
{
  FlowGraph g;
  auto lowered = add_collective(g, t, c, {});
  return run(t, g, f, EngineOptions{}).ops[lowered.end_op].end;
}

std::vector<int> range(int first, int count, int stride = 1)
{
  std::vector<int> v;
  for (int i = 0; i < count; ++i)
    v.push_back(first + i * stride);
  return v;
}

struct Case {
  CollectiveOp op;
  Algorithm algorithm;
  // Closed form for K ranks, size S, bandwidth B, per-hop latency alpha: the bytes' time and the chain's latency.
  double (*bytes)(double k, double s, double b);
  double (*chain)(double k, double a);
  // A pipelined call (ring, chain, tree) takes at least NCCL's own latency for it: max(chain, tuner latency).
  bool nccl_floor = true;
};

double log2k(double k)
{
  return std::log2(k);
}

const Case kCases[] = {
    {CollectiveOp::all_reduce, Algorithm::ring, [](double k, double s, double b) { return 2 * (k - 1) / k * s / b; },
     [](double k, double a) { return 2 * (k - 1) * a; }},
    {CollectiveOp::reduce_scatter, Algorithm::ring, [](double k, double s, double b) { return (k - 1) / k * s / b; },
     [](double k, double a) { return (k - 1) * a; }},
    {CollectiveOp::all_gather, Algorithm::ring, [](double k, double s, double b) { return (k - 1) / k * s / b; },
     [](double k, double a) { return (k - 1) * a; }},
    {CollectiveOp::broadcast, Algorithm::ring, [](double, double s, double b) { return s / b; },
     [](double k, double a) { return (k - 1) * a; }},
    {CollectiveOp::reduce, Algorithm::ring, [](double, double s, double b) { return s / b; },
     [](double k, double a) { return (k - 1) * a; }},
    // NCCL's tree: over the nodes a double binary tree per NIC (each rank interior in one tree, 3 half-buffers out,
    // a leaf in the other, 1); inside one node a chain per NIC, each carrying its share up and down: 2 S / B either
    // way. The chain's latency is the floor's, which is larger.
    {CollectiveOp::all_reduce, Algorithm::tree, [](double, double s, double b) { return 2 * s / b; },
     [](double k, double a) { return 2 * std::floor(log2k(k)) * a; }},
    // One tree: an interior rank sends the whole buffer to its two children.
    {CollectiveOp::broadcast, Algorithm::tree, [](double, double s, double b) { return 2 * s / b; },
     [](double k, double a) { return std::floor(log2k(k)) * a; }},
    {CollectiveOp::all_reduce, Algorithm::halving_doubling,
     [](double k, double s, double b) { return 2 * (k - 1) / k * s / b; },
     [](double k, double a) { return 2 * log2k(k) * a; }, false},
    {CollectiveOp::reduce_scatter, Algorithm::halving_doubling,
     [](double k, double s, double b) { return (k - 1) / k * s / b; }, [](double k, double a) { return log2k(k) * a; },
     false},
    {CollectiveOp::all_gather, Algorithm::halving_doubling,
     [](double k, double s, double b) { return (k - 1) / k * s / b; }, [](double k, double a) { return log2k(k) * a; },
     false},
    {CollectiveOp::all_to_all, Algorithm::direct, [](double k, double s, double b) { return (k - 1) / k * s / b; },
     [](double, double a) { return a; }, false},
    {CollectiveOp::all_reduce, Algorithm::direct, [](double k, double s, double b) { return 2 * (k - 1) / k * s / b; },
     [](double, double a) { return 2 * a; }, false},
    {CollectiveOp::broadcast, Algorithm::direct, [](double k, double s, double b) { return (k - 1) * s / b; },
     [](double, double a) { return a; }, false},
};

void check_all_cases(const topology::Topology& t, const std::vector<int>& gpus, double bandwidth, double alpha,
                     const char* where)
{
  const double k = static_cast<double>(gpus.size());
  for (const auto& c : kCases)
    for (double s : {1048576.0, 268435456.0})
      for (auto f : {Fidelity::analytical, Fidelity::flow}) {
        Collective col      = make(c.op, c.algorithm, gpus, s);
        const auto floor_as = c.op == CollectiveOp::broadcast || c.op == CollectiveOp::reduce
                                  ? NcclAlgorithm::ring
                                  : nccl_algorithm(c.algorithm).value_or(NcclAlgorithm::ring);
        // A direct call is NCCL's point-to-point: each group of sends pays the larger of its route and the p2p
        // floor (baseLat, then one step: netsim/README.md); an all-reduce is two such groups.
        const double per_send = c.op == CollectiveOp::broadcast ? s : s / k;
        const double chain    = c.nccl_floor ? std::max(c.chain(k, alpha), test::nccl_floor(t, col, floor_as))
                                : c.algorithm == Algorithm::direct
                                    ? c.chain(k, std::max(alpha, test::p2p_floor(t, col, per_send)))
                                    : c.chain(k, alpha);
        std::string what      = std::string(where) + ": " + std::string(name_of(c.op)) + "/" +
                           std::string(name_of(c.algorithm)) + " of " + std::to_string(static_cast<long>(s)) +
                           " B at " + std::string(name_of(f)) + " fidelity";
        // Inside one node NCCL's tree is a chain per NIC, each from its own head: a GPU heads one chain (sends no
        // share up) and ends another (none down), so each moves 2 (K-1)/K S rather than 2 S.
        const bool chains = c.op == CollectiveOp::all_reduce && c.algorithm == Algorithm::tree &&
                            t.locate(gpus.front()).node == t.locate(gpus.back()).node;
        // A direct call's LL sends (at most p2pnChannelsPerPeer x 16 KiB each) put twice their bytes on the wire.
        const double wire =
            c.algorithm == Algorithm::direct ? netsim::wire_factor(test::p2p_protocol_in(t, col, per_send)) : 1.0;
        const double bytes = c.bytes(k, s, bandwidth) * (chains ? (k - 1) / k : 1) * wire;
        expect_within(what, bytes + chain, simulate(t, col, f), 0.01);
      }
}

} // namespace

TEST_CASE("a call's reported estimate is its time alone: a tree's edges split the links they share", "[collective]")
{
  // In one NVLink node, 1 GiB: the double binary tree's all-reduce (each GPU's NVLink carries its edges of both
  // trees: 2 S / B) and the ring's, each estimate against its own simulation and closed form.
  auto t         = preset("hgx-h100-pod");
  const double b = t.spec().node.nvlink_rate();
  const double s = 1073741824.0;
  for (auto algorithm : {Algorithm::tree, Algorithm::ring}) {
    FlowGraph g;
    const auto col     = make(CollectiveOp::all_reduce, algorithm, range(0, 8), s);
    const auto lowered = add_collective(g, t, col, {});
    const double time  = run(t, g, Fidelity::analytical, EngineOptions{}).ops[lowered.end_op].end;
    // The tree inside one node is a chain per NIC, each from its own head (test "every algorithm ...").
    const double form = 2 * 7.0 / 8 * s / b + test::nccl_floor(t, col, *nccl_algorithm(algorithm));
    const std::string name(name_of(algorithm));
    expect_within(name + ": estimate against the simulated call", time, lowered.estimate, 0.01);
    expect_within(name + ": estimate against the closed form (bytes, then NCCL's latency)", form, lowered.estimate,
                  0.01);
  }
}

TEST_CASE("every algorithm matches its closed form inside one NVLink node", "[collective]")
{
  auto t = preset("hgx-h100-pod");
  check_all_cases(t, range(0, 8), t.spec().node.nvlink_rate(), 2 * t.spec().node.nvlink_latency, "one node");
}

TEST_CASE("every algorithm matches its closed form on one rail fabric", "[collective]")
{
  auto t = preset("hgx-h100-pod");
  // GPU 0 of 16 nodes: rail 0, all under one leaf, one NIC each.
  check_all_cases(t, range(0, 16, 8), t.spec().pod.nic_rate(), 2 * t.spec().pod.link_latency, "one rail");
}

TEST_CASE("ring all-reduce across two buildings over one link matches its closed form", "[collective]")
{
  // The 10 GB/s inter-building link is narrower than the 12.5 GB/s NICs; the ring crosses it once each way.
  auto t = two_buildings(10e9, 4, 4);
  std::vector<int> gpus{0, 1, 16, 17}; // two GPUs of one node in each building
  const double alpha = t.route_latency(t.route(1, 16)), nvlink = t.route_latency(t.route(0, 1));
  for (auto f : {Fidelity::analytical, Fidelity::flow})
    for (double s : {1048576.0, 268435456.0}) {
      Collective c = make(CollectiveOp::all_reduce, Algorithm::ring, gpus, s);
      // Six steps chained around the four edges 0-1, 1-16, 16-17, 17-0: one whole turn, then one long edge and one
      // NVLink edge (the windows of 16 Simple channels do not bind over these latencies).
      expect_within(std::string("ring across two buildings at ") + std::string(name_of(f)),
                    2 * 3.0 / 4 * s / 10e9 + 3 * (alpha + nvlink), simulate(t, c, f), 0.01);
    }
}

TEST_CASE("hierarchical all-reduce: intra-node, rails, intra-node phases add up", "[collective]")
{
  auto t          = preset("hgx-h100-pod");
  const auto& s   = t.spec();
  auto gpus       = range(0, 16); // two nodes of 8
  const double b1 = s.node.nvlink_rate(), a1 = 2 * s.node.nvlink_latency;
  const double b2 = s.pod.nic_rate(), a2 = 2 * s.pod.link_latency; // GPU i of both nodes: one leaf
  for (double size : {1048576.0, 268435456.0}) {
    // Each phase a ring: its bytes after the larger of its chain and NCCL's latency for it.
    auto in_node        = make(CollectiveOp::reduce_scatter, Algorithm::ring, range(0, 8), size);
    auto rail           = make(CollectiveOp::all_reduce, Algorithm::ring, {0, 8}, size / 8);
    const double phase1 = 7.0 / 8 * size / b1 + std::max(7 * a1, test::nccl_floor(t, in_node));
    in_node.op          = CollectiveOp::all_gather;
    const double phase3 = 7.0 / 8 * size / b1 + std::max(7 * a1, test::nccl_floor(t, in_node));
    double expected = phase1 + phase3 + (2 * 1.0 / 2 * (size / 8) / b2 + std::max(2 * a2, test::nccl_floor(t, rail)));
    for (auto f : {Fidelity::analytical, Fidelity::flow}) {
      Collective c = make(CollectiveOp::all_reduce, Algorithm::hierarchical, gpus, size);
      expect_within(std::string("hierarchical 2 x 8 at ") + std::string(name_of(f)), expected, simulate(t, c, f), 0.01);
    }
  }
}

TEST_CASE("hierarchical all-reduce across buildings adds a cross-building level", "[collective]")
{
  // 2 buildings x 2 nodes x 2 GPUs; GPU i of both nodes of a building sit under one leaf.
  auto t          = two_buildings(100e9, 2, 2);
  auto gpus       = range(0, 8);
  const auto& s   = t.spec();
  const double b1 = s.node.nvlink_rate(), a1 = 2 * s.node.nvlink_latency;
  const double b2 = s.pod.nic_rate(), a2 = 2 * s.pod.link_latency;
  const double a3   = t.route_latency(t.route(0, 4));
  const double size = 268435456.0;
  // RS in node (L=2), RS in building (M=2) on S/2, AR across buildings on S/4, AG in building, AG in node.
  double expected =
      2 * (1.0 / 2 * size / b1 + a1) + 2 * (1.0 / 2 * (size / 2) / b2 + a2) + (2 * 1.0 / 2 * (size / 4) / b2 + 2 * a3);
  for (auto f : {Fidelity::analytical, Fidelity::flow}) {
    Collective c = make(CollectiveOp::all_reduce, Algorithm::hierarchical, gpus, size);
    expect_within(std::string("hierarchical across buildings at ") + std::string(name_of(f)), expected,
                  simulate(t, c, f), 0.01);
  }
}

TEST_CASE("two all-reduces sharing the inter-building link each take about twice as long", "[collective][contention]")
{
  auto t            = two_buildings(12.5e9, 4, 4); // the link is as fast as one NIC
  const double s    = 268435456.0;
  Collective a      = make(CollectiveOp::all_reduce, Algorithm::ring, {0, 16}, s);
  Collective b      = make(CollectiveOp::all_reduce, Algorithm::ring, {1, 17}, s);
  double alone_flow = simulate(t, a, Fidelity::flow);
  FlowGraph g;
  int ea             = add_collective(g, t, a, {}).end_op;
  int eb             = add_collective(g, t, b, {}).end_op;
  auto flow          = run(t, g, Fidelity::flow, EngineOptions{});
  auto analytical    = run(t, g, Fidelity::analytical, EngineOptions{});
  const double alpha = t.route_latency(t.route(0, 16));
  // Alone: S over the 12.5 GB/s link; together each gets half of it.
  expect_within("ring alone (flow)", s / 12.5e9 + 2 * alpha, alone_flow, 0.01);
  expect_within("ring A sharing the link (flow)", 2 * s / 12.5e9 + 2 * alpha, flow.ops[ea].end, 0.01);
  expect_within("ring B sharing the link (flow)", 2 * s / 12.5e9 + 2 * alpha, flow.ops[eb].end, 0.01);
  expect_within("analytical against flow, ring A", flow.ops[ea].end, analytical.ops[ea].end, 0.05);
  expect_within("analytical against flow, ring B", flow.ops[eb].end, analytical.ops[eb].end, 0.05);
}

TEST_CASE("an all-reduce started halfway through another shares the link with it from then on",
          "[collective][contention]")
{
  auto t             = two_buildings(12.5e9, 4, 4); // the link is as fast as one NIC
  const double s     = 268435456.0;
  const double b     = 12.5e9;
  const double alpha = t.route_latency(t.route(0, 16));
  const double d     = s / (2 * b); // ring A has sent half its bytes when ring B starts
  FlowGraph g;
  const int start_b = g.add_delay(d);
  const int ea      = add_collective(g, t, make(CollectiveOp::all_reduce, Algorithm::ring, {0, 16}, s), {}).end_op;
  const int eb = add_collective(g, t, make(CollectiveOp::all_reduce, Algorithm::ring, {1, 17}, s), {start_b}).end_op;
  // Each ring of two is one flow of S per direction, after its route latency, then one more latency. A runs
  // alone at B until B's bytes start at d + alpha, by when S - B d are left; both then get B / 2, so A ends
  // 2 (S - B d) / B later, having let B move as many; B sends its last B d alone at B.
  const double a_end = d + alpha + 2 * (s - b * d) / b + alpha;
  const double b_end = a_end + b * d / b;
  auto flow          = run(t, g, Fidelity::flow, EngineOptions{});
  auto analytical    = run(t, g, Fidelity::analytical, EngineOptions{});
  expect_within("ring A, analytical", a_end, analytical.ops[ea].end, 0.01);
  expect_within("ring B, analytical", b_end, analytical.ops[eb].end, 0.01);
  expect_within("ring A, analytical against flow", flow.ops[ea].end, analytical.ops[ea].end, 0.02);
  expect_within("ring B, analytical against flow", flow.ops[eb].end, analytical.ops[eb].end, 0.02);
}

TEST_CASE("all-to-all with a size matrix is bound by the busiest sender", "[collective]")
{
  auto t         = preset("hgx-h100-pod");
  auto gpus      = range(0, 4, 8); // four nodes, one rail, one leaf
  const double x = 16e6;
  std::vector<std::vector<double>> m(4, std::vector<double>(4, x));
  for (int j = 0; j < 4; ++j) {
    m[j][j] = 0;
    if (j != 0)
      m[0][j] = 3 * x; // rank 0 sends 9x in all, every other rank 3x
  }
  Collective c   = make(CollectiveOp::all_to_all, Algorithm::direct, gpus, 0);
  c.matrix       = m;
  const double b = t.spec().pod.nic_rate(), a = 2 * t.spec().pod.link_latency;
  for (auto f : {Fidelity::analytical, Fidelity::flow})
    expect_within(std::string("skewed all-to-all at ") + std::string(name_of(f)), 9 * x / b + a, simulate(t, c, f),
                  0.01);
}

TEST_CASE("channels split flows without changing uncontended times", "[collective]")
{
  auto t       = preset("hgx-h100-pod");
  Collective c = make(CollectiveOp::all_reduce, Algorithm::ring, range(0, 16, 8), 268435456.0);
  FlowGraph one, four;
  auto l1          = add_collective(one, t, c, {});
  c.flows_per_pair = 4;
  auto l4          = add_collective(four, t, c, {});
  CHECK(l1.flows == 16);
  CHECK(l4.flows == 64);
  double t1 = run_flow(t, one).ops[l1.end_op].end;
  double t4 = run_flow(t, four).ops[l4.end_op].end;
  expect_within("4 channels against 1", t1, t4, 1e-6);
}

TEST_CASE("flow counts grow as O(K log K), O(K^2) only for all-to-all", "[collective]")
{
  auto t = preset("hgx-h100-pod");
  for (int k : {64, 256, 1024}) {
    auto gpus          = range(0, k);
    const double bound = 4.0 * k * std::log2(k);
    for (auto a : {Algorithm::ring, Algorithm::tree, Algorithm::halving_doubling, Algorithm::hierarchical}) {
      FlowGraph g;
      auto l = add_collective(g, t, make(CollectiveOp::all_reduce, a, gpus, 1e6), {});
      INFO(std::string(name_of(a)) << " over " << k << ": " << l.flows << " flows, bound " << bound);
      CHECK(static_cast<double>(l.flows) <= bound);
    }
    FlowGraph g;
    auto l = add_collective(g, t, make(CollectiveOp::all_to_all, Algorithm::direct, gpus, 1e6), {});
    // PXN: a pair across nodes whose GPUs sit on different rails goes over NVLink to the destination's rail first.
    std::size_t pairs = 0;
    for (int a : gpus)
      for (int b : gpus)
        if (a != b)
          pairs += t.locate(a).node != t.locate(b).node && t.locate(a).local != t.locate(b).local ? 2 : 1;
    CHECK(l.flows == pairs);
  }
}

TEST_CASE("the default policy is NCCL's tuner: a tree for small messages over many nodes, rings for large ones",
          "[collective]")
{
  auto t = preset("hgx-h100-pod");
  // 64 GPUs on one rail: NCCL's ring chains 126 steps of 14 us over the network, its tree 2 log2(64) = 12.
  Collective small    = make(CollectiveOp::all_reduce, Algorithm::automatic, range(0, 64, 8), 4096);
  small.nccl.protocol = Protocol::automatic;
  CHECK(default_algorithm(t, small) == Algorithm::tree);
  // 4 full nodes, 1 GiB: the rings, one per NIC, at the NICs' bound (NVLS would need SHARP across nodes).
  Collective big = make(CollectiveOp::all_reduce, Algorithm::automatic, range(0, 32), 1073741824.0);
  CHECK(default_algorithm(t, big) == Algorithm::ring);
  // Spansim's own algorithms are never NCCL's pick.
  for (double bytes : {1024.0, 1048576.0, 1073741824.0})
    for (int ranks : {8, 16, 64}) {
      Collective c = make(CollectiveOp::all_reduce, Algorithm::automatic, range(0, ranks), bytes);
      const auto a = default_algorithm(t, c);
      CHECK(nccl_algorithm(a).has_value());
    }
  Collective a2a = make(CollectiveOp::all_to_all, Algorithm::automatic, range(0, 8), 1e6);
  CHECK(default_algorithm(t, a2a) == Algorithm::direct);
}

TEST_CASE("algorithms that do not apply are refused with the allowed ones", "[collective]")
{
  auto t = preset("hgx-h100-pod");
  FlowGraph g;
  CHECK_THROWS_WITH(add_collective(g, t, make(CollectiveOp::all_to_all, Algorithm::ring, range(0, 8), 1e6), {}),
                    Catch::Contains("allowed: direct"));
  CHECK_THROWS_WITH(
      add_collective(g, t, make(CollectiveOp::all_reduce, Algorithm::halving_doubling, range(0, 6), 1e6), {}),
      Catch::Contains("power-of-two"));
  CHECK_THROWS_WITH(
      add_collective(g, t, make(CollectiveOp::all_reduce, Algorithm::hierarchical, {0, 1, 2, 8}, 1e6), {}),
      Catch::Contains("regular group"));
}

TEST_CASE("hierarchical all-reduce across regions is NeMo's scheme: reduce-scatter in each region, all-reduce "
          "between regions, all-gather in each region",
          "[collective]")
{
  // tiny.json: GPUs 0 and 1 of the first node of each of its four buildings (two per region).
  auto t                   = spansim::test::tiny_topology();
  const std::vector<int> g = {0, 1, 32, 33, 64, 65, 96, 97};
  const double size        = 268435456.0;
  Collective c             = make(CollectiveOp::all_reduce, Algorithm::hierarchical, g, size);
  FlowGraph graph;
  add_collective(graph, t, c, {});
  const auto run = netsim::run(t, graph, Fidelity::analytical, EngineOptions{});
  // After the node (L = 2) and the region (M = 2 nodes) reduce-scatters each GPU holds S / 4 and all-reduces it with
  // its one counterpart in the other region: 8 GPUs each send S / 4 across, 2 S in all. Sites as buildings would
  // all-reduce S / 2 per GPU pair over a ring of four buildings that crosses the regions' boundary twice.
  expect_within("bytes across regions, hierarchical over two regions", 2 * size,
                netsim::boundary_bytes(t, run.link_bytes).regions, 1e-9);
}
