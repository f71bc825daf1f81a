// Compute by kernel class: the classes add up to the stage's compute, and DeepGEMM's grouped GEMMs run at its
// published rates on the SMs DeepEP leaves.
#include "common/json_reader.hpp"
#include "roofline.hpp"
#include "tests/support.hpp"
#include "workload/cost_model.hpp"
#include "workload/workload.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>
#include <string>

namespace wl = spansim::workload;
using nlohmann::json;
using spansim::test::expect_within;

namespace {

const std::string kSource = SPANSIM_SOURCE_DIR;

json job_file(const std::string& name)
{
  return spansim::spec::load_json_file(kSource + "/examples/jobs/" + name);
}

// DeepSeek's H800 profile without calibration or effects, and its third model chunk (MoE layers only).
struct DeepSeekProfile {
  wl::JobSpec job;
  double gemm_sm_share = 0;
  wl::detail::ChunkCost moe;
};

DeepSeekProfile deepseek_profile()
{
  json j = workload_test::roofline(job_file("deepseek-v3-h800-profile.json"));
  DeepSeekProfile p;
  p.job = wl::parse_job(j, "deepseek-v3-h800-profile.json");
  const wl::detail::Context c(p.job);
  p.gemm_sm_share = c.gemm_sm_share;
  p.moe           = wl::detail::chunk_costs(c)[2];
  return p;
}

} // namespace

TEST_CASE("Kernel classes add up to each stage's forward, backward and recompute")
{
  for (const std::string name :
       {"deepseek-v3-h800-profile.json", "llama3-8b-64-h100.json", "gpt3-175b-1024-h100.json",
        "llama4-maverick-512-h200.json", "deepseek-v3-2048-b200.json", "llama3-70b-hsdp-b200.json"}) {
    const wl::JobSpec job = wl::load_job(kSource + "/examples/jobs/" + name);
    const auto graph      = wl::build_step_graph(job, wl::BuildOptions{false});
    const auto costs      = wl::job_costs(job, wl::BuildOptions{false});
    REQUIRE(graph.stages.size() == costs.stages.size());
    for (std::size_t s = 0; s < costs.stages.size(); ++s) {
      const auto& c = costs.stages[s];
      expect_within(name + " stage " + std::to_string(s) + ": classes against forward + backward + recompute",
                    c.forward + c.backward + c.recompute, graph.stages[s].kernels.total(), 1e-9);
      // The recompute by the classes it re-runs adds up to it; a full recompute re-runs the forward.
      const auto& by = graph.stages[s].recomputed;
      CHECK(by.recompute == 0);
      if (c.recompute > 0)
        expect_within(name + " stage " + std::to_string(s) + ": recompute by class against recompute", c.recompute,
                      by.total(), 1e-9);
      else
        CHECK(by.total() == 0);
      if (job.recompute == wl::Recompute::full)
        expect_within(name + " stage " + std::to_string(s) + ": full recompute by class against the forward", c.forward,
                      by.total(), 1e-9);
    }
    const auto& k  = graph.stages[graph.stages.size() > 1 ? 1 : 0].kernels;
    const bool moe = job.model.moe.experts > 0;
    INFO(name);
    CHECK((k.grouped_gemm > 0) == moe);
    CHECK((k.expert_wgrad > 0) == moe);
    CHECK((k.permute > 0) == moe);
    CHECK((k.quantize > 0) == (job.precision != wl::Precision::bf16));
    CHECK(k.gemm > 0);
    CHECK(k.attention > 0);
  }
}

TEST_CASE("Recomputed norms and RoPE of DeepSeek-V3's layout against a hand count")
{
  // DeepSeek recomputes "all RMSNorm operations and MLA up-projections" and the SwiGLU output (recompute_modules
  // layernorm, mla_up_proj, moe_act): per MoE layer the two hidden-size norms (read and write 7,168 BF16 values a
  // token, twice), MLA's RoPE and concatenation into the per-head Q and K (read and write 128 heads x 192 a token)
  // and the routed experts' SwiGLU (gate, up and product of 2,048 each for each of a token's 8 experts), at the
  // element-wise rate.
  const auto p    = deepseek_profile();
  const auto& job = p.job;
  const auto& ch  = p.moe;
  REQUIRE(ch.moe_layers == ch.layers);
  const double tokens = 4096, mem_rate = job.gpu.hbm_bandwidth * job.gpu.elementwise_efficiency;
  const double norms = tokens * 2 * 4 * 7168 / mem_rate, rope = tokens * 2 * 4 * 128 * 192 / mem_rate;
  const double swiglu = tokens * 2 * 8 * 3 * 2048 / mem_rate;
  const auto& by      = ch.recomputed;
  expect_within("recomputed norms of a layer (s)", norms, by.norms / ch.layers, 1e-12);
  expect_within("recomputed RoPE and SwiGLU of a layer (s)", rope + swiglu, by.elementwise / ch.layers, 1e-12);
  // The up-projections' GEMMs again, with the casts of their inputs: nothing of the experts, permute or attention.
  CHECK(by.gemm > 0);
  CHECK(by.quantize > 0);
  CHECK(by.grouped_gemm == 0);
  CHECK(by.permute == 0);
  CHECK(by.attention == 0);
  expect_within("recompute by class against the chunk's recompute (s)", ch.recompute_seconds, by.total(), 1e-12);
  std::cout << "DeepSeek-V3 layer recomputed by class (us): norms " << by.norms / ch.layers * 1e6 << " (hand count "
            << norms * 1e6 << "), RoPE and SwiGLU " << by.elementwise / ch.layers * 1e6 << " (" << (rope + swiglu) * 1e6
            << "), GEMMs " << by.gemm / ch.layers * 1e6 << ", casts " << by.quantize / ch.layers * 1e6 << "\n";
}

TEST_CASE("DeepGEMM's table is read at its published points and between them as documented")
{
  const auto& dg = wl::load_gpu("h100").gemm.deepgemm;
  REQUIRE(!dg.points.empty());
  // The points' rates of whole waves: each published rate over the tile model's quantization at its shape.
  auto full = [&](double rows, double n, double k) {
    for (const auto& p : dg.points)
      if (p.rows == rows && p.n == n && p.k == k)
        return p.full_wave;
    FAIL("no published point at " << rows << " rows, n " << n << ", k " << k);
    return 0.0;
  };
  for (const auto& p : dg.points) {
    CHECK(p.full_wave >= p.rate);
    expect_within("rate at " + std::to_string(int(p.rows)) + " rows, k " + std::to_string(int(p.k)), p.full_wave,
                  dg.rate(p.rows, p.k), 1e-12);
  }
  // Rows padded to 128: 4,000 rows read as 4,096; beyond the published rows held flat.
  expect_within("4000 rows pad to 4096", full(4096, 4096, 7168), dg.rate(4000, 7168), 1e-12);
  expect_within("16K rows held at 8K's", full(8192, 7168, 2048), dg.rate(16384, 2048), 1e-12);
  // Between the shapes, linearly in log2(k): k 4096 lies 1 / log2(7168 / 2048) of the way from 2048 to 7168.
  const double x = 1 / std::log2(7168.0 / 2048);
  expect_within("k 4096 at 8K rows", full(8192, 7168, 2048) + x * (full(8192, 4096, 7168) - full(8192, 7168, 2048)),
                dg.rate(8192, 4096), 1e-12);
  // Between rows, linearly in log2(rows): 2048 rows halfway (in log2) between 1024 and 4096.
  expect_within("2048 rows, k 7168", (full(1024, 4096, 7168) + full(4096, 4096, 7168)) / 2, dg.rate(2048, 7168), 1e-12);
}

TEST_CASE("A DeepSeek-V3 MoE layer's grouped GEMMs run at DeepGEMM's rates on the 112 SMs DeepEP leaves")
{
  // The profile's layout without calibration or effects: 4,096 tokens a GPU, top-8 of 256 experts over EP 64, so 4
  // local experts of 8,192 rows each (a multiple of 128: no padding).
  const auto p    = deepseek_profile();
  const auto& job = p.job;
  const auto& ch  = p.moe;
  REQUIRE(ch.moe_layers == ch.layers);
  const double share = (132.0 - 20) / 132;
  expect_within("SM share", share, p.gemm_sm_share, 1e-12);
  const double rows = 8192, experts = 4, h = 7168, f = 2048;
  // DeepGEMM's rates at 8K rows as whole waves (its published 1,346 and 1,214 TFLOP/s over the tile model's
  // quantization of its own 4 groups of 8,192 rows on 132 SMs).
  const auto& dg     = job.gpu.gemm.deepgemm;
  const double r7168 = dg.rate(rows, 7168), r2048 = dg.rate(rows, 2048);
  std::cout << "DeepGEMM at 8K rows as whole waves: " << r7168 / 1e12 << " (1346 published), " << r2048 / 1e12
            << " (1214) TFLOP/s\n";
  const double k4096 = r2048 + (r7168 - r2048) / std::log2(7168.0 / 2048);
  // Forward: gate and up (n 4096, k 7168) and down (n 7168, k 2048); input gradients: (n 7168, k 4096) and
  // (n 2048, k 7168).
  const double fwd   = 2 * experts * rows * (2 * f * h / r7168 + h * f / r2048) / share;
  const double dgrad = 2 * experts * rows * (h * 2 * f / k4096 + f * h / r7168) / share;
  // Tiles of 128 x 256 over 112 SMs lose at most 1.2% to a partial last wave at these shapes.
  const double per_layer = ch.kernels.grouped_gemm / ch.layers;
  expect_within("grouped GEMMs of a layer, forward and input gradient (s)", fwd + dgrad, per_layer, 0.02);
  CHECK(per_layer >= fwd + dgrad);
  // Weight gradients at 0.72 of the forward's rate (the forward's rows and depth).
  const double wgrad = 2 * experts * rows * (2 * f * h / r7168 + h * f / r2048) / share / 0.72;
  expect_within("the experts' weight gradients of a layer (s)", wgrad, ch.kernels.expert_wgrad / ch.layers, 0.02);
  std::cout << "DeepSeek-V3 layer on H800 under DeepGEMM: grouped " << per_layer * 1e6 << " us (closed form "
            << (fwd + dgrad) * 1e6 << "), expert weight gradients " << ch.kernels.expert_wgrad / ch.layers * 1e6
            << " us (closed form " << wgrad * 1e6 << ")\n";
}

TEST_CASE("Grouped GEMMs at DeepGEMM's published shapes take the published times, within 5%")
{
  // DeepGEMM's README (deepseek-ai/DeepGEMM, as h100.json cites it): contiguous layout 4 groups of 8,192 rows and 8
  // of 4,096; masked layout 1 group of 1,024 rows, 2 of 512, 4 of 256; each at N 4096, K 7168 and N 7168, K 2048.
  // spansim runs a grouped GEMM at the table's rate of whole waves for its rows and depth on the GPU's SMs, quantized
  // by the tile and wave model: at the published shapes that must give back the published time. (With the published
  // rate taken as the whole-wave rate, the masked rows at N 7168, K 2048 came out 17.9% slow: their partial waves
  // counted twice.)
  auto gpu       = wl::load_gpu("h100");
  const auto& dg = gpu.gemm.deepgemm;
  REQUIRE(!dg.points.empty());
  for (const auto& p : dg.points) {
    const double groups      = p.groups;
    auto library             = gpu;
    library.gemm.ceiling_fp8 = library.gemm.ceiling_fp8_blockwise = dg.rate(p.rows, p.k);
    const wl::GemmShape shape{.m = p.rows, .n = p.n, .k = p.k, .groups = static_cast<int>(groups)};
    const auto cost       = wl::gemm_cost(library, wl::Precision::fp8, shape, 1, wl::Fp8Recipe::blockwise);
    const double expected = 2 * groups * p.rows * p.n * p.k / p.rate;
    expect_within(std::to_string(static_cast<int>(groups)) + " groups of " + std::to_string(int(p.rows)) + " rows, n " +
                      std::to_string(int(p.n)) + ", k " + std::to_string(int(p.k)) + " (s)",
                  expected, cost.seconds, 0.05);
  }
}

TEST_CASE("An FP8 dispatch casts the rank's tokens row-wise and re-quantizes the received rows column-wise")
{
  // DeepSeek-V3's H800 layout (EP 64: 4 local experts, 4,096 tokens a GPU, top-8, balanced, block-wise FP8). With a
  // BF16 dispatch each expert casts its received rows once, both layouts: (2 + 2 qb) bytes an element. With DeepEP's
  // FP8 dispatch the rank writes its own tokens' row-wise copy before they leave ((2 + qb) an element of its 1,024
  // tokens a local expert) and each expert re-quantizes its received rows column-wise for the weight gradient
  // (read the row-wise copy, write the column-wise one: 2 qb), qb = 1 + 4/128 (an FP32 scale per 128).
  json j                   = workload_test::roofline(job_file("deepseek-v3-h800-profile.json"));
  auto quantized_fwd_bytes = [&](const std::string& dispatch) {
    j["moe"]["dispatch_precision"] = dispatch;
    const wl::JobSpec job          = wl::parse_job(j, "deepseek-v3-h800-profile.json");
    const wl::detail::Context c(job);
    const auto ch = wl::detail::chunk_costs(c)[2];
    REQUIRE(ch.moe_layers == ch.layers);
    return ch.sum.quantize_fwd_seconds * job.gpu.quantize_rate(wl::Precision::fp8, wl::Fp8Recipe::blockwise) /
           ch.layers;
  };
  const double fp8 = quantized_fwd_bytes("fp8"), bf16 = quantized_fwd_bytes("bf16");
  const double qb = 1 + 4.0 / 128, q = 2 + 2 * qb, h = 7168, local = 4;
  const double received = 4096.0 * 64 * 8 / 256; // an expert's rows: top-8 copies of 64 GPUs' 4,096 tokens over 256
  const double own      = 4096.0 / local;
  const double expected = local * h * ((q - qb) * own + 2 * qb * received - q * received);
  std::cout << "rows received an expert: " << received << ", own tokens a local expert: " << own << "\n";
  expect_within("FP8 dispatch less BF16 dispatch: the experts' input casts of a layer (bytes)", expected, fp8 - bf16,
                1e-9);
}

TEST_CASE("QK-norm adds two norms of the query and key heads: their traffic and their kept inputs by hand")
{
  // Qwen3-30B-A3B (48 layers, 32 query and 4 key heads of 128) on one H100, one 4K sequence, no recompute, the
  // roofline model: the norms read and write the rank's Q and K forward, twice that backward (3 passes), and the
  // pre-norm Q and K are kept for the backward.
  auto chunk = [](bool qk_norm) {
    json model            = spansim::spec::load_json_file(kSource + "/workload/models/qwen3-30b-a3b.json");
    model["qk_norm"]      = qk_norm;
    const json j          = workload_test::roofline({{"model", model},
                                                     {"gpu", "h100"},
                                                     {"gpus", 8},
                                                     {"parallelism", {{"tp", 1}, {"dp", 8}, {"ep", 8}}},
                                                     {"batch", {{"global_sequences", 8}, {"sequence_length", 4096}}},
                                                     {"schedule", {{"kind", "1f1b"}}}});
    const wl::JobSpec job = wl::parse_job(j, "qk-norm.json");
    const wl::detail::Context c(job);
    const auto ch = wl::detail::chunk_costs(c)[0];
    return std::pair{ch, wl::detail::stored_activations(c, ch)};
  };
  const auto [with, kept_with]       = chunk(true);
  const auto [without, kept_without] = chunk(false);
  const double bytes = 48 * 4096 * 2.0 * (32 + 4) * 128, rate = 3.35e12 * 0.8;
  expect_within("norms class, QK-norm's share", 3 * 2 * bytes / rate, with.kernels.norms - without.kernels.norms, 1e-9);
  expect_within("activations kept for QK-norm", bytes, kept_with - kept_without, 1e-12);
}

TEST_CASE("Activations kept in a low precision: their casts and the bytes they keep by hand")
{
  // DeepSeek-V3's H800 layout (report section 3.3.3): the attention output kept in E5M6 (1.5 bytes an element) and
  // the experts' SwiGLU inputs in FP8 (1 byte), each with an FP32 scale per 128. Each is cast from BF16 in the
  // forward and back in the backward, (2 + kept) bytes an element each way, at the job's quantization rate; what
  // the layer keeps for the backward shrinks by (2 - kept) bytes an element. Per layer and GPU: 4,096 tokens, an
  // attention output of 128 heads of 128, the gate and up of 4 local experts over 8,192 received rows each and of
  // the shared expert over the 4,096 tokens, 2 x 2,048 wide.
  json j     = workload_test::roofline(job_file("deepseek-v3-h800-profile.json"));
  auto costs = [&](bool kept) {
    if (!kept)
      j["precision"].erase("activation_cache");
    const wl::JobSpec job = wl::parse_job(j, "deepseek-v3-h800-profile.json");
    const wl::detail::Context c(job);
    const auto ch = wl::detail::chunk_costs(c)[2];
    REQUIRE(ch.moe_layers == ch.layers);
    const double rate = job.gpu.quantize_rate(wl::Precision::fp8, wl::Fp8Recipe::blockwise);
    return std::tuple{ch.sum.quantize_fwd_seconds * rate / ch.layers, ch.sum.quantize_bwd_seconds * rate / ch.layers,
                      wl::detail::stored_activations(c, ch) / ch.layers, double(ch.sum.kernels_fwd) / ch.layers};
  };
  const auto [fwd_kept, bwd_kept, stored_kept, kernels_kept] = costs(true);
  const auto [fwd, bwd, stored, kernels]                     = costs(false);
  const double scale = 4.0 / 128, e5m6 = 1.5 + scale, fp8 = 1 + scale;
  const double o = 4096.0 * 128 * 128, swiglu = (4 * 8192.0 + 4096) * 2 * 2048;
  const double cast = (2 + e5m6) * o + (2 + fp8) * swiglu;
  expect_within("forward casts a layer, kept less BF16 (bytes)", cast, fwd_kept - fwd, 1e-9);
  expect_within("backward casts a layer, kept less BF16 (bytes)", cast, bwd_kept - bwd, 1e-9);
  // The memory model keeps every token's top-8 and shared expert intermediates: 9 experts' gate and up a token.
  const double saved = 4096.0 * ((2 - e5m6) * 128 * 128 + (2 - fp8) * 9 * 2 * 2048);
  expect_within("activations a layer keeps, BF16 less kept (bytes)", saved, stored - stored_kept, 1e-9);
  // A layer's three kept tensors (attention output, routed and shared experts' SwiGLU inputs), one launch each.
  expect_within("forward launches a layer, kept less BF16", 3, kernels_kept - kernels, 1e-12);
}

TEST_CASE("Kept activations under recompute: what is cast and what is kept, by hand")
{
  // Llama 3 8B (32 query heads and 8 K/V heads of 128, gated MLP of 14,336) in FP8 on 2 H100 with TP 2 and sequence
  // parallelism, one 8K sequence a micro-batch: a rank's attention output is 16 heads of 128 and its MLP's gate and
  // up 2 x 7,168 over the 8,192 gathered tokens. Kept in E5M6 and FP8, the casts add (2 + kept) bytes an element each
  // way and the stored activations shrink by (2 - kept). Where the core attention is recomputed its output is not
  // kept (nothing cast, nothing saved); where the MLP is recomputed its intermediates are not kept either.
  auto chunk = [](const std::string& caching, const json& modules) {
    json j = workload_test::roofline({{"model", "llama3-8b"},
                                      {"gpu", "h100"},
                                      {"gpus", 2},
                                      {"parallelism", {{"tp", 2}, {"dp", 1}}},
                                      {"batch", {{"global_sequences", 2}, {"sequence_length", 8192}}},
                                      {"schedule", {{"kind", "1f1b"}}},
                                      {"precision", {{"compute", "fp8"}, {"recipe", "current"}}}});
    if (caching == "kept")
      j["precision"]["activation_cache"] = {{"attention_output", "e5m6"}, {"mlp_activation_input", "fp8"}};
    if (!modules.empty()) {
      j["recompute"]         = "selective";
      j["recompute_modules"] = modules;
    }
    const wl::JobSpec job = wl::parse_job(j, "kept.json");
    const wl::detail::Context c(job);
    const auto ch     = wl::detail::chunk_costs(c)[0];
    const double rate = job.gpu.quantize_rate(wl::Precision::fp8, wl::Fp8Recipe::current);
    return std::pair{ch.sum.quantize_fwd_seconds * rate / ch.layers, wl::detail::stored_activations(c, ch) / ch.layers};
  };
  const double t = 8192, e5m6 = 1.5 + 4.0 / 128, fp8 = 1 + 4.0 / 128;
  const double o = t * 16 * 128, act = t * 2 * 7168;
  struct Case {
    json modules;
    bool o_kept, mlp_kept;
  };
  for (const Case& k : {Case{json::array(), true, true}, Case{json::array({"core_attn"}), false, true},
                        Case{json::array({"mlp"}), true, false}, Case{json::array({"layernorm"}), true, true}}) {
    const auto [cast_kept, stored_kept] = chunk("kept", k.modules);
    const auto [cast, stored]           = chunk("bf16", k.modules);
    const std::string name              = "recompute " + k.modules.dump();
    expect_within(name + ": forward cast bytes a layer, kept less BF16",
                  (k.o_kept ? (2 + e5m6) * o : 0) + (2 + fp8) * act, cast_kept - cast, 1e-9);
    const double saved = (k.o_kept ? (2 - e5m6) * o : 0) + (k.mlp_kept ? (2 - fp8) * act : 0);
    if (saved > 0)
      expect_within(name + ": stored bytes a layer, BF16 less kept", saved, stored - stored_kept, 1e-9);
    else
      CHECK(stored == Approx(stored_kept).epsilon(1e-12));
  }
}

TEST_CASE("Per-expert casts launch each cast once per local expert where Transformer Engine's split quantize did")
{
  // Qwen3-30B-A3B on 8 H100 with EP 8: 16 local experts, two routed GEMMs a MoE layer (gate+up, down). Each routed
  // GEMM's input cast (forward) and output-gradient cast (backward) is one launch for all 16 experts when grouped and
  // 16 when per expert; current scaling is two kernels a cast (amax, then cast), delayed scaling's multi-tensor
  // cast-transpose and NVFP4's fused split stay one launch. Bytes and seconds of the casts are the same either way.
  auto layer = [](const std::string& precision, const std::string& recipe, const std::string& quantize,
                  bool fp8_dispatch = false) {
    json j         = workload_test::roofline({{"model", "qwen3-30b-a3b"},
                                              {"gpu", precision == "fp8" ? "h100" : "b200"},
                                              {"gpus", 8},
                                              {"parallelism", {{"tp", 1}, {"dp", 8}, {"ep", 8}}},
                                              {"batch", {{"global_sequences", 8}, {"sequence_length", 4096}}},
                                              {"schedule", {{"kind", "1f1b"}}},
                                              {"kernels", {{"expert_quantize", quantize}}}});
    j["precision"] = {{"compute", precision}};
    if (!recipe.empty())
      j["precision"]["recipe"] = recipe;
    if (fp8_dispatch)
      j["moe"] = {{"dispatcher", "deepep"}, {"dispatch_precision", "fp8"}};
    const wl::JobSpec job = wl::parse_job(j, "per-expert.json");
    const wl::detail::Context c(job);
    const auto ch = wl::detail::chunk_costs(c)[0];
    return std::tuple{static_cast<double>(ch.sum.kernels_fwd) / ch.layers,
                      static_cast<double>(ch.sum.kernels_bwd) / ch.layers, ch.sum.quantize_fwd_seconds};
  };
  struct Case {
    const char* precision;
    const char* recipe;
    double kernels_a_cast; // launches a cast takes, per expert when per expert
    bool split;            // launched per expert by split quantize
  };
  for (const Case& k : {Case{"fp8", "current", 2, true}, Case{"fp8", "blockwise", 1, true}, Case{"mxfp8", "", 1, true},
                        Case{"fp8", "delayed", 1, false}, Case{"nvfp4", "", 2, false}}) {
    const auto [fwd_g, bwd_g, q_g] = layer(k.precision, k.recipe, "grouped");
    const auto [fwd_e, bwd_e, q_e] = layer(k.precision, k.recipe, "per_expert");
    const double extra             = k.split ? 2 * k.kernels_a_cast * (16 - 1) : 0; // two routed GEMMs
    const std::string name         = std::string(k.precision) + " " + k.recipe;
    expect_within(name + ": forward launches a layer, per expert less grouped", extra, fwd_e - fwd_g, 1e-12);
    expect_within(name + ": backward launches a layer, per expert less grouped", extra, bwd_e - bwd_g, 1e-12);
    expect_within(name + ": cast seconds either way", q_g, q_e, 1e-12);
  }
  // With an FP8 dispatch the rank casts its own tokens once before they leave (two kernels in current scaling,
  // whatever the experts) and re-quantizes the received rows once per expert: the gate+up GEMM's forward adds 15
  // launches, the down GEMM's 2 x 15; the backward casts as before.
  const auto [fwd_g, bwd_g, q_g] = layer("fp8", "current", "grouped", true);
  const auto [fwd_e, bwd_e, q_e] = layer("fp8", "current", "per_expert", true);
  expect_within("FP8 dispatch: forward launches a layer, per expert less grouped", 15.0 + 2 * 15, fwd_e - fwd_g, 1e-12);
  expect_within("FP8 dispatch: backward launches a layer, per expert less grouped", 2.0 * 2 * 15, bwd_e - bwd_g, 1e-12);
  CHECK(q_g == q_e);
}
