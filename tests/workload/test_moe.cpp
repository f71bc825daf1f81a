// MoE as the frontier trains it, against closed forms: the routing statistics of a hierarchical dispatch against
// counting every top-k draw, each dispatcher's bytes against hand sums, the expert load of the busiest GPU against
// the seeded loads, and the overlap schedules' bubbles and memory against their published formulas.
#include "roofline.hpp"
#include "tests/support.hpp"
#include "workload/schedule.hpp"
#include "workload/workload.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <numeric>

namespace wl = spansim::workload;
using nlohmann::json;
using spansim::test::expect_within;

namespace {

// Every way of choosing k of n items, visited in turn.
void each_choice(int n, int k, const std::function<void(const std::vector<int>&)>& visit)
{
  std::vector<int> pick(static_cast<std::size_t>(k));
  std::iota(pick.begin(), pick.end(), 0);
  while (true) {
    visit(pick);
    int i = k - 1;
    while (i >= 0 && pick[static_cast<std::size_t>(i)] == n - k + i)
      --i;
    if (i < 0)
      return;
    ++pick[static_cast<std::size_t>(i)];
    for (int j = i + 1; j < k; ++j)
      pick[static_cast<std::size_t>(j)] = pick[static_cast<std::size_t>(j - 1)] + 1;
  }
}

json moe_model(int layers, int experts, int top_k, int shared = 0)
{
  return {
      {"name", "moe"},
      {"layers", layers},
      {"hidden", 1024},
      {"ffn", 4096},
      {"heads", 8},
      {"kv_heads", 8},
      {"vocab", 32000},
      {"mlp", "swiglu"},
      {"moe", {{"experts", experts}, {"experts_per_token", top_k}, {"expert_ffn", 512}, {"shared_experts", shared}}}};
}

json moe_job(json parallelism, json moe, json schedule = {{"kind", "1f1b"}}, int sequences = 16, int layers = 4)
{
  const int gpus =
      parallelism.value("tp", 1) * parallelism.value("cp", 1) * parallelism.value("pp", 1) * parallelism.value("dp", 1);
  return workload_test::roofline({{"name", "moe-job"},
                                  {"model", moe_model(layers, 16, 4)},
                                  {"gpu", "h100"},
                                  {"gpus", gpus},
                                  {"parallelism", parallelism},
                                  {"batch", {{"global_sequences", sequences}, {"sequence_length", 1024}}},
                                  {"schedule", schedule},
                                  {"moe", moe}});
}

wl::JobSpec parse(const json& j)
{
  return wl::parse_job(j, "test.json");
}

const wl::Op* first_op(const wl::StepGraph& g, wl::Purpose p, spansim::CollectiveOp kind)
{
  for (const auto& op : g.stages[0].ops)
    if (op.purpose == p && op.collective == kind && op.kind == wl::OpKind::collective)
      return &op;
  return nullptr;
}

} // namespace

TEST_CASE("Routing statistics of a deduplicated dispatch equal counting every top-k draw")
{
  // 16 experts on 8 GPUs of 4 nodes (2 experts per GPU, 4 per node), top-4: every one of the C(16, 4) draws.
  const int experts = 16, k = 4, gpus = 8, nodes = 4;
  double node_hits = 0, gpu_hits = 0, draws = 0;
  each_choice(experts, k, [&](const std::vector<int>& pick) {
    draws += 1;
    node_hits += std::any_of(pick.begin(), pick.end(), [](int e) { return e / 4 == 0; }) ? 1 : 0;
    gpu_hits += std::any_of(pick.begin(), pick.end(), [](int e) { return e / 2 == 0; }) ? 1 : 0;
  });
  auto r = wl::dispatch_rates(experts, k, gpus, nodes, 0);
  expect_within("chance that a node receives a token", node_hits / draws, r.node, 1e-12);
  expect_within("chance that a GPU receives a token", gpu_hits / draws, r.gpu, 1e-12);

  // Node-limited to 2 nodes: every pair of nodes is as likely, then k among their 8 experts.
  node_hits = gpu_hits = draws = 0;
  each_choice(nodes, 2, [&](const std::vector<int>& chosen) {
    each_choice(8, k, [&](const std::vector<int>& pick) {
      draws += 1;
      bool node0 = false, gpu0 = false;
      for (int i : pick) {
        const int e = chosen[static_cast<std::size_t>(i / 4)] * 4 + i % 4; // the i-th expert of the chosen nodes
        node0       = node0 || e / 4 == 0;
        gpu0        = gpu0 || e / 2 == 0;
      }
      node_hits += node0 ? 1 : 0;
      gpu_hits += gpu0 ? 1 : 0;
    });
  });
  r = wl::dispatch_rates(experts, k, gpus, nodes, 2);
  expect_within("node-limited (2 of 4): chance that a node receives a token", node_hits / draws, r.node, 1e-12);
  expect_within("node-limited (2 of 4): chance that a GPU receives a token", gpu_hits / draws, r.gpu, 1e-12);
  CHECK(r.node < wl::dispatch_rates(experts, k, gpus, nodes, 0).node);
}

TEST_CASE("Each dispatcher's buffer per GPU is the hand sum of the tokens it moves")
{
  // tp 2 with sequence parallelism: a rank dispatches its 512 of the micro-batch's 1,024 tokens.
  const json par      = {{"tp", 2}, {"pp", 1}, {"dp", 8}, {"ep", 4}, {"etp", 1}};
  const double tokens = 1024.0 / 2, k = 4, h = 1024;
  const auto flat = wl::build_step_graph(parse(moe_job(par, {{"dispatcher", "alltoall"}})), {false});
  const auto* d   = first_op(flat, wl::Purpose::ep_dispatch, spansim::CollectiveOp::all_to_all);
  REQUIRE(d != nullptr);
  expect_within("alltoall dispatch buffer (t/tp x k x h x 2 bytes)", tokens * k * h * 2, d->bytes, 1e-12);
  CHECK(d->group.size == 4);

  const auto fp8 =
      wl::build_step_graph(parse(moe_job(par, {{"dispatcher", "alltoall"}, {"dispatch_precision", "fp8"}})), {false});
  d = first_op(fp8, wl::Purpose::ep_dispatch, spansim::CollectiveOp::all_to_all);
  expect_within("FP8 dispatch buffer (a byte per element and a 4-byte scale per 128)", tokens * k * h * (1 + 4.0 / 128),
                d->bytes, 1e-12);
  const auto* c = first_op(fp8, wl::Purpose::ep_combine, spansim::CollectiveOp::all_to_all);
  expect_within("its combine stays BF16", tokens * k * h * 2, c->bytes, 1e-12);

  // The all-gather dispatcher gathers every token of the etp x ep group once, whatever k.
  const json par2 = {{"tp", 2}, {"pp", 1}, {"dp", 8}, {"ep", 4}, {"etp", 2}};
  const auto ag   = wl::build_step_graph(parse(moe_job(par2, {{"dispatcher", "allgather"}})), {false});
  d               = first_op(ag, wl::Purpose::ep_dispatch, spansim::CollectiveOp::all_gather);
  REQUIRE(d != nullptr);
  expect_within("allgather dispatch buffer (etp x ep x t/tp x h x 2 bytes)", 2 * 4 * tokens * h * 2, d->bytes, 1e-12);
  CHECK(d->group.size == 8);
  CHECK(first_op(ag, wl::Purpose::ep_combine, spansim::CollectiveOp::reduce_scatter) != nullptr);
}

TEST_CASE("A forced-balance job and a dropless one with uniform loads build the same step")
{
  const json par      = {{"tp", 1}, {"pp", 2}, {"dp", 4}, {"ep", 4}};
  const auto balanced = wl::build_step_graph(parse(moe_job(par, {{"routing", {{"balance", "balanced"}}}})), {false});
  const auto uniform =
      wl::build_step_graph(parse(moe_job(par, {{"routing", {{"balance", "dropless"}, {"skew", 0}}}})), {false});
  REQUIRE(balanced.stages.size() == uniform.stages.size());
  for (std::size_t s = 0; s < balanced.stages.size(); ++s) {
    REQUIRE(balanced.stages[s].ops.size() == uniform.stages[s].ops.size());
    for (std::size_t i = 0; i < balanced.stages[s].ops.size(); ++i) {
      CHECK(balanced.stages[s].ops[i].seconds == uniform.stages[s].ops[i].seconds);
      CHECK(balanced.stages[s].ops[i].bytes == uniform.stages[s].ops[i].bytes);
      CHECK(balanced.stages[s].ops[i].imbalance == uniform.stages[s].ops[i].imbalance);
    }
  }
  expect_within("makespan, forced balance against uniform dropless", wl::compute_makespan(balanced),
                wl::compute_makespan(uniform), 1e-9);
}

TEST_CASE("The busiest expert GPU computes the largest of the seeded loads and the layer waits for it")
{
  const json par  = {{"tp", 1}, {"pp", 1}, {"dp", 4}, {"ep", 4}};
  const auto job  = parse(moe_job(par, {{"routing", {{"balance", "dropless"}, {"skew", 0.5}, {"seed", 7}}}}));
  const auto load = wl::expert_load(job);
  const int local = 16 / 4;
  for (int layer = 0; layer < job.model.layers; ++layer) {
    const auto pop = wl::expert_popularity(job, layer);
    double busiest = 0;
    for (int j = 0; j < 4; ++j)
      busiest = std::max(busiest, std::accumulate(pop.begin() + j * local, pop.begin() + (j + 1) * local, 0.0) / local);
    expect_within("layer " + std::to_string(layer) + ": busiest member's load over the mean", busiest,
                  load.busiest[static_cast<std::size_t>(layer)], 1e-15);
    expect_within("layer " + std::to_string(layer) + ": the loads average 1", 1.0,
                  std::accumulate(pop.begin(), pop.end(), 0.0) / pop.size(), 1e-12);
    CHECK(busiest > 1);
  }

  // The forward of the one-layer MoE job's routed experts: the busiest member's tokens through each GEMM.
  auto one_layer       = moe_job(par, {{"routing", {{"balance", "dropless"}, {"skew", 0.5}, {"seed", 7}}}});
  one_layer["model"]   = moe_model(1, 16, 4);
  auto even            = one_layer;
  even["moe"]          = {{"routing", {{"balance", "balanced"}}}};
  const auto j1        = parse(one_layer);
  const double f       = wl::expert_load(j1).busiest[0];
  const double per     = 1024.0 * 4 * 4 / 16; // a GPU's tokens x top-4 x ep 4 over 16 experts, per expert
  double expected_diff = 0;
  for (const wl::GemmShape base : {wl::GemmShape{.m = per, .n = 2 * 512, .k = 1024, .groups = local},
                                   wl::GemmShape{.m = per, .n = 1024, .k = 512, .groups = local}}) {
    wl::GemmShape hot = base;
    hot.m *= f;
    expected_diff += wl::gemm_cost(j1.gpu, wl::Precision::bf16, hot).seconds -
                     wl::gemm_cost(j1.gpu, wl::Precision::bf16, base).seconds;
  }
  auto forward = [](const wl::StepGraph& g) {
    for (const auto& op : g.stages[0].ops)
      if (op.kind == wl::OpKind::forward)
        return op.seconds;
    return 0.0;
  };
  expect_within("forward: what the busiest GPU's extra tokens cost in the routed GEMMs", expected_diff,
                forward(wl::build_step_graph(j1, {false})) - forward(wl::build_step_graph(parse(even), {false})), 1e-9);
  const auto capped = [&](double cf, bool pad) {
    auto j   = one_layer;
    j["moe"] = {
        {"routing",
         {{"balance", "token-drop"}, {"skew", 0.5}, {"seed", 7}, {"capacity_factor", cf}, {"pad_to_capacity", pad}}}};
    return wl::expert_load(parse(j)).busiest[0];
  };
  expect_within("token drop padded to capacity: every expert computes the capacity", 1.25, capped(1.25, true), 1e-15);
  CHECK(capped(1.0, false) <= 1.0);
}

namespace {

// The step of a job whose compute ops take the durations the schedule formulas name, and each stage's busy time.
struct Timed {
  double makespan = 0;
  std::vector<double> busy; ///< per stage
};

// The step graph of a dense job on `pp` stages with `micro_batches` micro-batches under `schedule`, its compute ops
// timed: forward F, whole backward B, a split backward's input part B - W and its weight part W; the optimizer free.
wl::StepGraph timed_schedule(int pp, int micro_batches, json schedule, double F, double B, double W, int layers = 16)
{
  json j = workload_test::roofline({{"name", "sched"},
                                    {"model", moe_model(layers, 16, 4)},
                                    {"gpu", "h100"},
                                    {"gpus", pp},
                                    {"parallelism", {{"pp", pp}, {"data_parallel", "ddp"}}},
                                    {"batch", {{"global_sequences", micro_batches}, {"sequence_length", 1024}}},
                                    {"schedule", schedule}});
  j["model"].erase("moe");
  auto g = wl::build_step_graph(parse(j), {false});
  // A backward followed later by a weight pass is the input-gradient part.
  for (auto& st : g.stages) {
    std::map<std::pair<int, int>, bool> weighted;
    for (const auto& op : st.ops)
      if (op.kind == wl::OpKind::weight_grad)
        weighted[{op.chunk, op.micro_batch}] = true;
    for (auto& op : st.ops) {
      if (!wl::is_compute(op.kind))
        continue;
      op.seconds = op.kind == wl::OpKind::forward       ? F
                   : op.kind == wl::OpKind::weight_grad ? W
                   : op.kind == wl::OpKind::backward    ? (weighted.count({op.chunk, op.micro_batch}) ? B - W : B)
                                                        : 0;
    }
  }
  return g;
}

// The same job's step and each stage's busy time (communication is free in compute_makespan).
Timed schedule_run(int pp, int micro_batches, json schedule, double F, double B, double W, int layers = 16)
{
  const auto g = timed_schedule(pp, micro_batches, std::move(schedule), F, B, W, layers);
  Timed t;
  for (const auto& st : g.stages) {
    double busy = 0;
    for (const auto& op : st.ops)
      if (wl::is_compute(op.kind))
        busy += op.seconds;
    t.busy.push_back(busy);
  }
  t.makespan = wl::compute_makespan(g);
  return t;
}

// Peak forward passes whose activations are alive on a stage (from the forward to the whole backward, or to the
// weight pass of a split one), in the schedule's order.
int peak_live(const json& job_json, int stage)
{
  const auto job = parse(job_json);
  int live = 0, peak = 0;
  for (const auto& u : wl::detail::schedule_units(job, stage)) {
    live += u.pass == wl::detail::Pass::forward ? 1 : u.pass == wl::detail::Pass::backward_input ? 0 : -1;
    peak = std::max(peak, live);
  }
  return peak;
}

json dense_schedule_job(int pp, int micro_batches, json schedule, json moe_par = json::object())
{
  json par = {{"pp", pp}, {"data_parallel", "ddp"}};
  par.update(moe_par);
  json j = workload_test::roofline(
      {{"name", "sched"},
       {"model", moe_model(16, 16, 4)},
       {"gpu", "h100"},
       {"gpus", pp * par.value("dp", 1)},
       {"parallelism", par},
       {"batch", {{"global_sequences", micro_batches * par.value("dp", 1)}, {"sequence_length", 1024}}},
       {"schedule", schedule}});
  if (!moe_par.contains("ep"))
    j["model"].erase("moe");
  return j;
}

} // namespace

TEST_CASE("1F1B, ZB-H1, DualPipe and DualPipeV bubbles and memory against their formulas")
{
  const double F = 1, B = 2, W = 1;
  // 1F1B: every stage idles (PP - 1)(F + B); stage 0 holds PP micro-batches' activations.
  for (int pp : {4, 8}) {
    const auto t = schedule_run(pp, 3 * pp, {{"kind", "1f1b"}}, F, B, W);
    for (std::size_t s = 0; s < t.busy.size(); ++s)
      expect_within("1F1B pp " + std::to_string(pp) + " stage " + std::to_string(s) + " bubble (PP-1)(F+B)",
                    (pp - 1) * (F + B), t.makespan - t.busy[s], 1e-12);
    CHECK(peak_live(dense_schedule_job(pp, 3 * pp, {{"kind", "1f1b"}}), 0) == pp);
  }
  // ZB-H1 (sail-sg/zero-bubble-pipeline-parallelism's asserts): the step lasts m (F + B + W) + (p - 1)(F + B' - W)
  // with B' the input-gradient pass; 1F1B's memory.
  for (auto [p, m, f, bi, w] :
       std::vector<std::array<double, 5>>{{4, 8, 1, 1, 1}, {4, 8, 1, 2, 1}, {8, 24, 2, 2, 1}, {4, 8, 1, 1.5, 0.7}}) {
    const auto t = schedule_run(static_cast<int>(p), static_cast<int>(m), {{"kind", "zb-h1"}}, f, bi + w, w);
    expect_within("ZB-H1 p " + std::to_string(int(p)) + " F " + std::to_string(f) + " B " + std::to_string(bi) + " W " +
                      std::to_string(w) + ": makespan - m(F+B+W) = (p-1)(F+B-W)",
                  (p - 1) * (f + bi - w), t.makespan - m * (f + bi + w), 1e-12);
    for (int s = 0; s < int(p); ++s)
      CHECK(peak_live(dense_schedule_job(int(p), int(m), {{"kind", "zb-h1"}}), s) <= int(p));
  }
  CHECK(peak_live(dense_schedule_job(4, 8, {{"kind", "zb-h1"}}), 0) == 4);

  // DualPipe (deepseek-ai/DualPipe README): bubble (PP/2 - 1)(F&B + B - 3W) with F&B = F + B, twice the parameters,
  // PP + 1 activations; its bubble does not grow with the micro-batches.
  for (int pp : {4, 8})
    for (int m : {2 * pp + 4, 4 * pp}) {
      const auto t = schedule_run(pp, m, {{"kind", "dualpipe"}}, F, B, W);
      for (std::size_t s = 0; s < t.busy.size(); ++s)
        expect_within("DualPipe pp " + std::to_string(pp) + " m " + std::to_string(m) + " stage " + std::to_string(s) +
                          " bubble (PP/2-1)(F&B+B-3W)",
                      (pp / 2 - 1) * ((F + B) + B - 3 * W), t.makespan - t.busy[s], 1e-12);
      CHECK(peak_live(dense_schedule_job(pp, m, {{"kind", "dualpipe"}}), 0) == pp + 1);
    }
  // DualPipeV: the same bubble with PP = 2 x its ranks' stages.
  for (int ranks : {4}) {
    const auto t = schedule_run(ranks, 10, {{"kind", "dualpipev"}}, F, B, W);
    for (std::size_t s = 0; s < t.busy.size(); ++s)
      expect_within("DualPipeV " + std::to_string(ranks) + " ranks stage " + std::to_string(s) +
                        " bubble (PP/2-1)(F&B+B-3W), PP = 2 x ranks",
                    (ranks - 1) * ((F + B) + B - 3 * W), t.makespan - t.busy[s], 1e-12);
  }
}

TEST_CASE("DualPipe holds two copies of each stage, DualPipeV one")
{
  const auto one = wl::build_step_graph(parse(dense_schedule_job(4, 16, {{"kind", "1f1b"}})), {false});
  const auto two = wl::build_step_graph(parse(dense_schedule_job(4, 16, {{"kind", "dualpipe"}})), {false});
  const auto v   = wl::build_step_graph(parse(dense_schedule_job(4, 16, {{"kind", "dualpipev"}})), {false});
  double p1 = 0, p2 = 0, pv = 0;
  for (int s = 0; s < 4; ++s) {
    p1 += one.stages[s].params;
    p2 += two.stages[s].params;
    pv += v.stages[s].params;
  }
  expect_within("DualPipe: parameters held over all stages, twice 1F1B's", 2 * p1, p2, 1e-12);
  expect_within("DualPipeV: parameters held over all stages, 1F1B's", p1, pv, 1e-12);
}

TEST_CASE("Megatron's combined 1F1B keeps interleaved 1F1B's bubble and holds one more micro-batch's activations")
{
  // Free communication; each chunk's forward takes F and its backward B, whatever its pieces (the pair splits them
  // per layer into pre-dispatch and expert parts).
  const double F = 1, B = 2;
  for (auto [pp, v, m, layers] : std::vector<std::array<int, 4>>{{4, 2, 8, 8}, {4, 2, 16, 16}, {2, 3, 6, 12}}) {
    for (bool overlap : {false, true}) {
      json sched = {{"kind", "interleaved-1f1b"}, {"virtual_stages", v}, {"ep_overlap", overlap}};
      json j     = dense_schedule_job(pp, m, sched, {{"dp", 2}, {"ep", 2}});
      j["model"] = moe_model(layers, 16, 4);
      auto g     = wl::build_step_graph(parse(j), {false});
      for (auto& st : g.stages) {
        std::map<std::tuple<int, int, bool>, double> pass;
        for (const auto& op : st.ops)
          if (wl::is_compute(op.kind) && op.kind != wl::OpKind::optimizer)
            pass[{op.chunk, op.micro_batch, op.kind == wl::OpKind::forward}] += op.seconds;
        for (auto& op : st.ops) {
          if (!wl::is_compute(op.kind))
            continue;
          const bool fwd = op.kind == wl::OpKind::forward;
          op.seconds =
              op.kind == wl::OpKind::optimizer ? 0 : op.seconds / pass[{op.chunk, op.micro_batch, fwd}] * (fwd ? F : B);
        }
      }
      const double makespan = wl::compute_makespan(g);
      for (const auto& st : g.stages) {
        double busy = 0;
        for (const auto& op : st.ops)
          if (wl::is_compute(op.kind))
            busy += op.seconds;
        expect_within(std::string(overlap ? "combined 1F1B" : "interleaved 1F1B") + " pp " + std::to_string(pp) +
                          " v " + std::to_string(v) + " m " + std::to_string(m) + " stage " + std::to_string(st.stage) +
                          " bubble (PP-1)(F+B) per chunk",
                      (pp - 1) * (F + B), makespan - busy, 1e-12);
      }
    }
    for (int s = 0; s < pp; ++s) {
      // Copies: clang 14 cannot capture structured bindings.
      auto with = [&, pp = pp, v = v, m = m, layers = layers](bool overlap) {
        json j =
            dense_schedule_job(pp, m, {{"kind", "interleaved-1f1b"}, {"virtual_stages", v}, {"ep_overlap", overlap}},
                               {{"dp", 2}, {"ep", 2}});
        j["model"] = moe_model(layers, 16, 4);
        return peak_live(j, s);
      };
      CHECK(with(true) == std::min(with(false) + 1, m * v));
    }
  }
}

TEST_CASE("moe.dispatch_sms is refused outside 1 to the GPU's SMs less one, on every shipped GPU")
{
  // Each GPU file's SM count (gemm.sms) read here, so that a GPU added later is checked too.
  int gpus = 0;
  for (const auto& f : std::filesystem::directory_iterator(std::string(SPANSIM_SOURCE_DIR) + "/workload/gpus")) {
    if (f.path().extension() != ".json")
      continue;
    const std::string name = f.path().stem().string();
    const int sms          = json::parse(std::ifstream(f.path())).at("gemm").at("sms").get<int>();
    INFO("GPU " << name << " with " << sms << " SMs");
    ++gpus;
    auto job = [&](int dispatch_sms) {
      json j   = moe_job({{"pp", 1}, {"dp", 8}, {"ep", 4}}, {{"dispatcher", "deepep"}, {"dispatch_sms", dispatch_sms}});
      j["gpu"] = name;
      return j;
    };
    CHECK(parse(job(sms - 1)).dispatch.sms == sms - 1);
    CHECK(parse(job(1)).dispatch.sms == 1);
    for (int bad : {sms, 0, -3, 1'000'000}) {
      try {
        parse(job(bad));
        FAIL("dispatch_sms " << bad << " was accepted");
      } catch (const spansim::SpecError& e) {
        INFO(e.what());
        CHECK(e.json_path() == "$.moe.dispatch_sms");
        CHECK(std::string(e.what()).find("GPU " + name + " has " + std::to_string(sms) + " SMs") != std::string::npos);
        CHECK(std::string(e.what()).find("allowed: 1 to " + std::to_string(sms - 1)) != std::string::npos);
      }
    }
  }
  CHECK(gpus >= 8); // a100, a100-40gb, h100, h200, b200, b300, gb200, gb300
}

TEST_CASE("A compute precision the GPU has no tensor cores for is refused while the job is read")
{
  json j         = moe_job({{"pp", 1}, {"dp", 8}, {"ep", 4}}, {{"dispatcher", "alltoall"}});
  j["precision"] = {{"compute", "nvfp4"}};
  try {
    parse(j);
    FAIL("nvfp4 on h100 was accepted");
  } catch (const spansim::SpecError& e) {
    INFO(e.what());
    CHECK(e.json_path() == "$.precision.compute");
    CHECK(std::string(e.what()).find("GPU h100 has no nvfp4 tensor cores") != std::string::npos);
    CHECK(std::string(e.what()).find("it has: bf16, fp8") != std::string::npos);
  }
}

TEST_CASE("workload describe's bubble formula is each schedule's own closed form")
{
  // Compute ops timed as the formulas name them (F forward, B whole backward, W its weight part): the summary's
  // formula against the closed form by hand, and against the measured bubble, which the formula gives exactly here.
  struct Case {
    json schedule;
    int pp, m;
    double F, B, W;
    std::string text;
    double closed; ///< the closed form at pp, m (and v, F, B, W), by hand
  };
  const std::vector<Case> cases = {
      {{{"kind", "gpipe"}}, 4, 8, 1, 2, 1, "(pp-1)/m", 3.0 / 8},
      {{{"kind", "1f1b"}}, 4, 12, 1, 2, 1, "(pp-1)/m", 3.0 / 12},
      {{{"kind", "interleaved-1f1b"}, {"virtual_stages", 2}}, 4, 8, 1, 2, 1, "(pp-1)/(v*m)", 3.0 / (2 * 8)},
      // ZB-H1: (pp - 1)(F + B - 2W) / (m (F + B)) = 3 x (1 + 2.2 - 1.4) / (8 x 3.2).
      {{{"kind", "zb-h1"}}, 4, 8, 1, 2.2, 0.7, "(pp-1)(F+B-2W)/(m(F+B))", 3 * 1.8 / (8 * 3.2)},
      {{{"kind", "zb-h1"}}, 8, 24, 2, 3, 1, "(pp-1)(F+B-2W)/(m(F+B))", 7 * 3.0 / (24 * 5.0)}};
  for (const auto& c : cases) {
    const std::string what = c.schedule.dump() + " pp " + std::to_string(c.pp) + " m " + std::to_string(c.m);
    const auto g           = timed_schedule(c.pp, c.m, c.schedule, c.F, c.B, c.W);
    const auto s           = wl::summarize(g);
    INFO(what);
    CHECK(s.bubble_formula_text == c.text);
    expect_within(what + ": describe's formula value against the closed form", c.closed, s.bubble_formula, 1e-12);
    expect_within(what + ": measured bubble against the closed form", c.closed, s.bubble_fraction, 1e-12);
  }
  // DualPipe's and DualPipeV's bubble is a time, (pp/2 - 1)(F&B + B - 3W): no fraction of pp, v and m is set.
  for (const char* kind : {"dualpipe", "dualpipev"}) {
    const auto s = wl::summarize(timed_schedule(4, 16, {{"kind", kind}}, 1, 2, 1));
    INFO(kind);
    CHECK(s.bubble_formula_text.empty());
    CHECK(s.bubble_formula == 0);
  }
}
