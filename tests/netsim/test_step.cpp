// Co-simulated training steps against closed forms: a two-stage pipeline across two buildings, an exposed
// data-parallel all-reduce; the breakdown's accounting identity; determinism.
#include "common/error.hpp"
#include "netsim/contention.hpp"
#include "netsim/step.hpp"
#include "netsim/step_lowering.hpp"
#include "placement/placement.hpp"
#include "scenario/scenario.hpp"
#include "topology/topology.hpp"
#include "workload/workload.hpp"

#include "tests/support.hpp"
#include "tests/support_job.hpp"
#include "tests/support_step.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>

using namespace spansim;
using nlohmann::json;
using spansim::test::expect_within;
using spansim::test::job;
using spansim::test::kDpOutermost;
using spansim::test::kPpOutermost;
using spansim::test::PlacedStep;

namespace {

double seconds_of(const workload::StageProgram& p, workload::OpKind kind, int micro_batch)
{
  double t = 0;
  for (const auto& op : p.ops)
    if (op.kind == kind && op.micro_batch == micro_batch)
      t += op.seconds;
  return t;
}

void check_identity(const netsim::StepResult& r)
{
  for (const auto& b : r.stages) {
    double sum = b.compute + b.bubble + b.idle;
    for (double e : b.exposed)
      sum += e;
    INFO("stage " << b.stage << ": parts sum to " << sum << ", step " << r.step_time);
    CHECK(sum == Approx(r.step_time).epsilon(1e-9));
  }
}

// SM contention by hand from a run without the effect: each compute op's time under any overlapped communication
// op of its stage, times comm_sms / (sms - comm_sms).
double contention_by_hand(const workload::StepGraph& graph, const netsim::StepResult& first, const workload::JobSpec& j)
{
  const auto& ops  = graph.stages[0].ops;
  const double sms = j.gpu.gemm.sms, comm = j.gpu.comm_sms;
  double expected = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (!workload::is_compute(ops[i].kind))
      continue;
    const auto& c = first.ops[0][i];
    // Union of the communication intervals, clipped to the compute op, on a fine grid of its boundaries.
    std::vector<double> cuts{c.start, c.end};
    for (std::size_t k = 0; k < ops.size(); ++k)
      if (!workload::is_compute(ops[k].kind) && ops[k].overlappable)
        for (double t : {first.ops[0][k].active, first.ops[0][k].end})
          if (t > c.start && t < c.end)
            cuts.push_back(t);
    std::sort(cuts.begin(), cuts.end());
    for (std::size_t q = 0; q + 1 < cuts.size(); ++q) {
      const double mid = (cuts[q] + cuts[q + 1]) / 2;
      for (std::size_t k = 0; k < ops.size(); ++k)
        if (!workload::is_compute(ops[k].kind) && ops[k].overlappable && first.ops[0][k].active < mid &&
            first.ops[0][k].end > mid) {
          expected += (cuts[q + 1] - cuts[q]) * comm / (sms - comm);
          break;
        }
    }
  }
  return expected;
}

} // namespace

TEST_CASE("a two-stage GPipe pipeline across two buildings matches the schedule's closed form", "[step]")
{
  const PlacedStep placed(
      "two-buildings",
      job({{"tp", 1}, {"cp", 1}, {"pp", 2}, {"dp", 1}, {"data_parallel", "ddp"}}, {{"kind", "gpipe"}}, 8, 4096),
      {kPpOutermost, {"bldg-a", "bldg-b"}});
  // pp outermost: stage 0 in bldg-a, stage 1 in bldg-b.
  REQUIRE(placed.topo.locate(placed.place.stage_gpus(0)[0]).building == 0);
  REQUIRE(placed.topo.locate(placed.place.stage_gpus(1)[0]).building == 1);

  // One activation (or gradient) message: route latency + bytes over the narrowest link (the NIC).
  double bytes = 0;
  for (const auto& op : placed.graph.stages[0].ops)
    if (op.kind == workload::OpKind::send)
      bytes = op.bytes;
  auto route     = placed.topo.route(placed.place.stage_gpus(0)[0], placed.place.stage_gpus(1)[0]);
  const double x = placed.topo.route_latency(route) + bytes / placed.topo.route_bandwidth(route);
  const int m    = placed.graph.micro_batches;
  const auto& s0 = placed.graph.stages[0];
  const auto& s1 = placed.graph.stages[1];
  // GPipe on two stages: stage 1 runs forward i once it has finished i-1 and received i; backwards run in
  // reverse order, stage 0's once it has finished its previous one and received the gradient.
  double f0_end = 0, s1_end = 0;
  std::vector<double> s1_forward_end(m);
  for (int i = 0; i < m; ++i) {
    f0_end            = f0_end + seconds_of(s0, workload::OpKind::forward, i);
    s1_end            = std::max(s1_end, f0_end + x) + seconds_of(s1, workload::OpKind::forward, i);
    s1_forward_end[i] = s1_end;
  }
  double s0_end = f0_end;
  for (int i = m - 1; i >= 0; --i) {
    s1_end = s1_end + seconds_of(s1, workload::OpKind::backward, i);
    s0_end = std::max(s0_end, s1_end + x) + seconds_of(s0, workload::OpKind::backward, i);
  }
  double expected = std::max(s0_end + seconds_of(s0, workload::OpKind::optimizer, -1),
                             s1_end + seconds_of(s1, workload::OpKind::optimizer, -1));
  for (auto f : {netsim::Fidelity::analytical, netsim::Fidelity::flow}) {
    netsim::StepOptions o;
    o.fidelity = f;
    auto r     = placed.simulate(o);
    expect_within(std::string("two-stage pipeline step at ") + std::string(name_of(f)), expected, r.step_time, 0.02);
    check_identity(r);
  }
}

TEST_CASE("a DP all-reduce that backward cannot hide is exposed for its closed-form time", "[step]")
{
  // A short backward (one 512-token sequence per rank) and a large gradient (4-layer, 2048-wide model, fp32).
  const PlacedStep placed(
      "two-buildings",
      job({{"tp", 1}, {"cp", 1}, {"pp", 1}, {"dp", 2}, {"data_parallel", "ddp"}}, {{"kind", "1f1b"}}, 2, 512),
      {kDpOutermost, {"bldg-a", "bldg-b"}});
  double gradient_bytes = 0;
  for (const auto& op : placed.graph.stages[0].ops)
    if (op.kind == workload::OpKind::collective && op.collective == CollectiveOp::all_reduce &&
        op.dim == workload::Dim::dp)
      gradient_bytes += op.bytes * op.count;
  REQUIRE(gradient_bytes > 0);
  auto route     = placed.topo.route(placed.place.gpu(0), placed.place.gpu(1));
  const double a = placed.topo.route_latency(route), b = placed.topo.route_bandwidth(route);
  // Ring all-reduce over 2 ranks: 2(K-1)/K * S / B + 2(K-1) * alpha = S / B + 2 alpha.
  const double expected = gradient_bytes / b + 2 * a;
  for (auto f : {netsim::Fidelity::analytical, netsim::Fidelity::flow}) {
    netsim::StepOptions o;
    o.fidelity                      = f;
    o.algorithms[workload::Dim::dp] = netsim::Algorithm::ring;
    auto r                          = placed.simulate(o);
    expect_within(std::string("exposed DP all-reduce at ") + std::string(name_of(f)), expected,
                  r.stages[0].exposed[workload::Dim::dp], 0.02);
    check_identity(r);
  }
}

TEST_CASE("two runs of the same step give identical results", "[step]")
{
  const PlacedStep placed(
      "hgx-h100-pod",
      job({{"tp", 2}, {"cp", 1}, {"pp", 2}, {"dp", 4}, {"data_parallel", "fsdp"}}, {{"kind", "1f1b"}}, 16, 2048), {});
  netsim::StepOptions o;
  auto a = placed.simulate(o);
  auto b = placed.simulate(o);
  CHECK(a.step_time == b.step_time);
  for (std::size_t s = 0; s < a.stages.size(); ++s) {
    CHECK(a.stages[s].compute == b.stages[s].compute);
    CHECK(a.stages[s].bubble == b.stages[s].bubble);
    CHECK(a.stages[s].exposed.values == b.stages[s].exposed.values);
  }
  check_identity(a);
}

namespace {

// The step with rail 0 standing for `rails` identical rails against every rail simulated: equal step, breakdown and
// bytes on every link direction (relative 1e-9). At flow fidelity the times may differ by `flow_times`: a group's
// hops inside a node that several channels share are one flow there, which takes one max-min share of an NVLink
// where the channels' flows would take one each; at analytical fidelity node-local collectives that own the
// NVLinks are timed alone (netsim/README.md, "Rail symmetry").
void check_rails_alike(const PlacedStep& placed, int rails, double flow_times = 1e-9)
{
  for (auto f : {netsim::Fidelity::analytical, netsim::Fidelity::flow}) {
    netsim::StepOptions o;
    o.fidelity      = f;
    o.rail_symmetry = false;
    auto all        = placed.simulate(o);
    o.rail_symmetry = true;
    auto one        = placed.simulate(o);
    CHECK(one.flow_ops < all.flow_ops);
    REQUIRE(one.rails == rails);
    REQUIRE(all.rails == 1);
    std::cout << std::string(name_of(f)) << ": all rails " << all.transfers.size() << " transfers, step "
              << all.step_time << " s; rail 0 alone " << one.transfers.size() << " transfers, step " << one.step_time
              << " s\n";
    // Transfers that leave their node are per rail; node-local (TP) ones are one representative group already, and a
    // group over whole nodes keeps its hops inside each node (merged where its channels share a pair).
    auto scale_out = [&](const netsim::StepResult& r) {
      return std::count_if(r.transfers.begin(), r.transfers.end(), [&](const netsim::TransferRecord& t) {
        return placed.topo.locate(t.src).node != placed.topo.locate(t.dst).node;
      });
    };
    CHECK(scale_out(one) * rails == scale_out(all));
    const double times = f == netsim::Fidelity::flow ? flow_times : 1e-9;
    INFO(name_of(f) << ": step folded " << one.step_time << " s against " << all.step_time << " s, tolerance "
                    << times);
    CHECK(one.step_time == Approx(all.step_time).epsilon(times));
    // Parts of the breakdown are differences of times: within the tolerance of the step.
    const double margin = times > 1e-9 ? times * all.step_time : 1e-12;
    for (std::size_t s = 0; s < all.stages.size(); ++s) {
      CHECK(one.stages[s].bubble == Approx(all.stages[s].bubble).epsilon(times).margin(margin));
      for (auto d : workload::kDims)
        CHECK(one.stages[s].exposed[d] == Approx(all.stages[s].exposed[d]).epsilon(times).margin(margin));
    }
    std::vector<double> tier_all(topology::kTierCount, 0), tier_one(topology::kTierCount, 0);
    for (std::size_t l = 0; l < placed.topo.links().size(); ++l) {
      int t = static_cast<int>(placed.topo.links()[l].tier);
      tier_all[t] += all.link_bytes[2 * l] + all.link_bytes[2 * l + 1];
      tier_one[t] += one.link_bytes[2 * l] + one.link_bytes[2 * l + 1];
    }
    for (int t = 0; t < topology::kTierCount; ++t) {
      INFO(name_of(static_cast<topology::Tier>(t)) << ": " << tier_all[t] << " vs " << tier_one[t]);
      CHECK(tier_one[t] == Approx(tier_all[t]).epsilon(1e-9));
    }
    // Per link too: every NIC carries what it carried with all rails simulated.
    for (std::size_t k = 0; k < all.link_bytes.size(); ++k)
      if (all.link_bytes[k] != Approx(one.link_bytes[k]).epsilon(1e-9)) {
        FAIL("link " << k / 2 << " direction " << k % 2 << ": " << all.link_bytes[k] << " vs " << one.link_bytes[k]);
      }
  }
}

} // namespace

TEST_CASE("rail symmetry: simulating rail 0 alone gives the same step, breakdown and bytes", "[step][rails]")
{
  // TP fills each 8-GPU node of a rail-optimized fabric; PP crosses the building boundary and DP stays inside.
  const PlacedStep placed(
      "two-buildings",
      job({{"tp", 8}, {"cp", 1}, {"pp", 2}, {"dp", 4}, {"data_parallel", "fsdp"}, {"reshard_after_forward", false}},
          {{"kind", "1f1b"}}, 16, 2048),
      {kPpOutermost, {"bldg-a", "bldg-b"}});
  check_rails_alike(placed, 8);
}

TEST_CASE("rail symmetry without TP: FSDP over whole nodes of 4 used GPUs, 4 standing by, folds to one rail",
          "[step][rails]")
{
  // No TP: the FSDP groups hold every used GPU of 4 nodes (their rings leave each node by all 4 NICs), the pipeline
  // pairs keep to their rail, and turning each node's 4 used GPUs one place maps the step onto itself.
  placement::PlacementSpec spec{kPpOutermost, {"bldg-a", "bldg-b"}};
  spec.gpus_per_node = 4;
  const PlacedStep placed(
      "two-buildings",
      job({{"tp", 1}, {"cp", 1}, {"pp", 2}, {"dp", 16}, {"data_parallel", "fsdp"}, {"reshard_after_forward", false}},
          {{"kind", "1f1b"}}, 32, 2048),
      spec);
  check_rails_alike(placed, 4);
}

TEST_CASE("rail symmetry: rings leaving by fewer NICs than a node uses keep every rail simulated", "[step][rails]")
{
  // 64 used GPUs of each GB200 NVL72 rack (8 standing by), FSDP over two whole racks: NCCL's rings take 32 channels,
  // so they leave by 32 of the 64 NICs and the rails differ; the lowering finds it and every rail is simulated.
  placement::PlacementSpec spec;
  spec.gpus_per_node = 64;
  const PlacedStep placed(
      "gb200-nvl72",
      job({{"tp", 1}, {"cp", 1}, {"pp", 1}, {"dp", 128}, {"data_parallel", "fsdp"}}, {{"kind", "1f1b"}}, 128, 1024),
      spec);
  // The step is turned onto itself as placed: the fold is given up when the lowering finds the rails differ.
  REQUIRE(netsim::detail::symmetric_rails(placed.topo, placed.graph, placed.place) == 64);
  netsim::StepOptions o;
  const auto folded = placed.simulate(o);
  o.rail_symmetry   = false;
  const auto all    = placed.simulate(o);
  CHECK(folded.rails == 1);
  CHECK(folded.engine.at("rail_symmetry") == false);
  std::cout << "64 of 72 GPUs, FSDP 128: step " << folded.step_time << " s, every rail " << all.step_time << " s\n";
  CHECK(folded.step_time == all.step_time);
}

TEST_CASE("rail symmetry by blocks: two EP groups a node and their expert data-parallel groups fold to rails 0 and 4",
          "[step][rails]")
{
  // EP 4 inside each 8-GPU node (two EP groups a node), DP 16 over two nodes a stage, PP 2 across the buildings.
  // Each expert data-parallel group holds the GPUs at one offset of both halves of its nodes ({l, l + 4} of two
  // nodes): turning the whole node one place does not map them onto groups, turning each half one place does, so
  // rails 0 and 4 are simulated, each standing for the 4 rails of its half.
  json j = {{"name", "moe-job"},
            {"model", spansim::test::small_moe_model(2, 0)},
            {"gpu", "h100"},
            {"gpus", 32},
            {"parallelism", {{"tp", 1}, {"pp", 2}, {"dp", 16}, {"ep", 4}, {"data_parallel", "fsdp"}}},
            {"batch", {{"global_sequences", 32}, {"sequence_length", 2048}, {"micro_batch", 1}}},
            {"schedule", {{"kind", "1f1b"}}},
            {"recompute", "none"},
            {"calibration", "none"}};
  const PlacedStep placed("two-buildings", workload::parse_job(j, "moe-job.json"),
                          {kPpOutermost, {"bldg-a", "bldg-b"}});
  REQUIRE(netsim::detail::symmetric_rails(placed.topo, placed.graph, placed.place) == 4);
  check_rails_alike(placed, 4, 0.01);
}

TEST_CASE("auto picks, per step, the fastest of the per-call policy and each algorithm for all calls", "[step][auto]")
{
  // GPT-3 175B on 1,024 GPUs, DP across two buildings joined at 1:1. Choosing each call's algorithm with its
  // own groups alone, the policy takes one that moves more across the boundary, where the other stages'
  // collectives slow it down; one algorithm for every DP call is faster for the step.
  auto sc =
      scenario::load_scenario(std::string(SPANSIM_SOURCE_DIR) + "/experiments/scenarios/gpt3-175b-two-buildings.json");
  sc.topology.inter_building.bandwidth = 204.8e12 / 8;
  // The choice is made on the network before SM contention lengthens compute (netsim/tuning.cpp).
  sc.job.effects.sm_contention = false;
  topology::Topology topo(sc.topology);
  auto graph = workload::build_step_graph(sc.job);
  placement::Placement place(topo, sc.job, sc.placement);
  auto options            = sc.options;
  options.fidelity        = netsim::Fidelity::analytical;
  options.choose_per_step = false;
  const double per_call   = netsim::simulate_step(topo, graph, place, options).step_time;
  const auto dp           = workload::Dim::dp;
  double best             = per_call;
  for (auto a : {netsim::Algorithm::ring, netsim::Algorithm::hierarchical, netsim::Algorithm::halving_doubling,
                 netsim::Algorithm::tree}) {
    auto forced           = options;
    forced.algorithms[dp] = a;
    try {
      const double t = netsim::simulate_step(topo, graph, place, forced).step_time;
      std::cout << "  dp " << name_of(a) << " for every call: " << t << " s\n";
      best = std::min(best, t);
    } catch (const spansim::UsageError&) {
      std::cout << "  dp " << name_of(a) << " does not fit these groups\n";
    }
  }
  options.choose_per_step = true;
  auto r                  = netsim::simulate_step(topo, graph, place, options);
  std::cout << "  per-call policy " << per_call << " s, per-step choice " << r.step_time << " s ("
            << r.engine["collectives_chosen_per_step"].dump() << ")\n";
  expect_within("step with auto chosen per step against the fastest candidate", best, r.step_time, 1e-9);
  CHECK(r.step_time <= per_call); // never slower than NCCL's per-call pick, which is one of the candidates
}

TEST_CASE("SM contention: compute overlapped by communication loses NCCL's SMs for the overlap", "[step][effects]")
{
  topology::Topology topo(topology::load_topology_spec("two-buildings"));
  auto j = job({{"tp", 1}, {"cp", 1}, {"pp", 1}, {"dp", 2}, {"data_parallel", "ddp"}}, {{"kind", "1f1b"}}, 4, 2048);
  j.effects.dp_overlap_by_unit = true; // gradient reductions overlap the backward
  placement::Placement place(topo, j, {kDpOutermost, {"bldg-a", "bldg-b"}});
  // At flow fidelity the overlap is read off the analytical engine's run (netsim/tuning.cpp): with the algorithm
  // given, a run of the flow lowering; with `auto` settled per step, the winning analytical trial. The hand count
  // uses the flow engine's own run, so the two engines must agree on it.
  struct Case {
    netsim::Fidelity fidelity;
    bool per_step;
    const char* what;
  };
  for (const auto& c : {Case{netsim::Fidelity::analytical, false, "analytical, DP ring"},
                        Case{netsim::Fidelity::flow, false, "flow, DP ring"},
                        Case{netsim::Fidelity::flow, true, "flow, DP auto settled per step"}}) {
    std::cout << c.what << "\n";
    j.effects.sm_contention = false;
    auto graph              = workload::build_step_graph(j);
    netsim::StepOptions o;
    o.fidelity                      = c.fidelity;
    o.choose_per_step               = c.per_step;
    o.algorithms[workload::Dim::dp] = c.per_step ? netsim::Algorithm::automatic : netsim::Algorithm::ring;
    const auto first                = netsim::simulate_step(topo, graph, place, o);
    const double expected           = contention_by_hand(graph, first, j);
    REQUIRE(expected > 0);
    j.effects.sm_contention = true;
    graph                   = workload::build_step_graph(j);
    const auto second       = netsim::simulate_step(topo, graph, place, o);
    REQUIRE(second.sm_contention.size() == 1);
    if (c.per_step)
      CHECK(second.engine.contains("collectives_chosen_per_step"));
    expect_within("SM contention seconds on stage 0", expected, second.sm_contention[0], 1e-9);
    expect_within("compute part grows by them", first.stages[0].compute + expected, second.stages[0].compute, 1e-9);
    CHECK(second.step_time >= first.step_time);
    check_identity(second);
  }
}

TEST_CASE("SM contention on a GPU without NCCL's share: only ops that name their SMs take them", "[step][effects]")
{
  // The case above on a GPU file with no comm_sms: nothing is taken until the overlapped ops name 16 SMs each (as a
  // MoE dispatcher's do), and then exactly what NCCL's 16 would take.
  topology::Topology topo(topology::load_topology_spec("two-buildings"));
  auto j = job({{"tp", 1}, {"cp", 1}, {"pp", 1}, {"dp", 2}, {"data_parallel", "ddp"}}, {{"kind", "1f1b"}}, 4, 2048);
  j.effects.dp_overlap_by_unit = true;
  placement::Placement place(topo, j, {kDpOutermost, {"bldg-a", "bldg-b"}});
  netsim::StepOptions o;
  o.fidelity                      = netsim::Fidelity::analytical;
  o.algorithms[workload::Dim::dp] = netsim::Algorithm::ring;
  j.effects.sm_contention         = false;
  const auto first                = netsim::simulate_step(topo, workload::build_step_graph(j), place, o);
  const double expected           = contention_by_hand(workload::build_step_graph(j), first, j);
  REQUIRE(expected > 0);
  j.effects.sm_contention = true;
  auto graph              = workload::build_step_graph(j);
  graph.job.gpu.comm_sms  = 0;
  CHECK_FALSE(netsim::contention_applies(graph));
  const auto none = netsim::simulate_step(topo, graph, place, o);
  expect_within("no SMs named: the step without contention", first.step_time, none.step_time, 1e-12);
  for (auto& op : graph.stages[0].ops)
    if (!workload::is_compute(op.kind) && op.overlappable)
      op.sms = 16;
  CHECK(netsim::contention_applies(graph));
  const auto named = netsim::simulate_step(topo, graph, place, o);
  REQUIRE(named.sm_contention.size() == 1);
  expect_within("16 SMs named by the ops: NCCL's 16 by hand", expected, named.sm_contention[0], 1e-9);

  // DeepGEMM beside DeepEP already runs on the SMs the dispatch leaves (20 of them): communication that takes 16
  // costs nothing more, and 24 costs the 4 beyond the 20, out of the sms - 24 left.
  graph.job.gemm_library        = workload::GemmLibrary::deepgemm;
  graph.job.model.moe.experts   = 8;
  graph.job.dispatch.dispatcher = workload::Dispatcher::deepep;
  graph.job.dispatch.sms        = 20;
  REQUIRE(workload::reserved_sms(graph.job) == 20);
  const auto within = netsim::simulate_step(topo, graph, place, o);
  CHECK((within.sm_contention.empty() || within.sm_contention[0] == 0));
  expect_within("16 SMs beside 20 reserved: the step without contention", first.step_time, within.step_time, 1e-12);
  for (auto& op : graph.stages[0].ops)
    if (!workload::is_compute(op.kind) && op.overlappable)
      op.sms = 24;
  const double sms    = graph.job.gpu.gemm.sms;
  const auto beyond   = netsim::simulate_step(topo, graph, place, o);
  const double scaled = expected / (16 / (sms - 16)) * (4 / (sms - 24));
  expect_within("24 SMs beside 20 reserved: 4 / (sms - 24) of the overlap", scaled, beyond.sm_contention[0], 1e-9);
}

TEST_CASE("flow fidelity: links left out as slack change no op of a step", "[step][slack]")
{
  // Pipeline pairs and DP rings over the NICs and leaf uplinks of both buildings: a rail's leaf uplinks (12.8
  // Tbps) carry at most its 32 NICs (12.03 Tbps at NCCL efficiency), so SimGrid runs without them.
  const PlacedStep placed(
      "two-buildings",
      job({{"tp", 1}, {"cp", 1}, {"pp", 2}, {"dp", 8}, {"data_parallel", "fsdp"}}, {{"kind", "1f1b"}}, 32, 2048),
      {kPpOutermost, {"bldg-a", "bldg-b"}});
  netsim::StepOptions o;
  o.fidelity                             = netsim::Fidelity::flow;
  const auto with                        = placed.simulate(o);
  o.engine.simgrid.leave_out_slack_links = false;
  const auto without                     = placed.simulate(o);
  const int left_out                     = with.engine["slack_link_directions_left_out"].get<int>();
  std::cout << "link directions left out: " << left_out << "\n";
  CHECK(left_out > 0);
  CHECK(without.engine["slack_link_directions_left_out"].get<int>() == 0);
  expect_within("step with and without slack links", without.step_time, with.step_time, 1e-12);
  double worst = 0;
  for (std::size_t s = 0; s < with.ops.size(); ++s)
    for (std::size_t i = 0; i < with.ops[s].size(); ++i)
      worst = std::max(worst, std::abs(with.ops[s][i].end - without.ops[s][i].end) / without.step_time);
  std::cout << "worst op end difference: " << worst << " of the step (tolerance 1e-12)\n";
  CHECK(worst <= 1e-12);
}

TEST_CASE("DP unit by unit: a reduction the backward hides leaves only the last unit exposed", "[step][effects]")
{
  // A long backward (one 64K-token sequence per rank) and the gradient of a 4-layer model: the units reduced
  // during the backward are hidden; the last one (first layer, embedding and output layer) waits, for its ring
  // time.
  auto j = job({{"tp", 1}, {"cp", 1}, {"pp", 1}, {"dp", 2}, {"data_parallel", "ddp"}}, {{"kind", "1f1b"}}, 2, 65536);
  j.effects.dp_overlap_by_unit = true;
  const PlacedStep placed("two-buildings", std::move(j), {kDpOutermost, {"bldg-a", "bldg-b"}});
  std::vector<double> reductions;
  for (const auto& op : placed.graph.stages[0].ops)
    if (op.kind == workload::OpKind::collective && op.dim == workload::Dim::dp)
      reductions.push_back(op.bytes * op.count);
  REQUIRE(reductions.size() == 2);
  const double layer = 4 * 2048.0 * 2048 + 3 * 2048.0 * 8192 + 2 * 2048, extra = 2 * 32000.0 * 2048 + 2048;
  expect_within("last unit's share of the gradient", (layer + extra) / (4 * layer + extra),
                reductions[1] / (reductions[0] + reductions[1]), 1e-12);
  auto route     = placed.topo.route(placed.place.gpu(0), placed.place.gpu(1));
  const double a = placed.topo.route_latency(route), b = placed.topo.route_bandwidth(route);
  netsim::StepOptions o;
  o.fidelity                      = netsim::Fidelity::analytical;
  o.algorithms[workload::Dim::dp] = netsim::Algorithm::ring;
  auto r                          = placed.simulate(o);
  expect_within("exposed DP: the last unit's ring all-reduce", reductions[1] / b + 2 * a,
                r.stages[0].exposed[workload::Dim::dp], 0.02);
  check_identity(r);
}

namespace {

// Bytes per step on the links of one tier, both directions.
double tier_bytes(const topology::Topology& topo, const netsim::StepResult& r, topology::Tier tier)
{
  return netsim::tier_bytes(topo, r.link_bytes)[static_cast<std::size_t>(tier)];
}

netsim::CompressionRule rule(workload::Dim dim, netsim::Boundary across, double ratio, double c, double d)
{
  netsim::CompressionRule x;
  x.dim             = dim;
  x.across          = across;
  x.ratio           = ratio;
  x.compress_rate   = c;
  x.decompress_rate = d;
  return x;
}

} // namespace

TEST_CASE("compression: bytes across the boundary shrink by the ratio, time is alpha-beta plus the GPU cost",
          "[step][compression]")
{
  const PlacedStep placed(
      "two-regions",
      job({{"tp", 1}, {"cp", 1}, {"pp", 1}, {"dp", 2}, {"data_parallel", "ddp"}}, {{"kind", "1f1b"}}, 2, 512),
      {kDpOutermost, {"east-b0", "west-b0"}});
  double gradient_bytes = 0;
  for (const auto& op : placed.graph.stages[0].ops)
    if (op.kind == workload::OpKind::collective && op.dim == workload::Dim::dp)
      gradient_bytes += op.bytes * op.count;
  auto route     = placed.topo.route(placed.place.gpu(0), placed.place.gpu(1));
  const double a = placed.topo.route_latency(route), b = placed.topo.route_bandwidth(route);
  const double ratio = 8, c = 400e9, d = 800e9;
  for (auto f : {netsim::Fidelity::analytical, netsim::Fidelity::flow}) {
    netsim::StepOptions plain;
    plain.fidelity                      = f;
    plain.algorithms[workload::Dim::dp] = netsim::Algorithm::ring;
    plain.nccl.windows                  = false; // the slots' window over 5 ms is test_long_links' subject
    auto compressed                     = plain;
    compressed.compression.rules        = {rule(workload::Dim::dp, netsim::Boundary::region, ratio, c, d)};
    const auto r0                       = placed.simulate(plain);
    const auto r1                       = placed.simulate(compressed);
    const std::string at                = " at " + std::string(name_of(f));
    // Exactly the ratio: every byte of the step that crosses regions is the DP gradient's.
    const double across0 = tier_bytes(placed.topo, r0, topology::Tier::inter_region);
    const double across1 = tier_bytes(placed.topo, r1, topology::Tier::inter_region);
    REQUIRE(across0 > 0);
    expect_within("bytes across regions, compressed x" + std::to_string(int(ratio)) + at, across0 / ratio, across1,
                  1e-12);
    // Ring all-reduce over 2 ranks of S / ratio, plus compressing and decompressing S on the GPU.
    const double cost     = gradient_bytes / c + gradient_bytes / d;
    const double expected = gradient_bytes / ratio / b + 2 * a + cost;
    expect_within("exposed compressed DP all-reduce" + at, expected, r1.stages[0].exposed[workload::Dim::dp], 0.02);
    expect_within("compression GPU time in the breakdown" + at, cost, r1.stages[0].compression, 1e-12);
    CHECK(r0.stages[0].compression == 0);
    check_identity(r1);
  }
}

TEST_CASE("compression: a region rule leaves building-crossing groups alone, a building rule covers regions too",
          "[step][compression]")
{
  netsim::CompressionSpec spec;
  spec.rules = {rule(workload::Dim::dp, netsim::Boundary::region, 4, 0, 0),
                rule(workload::Dim::pp, netsim::Boundary::building, 2, 0, 0)};
  using netsim::Boundary;
  using workload::Purpose;
  CHECK(spec.rule_for(workload::Dim::dp, Purpose::grad_reduce, Boundary::building) == nullptr);
  REQUIRE(spec.rule_for(workload::Dim::dp, Purpose::grad_reduce, Boundary::region) != nullptr);
  CHECK(spec.rule_for(workload::Dim::dp, Purpose::grad_reduce, Boundary::region)->ratio == 4);
  REQUIRE(spec.rule_for(workload::Dim::pp, Purpose::pp_activations, Boundary::region) != nullptr);
  CHECK(spec.rule_for(workload::Dim::pp, Purpose::pp_activations, Boundary::region)->ratio == 2);
  CHECK(spec.rule_for(workload::Dim::ep, Purpose::ep_dispatch, Boundary::region) == nullptr);
  // Purposes narrow a rule; the most specific boundary wins.
  spec.rules.push_back(rule(workload::Dim::dp, netsim::Boundary::building, 2, 0, 0));
  spec.rules.back().purposes = {Purpose::param_gather};
  CHECK(spec.rule_for(workload::Dim::dp, Purpose::param_gather, Boundary::building)->ratio == 2);
  CHECK(spec.rule_for(workload::Dim::dp, Purpose::param_gather, Boundary::region)->ratio == 4);
  CHECK(spec.rule_for(workload::Dim::dp, Purpose::grad_reduce, Boundary::building) == nullptr);

  // In a step: DP across two buildings of one region is not compressed by a region rule.
  const PlacedStep placed(
      "two-buildings",
      job({{"tp", 1}, {"cp", 1}, {"pp", 1}, {"dp", 2}, {"data_parallel", "ddp"}}, {{"kind", "1f1b"}}, 2, 512),
      {kDpOutermost, {"bldg-a", "bldg-b"}});
  netsim::StepOptions o;
  o.fidelity             = netsim::Fidelity::analytical;
  const auto plain       = placed.simulate(o);
  o.compression.rules    = {rule(workload::Dim::dp, netsim::Boundary::region, 4, 1e9, 1e9)};
  const auto region_rule = placed.simulate(o);
  CHECK(region_rule.step_time == plain.step_time);
  CHECK(tier_bytes(placed.topo, region_rule, topology::Tier::inter_building) ==
        tier_bytes(placed.topo, plain, topology::Tier::inter_building));
  o.compression.rules[0].across = netsim::Boundary::building;
  const auto building_rule      = placed.simulate(o);
  expect_within("bytes across buildings under a building rule x4",
                tier_bytes(placed.topo, plain, topology::Tier::inter_building) / 4,
                tier_bytes(placed.topo, building_rule, topology::Tier::inter_building), 1e-12);
}

TEST_CASE("compression of pipeline activations across regions: each message is latency + (S/r)/B + the GPU cost",
          "[step][compression]")
{
  const PlacedStep placed(
      "two-regions",
      job({{"tp", 1}, {"cp", 1}, {"pp", 2}, {"dp", 1}, {"data_parallel", "ddp"}}, {{"kind", "gpipe"}}, 4, 4096),
      {kPpOutermost, {"east-b0", "west-b0"}});
  REQUIRE(placed.topo.locate(placed.place.stage_gpus(0)[0]).region !=
          placed.topo.locate(placed.place.stage_gpus(1)[0]).region);
  netsim::StepOptions o;
  o.fidelity         = netsim::Fidelity::analytical;
  o.nccl.windows     = false; // the slots' window over 5 ms is test_long_links' subject
  const auto plain   = placed.simulate(o);
  const double ratio = 4, c = 100e9, d = 200e9;
  o.compression.rules = {rule(workload::Dim::pp, netsim::Boundary::region, ratio, c, d)};
  const auto r        = placed.simulate(o);
  double bytes        = 0;
  int sends           = 0;
  for (const auto& op : placed.graph.stages[0].ops)
    if (op.kind == workload::OpKind::send) {
      bytes = op.bytes;
      ++sends;
    }
  auto route       = placed.topo.route(placed.place.stage_gpus(0)[0], placed.place.stage_gpus(1)[0]);
  const double lat = placed.topo.route_latency(route), b = placed.topo.route_bandwidth(route);
  // Each of the send's ops: sender compresses, bytes / ratio cross, receiver decompresses.
  for (std::size_t i = 0; i < placed.graph.stages[0].ops.size(); ++i)
    if (placed.graph.stages[0].ops[i].kind == workload::OpKind::send) {
      const auto& t = r.ops[0][i];
      expect_within("compressed activation message", lat + bytes / ratio / b + bytes / c + bytes / d, t.end - t.active,
                    1e-6);
      break;
    }
  expect_within("bytes across regions", tier_bytes(placed.topo, plain, topology::Tier::inter_region) / ratio,
                tier_bytes(placed.topo, r, topology::Tier::inter_region), 1e-12);
  // Stage 0 compresses its sends, stage 1 decompresses them (and the reverse for the gradients).
  expect_within("stage 0's compression GPU time", sends * (bytes / c + bytes / d), r.stages[0].compression, 1e-9);
  check_identity(r);
}

TEST_CASE("compression of EP all-to-alls across buildings: only their bytes shrink, by the ratio",
          "[step][compression]")
{
  // An MoE job whose expert groups (EP 8 over DP 8, DP outermost) span both buildings; FSDP traffic crosses too.
  json model = spansim::test::small_moe_model(2, 0);
  json j     = {{"name", "moe-job"},
                {"model", model},
                {"gpu", "h100"},
                {"gpus", 16},
                {"parallelism", {{"tp", 2}, {"pp", 1}, {"dp", 8}, {"ep", 8}, {"data_parallel", "fsdp"}}},
                {"batch", {{"global_sequences", 16}, {"sequence_length", 2048}, {"micro_batch", 1}}},
                {"schedule", {{"kind", "1f1b"}}},
                {"recompute", "none"},
                {"calibration", "none"}};
  const PlacedStep placed("two-buildings", workload::parse_job(j, "moe-job.json"),
                          {kDpOutermost, {"bldg-a", "bldg-b"}});
  netsim::StepOptions o;
  o.fidelity       = netsim::Fidelity::analytical;
  o.all_to_all     = netsim::AllToAllTiming::flows;
  const auto plain = placed.simulate(o);
  auto across      = [&](double ratio) {
    o.compression.rules = {rule(workload::Dim::ep, netsim::Boundary::building, ratio, 0, 0)};
    return tier_bytes(placed.topo, placed.simulate(o), topology::Tier::inter_building);
  };
  const double b0 = tier_bytes(placed.topo, plain, topology::Tier::inter_building);
  const double d2 = b0 - across(2), d4 = b0 - across(4);
  // With E bytes of all-to-all crossing: d2 = E / 2 and d4 = 3E / 4, whatever the FSDP traffic.
  REQUIRE(d2 > 0);
  expect_within("EP bytes saved at x4 against x2 (3/4 E against 1/2 E)", 1.5 * d2, d4, 1e-12);
  CHECK(2 * d2 < b0); // the FSDP traffic across is untouched
}
