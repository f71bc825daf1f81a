// MoE dispatch as deployed: each dispatcher's bytes on the wire against hand sums (flat, and deduplicated per node
// and GPU with and without node-limited routing), the busiest member's share, and DeepEP's published bandwidths
// (deepseek-ai/DeepEP README, H800 with CX7 400 Gb/s: intranode EP 8 153 GB/s, internode EP 16/32/64 43/58/51
// GB/s) as checks of the hierarchical dispatch's time. Nothing here is fitted to those figures.
#include "netsim/collectives.hpp"
#include "netsim/dispatch.hpp"
#include "netsim/netsim.hpp"
#include "tests/support.hpp"
#include "topology/topology.hpp"
#include "workload/workload.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>
#include <numeric>

using namespace spansim;
using nlohmann::json;
using spansim::test::expect_within;

namespace {

// An H800 cluster as DeepSeek-V3 describes it (arXiv 2412.19437 section 3.2.2): 8 GPUs per node on NVLink with
// 160 GB/s usable (200 GB/s per direction at 0.8), one 400 Gb/s InfiniBand NIC per GPU (DeepEP: ~50 GB/s; 0.94
// as the dataset's NDR rows), rail-optimized.
topology::Topology h800(int nodes)
{
  json spec = {
      {"name", "h800"},
      {"node", {{"gpus", 8}, {"nvlink_bandwidth", "200GBps"}, {"nvlink_latency", "1us"}, {"nccl_efficiency", 0.8}}},
      {"pod",
       {{"nodes", nodes},
        {"rail_optimized", true},
        {"fabric", "ib"},
        {"nic_bandwidth", "400Gbps"},
        {"nccl_efficiency", 0.94},
        {"leaf_radix", 64},
        {"spine_radix", 64},
        {"oversubscription", 1},
        {"link_latency", "1us"}}},
      {"building", {{"pods", 1}, {"aggregation_oversubscription", 1}, {"aggregation_latency", "1us"}}},
      {"regions", json::array({{{"name", "r"}, {"buildings", json::array({"b0"})}}})}};
  return topology::Topology(topology::parse_topology_spec(spec, "h800"));
}

// DeepSeek-V3's routing on `ep` GPUs: 256 experts, top-8, at most `node_limit` nodes, FP8 dispatch.
workload::JobSpec deepseek_job(int ep, const std::string& dispatcher, int node_limit)
{
  json moe = {{"dispatcher", dispatcher}, {"dispatch_precision", "fp8"}};
  if (node_limit > 0)
    moe["node_limit"] = node_limit;
  json j = {{"name", "dispatch"},
            {"model", "deepseek-v3"},
            {"gpu", "h100"},
            {"gpus", ep},
            {"parallelism", {{"dp", ep}, {"ep", ep}, {"data_parallel", "ddp"}}},
            {"batch", {{"global_sequences", ep}, {"sequence_length", 4096}}},
            {"schedule", {{"kind", "1f1b"}}},
            {"moe", moe}};
  return workload::parse_job(j, "dispatch.json");
}

// One dispatch of `tokens` tokens per GPU (hidden 7168, FP8: 1 + 4/128 bytes per element).
workload::Op dispatch_op(double tokens, double imbalance = 1)
{
  workload::Op op;
  op.kind       = workload::OpKind::collective;
  op.collective = CollectiveOp::all_to_all;
  op.purpose    = workload::Purpose::ep_dispatch;
  op.bytes      = tokens * 8 * 7168 * (1 + 4.0 / 128);
  op.count      = 1;
  op.imbalance  = imbalance;
  return op;
}

std::vector<int> first_gpus(int n)
{
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

double time_matrix(const topology::Topology& t, const std::vector<int>& gpus, const std::vector<std::vector<double>>& m)
{
  netsim::Collective c;
  c.op     = CollectiveOp::all_to_all;
  c.gpus   = gpus;
  c.matrix = m;
  netsim::FlowGraph g;
  const auto lowered = netsim::add_collective(g, t, c, {});
  return netsim::run_analytical(t, g).ops[static_cast<std::size_t>(lowered.end_op)].end;
}

} // namespace

TEST_CASE("A flat dispatch sends every token copy once, the busiest member receives its share")
{
  const auto t   = h800(2);
  const auto job = deepseek_job(16, "alltoall", 0);
  const auto op  = dispatch_op(4096, 1.5);
  const auto m   = netsim::detail::dispatch_matrix(t, first_gpus(16), job, op, 3);
  double sent0 = 0, into3 = 0, into5 = 0;
  for (int j = 0; j < 16; ++j)
    sent0 += m[0][static_cast<std::size_t>(j)];
  for (int i = 0; i < 16; ++i) {
    into3 += m[static_cast<std::size_t>(i)][3];
    into5 += m[static_cast<std::size_t>(i)][5];
  }
  const double per_peer = op.bytes / 16;
  expect_within("the busiest member (3) receives 1.5x its even share from each of 15 peers", 15 * per_peer * 1.5, into3,
                1e-12);
  expect_within("another member receives (16 - 1.5) / 15 of it", 15 * per_peer * (16 - 1.5) / 15, into5, 1e-12);
  CHECK(sent0 < op.bytes);
}

TEST_CASE("DeepEP's hierarchical dispatch: one copy per node over InfiniBand, one per GPU over NVLink")
{
  const int ep = 32, nodes = 4;
  const auto t = h800(nodes);
  for (int limit : {0, 2}) {
    const auto job     = deepseek_job(ep, "deepep", limit);
    const auto op      = dispatch_op(4096);
    const auto m       = netsim::detail::dispatch_matrix(t, first_gpus(ep), job, op, 0);
    const auto rates   = workload::dispatch_rates(256, 8, ep, nodes, limit);
    const double token = op.bytes / 8; // one copy of a GPU's tokens
    // GPU 0 (node 0, local 0): to local 0 of each other node over InfiniBand; to the 7 others of node 0 over NVLink.
    double rdma = 0, nvlink = 0;
    for (int j = 1; j < ep; ++j)
      (t.locate(j).node == t.locate(0).node ? nvlink : rdma) += m[0][static_cast<std::size_t>(j)];
    const std::string tag = limit > 0 ? " (at most " + std::to_string(limit) + " nodes)" : "";
    expect_within("InfiniBand bytes of one GPU" + tag + ": (nodes - 1) x P(node) x tokens x bytes",
                  (nodes - 1) * rates.node * token, rdma, 1e-12);
    expect_within("NVLink bytes of one GPU" + tag + ": 7 peers x nodes x P(GPU) x tokens x bytes",
                  7 * nodes * rates.gpu * token, nvlink, 1e-12);
    for (int j = 1; j < ep; ++j)
      if (t.locate(j).node != t.locate(0).node)
        CHECK((m[0][static_cast<std::size_t>(j)] > 0) == (t.locate(j).local == 0));
  }
  // Limiting a token to 2 of the 4 nodes cuts its InfiniBand bytes.
  CHECK(workload::dispatch_rates(256, 8, ep, nodes, 2).node < workload::dispatch_rates(256, 8, ep, nodes, 0).node);
}

TEST_CASE("DeepEP on nodes holding unequal parts of the group: each node is hit as often as its experts make it")
{
  // EP 16 on GPUs 4-19 of 8-GPU nodes: 4, 8 and 4 members, 16 of DeepSeek-V3's 256 experts each. A token (top 8)
  // reaches the 4-member nodes with 1 - C(192, 8) / C(256, 8) and the 8-member node with 1 - C(128, 8) / C(256, 8),
  // not with the even split's 256 / 3 experts a node.
  const auto t = h800(3);
  std::vector<int> gpus;
  for (int g = 4; g < 20; ++g)
    gpus.push_back(g);
  const auto job     = deepseek_job(16, "deepep", 0);
  const auto op      = dispatch_op(4096);
  const auto m       = netsim::detail::dispatch_matrix(t, gpus, job, op, 0);
  const double token = op.bytes / 8;
  auto miss          = [](int held) {
    double p = 1;
    for (int i = 0; i < 8; ++i)
      p *= double(256 - held - i) / double(256 - i);
    return p;
  };
  const double small = 1 - miss(64), large = 1 - miss(128);
  // Member 0 (GPU 4, node 0, local 0) sends once to node 1 (member 4, GPU 8) and once to node 2 (member 12, GPU 16).
  expect_within("into the 8-member node", token * large, m[0][4], 1e-12);
  expect_within("into the other 4-member node", token * small, m[0][12], 1e-12);
  // Member 4 (GPU 8, node 1, local 0) sends to both 4-member nodes at their rate.
  expect_within("out of the 8-member node into a 4-member one", token * small, m[4][0], 1e-12);
  expect_within("and the other", token * small, m[4][12], 1e-12);
}

TEST_CASE("DeepEP's published bandwidths check the hierarchical dispatch's time (H800, CX7 400 Gb/s)")
{
  // DeepEP counts "bottleneck bandwidth" logically: internode, each (token, destination node) pair once, the
  // sender's own node included, over the dispatch's time (tests/test_internode.py: num_rdma_token_sent);
  // intranode, each token once per receiving GPU, its own included (recv_x). 4,096 tokens of 7,168 in FP8, top-8 of
  // 256 experts, at most min(nodes, 4) nodes per token.
  struct Case {
    int ep;
    double published; ///< GB/s
  };
  for (const Case c : {Case{8, 153}, Case{16, 43}, Case{32, 58}, Case{64, 51}}) {
    const int nodes      = c.ep / 8;
    const int limit      = nodes > 1 ? std::min(nodes, 4) : 0;
    const auto t         = h800(nodes);
    const auto job       = deepseek_job(c.ep, "deepep", limit);
    const auto op        = dispatch_op(4096);
    const auto m         = netsim::detail::dispatch_matrix(t, first_gpus(c.ep), job, op, 0);
    const double sec     = time_matrix(t, first_gpus(c.ep), m);
    const auto rates     = workload::dispatch_rates(256, 8, c.ep, nodes, limit);
    const double token   = op.bytes / 8;
    const double logical = nodes > 1 ? nodes * rates.node * token : c.ep * rates.gpu * token;
    expect_within("DeepEP dispatch EP " + std::to_string(c.ep) + ", logical " + (nodes > 1 ? "RDMA" : "NVLink") +
                      " GB/s against the published figure",
                  c.published, logical / sec / 1e9, 0.35);
  }
}
