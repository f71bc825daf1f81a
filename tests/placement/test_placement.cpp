// Rank -> GPU placement: Megatron order, rail alignment, boundary crossing by the outermost dimension, refusals.
#include "common/error.hpp"
#include "placement/placement.hpp"

#include <catch2/catch.hpp>

#include <set>

using namespace spansim;
using nlohmann::json;

namespace {

workload::JobSpec job(int tp, int cp, int pp, int dp, int ep = 1, const char* model = "llama3-8b")
{
  json j = {{"name", "placement-test"},
            {"model", model},
            {"gpu", "h100"},
            {"gpus", tp * cp * pp * dp},
            {"parallelism", {{"tp", tp}, {"cp", cp}, {"pp", pp}, {"dp", dp}, {"ep", ep}}},
            {"batch", {{"global_sequences", 16 * dp * cp}, {"sequence_length", 8192}, {"micro_batch", 1}}},
            {"schedule", {{"kind", "1f1b"}}}};
  return workload::parse_job(j, "placement-test.json");
}

std::set<int> nodes_of(const topology::Topology& t, const std::vector<int>& gpus)
{
  std::set<int> s;
  for (int g : gpus)
    s.insert(t.locate(g).node);
  return s;
}

} // namespace

TEST_CASE("Megatron order: TP fills a node, DP groups stay on one rail", "[placement]")
{
  topology::Topology t(topology::load_topology_spec("hgx-h100-pod"));
  auto j = job(8, 1, 4, 8);
  placement::Placement p(t, j, {});
  CHECK(p.ranks() == 256);
  // Rank index = tp + 8 * (cp + 1 * (pp + 4 * dp)).
  auto c = p.coordinates(8 * 4 * 3 + 8 * 2 + 5);
  CHECK(c.tp == 5);
  CHECK(c.pp == 2);
  CHECK(c.dp == 3);
  CHECK(p.rank_of(c) == 8 * 4 * 3 + 8 * 2 + 5);
  for (const auto& g : p.groups(0, {workload::Axis::tp, 8}))
    CHECK(nodes_of(t, g).size() == 1);
  auto dp = p.groups(1, {workload::Axis::dp, 8});
  CHECK(dp.size() == 8); // one per TP rank of stage 1
  for (const auto& g : dp) {
    CHECK(g.size() == 8);
    std::set<int> rails;
    for (int gpu : g)
      rails.insert(t.locate(gpu).local);
    CHECK(rails.size() == 1); // rail-aligned
  }
  // A stage's pipeline peer is the same TP rank of the next stage's node.
  int gpu = p.stage_gpus(0)[3];
  CHECK(p.peer_gpu(gpu, 1) == gpu + 8);
}

TEST_CASE("the outermost dimension is the one that crosses buildings", "[placement]")
{
  topology::Topology t(topology::load_topology_spec("two-buildings"));
  auto j = job(8, 1, 4, 8);
  placement::Placement dp_across(
      t, j, {{workload::Dim::tp, workload::Dim::cp, workload::Dim::pp, workload::Dim::dp}, {"bldg-a", "bldg-b"}});
  placement::Placement pp_across(
      t, j, {{workload::Dim::tp, workload::Dim::cp, workload::Dim::dp, workload::Dim::pp}, {"bldg-a", "bldg-b"}});
  auto buildings = [&](const std::vector<int>& g) {
    std::set<int> b;
    for (int gpu : g)
      b.insert(t.locate(gpu).building);
    return b.size();
  };
  for (const auto& g : dp_across.groups(0, {workload::Axis::dp, 8}))
    CHECK(buildings(g) == 2);
  for (int s = 0; s < 4; ++s)
    CHECK(buildings(dp_across.stage_gpus(s)) == 2);
  for (const auto& g : pp_across.groups(0, {workload::Axis::dp, 8}))
    CHECK(buildings(g) == 1);
  CHECK(buildings(pp_across.stage_gpus(0)) == 1);
  CHECK(buildings(pp_across.stage_gpus(3)) == 1);
  CHECK(t.locate(pp_across.stage_gpus(0)[0]).building != t.locate(pp_across.stage_gpus(3)[0]).building);
}

TEST_CASE("expert groups are carved out of cp x dp, fastest first", "[placement]")
{
  topology::Topology t(topology::load_topology_spec("hgx-h100-pod"));
  auto j = job(1, 1, 1, 16, 4, "llama4-scout");
  placement::Placement p(t, j, {});
  auto ep = p.groups(0, {workload::Axis::ep, 4});
  REQUIRE(ep.size() == 4);
  CHECK(ep[0] == std::vector<int>{0, 1, 2, 3});
  auto edp = p.groups(0, {workload::Axis::edp, 4});
  REQUIRE(edp.size() == 4);
  CHECK(edp[0] == std::vector<int>{0, 4, 8, 12});
}

TEST_CASE("Expert groups fold etp x ep x edp over a stage's ranks as Megatron-LM's RankGenerator does", "[placement]")
{
  // The groups Megatron-LM's generate_masked_orthogonal_rank_groups gives (order tp-cp-ep-dp-pp, pp outermost).
  using workload::Axis;
  using workload::Dim;
  const std::vector<Dim> megatron{Dim::tp, Dim::cp, Dim::dp, Dim::pp};
  auto groups = [](const workload::ParallelismSpec& par, const std::vector<Dim>& order, int stage, Axis a, int size) {
    return placement::RankLayout(par, order).groups(stage, {a, size});
  };
  using G = std::vector<std::vector<int>>;
  // World 16, TP 2, PP 2, DP 4; ETP 1, EP 4: expert-DP 2.
  workload::ParallelismSpec a;
  a.tp = 2, a.pp = 2, a.dp = 4, a.ep = 4, a.etp = 1;
  CHECK(groups(a, megatron, 0, Axis::ep, 4) == G{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(groups(a, megatron, 1, Axis::ep, 4) == G{{8, 9, 10, 11}, {12, 13, 14, 15}});
  CHECK(groups(a, megatron, 0, Axis::edp, 2) == G{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(groups(a, megatron, 0, Axis::tp, 2) == G{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(groups(a, megatron, 0, Axis::dp, 4) == G{{0, 2, 4, 6}, {1, 3, 5, 7}});
  // World 8, TP 2, ETP 2, EP 2, PP 1: expert-DP 2.
  workload::ParallelismSpec b;
  b.tp = 2, b.dp = 4, b.ep = 2, b.etp = 2;
  CHECK(groups(b, megatron, 0, Axis::etp, 2) == G{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(groups(b, megatron, 0, Axis::ep, 2) == G{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(groups(b, megatron, 0, Axis::edp, 2) == G{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  // Context and expert parallelism folded together (Megatron's README: CP 8 and EP 8 on the same 8 GPUs).
  workload::ParallelismSpec c;
  c.cp = 8, c.ep = 8, c.etp = 1;
  CHECK(groups(c, megatron, 0, Axis::cp, 8) == G{{0, 1, 2, 3, 4, 5, 6, 7}});
  CHECK(groups(c, megatron, 0, Axis::ep, 8) == G{{0, 1, 2, 3, 4, 5, 6, 7}});
}

TEST_CASE("A MoE job's default rank order keeps EP inside a node where it fits, the placement says which cross",
          "[placement]")
{
  topology::Topology t(topology::load_topology_spec("hgx-h100-pod"));
  // Qwen3-235B-A22B's published layout: TP 2, PP 8, EP 32 over TP x DP (ETP 1) on 256 GPUs.
  json j          = {{"name", "qwen3-235b"},
                     {"model", "qwen3-235b-a22b"},
                     {"gpu", "h100"},
                     {"gpus", 256},
                     {"parallelism", {{"tp", 2}, {"pp", 8}, {"dp", 16}, {"ep", 32}, {"etp", 1}}},
                     {"batch", {{"global_sequences", 2048}, {"sequence_length", 4096}}},
                     {"schedule", {{"kind", "interleaved-1f1b"}, {"virtual_stages", 4}, {"ep_overlap", true}}}};
  const auto qwen = workload::parse_job(j, "qwen.json");
  CHECK(qwen.parallelism.order ==
        std::vector<workload::Dim>(workload::kMegatronOrder.begin(), workload::kMegatronOrder.end()));
  placement::Placement p(t, qwen, {});
  for (int s = 0; s < 8; ++s)
    for (const auto& g : p.groups(s, {workload::Axis::ep, 32}))
      CHECK(nodes_of(t, g).size() == 4); // 32 consecutive GPUs: four whole nodes
  // EP 8 fits a node: every group inside one.
  j["parallelism"]["ep"] = 8;
  placement::Placement eight(t, workload::parse_job(j, "qwen.json"), {});
  for (const auto& g : eight.groups(0, {workload::Axis::ep, 8}))
    CHECK(nodes_of(t, g).size() == 1);
  const auto report = eight.report(workload::build_step_graph(workload::parse_job(j, "qwen.json"), {false}));
  bool reported     = false;
  for (const auto& row : report.groups)
    if (row.group == "ep") {
      reported = true;
      CHECK(row.across_nodes == 0);
      CHECK(row.groups == (256 / 8) / 8 * 8); // 32 GPUs per stage make 4 EP groups of 8, over 8 stages
    }
  CHECK(reported);
  // Llama 3's order [tp, cp, pp, dp] puts the same EP 8 across nodes.
  placement::Placement llama(t, workload::parse_job(j, "qwen.json"),
                             {{workload::Dim::tp, workload::Dim::cp, workload::Dim::pp, workload::Dim::dp}});
  for (const auto& g : llama.groups(0, {workload::Axis::ep, 8}))
    CHECK(nodes_of(t, g).size() == 4);
}

TEST_CASE("impossible placements are refused with the reason", "[placement]")
{
  topology::Topology t(topology::load_topology_spec("two-buildings"));
  auto j = job(8, 1, 4, 8);
  CHECK_THROWS_WITH(placement::Placement(t, j, {{}, {"bldg-a", "bldg-z"}}),
                    Catch::Contains("unknown building \"bldg-z\"") && Catch::Contains("bldg-a, bldg-b"));
  CHECK_THROWS_WITH(
      placement::Placement(t, j, {{workload::Dim::pp, workload::Dim::tp, workload::Dim::cp, workload::Dim::dp}, {}}),
      Catch::Contains("straddle nodes"));
  auto big = job(8, 1, 16, 512); // 65,536 GPUs on a 32,768-GPU topology
  CHECK_THROWS_WITH(placement::Placement(t, big, {}), Catch::Contains("has 32768"));
  auto odd = job(1, 1, 1, 3); // 3 GPUs cannot split over 2 buildings
  CHECK_THROWS_WITH(placement::Placement(t, odd, {{}, {"bldg-a", "bldg-b"}}), Catch::Contains("split evenly"));
}

TEST_CASE("Racks with spares: a job on 64 of each NVL72 rack's 72 GPUs keeps EP 64 inside each rack", "[placement]")
{
  topology::Topology t(topology::load_topology_spec("gb200-nvl72"));
  // Qwen3-30B-A3B (128 experts) with EP 64 over DP 128, PP 2: 256 GPUs, four racks' worth of 64.
  json j         = {{"name", "spares"},
                    {"model", "qwen3-30b-a3b"},
                    {"gpu", "gb200"},
                    {"gpus", 256},
                    {"parallelism", {{"tp", 1}, {"pp", 2}, {"dp", 128}, {"ep", 64}}},
                    {"batch", {{"global_sequences", 1024}, {"sequence_length", 4096}}},
                    {"schedule", {{"kind", "1f1b"}}}};
  const auto moe = workload::parse_job(j, "spares.json");
  placement::PlacementSpec spec;
  spec.gpus_per_node = 64;
  placement::Placement p(t, moe, spec);
  CHECK(p.gpus_per_node() == 64);
  std::set<int> racks;
  for (int r = 0; r < p.ranks(); ++r) {
    const auto at = t.locate(p.gpu(r));
    INFO("rank " << r << " on " << t.vertex_name(p.gpu(r)));
    CHECK(at.local < 64); // the last 8 GPUs of a rack stand by
    racks.insert(at.node);
  }
  CHECK(racks.size() == 4);
  for (int s = 0; s < 2; ++s)
    for (const auto& g : p.groups(s, {workload::Axis::ep, 64}))
      CHECK(nodes_of(t, g).size() == 1);
  const auto report = p.report(workload::build_step_graph(moe, {false}));
  bool reported     = false;
  for (const auto& row : report.groups)
    if (row.group == "ep") {
      reported = true;
      INFO("EP groups across racks: " << row.across_nodes);
      CHECK(row.across_nodes == 0); // no EP byte leaves a rack
    }
  CHECK(reported);
  // Without spares the same job packs 72 to a rack: EP groups of 64 straddle two racks.
  placement::Placement packed(t, moe, {});
  int straddling = 0;
  for (const auto& g : packed.groups(0, {workload::Axis::ep, 64}))
    straddling += nodes_of(t, g).size() > 1 ? 1 : 0;
  CHECK(straddling > 0);
  // Refused: more GPUs per node than the rack has.
  spec.gpus_per_node = 73;
  CHECK_THROWS_WITH(placement::Placement(t, moe, spec), Catch::Contains("gpus_per_node 73 is above the 72 GPUs"));
}
