// The training-step graph against closed forms: FLOPs (6 N D plus causal attention), bytes per parallelism
// dimension (textbook collective volumes), pipeline bubbles ((pp - 1) / (v m)) and memory (hand-computed cases).
#include "common/error.hpp"
#include "roofline.hpp"
#include "tests/support.hpp"
#include "workload/workload.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>
#include <map>
#include <string>

namespace wl = spansim::workload;
using nlohmann::json;
using spansim::test::expect_within;

namespace {

const std::string kSource = SPANSIM_SOURCE_DIR;

// A job's shape; the parallelism degrees default to 1.
struct Shape {
  json model;
  int tp = 1, cp = 1, pp = 1, dp = 1;
  int seq       = 4096;
  int sequences = 16;
  json schedule = {{"kind", "1f1b"}};
  json extra    = json::object(); ///< more parallelism keys (ep, data_parallel, ...)
};

json job(const Shape& sh)
{
  json par = {{"tp", sh.tp}, {"cp", sh.cp}, {"pp", sh.pp}, {"dp", sh.dp}};
  par.update(sh.extra);
  // The closed forms here are the roofline's: no calibration profile and no production effect.
  return workload_test::roofline(
      {{"model", sh.model},
       {"gpu", "h100"},
       {"gpus", sh.tp * sh.cp * sh.pp * sh.dp},
       {"parallelism", par},
       {"batch", {{"global_sequences", sh.sequences}, {"sequence_length", sh.seq}, {"micro_batch", 1}}},
       {"schedule", sh.schedule}});
}

wl::StepSummary summary_of(const json& j)
{
  const wl::JobSpec spec = wl::parse_job(j, "test.json");
  return wl::summarize(wl::build_step_graph(spec, wl::BuildOptions{false}));
}

double traffic(const wl::StepSummary& s, wl::Dim t, bool job_total)
{
  return job_total ? s.traffic[t].job_total : s.traffic[t].per_gpu_max;
}

// Llama 3 8B from its published shape (arXiv 2407.21783 Table 3).
constexpr double kL = 32, kH = 4096, kF = 14336, kHeads = 32, kKv = 8, kVocab = 128256;
constexpr double kHd = kH / kHeads;
double llama8b_layer_params()
{
  return 2 * kH * kH + 2 * kH * kKv * kHd + 3 * kH * kF + 2 * kH;
}
double llama8b_params()
{
  return kL * llama8b_layer_params() + 2 * kVocab * kH + kH;
}

} // namespace

TEST_CASE("Dense FLOPs are 6 N D plus causal attention, whatever the parallelism")
{
  const double seq = 4096, sequences = 16, tokens = seq * sequences;
  // The input embedding is a lookup and the norms are element-wise: they do no matmul FLOPs.
  const double n_matmul = llama8b_params() - kVocab * kH - (2 * kL + 1) * kH;
  // Causal attention: QK^T and PV over half of an s x s score matrix, 2 s^2 h FLOPs per sequence and layer
  // forward; backward twice that.
  const double attention = 3 * kL * 2 * seq * seq * kH * sequences;
  const double expected  = 6 * n_matmul * tokens + attention;
  expect_within("llama3-8b tp2 cp2 pp2 dp2 1f1b", expected,
                summary_of(job({.model = "llama3-8b", .tp = 2, .cp = 2, .pp = 2, .dp = 2})).model_flops, 1e-9);
  expect_within("llama3-8b tp8 pp4 interleaved v2", expected,
                summary_of(job({.model    = "llama3-8b",
                                .tp       = 8,
                                .pp       = 4,
                                .schedule = {{"kind", "interleaved-1f1b"}, {"virtual_stages", 2}}}))
                    .model_flops,
                1e-9);
  const double six_nd = 6 * llama8b_params() * tokens;
  std::cout << "llama3-8b: model FLOPs / (6 N D) = " << expected / six_nd << " (attention adds, lookups subtract)\n";

  // GPT-3 175B: tied embeddings, so the output projection is the only use of the vocab x d matrix and 6 N D
  // counts it exactly; plain two-matrix GELU MLP.
  const double L = 96, h = 12288, s = 2048, seqs = 8;
  const double n            = L * (4 * h * h + 2 * h * 4 * h + 2 * h) + 50257 * h + h;
  const double gpt_expected = 6 * (n - (2 * L + 1) * h) * s * seqs + 3 * L * 2 * s * s * h * seqs;
  expect_within(
      "gpt3-175b tp4 pp4 gpipe", gpt_expected,
      summary_of(
          job({.model = "gpt3-175b", .tp = 4, .pp = 4, .seq = 2048, .sequences = 8, .schedule = {{"kind", "gpipe"}}}))
          .model_flops,
      1e-9);
}

TEST_CASE("MoE FLOPs are 6 N_active D plus attention")
{
  {
    // Llama 4 Scout: every layer routes each token to 1 of 16 experts plus the shared one (3 h 8192 each) and
    // runs the router (h x 16); GQA 40 heads of 128, 8 K/V heads.
    const double L = 48, h = 5120, s = 4096, seqs = 32;
    const double attn     = 2 * h * h + 2 * h * 8 * 128;
    const double active   = L * (attn + 2 * 3 * h * 8192 + h * 16) + 202048 * h;
    const double expected = 6 * active * s * seqs + 3 * L * 2 * s * s * (40 * 128) * seqs;
    expect_within(
        "llama4-scout tp2 pp2 dp8 ep4", expected,
        summary_of(job({.model = "llama4-scout", .tp = 2, .pp = 2, .dp = 8, .sequences = 32, .extra = {{"ep", 4}}}))
            .model_flops,
        1e-9);
  }
  {
    // DeepSeek-V3, MLA: q down 7168x1536, q up 1536 x 128 x 192, kv down 7168 x 576, kv up 512 x 128 x 256,
    // out 128 x 128 x 7168; attention scores over qk 192 and values 128. Three dense layers (FFN 18432), 58 MoE
    // layers with 8 routed + 1 shared experts of 3 x 7168 x 2048 and a 7168 x 256 router.
    const double h = 7168, s = 4096, seqs = 64;
    const double mla       = h * 1536 + 1536.0 * 128 * 192 + h * 576 + 512.0 * 128 * 256 + 128.0 * 128 * h;
    const double active    = 3 * (mla + 3 * h * 18432) + 58 * (mla + 9 * 3 * h * 2048 + h * 256) + 129280 * h;
    const double attention = 3 * 61 * s * s * 128 * (192 + 128) * seqs;
    const double expected  = 6 * active * s * seqs + attention;
    expect_within(
        "deepseek-v3 tp4 pp4 dp8 ep8", expected,
        summary_of(job({.model = "deepseek-v3", .tp = 4, .pp = 4, .dp = 8, .sequences = 64, .extra = {{"ep", 8}}}))
            .model_flops,
        1e-9);
  }
}

TEST_CASE("Bytes per dimension follow the textbook collective volumes")
{
  // Llama 3 8B, tp 4 with sequence parallelism, cp 2, pp 2, dp 2, FSDP without resharding; 8 micro-batches of one
  // 8192-token sequence. Each stage holds 16 layers.
  const double tp = 4, cp = 2, pp = 2, dp = 2, s = 8192, m = 8, layers_per_stage = 16;
  const json j              = job({.model = "llama3-8b",
                                   .tp    = 4,
                                   .cp    = 2,
                                   .pp    = 2,
                                   .dp    = 2,
                                   .seq   = 8192,
                                   .extra = {{"data_parallel", "fsdp"}, {"reshard_after_forward", false}}});
  const wl::StepSummary sum = summary_of(j);
  const double act          = s / cp * kH * 2; // bf16 activation of one micro-batch on a CP rank
  // TP: per layer and pass, 2 all-gathers + 2 reduce-scatters of `act`, each (n-1)/n of it on the wire.
  expect_within("tp bytes per GPU", 2 * 4 * layers_per_stage * m * (tp - 1) / tp * act,
                traffic(sum, wl::Dim::tp, false), 1e-12);
  // CP: K and V of the whole sequence all-gathered per layer forward, gathered again and their gradients
  // reduce-scattered backward: 3 collectives of s x (2 heads per rank x (128 + 128)) x 2 bytes.
  const double kv = s * (kKv / tp) * 2 * kHd * 2;
  expect_within("cp bytes per GPU", 3 * layers_per_stage * m * (cp - 1) / cp * kv, traffic(sum, wl::Dim::cp, false),
                1e-12);
  // PP: one boundary, each micro-batch crosses it forward and backward with the sequence-parallel shard.
  const double msg = s / cp * kH * 2 / tp;
  expect_within("pp bytes, whole job", 2 * (pp - 1) * m * msg * tp * cp * dp, traffic(sum, wl::Dim::pp, true), 1e-12);
  // FSDP over cp x dp = n ranks: each GPU all-gathers its bf16 parameters once and reduce-scatters fp32 gradients
  // once; summed over the job that is (n - 1) x 6 bytes x N.
  const double n = cp * dp;
  expect_within("dp bytes, whole job", (n - 1) * 6 * llama8b_params(), traffic(sum, wl::Dim::dp, true), 1e-12);
  // The busiest GPU is on the last stage: 16 layers, the output layer and the final norm, split over tp.
  expect_within("dp bytes per GPU, last stage",
                (n - 1) / n * 6 * (layers_per_stage * llama8b_layer_params() + kVocab * kH + kH) / tp,
                traffic(sum, wl::Dim::dp, false), 1e-12);
  CHECK(traffic(sum, wl::Dim::ep, true) == 0);

  // DDP: one ring all-reduce of fp32 gradients per replica group: 2 (n - 1) / n x 4 N per GPU-set of a replica.
  const wl::StepSummary ddp = summary_of(job(
      {.model = "llama3-8b", .tp = 4, .cp = 2, .pp = 2, .dp = 2, .seq = 8192, .extra = {{"data_parallel", "ddp"}}}));
  expect_within("ddp bytes, whole job", 2 * (n - 1) * 4 * llama8b_params(), traffic(ddp, wl::Dim::dp, true), 1e-12);

  // Without sequence parallelism: 2 all-reduces per layer and pass, 2 (n - 1) / n each: the same wire volume.
  const wl::StepSummary nosp = summary_of(job({.model = "llama3-8b",
                                               .tp    = 4,
                                               .cp    = 2,
                                               .pp    = 2,
                                               .dp    = 2,
                                               .seq   = 8192,
                                               .extra = {{"sequence_parallel", false}}}));
  expect_within("tp bytes per GPU without SP", 2 * 2 * layers_per_stage * m * 2 * (tp - 1) / tp * act,
                traffic(nosp, wl::Dim::tp, false), 1e-12);

  // FP8: Transformer Engine all-gathers each GEMM's quantized input (1 byte per element), the reduce-scatters stay
  // in BF16: per layer and pass 2 x act / 2 + 2 x act instead of 4 x act.
  json fp8         = j;
  fp8["precision"] = {{"compute", "fp8"}};
  expect_within("tp bytes per GPU, FP8", 2 * 3 * layers_per_stage * m * (tp - 1) / tp * act,
                traffic(summary_of(fp8), wl::Dim::tp, false), 1e-12);

  // Full recompute repeats the forward's collectives in backward: 3 passes instead of 2.
  json full         = j;
  full["recompute"] = "full";
  expect_within("tp bytes per GPU, full recompute", 3 * 4 * layers_per_stage * m * (tp - 1) / tp * act,
                traffic(summary_of(full), wl::Dim::tp, false), 1e-12);
  expect_within("cp bytes per GPU, full recompute", 4 * layers_per_stage * m * (cp - 1) / cp * kv,
                traffic(summary_of(full), wl::Dim::cp, false), 1e-12);

  // Selective recompute re-runs the attention and gathers K/V once more (4 collectives instead of 3); Ulysses runs
  // its two all-to-alls of Q, K, V and of the output again: 3 passes of them instead of 2. Each all-to-all sends
  // (n-1)/n of its buffer: Q, K and V of s / cp tokens (32 + 2 x 8 heads over tp 4, 128 each) and the output (32
  // heads over tp 4).
  json selective         = j;
  selective["recompute"] = "selective";
  expect_within("cp bytes per GPU, selective recompute", 4 * layers_per_stage * m * (cp - 1) / cp * kv,
                traffic(summary_of(selective), wl::Dim::cp, false), 1e-12);
  selective["parallelism"]["cp_comm"] = "a2a";
  const double qkv = s / cp * (kHeads + 2 * kKv) / tp * kHd * 2, out = s / cp * kHeads / tp * kHd * 2;
  expect_within("cp bytes per GPU, Ulysses with selective recompute",
                3 * layers_per_stage * m * (cp - 1) / cp * (qkv + out),
                traffic(summary_of(selective), wl::Dim::cp, false), 1e-12);
}

TEST_CASE("HSDP shards inside a group and all-reduces the shards across replicas")
{
  // Llama 3 8B, tp 4, pp 2, dp 8 as 2 replicas of 4-way shards, no resharding: per GPU one bf16 all-gather and
  // one fp32 reduce-scatter in the shard group (S = 4), then an all-reduce of the 1/S gradient shard across the
  // R = 2 replicas.
  const double tp = 4, S = 4, R = 2;
  const json hsdp           = {{"data_parallel", "hsdp"}, {"hsdp_shard_size", 4}, {"reshard_after_forward", false}};
  const json j              = job({.model = "llama3-8b", .tp = 4, .pp = 2, .dp = 8, .seq = 8192, .extra = hsdp});
  const wl::StepGraph g     = wl::build_step_graph(wl::parse_job(j, "test.json"), wl::BuildOptions{false});
  const wl::StepSummary sum = wl::summarize(g);
  const double p_last       = (16 * llama8b_layer_params() + kVocab * kH + kH) / tp;
  const double per_gpu      = (S - 1) / S * (2 + 4) * p_last + 2 * (R - 1) / R * 4 * p_last / S;
  expect_within("hsdp dp bytes per GPU, last stage", per_gpu, traffic(sum, wl::Dim::dp, false), 1e-12);
  expect_within("hsdp dp bytes, whole job", 8 * llama8b_params() * ((S - 1) / S * 6 + 2 * (R - 1) / R * 4 / S),
                traffic(sum, wl::Dim::dp, true), 1e-12);
  int shard_ops = 0, replica_ops = 0;
  for (const auto& op : g.stages[1].ops) {
    shard_ops += wl::group_name(op.group) == "dp_shard" ? 1 : 0;
    replica_ops += wl::group_name(op.group) == "dp_replicate" ? 1 : 0;
  }
  // One gather and one reduce-scatter per chunk in the shard group, one all-reduce across replicas.
  CHECK(shard_ops == 2);
  CHECK(replica_ops == 1);
}

TEST_CASE("Expert parallelism: all-to-all volumes and expert-data-parallel gradients")
{
  // Llama 4 Scout, tp 2 with SP, pp 2, dp 8, ep 4 (so expert data parallelism 2), FSDP resharding after forward.
  const double tp = 2, dp = 8, ep = 4, s = 4096, m = 4, h = 5120, moe_layers_per_stage = 24;
  const wl::StepSummary sum = summary_of(job({.model     = "llama4-scout",
                                              .tp        = 2,
                                              .pp        = 2,
                                              .dp        = 8,
                                              .sequences = 32,
                                              .extra     = {{"ep", 4}, {"data_parallel", "fsdp"}}}));
  // Dispatch and combine, forward and backward: 4 all-to-alls per MoE layer of the top-1 copies of the rank's
  // s / tp tokens, (ep - 1) / ep of each leaves the rank.
  const double a2a = s / tp * 1 * h * 2;
  expect_within("ep bytes per GPU", 4 * moe_layers_per_stage * m * (ep - 1) / ep * a2a,
                traffic(sum, wl::Dim::ep, false), 1e-12);
  // Full recompute repeats the forward's dispatch and combine: 6 all-to-alls per MoE layer, in 1F1B and in DualPipe
  // (beside the pair's compute there; Megatron's 1F1B all-to-all overlap refuses full recompute).
  for (json schedule : {json{{"kind", "1f1b"}}, json{{"kind", "dualpipe"}}}) {
    json full         = job({.model     = "llama4-scout",
                             .tp        = 2,
                             .pp        = 2,
                             .dp        = 8,
                             .sequences = 32,
                             .schedule  = schedule,
                             .extra = {{"ep", 4}, {"etp", 1}, {"data_parallel", "fsdp"}, {"reshard_after_forward", false}}});
    full["recompute"] = "full";
    expect_within("ep bytes per GPU, full recompute, " + schedule.dump(),
                  6 * moe_layers_per_stage * m * (ep - 1) / ep * a2a, traffic(summary_of(full), wl::Dim::ep, false),
                  1e-12);
    // And the TP collectives, in DualPipe too: per layer an all-gather and a reduce-scatter around attention and
    // around the shared expert, per pass: 3 passes of 4 collectives of the s-token BF16 activation, (tp - 1) / tp
    // of each on the wire (etp 1: no expert-TP collectives beside them).
    expect_within("tp bytes per GPU, full recompute, " + schedule.dump(),
                  3 * 4 * moe_layers_per_stage * m * (tp - 1) / tp * (s * h * 2),
                  traffic(summary_of(full), wl::Dim::tp, false), 1e-12);
  }
  // FSDP resharding: per micro-batch, all-gather bf16 weights before forward and before backward, reduce-scatter
  // fp32 gradients after backward: (2 + 2 + 4) bytes per parameter per micro-batch. Dense parameters over the
  // 8 dp ranks, routed experts over the 2 expert-data-parallel ranks; whole job: (n - 1) x 8 bytes x params x m.
  const double attn    = 2 * h * h + 2 * h * 8 * 128;
  const double experts = 48 * 16 * 3 * h * 8192;
  const double dense   = 48 * (attn + 3 * h * 8192 + h * 16 + 2 * h) + 2 * 202048 * h + h;
  const double edp     = dp / ep;
  expect_within("dp bytes, whole job", ((dp - 1) * dense + (edp - 1) * experts) * 8 * m,
                traffic(sum, wl::Dim::dp, true), 1e-12);
  // FP8 primary weights (Megatron's fp8_param_gather) and BF16 gradient reduction: the linear layers' weights (the
  // routed experts, attention, the shared expert) gathered at 1 byte, the rest (norms, router, embedding, output
  // layer) at 2; gradients at 2.
  json fp8            = job({.model     = "llama4-scout",
                             .tp        = 2,
                             .pp        = 2,
                             .dp        = 8,
                             .sequences = 32,
                             .extra     = {{"ep", 4}, {"data_parallel", "fsdp"}}});
  fp8["precision"]    = {{"compute", "fp8"}, {"gradient_reduce", "bf16"}, {"param_gather", "fp8"}};
  const double linear = 48 * (attn + 3 * h * 8192);
  const double gather = 1 * linear + 2 * (dense - linear);
  expect_within("dp bytes, FP8 parameter gather, whole job",
                ((dp - 1) * (2 * gather + 2 * dense) + (edp - 1) * (2 * 1 * experts + 2 * experts)) * m,
                traffic(summary_of(fp8), wl::Dim::dp, true), 1e-12);
}

TEST_CASE("Pipeline bubbles match (pp - 1) / (v m)")
{
  // Equal stages: 16 identical layers and a negligible vocabulary, so every chunk costs the same.
  const json tiny = {{"name", "tiny"}, {"layers", 16}, {"hidden", 1024}, {"ffn", 4096}, {"heads", 8}, {"vocab", 8}};
  struct Case {
    json schedule;
    int m;
  };
  const Case cases[] = {{{{"kind", "gpipe"}}, 8},
                        {{{"kind", "1f1b"}}, 8},
                        {{{"kind", "1f1b"}}, 16},
                        {{{"kind", "interleaved-1f1b"}, {"virtual_stages", 2}}, 8},
                        {{{"kind", "interleaved-1f1b"}, {"virtual_stages", 4}}, 16},
                        {{{"kind", "interleaved-1f1b"}, {"virtual_stages", 2}, {"microbatch_group", 8}}, 16}};
  const int pp       = 4;
  for (const auto& c : cases) {
    const wl::StepSummary s =
        summary_of(job({.model = tiny, .pp = pp, .seq = 1024, .sequences = c.m, .schedule = c.schedule}));
    const int v           = c.schedule.value("virtual_stages", 1);
    const double expected = double(pp - 1) / (v * c.m);
    INFO(c.schedule.dump() << " m " << c.m << ": expected bubble " << expected << " actual " << s.bubble_fraction);
    std::cout << c.schedule.dump() << " m=" << c.m << ": bubble expected " << expected << " actual "
              << s.bubble_fraction << "\n";
    // The output layer (vocabulary 8) makes the last stage slightly heavier than the others: its GEMMs are tiny
    // but pay for whole tiles and a 64-deep K step (< 0.5%).
    CHECK(std::fabs(s.bubble_fraction - expected) <= 5e-3 * expected);
  }
}

TEST_CASE("Memory matches hand-computed cases")
{
  // 4 layers, h 256, FFN 1024, 4 heads of 64, 2 K/V heads, vocabulary 1000, SwiGLU, untied. pp 2, DDP, 1F1B,
  // 4 micro-batches of 512 tokens.
  const json tiny = {{"name", "tiny"}, {"layers", 4},   {"hidden", 256}, {"ffn", 1024},
                     {"heads", 4},     {"kv_heads", 2}, {"vocab", 1000}};
  // Layer: Q, O 2 x 256^2 = 131072; K, V 2 x 256 x 128 = 65536; MLP 3 x 256 x 1024 = 786432; norms 512.
  const double layer  = 131072 + 65536 + 786432 + 512; // 983552
  const double stage0 = 2 * layer + 256000;            // + embedding 1000 x 256
  const double stage1 = 2 * layer + 256000 + 256;      // + output layer and final norm
  // Activations kept per token and layer, in bf16 elements: norm inputs and outputs 4 x 256, Q 256, K and V
  // 2 x 2 x 64, attention output 256, gate, up and product 3 x 1024 = 4864 elements = 9728 bytes; x 512 tokens.
  const double act_layer = 9728.0 * 512; // 4980736
  const double logits    = 512.0 * 1000 * (2 + 4);
  auto build             = [&](const std::string& recompute, const json& schedule, const json& par) {
    json j         = job({.model     = tiny,
                                      .pp        = 2,
                                      .dp        = par.value("dp", 1),
                                      .seq       = 512,
                                      .sequences = 4 * par.value("dp", 1),
                                      .schedule  = schedule,
                                      .extra     = par});
    j["recompute"] = recompute;
    return wl::build_step_graph(wl::parse_job(j, "test.json"));
  };
  const json ddp = {{"data_parallel", "ddp"}};
  {
    const wl::StepGraph g = build("none", {{"kind", "1f1b"}}, ddp);
    const auto& m0        = g.stages[0].memory;
    const auto& m1        = g.stages[1].memory;
    expect_within("stage 0 weights (bf16)", 2 * stage0, m0.weights, 1e-12);
    expect_within("stage 0 gradients (fp32)", 4 * stage0, m0.gradients, 1e-12);
    expect_within("stage 0 Adam state", 12 * stage0, m0.optimizer, 1e-12);
    expect_within("stage 1 weights", 2 * stage1, m1.weights, 1e-12);
    // 1F1B: stage 0 holds pp = 2 micro-batches of its 2 layers, plus one layer's working set.
    expect_within("stage 0 activations, 1f1b", 2 * 2 * act_layer + act_layer, m0.activations, 1e-12);
    // The last stage holds one micro-batch, and its logits.
    expect_within("stage 1 activations, 1f1b", 2 * act_layer + logits + act_layer, m1.activations, 1e-12);
  }
  {
    // GPipe: all 4 micro-batches in flight.
    const wl::StepGraph g = build("none", {{"kind", "gpipe"}}, ddp);
    expect_within("stage 0 activations, gpipe", 4 * 2 * act_layer + act_layer, g.stages[0].memory.activations, 1e-12);
  }
  {
    // Full recompute keeps each layer's input only: 256 elements per token.
    const wl::StepGraph g = build("full", {{"kind", "1f1b"}}, ddp);
    expect_within("stage 0 activations, full recompute", 2 * 2 * (512.0 * 256 * 2) + act_layer,
                  g.stages[0].memory.activations, 1e-12);
    // Selective drops norm outputs (2 x 256), attention output (256) and the MLP product (1024): 3072 elements.
    const wl::StepGraph s = build("selective", {{"kind", "1f1b"}}, ddp);
    expect_within("stage 0 activations, selective", 2 * 2 * (512.0 * 3072 * 2) + act_layer,
                  s.stages[0].memory.activations, 1e-12);
  }
  {
    // FSDP over dp 2 without resharding: whole bf16 weights and fp32 gradients, Adam state halved.
    const wl::StepGraph g =
        build("none", {{"kind", "1f1b"}}, {{"dp", 2}, {"data_parallel", "fsdp"}, {"reshard_after_forward", false}});
    expect_within("fsdp stage 0 weights", 2 * stage0, g.stages[0].memory.weights, 1e-12);
    expect_within("fsdp stage 0 Adam state", 12 * stage0 / 2, g.stages[0].memory.optimizer, 1e-12);
    // Resharding: a shard at rest plus the unit being computed and the one prefetched (FSDP wraps each layer,
    // and the embedding, as a unit: the largest here is a layer), and one unit's unsharded gradients.
    const wl::StepGraph r = build("none", {{"kind", "1f1b"}}, {{"dp", 2}, {"data_parallel", "fsdp"}});
    expect_within("fsdp reshard stage 0 weights", 2 * (stage0 / 2 + 2 * layer), r.stages[0].memory.weights, 1e-12);
    expect_within("fsdp reshard stage 0 gradients", 4 * (stage0 / 2 + layer), r.stages[0].memory.gradients, 1e-12);
  }
  {
    // Megatron's buffers as its FP8 recipes set them: gradients in the reduce dtype (bf16: 2 bytes) and FP8 primary
    // weights (fp8_param_gather), here MXFP8 on a B200: the linear layers' 1 + 1/32 bytes a weight in each of
    // Transformer Engine's two layouts; norms and embedding stay bf16.
    json par             = {{"dp", 2}, {"data_parallel", "fsdp"}, {"reshard_after_forward", false}};
    json j               = job({.model = tiny, .pp = 2, .dp = 2, .seq = 512, .sequences = 8, .extra = par});
    j["gpu"]             = "b200";
    j["precision"]       = {{"compute", "mxfp8"}, {"gradient_reduce", "bf16"}};
    const auto bf16_grad = wl::build_step_graph(wl::parse_job(j, "test.json"));
    expect_within("bf16 gradient buffer, stage 0", 2 * stage0, bf16_grad.stages[0].memory.gradients, 1e-12);
    const double linear = 2 * (layer - 512); // Q, K, V, O and the MLP of stage 0's two layers
    // BF16 primary weights keep Transformer Engine's cached MXFP8 copies of the linear layers, in both layouts.
    expect_within("bf16 weights and their MXFP8 caches", 2 * stage0 + 2 * (1 + 1.0 / 32) * linear,
                  bf16_grad.stages[0].memory.weights, 1e-12);
    j["precision"]["param_gather"] = "fp8";
    const auto fp8_params          = wl::build_step_graph(wl::parse_job(j, "test.json"));
    expect_within("MXFP8 primary weights, stage 0", 2 * (1 + 1.0 / 32) * linear + 2 * (stage0 - linear),
                  fp8_params.stages[0].memory.weights, 1e-12);
    expect_within("MXFP8 primary weights, stage 0 gradients", 2 * stage0, fp8_params.stages[0].memory.gradients, 1e-12);
  }
}

TEST_CASE("Memory: context parallelism adds its K/V buffers to a layer's working set")
{
  // The tiny model of the memory case (h 256, 4 heads of 64, 2 K/V heads), pp 2, DDP, 1F1B, sequences of 512
  // tokens over cp 4: 128 tokens per rank. The whole sequence's K/V: 2 bytes x 2 heads x (64 + 64) x 512 = 262144.
  const json tiny        = {{"name", "tiny"}, {"layers", 4},   {"hidden", 256}, {"ffn", 1024},
                            {"heads", 4},     {"kv_heads", 2}, {"vocab", 1000}};
  const double act_layer = 9728.0 * 128; // the memory case's 9728 bytes per token and layer
  const double kv = 262144, local = kv / 4;
  struct Case {
    json par;
    double extra;
    std::string why;
  };
  const std::vector<Case> cases{
      {{{"cp_comm", "allgather"}}, 2 * kv - local, "all-gather: gathered K/V and their gradients, less its own"},
      {{{"cp_comm", "ring"}}, 3 * local, "ring of 4: the forward's 3 received chunks, the backward's 3"},
      // Ulysses over 4: K/V heads replicated up to 4; Q, K, V of 128 tokens 2 x 128 x (256 + 4 x 128), output
      // 2 x 128 x 256.
      {{{"cp_comm", "a2a"}}, 2 * 128.0 * (256 + 4 * 128) + 2 * 128.0 * 256, "Ulysses: its receive buffers"},
      // a2a over 2 (2 K/V heads: none replicated) and a ring over 2 of chunks of 2 x 256 tokens x 1 K/V head: the
      // backward's three chunks (the forward keeps one).
      {{{"cp_comm", "a2a+p2p"}, {"cp_a2a", 2}},
       2 * 128.0 * (256 + 2 * 128) + 2 * 128.0 * 256 + 3 * local,
       "a2a+p2p: Ulysses' buffers and the ring's"}};
  for (const auto& c : cases) {
    json par              = c.par;
    par["data_parallel"]  = "ddp";
    json j                = job({.model = tiny, .cp = 4, .pp = 2, .seq = 512, .sequences = 4, .extra = par});
    j["recompute"]        = "none";
    const wl::StepGraph g = wl::build_step_graph(wl::parse_job(j, "test.json"));
    // 1F1B: stage 0 holds 2 micro-batches of 2 layers, and one layer's working set with CP's buffers.
    expect_within("stage 0 activations, " + c.why, 2 * 2 * act_layer + act_layer + c.extra,
                  g.stages[0].memory.activations, 1e-12);
  }
  // A ring of 8 (64 tokens a rank): the forward keeps the 7 chunks it received, more than the backward's 3.
  {
    json j         = job({.model     = tiny,
                          .cp        = 8,
                          .pp        = 2,
                          .seq       = 512,
                          .sequences = 4,
                          .extra     = {{"cp_comm", "ring"}, {"data_parallel", "ddp"}}});
    j["recompute"] = "none";
    expect_within("stage 0 activations, ring of 8", 5 * 9728.0 * 64 + 7 * kv / 8,
                  wl::build_step_graph(wl::parse_job(j, "test.json")).stages[0].memory.activations, 1e-12);
  }
  // Without CP nothing is added: the memory case's figure.
  json j               = job({.model = tiny, .pp = 2, .seq = 512, .sequences = 4, .extra = {{"data_parallel", "ddp"}}});
  j["recompute"]       = "none";
  const double act_512 = 9728.0 * 512;
  expect_within("stage 0 activations without CP", 5 * act_512,
                wl::build_step_graph(wl::parse_job(j, "test.json")).stages[0].memory.activations, 1e-12);
}

TEST_CASE("Interleaved 1F1B keeps the warm-up's micro-batch chunks in flight")
{
  // 16 layers over pp 4 x v 2 chunks of 2 layers; full recompute keeps each layer's input, 1024 tokens x h 1024
  // x 2 bytes. Megatron's interleaved warm-up on stage 0 runs (pp - 1) x 2 + (v - 1) x N forwards, one more
  // before the first backward: 3 x 2 + 1 x 4 + 1 = 11 chunks in flight with N = 4; with N = 8, 3 x 2 + 8 + 1 = 15.
  const json tiny    = {{"name", "tiny"}, {"layers", 16}, {"hidden", 1024}, {"ffn", 4096}, {"heads", 8}, {"vocab", 8}};
  const double chunk = 2 * 1024.0 * 1024 * 2;
  // One layer's full working set during backward: norms 4h, Q, K, V, O 4h, MLP 3 x 4096, bf16, 1024 tokens.
  const double working = 1024.0 * 2 * (4 * 1024 + 4 * 1024 + 3 * 4096);
  struct Case {
    int group;
    double in_flight;
  };
  for (const Case c : {Case{4, 11}, Case{8, 15}}) {
    const json schedule   = {{"kind", "interleaved-1f1b"}, {"virtual_stages", 2}, {"microbatch_group", c.group}};
    json j                = job({.model = tiny, .pp = 4, .seq = 1024, .sequences = 16, .schedule = schedule});
    j["recompute"]        = "full";
    const wl::StepGraph g = wl::build_step_graph(wl::parse_job(j, "test.json"));
    expect_within("stage 0 activations, interleaved N=" + std::to_string(c.group), c.in_flight * chunk + working,
                  g.stages[0].memory.activations, 1e-12);
  }
}

TEST_CASE("A job that does not fit is refused with the numbers")
{
  json j = json::parse(R"({
    "model": "llama3-405b", "gpu": "h100", "gpus": 1024,
    "parallelism": {"tp": 8, "pp": 16, "dp": 8, "data_parallel": "ddp"},
    "batch": {"global_tokens": 2097152, "sequence_length": 8192},
    "schedule": {"kind": "1f1b"}
  })");
  try {
    wl::build_step_graph(wl::parse_job(j, "big.json"));
    FAIL("accepted");
  } catch (const spansim::SpecError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("does not fit") != std::string::npos);
    CHECK(what.find("weights") != std::string::npos);
    CHECK(what.find("activations") != std::string::npos);
    CHECK(what.find("80 GiB") != std::string::npos);
  }
}

TEST_CASE("The graph is one program per stage with matching sends and receives")
{
  const wl::JobSpec spec = wl::load_job(kSource + "/examples/jobs/llama3-405b-8k-h100.json");
  const wl::StepGraph g  = wl::build_step_graph(spec);
  REQUIRE(g.stages.size() == 16);
  // Layers: 126 over 64 chunks of 2, one fewer in the very first and very last chunk (embedding, output layer).
  int layers = 0;
  for (const auto& st : g.stages)
    for (int n : st.chunk_layers)
      layers += n;
  CHECK(layers == 126);
  CHECK(g.stages[0].chunk_layers[0] == 1);
  CHECK(g.stages[15].chunk_layers[3] == 1);
  // Every send has exactly one receive on its peer stage, with the same size.
  std::map<std::pair<int, std::int64_t>, double> sends, recvs;
  std::size_t ops = 0;
  for (const auto& st : g.stages) {
    ops += st.ops.size();
    for (std::size_t i = 0; i < st.ops.size(); ++i) {
      const wl::Op& op = st.ops[i];
      for (int d : op.deps)
        CHECK((d >= 0 && std::size_t(d) < i));
      if (op.kind == wl::OpKind::send)
        CHECK(sends.emplace(std::make_pair(op.peer_stage, op.tag), op.bytes).second);
      if (op.kind == wl::OpKind::recv)
        CHECK(recvs.emplace(std::make_pair(st.stage, op.tag), op.bytes).second);
      if (op.dim == wl::Dim::tp)
        CHECK(wl::group_name(op.group) == "tp");
      if (op.dim == wl::Dim::dp)
        CHECK(wl::group_name(op.group) == "dp");
    }
  }
  CHECK(sends == recvs);
  // PP 16 x 4 virtual stages = 64 model chunks, so 63 chunk boundaries; each is crossed by an activation and a
  // gradient for each of the 32 micro-batches. The graph grows with pp v m, not with the 8,192 GPUs.
  CHECK(sends.size() == std::size_t(2 * 32 * 63));
  std::cout << "llama3-405b example: " << ops << " ops in " << g.stages.size() << " programs\n";
}
