// The compute model against closed forms: GEMM efficiency from the measured ceiling, tile and wave quantization and
// K-depth padding; the byte floor of gradient accumulation (fp32 or bf16 buffers); attention at the kernel library's
// forward and backward rates; a layer-by-layer forward and backward assembled from those parts.
#include "common/error.hpp"
#include "common/units.hpp"
#include "roofline.hpp"
#include "tests/support.hpp"
#include "workload/cost_model.hpp"
#include "workload/workload.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <iostream>
#include <string>

namespace wl = spansim::workload;
using nlohmann::json;
using spansim::test::expect_within;

namespace {

// H100 SXM's figures (h100.json) with a single 128 x 256 tile, so that the quantization has one closed form.
wl::GpuSpec one_tile_h100()
{
  wl::GpuSpec g = wl::load_gpu("h100");
  g.gemm.tiles  = {{128, 256}};
  return g;
}

constexpr double kPeak = 989e12, kCeiling = 794.5e12, kHbm = 3.35e12, kElementwise = 0.8;

} // namespace

TEST_CASE("A GEMM whose tiles fill whole waves runs at the measured ceiling")
{
  const wl::GpuSpec g = one_tile_h100();
  for (int waves : {1, 2, 5}) {
    // 12 x 11 = 132 tiles of 128 x 256 per wave on 132 SMs; K a multiple of the 64-deep main-loop step.
    const wl::GemmShape s{.m = 128.0 * 12 * waves, .n = 256.0 * 11, .k = 8192};
    const wl::GemmCost c = wl::gemm_cost(g, wl::Precision::bf16, s);
    expect_within(std::to_string(waves) + " full wave(s): efficiency", kCeiling / kPeak, c.efficiency, 1e-12);
    expect_within(std::to_string(waves) + " full wave(s): seconds", 2 * s.m * s.n * s.k / kCeiling, c.seconds, 1e-12);
  }
}

TEST_CASE("One tile more than whole waves costs a wave, partial tiles and K padding cost their share")
{
  const wl::GpuSpec g = one_tile_h100();
  const double k      = 8192;
  {
    // 2 full waves (264 tiles) and one tile row more: 25 x 11 = 275 tiles take 3 waves of 132.
    const double m = 128.0 * 25, n = 256.0 * 11;
    const double expected = kCeiling / kPeak * (m * n) / (3 * 132 * 128.0 * 256);
    expect_within("275 tiles in 3 waves: efficiency", expected,
                  wl::gemm_cost(g, wl::Precision::bf16, {.m = m, .n = n, .k = k}).efficiency, 1e-12);
    expect_within("ratio to the ceiling", 275.0 / 396, expected / (kCeiling / kPeak), 1e-12);
  }
  {
    // One token past 2 full waves: a partial tile row, and the same 3 waves.
    const double m = 128.0 * 24 + 1, n = 256.0 * 11;
    expect_within("partial tile row: efficiency", kCeiling / kPeak * (m * n) / (3 * 132 * 128.0 * 256),
                  wl::gemm_cost(g, wl::Precision::bf16, {.m = m, .n = n, .k = k}).efficiency, 1e-12);
  }
  {
    // K = 8192 + 32 pads to 129 steps of 64.
    const double kk = 8192 + 32;
    expect_within("K padding: efficiency", kCeiling / kPeak * kk / (129 * 64),
                  wl::gemm_cost(g, wl::Precision::bf16, {.m = 128.0 * 12, .n = 256.0 * 11, .k = kk}).efficiency, 1e-12);
  }
  {
    // With several tile shapes the best tiling counts: 1536 x 1408 fills 12 x 5.5 tiles of 128 x 256 (66 tiles
    // of 132 SMs, 2 partial columns: 1536 x 1408 / (132 x 128 x 256)) but exactly 12 x 11 tiles of 128 x 128.
    wl::GpuSpec h100 = wl::load_gpu("h100");
    const wl::GemmShape s{.m = 1536, .n = 1408, .k = k};
    expect_within("128 x 128 tiles chosen", kCeiling / kPeak, wl::gemm_cost(h100, wl::Precision::bf16, s).efficiency,
                  1e-12);
    expect_within("128 x 256 alone", kCeiling / kPeak * 1536 * 1408 / (132 * 128.0 * 256),
                  wl::gemm_cost(one_tile_h100(), wl::Precision::bf16, s).efficiency, 1e-12);
  }
}

TEST_CASE("A weight-gradient GEMM over few tokens is bound by its gradient buffer traffic, fp32 or bf16")
{
  // dW (4096 x 4096) = X^T dY over 16 tokens: 0.5 GFLOP against a 64 MiB fp32 gradient read and written.
  const wl::GpuSpec g = wl::load_gpu("h100");
  const double out = 4096, in = 4096, tokens = 16;
  const wl::GemmShape w{.m = out, .n = in, .k = tokens, .accumulate_bytes = 4};
  const double bytes   = (out + in) * tokens * 2 + out * in * 8;
  const wl::GemmCost c = wl::gemm_cost(g, wl::Precision::bf16, w);
  expect_within("wgrad bytes (bf16 A, B; fp32 C read + write)", bytes, c.bytes, 1e-12);
  expect_within("wgrad seconds at the element-wise HBM rate", bytes / (kHbm * kElementwise), c.seconds, 1e-12);
  INFO("compute time " << c.flops / (kPeak * c.efficiency) << " s must be below the traffic time");
  CHECK(c.flops / (kPeak * c.efficiency) < c.seconds);
  // Without the accumulation C is a bf16 output: 4x fewer C bytes.
  const wl::GemmCost plain = wl::gemm_cost(g, wl::Precision::bf16, {.m = out, .n = in, .k = tokens});
  expect_within("bf16 C bytes", (out + in) * tokens * 2 + out * in * 2, plain.bytes, 1e-12);
  // A bf16 gradient buffer (gradients reduced in bf16: Megatron's wgrad_gemm_accum_fp16) is read and written at 2
  // bytes an element.
  const wl::GemmShape w16{.m = out, .n = in, .k = tokens, .accumulate_bytes = 2};
  const wl::GemmCost c16 = wl::gemm_cost(g, wl::Precision::bf16, w16);
  expect_within("wgrad bytes (bf16 C read + write)", (out + in) * tokens * 2 + out * in * 4, c16.bytes, 1e-12);
  expect_within("wgrad seconds, bf16 buffer", c16.bytes / (kHbm * kElementwise), c16.seconds, 1e-12);
}

TEST_CASE("FP8 GEMMs run at the FP8 ceiling and read one byte per input element")
{
  const wl::GpuSpec g = one_tile_h100();
  const wl::GemmShape s{.m = 128.0 * 12, .n = 256.0 * 11, .k = 8192};
  const wl::GemmCost c = wl::gemm_cost(g, wl::Precision::fp8, s);
  expect_within("fp8 full wave: efficiency of the fp8 peak", 1402.6e12 / 1979e12, c.efficiency, 1e-12);
  expect_within("fp8 seconds", 2 * s.m * s.n * s.k / 1402.6e12, c.seconds, 1e-12);
  expect_within("fp8 bytes", (s.m + s.n) * s.k + s.m * s.n * 2, c.bytes, 1e-12);
}

namespace {

// Per-layer GEMM milliseconds (forward, input and weight gradients, quantization included) of Transformer Engine's
// GEMM profiling config on `gpu` (a name or a GPU object) at the measured clocks, in `format` (bf16, an FP8 recipe,
// mxfp8 or nvfp4): hidden 4096, FFN 16384 (GELU), 32 heads, M = 31 x 512.
double te_profile_layer_ms(const json& gpu, const std::string& format)
{
  json j = {{"model",
             {{"name", "te-5b"},
              {"layers", 24},
              {"hidden", 4096},
              {"ffn", 16384},
              {"heads", 32},
              {"kv_heads", 32},
              {"vocab", 32000},
              {"mlp", "gelu"}}},
            {"gpu", gpu},
            {"gpus", 1},
            {"parallelism", {{"tp", 1}}},
            {"batch", {{"global_sequences", 31}, {"sequence_length", 512}, {"micro_batch", 31}}},
            {"schedule", {{"kind", "1f1b"}}},
            {"recompute", "none"}};
  if (format == "mxfp8" || format == "nvfp4")
    j["precision"] = {{"compute", format}};
  else if (format != "bf16")
    j["precision"] = {{"compute", "fp8"}, {"recipe", format}};
  const wl::JobSpec job = wl::parse_job(workload_test::roofline(j), "te-profile.json");
  const wl::detail::Context c(job);
  const auto chunks = wl::detail::chunk_costs(c);
  return (chunks[0].sum.gemm_fwd_seconds + chunks[0].sum.gemm_bwd_seconds) / 24 * 1e3;
}

} // namespace

TEST_CASE("Low-precision GEMMs of Transformer Engine's published GEMM profile, from which the rates were derived")
{
  // TE's docs/examples/gemm_profiling/gemm_profiling.rst (PR #2863): one layer's 12 GEMMs, autocast (quantization
  // included). The GPU files' quantization rates (autocast less pre-quantized) and Hopper's block ceiling (block
  // over delayed) were derived from it, so these reproduce a derivation; they are not checks. On B300 (the guide's
  // own part): BF16 12.758 ms, FP8 current 9.147, delayed 7.802, MXFP8 8.984, NVFP4 6.453.
  const double b300 = te_profile_layer_ms("b300", "bf16");
  expect_within("B300 FP8 current speed-up (TE 1.395x)", 12.758 / 9.147, b300 / te_profile_layer_ms("b300", "current"),
                0.05);
  expect_within("B300 FP8 delayed speed-up (TE 1.635x)", 12.758 / 7.802, b300 / te_profile_layer_ms("b300", "delayed"),
                0.05);
  expect_within("B300 MXFP8 speed-up (TE 1.420x)", 12.758 / 8.984, b300 / te_profile_layer_ms("b300", "mxfp8"), 0.05);
  expect_within("B300 NVFP4 speed-up (TE 1.977x)", 12.758 / 6.453, b300 / te_profile_layer_ms("b300", "nvfp4"), 0.08);
  // H200 NVL: block 22.882 ms against delayed 18.978, what h200.json's ceiling_fp8_blockwise was derived from.
  const double delayed = te_profile_layer_ms("h200", "delayed");
  expect_within("H200 FP8 block over delayed (TE 1.206x)", 22.882 / 18.978,
                te_profile_layer_ms("h200", "blockwise") / delayed, 1e-3);
  // H100 carries the same block ceiling (0.803 of its FP8 one): block scaling costs more than 1.15x delayed, where
  // its scales' bytes alone would add under 1%.
  CHECK(te_profile_layer_ms("h100", "blockwise") > 1.15 * te_profile_layer_ms("h100", "delayed"));
}

TEST_CASE("Quantization runs at the GPU file's cast rate: bytes per operand and recipe by hand over it")
{
  // TE's profiling config (hidden h 4096, FFN f 16384 GELU, T = 15,872 tokens, one micro-batch), each recipe on a
  // GPU whose file has its cast rate: activations and output gradients every micro-batch, weights once. QKV
  // (T x 3h x h, norm-fed), proj (T x h x h), fc1 (T x f x h, norm-fed), fc2 (T x h x f). Per element, an unfused cast
  // reads BF16 (2 bytes) and writes a row-wise and a column-wise copy with their scales; current scaling and NVFP4 read
  // the tensor once more (amax); a norm that quantizes its own output writes the copies (and reads for the amax)
  // only. Copies: FP8 1 byte; block-wise FP8 1 + 4/128 (an FP32 scale per 128); MXFP8 1 + 1/32 (an E8M0 scale per
  // 32); NVFP4 1/2 + 1/16 (an E4M3 scale per 16).
  struct Case {
    const char* gpu;
    const char* recipe;
    double copy;
    bool amax;
  };
  const double h = 4096, f = 16384, t = 31 * 512;
  for (const Case& k : {Case{"h200", "current", 1, true}, Case{"h100", "delayed", 1, false},
                        Case{"h100", "current", 1, true}, Case{"h100", "blockwise", 1 + 4.0 / 128, false},
                        Case{"b300", "mxfp8", 1 + 1.0 / 32, false}, Case{"b300", "nvfp4", 0.5 + 1.0 / 16, true}}) {
    const double unfused = 2 + 2 * k.copy + (k.amax ? 2 : 0), fed = 2 * k.copy + (k.amax ? 2 : 0);
    // Norm-fed: the QKV and fc1 inputs. Unfused: the proj and fc2 inputs, the weights (one micro-batch) and the
    // output gradients of all four.
    const double bytes = fed * (t * h + t * h) + unfused * (t * h + t * f) +
                         unfused * (3 * h * h + h * h + f * h + h * f) + unfused * t * (3 * h + h + f + h);
    json g = json::parse(std::ifstream(std::string(SPANSIM_SOURCE_DIR) + "/workload/gpus/" + k.gpu + ".json"));
    const std::string key = std::string(k.recipe) == "current"                                     ? "fp8_current"
                            : std::string(k.recipe) == "mxfp8" || std::string(k.recipe) == "nvfp4" ? k.recipe
                                                                                                   : "fp8";
    const double hbm      = spansim::units::parse_bandwidth(g["hbm_bandwidth"].get<std::string>());
    const double at_file  = g["efficiency"]["quantize"][key].get<double>();
    const double at_plain = g["efficiency"]["elementwise"].get<double>();
    const double with     = te_profile_layer_ms(g, k.recipe);
    g["efficiency"].erase("quantize");
    const double without = te_profile_layer_ms(g, k.recipe);
    expect_within(std::string(k.gpu) + " " + k.recipe + ": " + std::to_string(unfused) + " bytes an element unfused, " +
                      std::to_string(fed) + " norm-fed; cast ms at the file's rate less at the element-wise one",
                  bytes / hbm * (1 / at_file - 1 / at_plain) * 1e3, with - without, 1e-9);
  }
}

TEST_CASE("Block-wise FP8 runs as MXFP8 where the GPU has MXFP8 and no block-scaled FP8 ceiling")
{
  // Transformer Engine emulates FP8 block scaling with MXFP8 on Blackwell (fp8_blockwise_scaling.rst, "Supported
  // devices"): the same kernels, so the same milliseconds; Hopper keeps its native block ceiling.
  expect_within("B300 block-wise = MXFP8", te_profile_layer_ms("b300", "mxfp8"),
                te_profile_layer_ms("b300", "blockwise"), 1e-12);
  const wl::GpuSpec b300 = wl::load_gpu("b300"), h100 = wl::load_gpu("h100");
  CHECK(b300.runs_as(wl::Precision::fp8, wl::Fp8Recipe::blockwise).precision == wl::Precision::mxfp8);
  CHECK(b300.runs_as(wl::Precision::fp8, wl::Fp8Recipe::current).precision == wl::Precision::fp8);
  const wl::GemmFormat hopper = h100.runs_as(wl::Precision::fp8, wl::Fp8Recipe::blockwise);
  CHECK(hopper.precision == wl::Precision::fp8);
  CHECK(hopper.recipe == wl::Fp8Recipe::blockwise);
  // The job says so where it happens (workload describe's precision line).
  const auto b200_job = wl::load_job(std::string(SPANSIM_SOURCE_DIR) + "/examples/jobs/deepseek-v3-2048-b200.json");
  CHECK(wl::precision_line(b200_job) ==
        "fp8 blockwise, run as mxfp8 on b200; gradients bf16; parameters gathered in bf16");
  auto h100_job = b200_job;
  h100_job.gpu  = h100;
  CHECK(wl::precision_line(h100_job) == "fp8 blockwise; gradients bf16; parameters gathered in bf16");
  // And its kernels line: a MoE job in a low precision says how its experts' casts are launched.
  auto per_expert            = b200_job;
  per_expert.expert_quantize = wl::ExpertQuantize::per_expert;
  CHECK(wl::kernels_line(per_expert) ==
        "attention " + std::string(spansim::name_of(per_expert.attention)) +
            (per_expert.attention == per_expert.gpu.attention_default ? " (the GPU's default)" : "") +
            "; GEMMs cublas; experts' casts per expert");
}

TEST_CASE("A job's precision and kernels blocks, as results and searches write them, read back to the same job")
{
  const std::string file = std::string(SPANSIM_SOURCE_DIR) + "/examples/jobs/deepseek-v3-2048-b200.json";
  json spec              = json::parse(std::ifstream(file));
  spec["precision"]      = {{"compute", "fp8"},
                            {"recipe", "blockwise"},
                            {"gradient_reduce", "bf16"},
                            {"param_gather", "fp8"},
                            {"activation_cache", {{"attention_output", "e5m6"}, {"mlp_activation_input", "fp8"}}}};
  spec["kernels"]        = {{"attention", "cudnn"}, {"expert_quantize", "per_expert"}};
  const wl::JobSpec job  = wl::parse_job(spec, file);
  INFO("written: " << wl::precision_spec(job).dump() << " " << wl::kernels_spec(job).dump());
  CHECK(wl::precision_spec(job) == spec["precision"]); // every key was given: the same block
  CHECK(wl::kernels_spec(job)["gemm"] == "cublas");    // the default filled in
  json again             = spec;
  again["precision"]     = wl::precision_spec(job);
  again["kernels"]       = wl::kernels_spec(job);
  const wl::JobSpec back = wl::parse_job(again, file);
  CHECK(wl::precision_line(back) == wl::precision_line(job));
  CHECK(wl::kernels_line(back) == wl::kernels_line(job));
  CHECK(back.low_precision_param_gather);
  CHECK(back.activation_cache.attention_output == wl::KeptFormat::e5m6);
  CHECK(back.expert_quantize == wl::ExpertQuantize::per_expert);
  // A BF16 job writes no recipe (the reader refuses one) and reads back in BF16.
  json bf16           = spec;
  bf16["precision"]   = {{"compute", "bf16"}};
  bf16["kernels"]     = json::object();
  const wl::JobSpec b = wl::parse_job(bf16, file);
  CHECK(wl::precision_spec(b).count("recipe") == 0);
  bf16["precision"] = wl::precision_spec(b);
  bf16["kernels"]   = wl::kernels_spec(b);
  CHECK(wl::precision_line(wl::parse_job(bf16, file)) == wl::precision_line(b));
}

namespace {

// Llama 3 8B on one GPU, one sequence: the forward and backward ops of the step graph.
struct Passes {
  wl::Op forward, backward;
};
Passes llama8b_passes(int seq, const json& kernels = json::object())
{
  json j = {{"model", "llama3-8b"},
            {"gpu", "h100"},
            {"gpus", 1},
            {"parallelism", {{"tp", 1}}},
            {"batch", {{"global_sequences", 1}, {"sequence_length", seq}}},
            {"schedule", {{"kind", "gpipe"}}}};
  if (!kernels.empty())
    j["kernels"] = kernels;
  const wl::StepGraph g =
      wl::build_step_graph(wl::parse_job(workload_test::roofline(j), "test.json"), wl::BuildOptions{false});
  Passes p;
  for (const auto& op : g.stages[0].ops) {
    if (op.kind == wl::OpKind::forward)
      p.forward = op;
    if (op.kind == wl::OpKind::backward)
      p.backward = op;
  }
  return p;
}

constexpr double kL = 32, kH = 4096, kF = 14336, kVocab = 128256;

} // namespace

TEST_CASE("A forward pass over few tokens is bound by reading the weights")
{
  // 16 tokens: 2 x 16 x 7.5e9 FLOPs take 0.3 ms, 15 GB of bf16 weights (all but the embedding lookup) take 5.6 ms.
  // On top: the activations the GEMMs read and write, split-K partial tiles and the element-wise ops (< 3%).
  const double weights = 2 * (kL * (2 * kH * kH + 2 * kH * 1024 + 3 * kH * kF) + kVocab * kH);
  const double actual  = llama8b_passes(16).forward.seconds;
  expect_within("weight-bound forward, s", weights / (kHbm * kElementwise), actual, 0.03);
  CHECK(actual >= weights / (kHbm * kElementwise));
}

TEST_CASE("A compute-bound pass is the sum of its GEMMs, attention at the library's rates and element-wise traffic")
{
  const double s      = 8192;
  const wl::GpuSpec g = wl::load_gpu("h100");
  // The layer's GEMMs (tokens x out x in): fused QKV (32 + 2 x 8 heads of 128), attention output, fused gate+up,
  // down; then the output layer.
  const wl::GemmShape layer[] = {{.m = s, .n = 6144, .k = kH},
                                 {.m = s, .n = kH, .k = kH},
                                 {.m = s, .n = 2 * kF, .k = kH},
                                 {.m = s, .n = kH, .k = kF}};
  const wl::GemmShape head{.m = s, .n = kVocab, .k = kH};
  double fwd = 0, bwd = 0, fwd_bytes = 0, bwd_bytes = 0, flops = 0;
  auto add = [&](const wl::GemmShape& f, double times) {
    const wl::GemmCost c = wl::gemm_cost(g, wl::Precision::bf16, f);
    const wl::GemmCost d = wl::gemm_cost(g, wl::Precision::bf16, {.m = f.m, .n = f.k, .k = f.n});
    const wl::GemmCost w = wl::gemm_cost(g, wl::Precision::bf16, {.m = f.n, .n = f.k, .k = f.m, .accumulate_bytes = 4});
    fwd += times * c.seconds;
    bwd += times * (d.seconds + w.seconds);
    fwd_bytes += times * c.bytes;
    bwd_bytes += times * (d.bytes + w.bytes);
    flops += times * c.flops;
  };
  for (const auto& f : layer)
    add(f, kL);
  add(head, 1);
  // Causal attention, 2 s^2 x 4096 FLOPs per layer forward: FlashAttention-2 (h100.json's default) at 333
  // TFLOP/s forward; its backward does 2.5 times the forward's FLOPs at 318 TFLOP/s.
  const double attn = kL * 2 * s * s * kH;
  const Passes p    = llama8b_passes(8192);
  expect_within("forward FLOPs: GEMMs plus attention", flops + attn, p.forward.model_flops, 1e-12);
  const double elementwise = p.forward.hbm_bytes - fwd_bytes;
  // The element-wise traffic is the op's own figure, so bound it by shapes: every layer reads and writes its bf16
  // activations at least once (s x hidden), and touches at most a few dozen tensors of s x (hidden + ffn).
  INFO("element-wise bytes " << elementwise);
  CHECK(elementwise >= kL * 2 * s * kH * 2);
  CHECK(elementwise <= kL * 32 * s * (kH + kF) * 2);
  const double ew = elementwise / (kHbm * kElementwise);
  expect_within("forward seconds", fwd + attn / 333e12 + ew, p.forward.seconds, 1e-9);
  expect_within("backward seconds", bwd + 2.5 * attn / 318e12 + 2 * ew, p.backward.seconds, 1e-9);
  expect_within("backward bytes", bwd_bytes + 2 * elementwise, p.backward.hbm_bytes, 1e-9);
  std::cout << "llama3-8b, 8192 tokens on h100: GEMMs at " << flops / fwd / 1e12 << " TFLOP/s forward\n";

  // FlashAttention-3 (selected by the job) changes only the attention terms.
  const Passes p3 = llama8b_passes(8192, {{"attention", "flash3"}});
  expect_within("flash3 forward: attention at 602 TFLOP/s", p.forward.seconds - attn / 333e12 + attn / 602e12,
                p3.forward.seconds, 1e-9);
  expect_within("flash3 backward: attention at 559 TFLOP/s",
                p.backward.seconds - 2.5 * attn / 318e12 + 2.5 * attn / 559e12, p3.backward.seconds, 1e-9);

  // llm-foundry's Triton kernel on H100: its A100 ratio to FlashAttention-2 at 8K (78 / 182, the FlashAttention-2
  // paper's Fig. 4) times FlashAttention-2's H100 rates (333 / 318), as h100.json derives it (to 0.1 TFLOP/s).
  const Passes pt = llama8b_passes(8192, {{"attention", "triton"}});
  expect_within("triton forward: attention at 333 x 78/182 TFLOP/s",
                p.forward.seconds - attn / 333e12 + attn / (333e12 * 78 / 182), pt.forward.seconds, 1e-3);
  expect_within("triton backward: attention at 318 x 78/182 TFLOP/s",
                p.backward.seconds - 2.5 * attn / 318e12 + 2.5 * attn / (318e12 * 78 / 182), pt.backward.seconds, 1e-3);
}
