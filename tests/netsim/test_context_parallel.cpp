// Context-parallel variants against closed forms: each variant's buffers per layer and pass (all-gather, ring,
// Ulysses all-to-all, hierarchical a2a+p2p) against hand sums for Llama 3 8B at 128K tokens, and a ring's
// overlap with the attention kernels against the all-gather variant's exposed time.
#include "netsim/step.hpp"
#include "placement/placement.hpp"
#include "topology/topology.hpp"
#include "workload/workload.hpp"

#include "tests/support.hpp"

#include <catch2/catch.hpp>

#include <iostream>
#include <map>
#include <tuple>

using namespace spansim;
using nlohmann::json;
using spansim::test::expect_within;

namespace {

workload::JobSpec cp_job(const std::string& comm, int sequence, int cp_a2a = 0, const std::string& model = "llama3-8b")
{
  json p = {{"tp", 1}, {"cp", 8}, {"dp", 1}, {"cp_comm", comm}};
  if (cp_a2a > 0)
    p["cp_a2a"] = cp_a2a;
  json j = {{"model", model},
            {"gpu", "h100"},
            {"gpus", 8},
            {"parallelism", p},
            {"batch", {{"global_sequences", 1}, {"sequence_length", sequence}}},
            {"schedule", {{"kind", "1f1b"}}},
            {"calibration", "none"}};
  json effects;
  for (const auto& [key, member] : workload::kEffectSwitches)
    effects[std::string(key)] = false;
  j["effects"] = effects;
  return workload::parse_job(j, "test.json");
}

struct CpOp {
  CollectiveOp kind;
  int group;
  double bytes;
  int count;
  bool overlappable;
};

// The CP collectives of the (single) stage's forward micro-batch and backward, in program order.
std::vector<CpOp> cp_ops(const workload::StepGraph& g)
{
  std::vector<CpOp> out;
  for (const auto& op : g.stages[0].ops)
    if (op.kind == workload::OpKind::collective && op.dim == workload::Dim::cp)
      out.push_back({op.collective, op.group.size, op.bytes, op.count, op.overlappable});
  return out;
}

} // namespace

TEST_CASE("Each CP variant's buffers per layer and pass equal hand sums (Llama 3 8B, 128K, cp 8)", "[cp]")
{
  // Llama 3 8B: 32 layers, 32 query heads and 8 K/V heads of 128, BF16. One 131072-token sequence over 8 ranks.
  const double s = 131072, L = 32, kv = 2.0 * s * 8 * 256; // K and V of the whole sequence: 512 MiB
  const double local = s / 8;
  const double qkv = 2 * local * (32 * 128 + 8 * 256), out = 2 * local * 32 * 128;
  struct Case {
    std::string comm;
    int a2a;
    std::vector<CpOp> expected; // forward, then backward
  };
  const std::vector<Case> cases{
      {"allgather",
       0,
       {{CollectiveOp::all_gather, 8, kv, 32, false},
        {CollectiveOp::all_gather, 8, kv, 32, false},
        {CollectiveOp::reduce_scatter, 8, kv, 32, false}}},
      {"ring",
       0,
       {{CollectiveOp::all_gather, 8, kv, 32, true},
        {CollectiveOp::all_gather, 8, kv, 32, true},
        {CollectiveOp::reduce_scatter, 8, kv, 32, true}}},
      {"a2a",
       0,
       {{CollectiveOp::all_to_all, 8, qkv, 32, false},
        {CollectiveOp::all_to_all, 8, out, 32, false},
        {CollectiveOp::all_to_all, 8, qkv, 32, false},
        {CollectiveOp::all_to_all, 8, out, 32, false}}},
      // Groups of 2 exchange heads (8 K/V heads split 4 each), rings of 4 pass the K/V of those 4 heads.
      // The ring first on the CP stream (it runs under the attention), the all-to-alls after it.
      {"a2a+p2p",
       2,
       {{CollectiveOp::all_gather, 4, kv / 2, 32, true},
        {CollectiveOp::all_to_all, 2, qkv, 32, false},
        {CollectiveOp::all_to_all, 2, out, 32, false},
        {CollectiveOp::all_gather, 4, kv / 2, 32, true},
        {CollectiveOp::reduce_scatter, 4, kv / 2, 32, true},
        {CollectiveOp::all_to_all, 2, qkv, 32, false},
        {CollectiveOp::all_to_all, 2, out, 32, false}}},
  };
  for (const auto& c : cases) {
    const auto g   = workload::build_step_graph(cp_job(c.comm, int(s), c.a2a), workload::BuildOptions{false});
    const auto got = cp_ops(g);
    INFO(c.comm);
    REQUIRE(got.size() == c.expected.size());
    double wire = 0; // bytes one GPU sends per layer, forward and backward
    for (std::size_t i = 0; i < got.size(); ++i) {
      const auto& e = c.expected[i];
      expect_within(c.comm + " op " + std::to_string(i) + " buffer", e.bytes, got[i].bytes, 1e-12);
      CHECK(got[i].kind == e.kind);
      CHECK(got[i].group == e.group);
      CHECK(got[i].count == e.count);
      CHECK(got[i].overlappable == e.overlappable);
      wire += got[i].bytes * (got[i].group - 1) / got[i].group;
    }
    std::cout << c.comm << ": " << wire / (1 << 20) << " MiB sent per GPU per layer (forward and backward), "
              << wire * L / (1 << 30) << " GiB per step\n";
  }
}

TEST_CASE("MLA under CP moves per-head K and V, as Megatron's core attention receives them (DeepSeek-V3, 32K)", "[cp]")
{
  // Megatron's MLA up-projects its latent (512 + 64 per token) into 128 heads of K (128 + 64 rope) and V (128)
  // before the core attention, which context parallelism wraps (multi_latent_attention.py: core_attention gets
  // query, key and value; k_channels 192, v_channels 128). One 32768-token sequence over 8 ranks, TP 1.
  const double s = 32768, kv = 2.0 * s * 128 * (192 + 128); // 2.5 GiB per layer, not the latent's 36 MiB
  for (const auto& [comm, a2a, ring] : std::vector<std::tuple<std::string, int, double>>{
           {"allgather", 0, kv}, {"ring", 0, kv}, {"a2a+p2p", 2, kv / 2}}) {
    auto job       = cp_job(comm, int(s), a2a, "deepseek-v3");
    const auto got = cp_ops(workload::build_step_graph(job, workload::BuildOptions{false}));
    INFO(comm);
    bool gathered = false;
    for (const auto& op : got)
      if (op.kind == CollectiveOp::all_gather) {
        expect_within(comm + " K/V all-gather buffer", ring, op.bytes, 1e-12);
        CHECK(op.count == 61); // every layer's attention
        gathered = true;
      }
    CHECK(gathered);
  }
}

TEST_CASE("A CP variant that cannot split the heads is refused with its JSON path", "[cp]")
{
  // Llama 3 8B has 32 heads: Ulysses over 64 ranks would need 64.
  json p = {{"tp", 1}, {"cp", 64}, {"dp", 1}, {"cp_comm", "a2a"}};
  json j = {{"model", "llama3-8b"},
            {"gpu", "h100"},
            {"gpus", 64},
            {"parallelism", p},
            {"batch", {{"global_sequences", 1}, {"sequence_length", 131072}}},
            {"schedule", {{"kind", "1f1b"}}}};
  try {
    workload::parse_job(j, "cp.json");
    FAIL("accepted");
  } catch (const std::exception& e) {
    std::string what = e.what();
    CHECK(what.find("$.parallelism.cp") != std::string::npos);
    CHECK(what.find("not divisible by 64") != std::string::npos);
  }
}

TEST_CASE("A ring hides its K/V exchange under the attention: exposed CP is the all-gather's less the attention",
          "[cp]")
{
  // 8 ranks of cp over two 4-GPU nodes of tiny.json (100 Gb/s NICs): the exchange outlasts a short sequence's
  // attention, so each pass exposes the difference.
  topology::Topology topo(topology::load_topology_spec(std::string(SPANSIM_SOURCE_DIR) + "/tests/data/tiny.json"));
  std::map<std::string, double> exposed;
  double attention = 0;
  for (const std::string comm : {"allgather", "ring", "a2a", "a2a+p2p"}) {
    const auto j = cp_job(comm, 4096, comm == "a2a+p2p" ? 2 : 0);
    const auto g = workload::build_step_graph(j, workload::BuildOptions{false});
    placement::Placement place(topo, j, {});
    netsim::StepOptions o;
    o.fidelity    = netsim::Fidelity::analytical;
    const auto r  = netsim::simulate_step(topo, g, place, o);
    exposed[comm] = r.stages[0].exposed[workload::Dim::cp];
    if (comm == "ring") {
      // The attention ops: the second compute op of each pass.
      const auto& ops = g.stages[0].ops;
      for (std::size_t i = 1; i < ops.size(); ++i)
        if (workload::is_compute(ops[i].kind) && !ops[i].deps.empty() && ops[i].deps[0] == int(i) - 1 &&
            workload::is_compute(ops[i - 1].kind))
          attention += ops[i].seconds;
    }
  }
  std::cout << "exposed CP: all-gather " << exposed["allgather"] << " s, ring " << exposed["ring"] << " s, a2a "
            << exposed["a2a"] << " s, a2a+p2p " << exposed["a2a+p2p"] << " s; attention " << attention << " s\n";
  // Ulysses moves 560 of the all-gather's 1344 MiB per layer, exposed; a2a+p2p's pairs stay inside a node.
  CHECK(exposed["a2a"] > 0);
  CHECK(exposed["a2a"] < exposed["allgather"]);
  CHECK(exposed["a2a+p2p"] > 0);
  REQUIRE(attention > 0);
  REQUIRE(exposed["allgather"] > attention);
  expect_within("ring's exposed CP", exposed["allgather"] - attention, exposed["ring"], 0.02);
}
