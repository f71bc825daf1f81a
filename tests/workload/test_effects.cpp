// Production effects against hand-computed cases (each switched on alone over the roofline model), and a user's
// measured kernel times: exact rows, interpolation between them, the model outside them, bad tables.
#include "common/error.hpp"
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

const std::string kData = std::string(SPANSIM_SOURCE_DIR) + "/tests/workload/data";

// Llama 3 8B on one H100, one 4096-token sequence, GPipe (one forward, one backward, the optimizer).
json llama8b()
{
  return workload_test::roofline({{"model", "llama3-8b"},
                                  {"gpu", "h100"},
                                  {"gpus", 1},
                                  {"parallelism", {{"tp", 1}}},
                                  {"batch", {{"global_sequences", 1}, {"sequence_length", 4096}}},
                                  {"schedule", {{"kind", "gpipe"}}}});
}

struct Ops {
  wl::Op forward, backward, optimizer;
};
Ops ops_of(const wl::JobSpec& job)
{
  Ops o;
  const auto graph = wl::build_step_graph(job, wl::BuildOptions{false});
  for (const auto& op : graph.stages[0].ops) {
    if (op.kind == wl::OpKind::forward)
      o.forward = op;
    if (op.kind == wl::OpKind::backward)
      o.backward = op;
    if (op.kind == wl::OpKind::optimizer)
      o.optimizer = op;
  }
  return o;
}
wl::JobSpec parse(const json& j)
{
  return wl::parse_job(j, kData + "/job.json");
}

// The forward GEMMs of one Llama 3 8B layer over T tokens (fused QKV with 8 K/V heads, O, gate and up fused, down),
// and the output layer.
std::vector<wl::GemmShape> llama8b_forward_gemms(double t)
{
  std::vector<wl::GemmShape> g;
  for (int l = 0; l < 32; ++l) {
    g.push_back({.m = t, .n = (32 + 16) * 128.0, .k = 4096});
    g.push_back({.m = t, .n = 4096, .k = 4096});
    g.push_back({.m = t, .n = 2 * 14336.0, .k = 4096});
    g.push_back({.m = t, .n = 4096, .k = 14336});
  }
  g.push_back({.m = t, .n = 128256, .k = 4096});
  return g;
}

} // namespace

TEST_CASE("Kernel gaps: every kernel launched leaves the GPU idle for the profile's gap")
{
  const wl::JobSpec off     = parse(llama8b());
  wl::JobSpec on            = off;
  on.calibration.name       = "test";
  on.calibration.kernel_gap = 10e-6;
  on.effects.kernel_gaps    = true;
  const Ops a = ops_of(off), b = ops_of(on);
  // Per layer forward: 4 GEMMs, 1 attention kernel, 6 element-wise kernels; the output GEMM and the loss's 2.
  // Backward: 2 GEMMs for each forward one, 2 attention kernels, 12 element-wise; 2 for the output GEMM, 2 loss.
  const double fwd_kernels = 32 * (4 + 1 + 6) + 1 + 2, bwd_kernels = 32 * (8 + 2 + 12) + 2 + 2;
  expect_within("forward: gap x 355 kernels", fwd_kernels * 10e-6, b.forward.seconds - a.forward.seconds, 1e-9);
  expect_within("backward: gap x 708 kernels", bwd_kernels * 10e-6, b.backward.seconds - a.backward.seconds, 1e-9);
  expect_within("forward effect reported", fwd_kernels * 10e-6, b.forward.effects.kernel_gaps, 1e-12);
  CHECK(a.forward.effects.total() == 0);
}

TEST_CASE("MoE host floor: a pass whose MoE layers take the host longer to issue than the GPU to run waits for it")
{
  // Qwen3-30B-A3B (48 MoE layers) on 8 H100 with EP 8, one 4096-token sequence per GPU, GPipe.
  const json qwen       = workload_test::roofline({{"model", "qwen3-30b-a3b"},
                                                   {"gpu", "h100"},
                                                   {"gpus", 8},
                                                   {"parallelism", {{"tp", 1}, {"dp", 8}, {"ep", 8}}},
                                                   {"batch", {{"global_sequences", 8}, {"sequence_length", 4096}}},
                                                   {"schedule", {{"kind", "gpipe"}}}});
  const wl::JobSpec off = parse(qwen);
  const Ops a           = ops_of(off);
  auto with_host        = [&](double host, bool effect = true) {
    wl::JobSpec on          = off;
    on.calibration.name     = "test";
    on.calibration.moe_host = host;
    on.effects.kernel_gaps  = effect;
    return ops_of(on);
  };
  // Far above the GPU's time: the forward issues a third of each layer's host time, the backward two thirds.
  const Ops slow = with_host(0.1);
  expect_within("host-bound forward: 48 x 0.1 s / 3", 48 * 0.1 / 3, slow.forward.seconds, 1e-12);
  expect_within("host-bound backward: 48 x 0.1 s x 2/3", 48 * 0.1 * 2 / 3, slow.backward.seconds, 1e-12);
  expect_within("what the GPU waits, as the kernel-gaps effect", slow.forward.seconds - a.forward.seconds,
                slow.forward.effects.kernel_gaps, 1e-12);
  // At one and a half times the forward's compute: the forward takes the host's time, the backward its own when
  // that is longer than twice the forward's host time.
  const double host = 1.5 * a.forward.seconds * 3 / 48;
  const Ops above   = with_host(host);
  expect_within("forward at 1.5x its compute", 1.5 * a.forward.seconds, above.forward.seconds, 1e-12);
  expect_within("backward: the longer of its compute and the host's", std::max(a.backward.seconds, 48 * host * 2 / 3),
                above.backward.seconds, 1e-12);
  // Below the GPU's time, or with the effect off: nothing changes.
  CHECK(with_host(1e-6).forward.seconds == a.forward.seconds);
  CHECK(with_host(1e-6).backward.seconds == a.backward.seconds);
  CHECK(with_host(0.1, false).forward.seconds == a.forward.seconds);
  // What the all-to-all overlap adds to the host's time counts only for a job that runs the overlap: without it the
  // far-above-compute host time of 0.1 s is the forward's as before; with it, 0.1 s + 0.05 s.
  auto host_of = [&](const json& spec, double overlap_host) {
    wl::JobSpec job                  = parse(spec);
    job.calibration.name             = "test";
    job.calibration.moe_host         = 0.1;
    job.calibration.moe_host_overlap = overlap_host;
    job.effects.kernel_gaps          = true;
    return std::pair{wl::detail::Context(job).moe_host, ops_of(job).forward.seconds};
  };
  json paired        = qwen;
  paired["schedule"] = {{"kind", "1f1b"}, {"ep_overlap", true}};
  expect_within("host seconds per MoE layer without ep_overlap: moe_host alone", 0.1, host_of(qwen, 0.05).first, 1e-12);
  expect_within("host-bound forward without ep_overlap: 48 x 0.1 s / 3", 48 * 0.1 / 3, host_of(qwen, 0.05).second,
                1e-12);
  expect_within("host seconds per MoE layer under ep_overlap: moe_host + moe_host_overlap", 0.15,
                host_of(paired, 0.05).first, 1e-12);
  expect_within("host seconds per MoE layer under ep_overlap, none added", 0.1, host_of(paired, 0).first, 1e-12);
  // A dense model has no MoE layer to wait on.
  wl::JobSpec dense          = parse(llama8b());
  const double dense_forward = ops_of(dense).forward.seconds;
  dense.calibration.name     = "test";
  dense.calibration.moe_host = 0.1;
  dense.effects.kernel_gaps  = true;
  CHECK(ops_of(dense).forward.seconds == dense_forward);
}

TEST_CASE("Sustained clock: compute-bound GEMMs and attention run at the profile's clock fraction")
{
  const wl::JobSpec off         = parse(llama8b());
  wl::JobSpec on                = off;
  on.calibration.name           = "test";
  on.calibration.clock_fraction = 0.8;
  on.effects.sustained_clock    = true;
  const Ops a = ops_of(off), b = ops_of(on);
  double expected = 0;
  for (const auto& g : llama8b_forward_gemms(4096))
    expected += wl::gemm_cost(on.gpu, wl::Precision::bf16, g, 0.8).seconds -
                wl::gemm_cost(on.gpu, wl::Precision::bf16, g, 1).seconds;
  // Causal flash attention: 32 layers x 32 heads x s^2 x (128 + 128) FLOPs at the library's rate, / 0.8.
  const double attention = 32 * 32 * 4096.0 * 4096 * 256 / on.gpu.attention[0].forward;
  expected += attention * (1 / 0.8 - 1);
  expect_within("forward: what the clock adds", expected, b.forward.seconds - a.forward.seconds, 1e-9);
  expect_within("forward effect reported", expected, b.forward.effects.sustained_clock, 1e-9);
}

TEST_CASE("Attention by length: the measured curve's rate at the kernel's sequence length")
{
  const wl::JobSpec off          = parse(llama8b());
  wl::JobSpec on                 = off;
  on.effects.attention_by_length = true;
  const Ops a = ops_of(off), b = ops_of(on);
  const auto& flash2 = on.gpu.attention[0];
  REQUIRE(!flash2.sequences.empty());
  const double flops    = 32 * 32 * 4096.0 * 4096 * 256;
  const double expected = flops / flash2.rate(4096, false) - flops / flash2.forward;
  std::cout << "flash2 forward at 4096: " << flash2.rate(4096, false) / 1e12 << " TFLOP/s, at the reference "
            << flash2.forward / 1e12 << "\n";
  CHECK(flash2.rate(4096, false) != flash2.forward); // the curve differs from the reference at 4k
  expect_within("forward: attention at 4k instead of the reference", expected, b.forward.seconds - a.forward.seconds,
                1e-9);
  expect_within("forward effect reported", expected, b.forward.effects.attention_by_length, 1e-9);
  // The curve interpolates linearly in log2(s) between its points and is flat beyond its ends.
  const double mid = std::sqrt(flash2.sequences[0] * flash2.sequences[1]);
  expect_within("rate halfway (in log2) between the first two points",
                (flash2.forward_by_length[0] + flash2.forward_by_length[1]) / 2, flash2.rate(mid, false), 1e-12);
  CHECK(flash2.rate(flash2.sequences.back() * 4, true) == flash2.backward_by_length.back());
}

TEST_CASE("Attention by length under context parallelism: the length each variant's kernel sees")
{
  // Llama 3 8B, one 16K sequence over cp 4: gathered or ring K/V leave each rank s / cp queries (4K), Ulysses gives
  // it the whole sequence for a quarter of the heads (16K), a2a+p2p with all-to-all groups of 2 half of it (8K).
  const double s = 16384;
  struct Case {
    const char* comm;
    int a2a;
    double length;
  };
  for (const Case& c :
       {Case{"allgather", 1, s / 4}, Case{"ring", 1, s / 4}, Case{"a2a", 1, s}, Case{"a2a+p2p", 2, s / 2}}) {
    json j                        = llama8b();
    j["gpus"]                     = 4;
    j["parallelism"]              = {{"tp", 1}, {"cp", 4}, {"cp_comm", c.comm}};
    j["batch"]["sequence_length"] = s;
    if (c.a2a > 1)
      j["parallelism"]["cp_a2a"] = c.a2a;
    wl::JobSpec job                 = parse(j);
    job.effects.attention_by_length = true;
    const auto& flash2              = job.gpu.attention[0];
    // The rank's causal attention: 32 layers x 32 heads x s^2 x (128 + 128) FLOPs, a quarter of it.
    const double flops    = 32 * 32 * s * s * 256 / 4;
    const double expected = flops / flash2.rate(c.length, false) - flops / flash2.forward;
    double reported       = 0;
    const auto graph      = wl::build_step_graph(job, wl::BuildOptions{false});
    for (const auto& op : graph.stages[0].ops)
      if (op.kind == wl::OpKind::forward)
        reported += op.effects.attention_by_length;
    expect_within(std::string(c.comm) + ": forward effect at the kernel's length", expected, reported, 1e-9);
  }
  // The three lengths differ in rate, so a variant timed at another's length would fail above.
  const auto& flash2 = parse(llama8b()).gpu.attention[0];
  std::cout << "flash2 forward at 4K, 8K, 16K: " << flash2.rate(s / 4, false) / 1e12 << ", "
            << flash2.rate(s / 2, false) / 1e12 << ", " << flash2.rate(s, false) / 1e12 << " TFLOP/s\n";
  CHECK(flash2.rate(s / 4, false) != flash2.rate(s / 2, false));
  CHECK(flash2.rate(s / 2, false) != flash2.rate(s, false));
  CHECK(flash2.rate(s / 4, false) != flash2.rate(s, false));
}

TEST_CASE("Gradient clipping reads every local fp32 gradient once in the optimizer step")
{
  const wl::JobSpec off    = parse(llama8b());
  wl::JobSpec on           = off;
  on.effects.grad_clipping = true;
  const Ops a = ops_of(off), b = ops_of(on);
  const double params   = wl::count_params(on.model).total;
  const double expected = 4 * params / (on.gpu.hbm_bandwidth * on.gpu.elementwise_efficiency);
  expect_within("optimizer: 4 bytes per parameter at the element-wise rate", expected,
                b.optimizer.seconds - a.optimizer.seconds, 1e-9);
  expect_within("optimizer effect reported", expected, b.optimizer.effects.grad_clipping, 1e-12);
}

TEST_CASE("Gradients reduced in BF16 are cast up to fp32 main gradients in the optimizer step")
{
  // Llama 3 8B on one H100 (every parameter local): Adam's 30 bytes a parameter, and with a BF16 gradient buffer
  // 6 more (its 2-byte read and the fp32 main gradient's 4-byte write), at the element-wise rate.
  const wl::JobSpec fp32     = parse(llama8b());
  wl::JobSpec bf16           = fp32;
  bf16.gradient_reduce_bytes = 2;
  const Ops a = ops_of(fp32), b = ops_of(bf16);
  const double params = wl::count_params(fp32.model).total;
  const double rate   = fp32.gpu.hbm_bandwidth * fp32.gpu.elementwise_efficiency;
  expect_within("fp32 gradients: Adam's 30 bytes a parameter", 30 * params / rate, a.optimizer.seconds, 1e-9);
  expect_within("BF16 gradients: 6 bytes a parameter more", 6 * params / rate,
                b.optimizer.seconds - a.optimizer.seconds, 1e-9);
  expect_within("the step's HBM bytes", 36 * params, b.optimizer.hbm_bytes, 1e-12);
}

TEST_CASE("Data parallelism unit by unit: only the first unit's gather waits, the rest overlaps compute")
{
  json j                         = llama8b();
  j["gpus"]                      = 2;
  j["parallelism"]               = {{"tp", 1}, {"dp", 2}, {"data_parallel", "fsdp"}, {"reshard_after_forward", false}};
  j["batch"]["global_sequences"] = 2;
  const wl::JobSpec off          = parse(j);
  wl::JobSpec on                 = off;
  on.effects.dp_overlap_by_unit  = true;
  auto gathers                   = [](const wl::JobSpec& job) {
    std::vector<wl::Op> out;
    const auto graph = wl::build_step_graph(job, wl::BuildOptions{false});
    for (const auto& op : graph.stages[0].ops)
      if (op.kind == wl::OpKind::collective && op.purpose == wl::Purpose::param_gather)
        out.push_back(op);
    return out;
  };
  const auto a = gathers(off), b = gathers(on);
  REQUIRE(a.size() == 1);
  REQUIRE(b.size() == 2);
  // The lead unit: the largest layer and the embedding and output layer (one chunk holds them all).
  const double layer = 4096.0 * 4096 * 2 + 2 * 4096.0 * 1024 + 3 * 4096.0 * 14336 + 2 * 4096;
  const double extra = 2 * 128256.0 * 4096 + 4096;
  const double total = 32 * layer + extra;
  expect_within("lead gather bytes", 2 * (layer + extra), b[0].bytes, 1e-12);
  expect_within("the rest", 2 * (total - layer - extra), b[1].bytes, 1e-12);
  expect_within("bytes kept", a[0].bytes, b[0].bytes + b[1].bytes, 1e-12);
}

TEST_CASE("Measured GEMM times: exact rows, interpolation of the achieved rate, the model outside")
{
  json j                = llama8b();
  j["measured_kernels"] = {{"gemm", "measured/gemm.csv"}, {"attention", "measured/attention.csv"}};
  const wl::JobSpec job = parse(j);
  const auto& mk        = job.gpu.measured;
  REQUIRE(mk.gemm.size() == 2);
  CHECK(mk.gemm_seconds(wl::Precision::bf16, 1024, 4096, 4096) == Approx(1e-4).epsilon(1e-12));
  CHECK(mk.gemm_seconds(wl::Precision::bf16, 4096, 4096, 4096) == Approx(2e-4).epsilon(1e-12));
  // Halfway in log2(M): equal weights, so the mean of the two achieved rates.
  const double r1 = 2 * 1024.0 * 4096 * 4096 / 1e-4, r2 = 2 * 4096.0 * 4096 * 4096 / 2e-4;
  expect_within("M = 2048 between the rows", 2 * 2048.0 * 4096 * 4096 / ((r1 + r2) / 2),
                *mk.gemm_seconds(wl::Precision::bf16, 2048, 4096, 4096), 1e-12);
  CHECK_FALSE(mk.gemm_seconds(wl::Precision::bf16, 8192, 4096, 4096)); // beyond the measured M
  CHECK_FALSE(mk.gemm_seconds(wl::Precision::bf16, 2048, 4096, 8192)); // another K
  CHECK_FALSE(mk.gemm_seconds(wl::Precision::fp8, 1024, 4096, 4096));  // no fp8 rows
  // In the step: the O projection (4096 x 4096 x 4096) of each of the 32 layers takes the measured time.
  const wl::JobSpec plain = parse(llama8b());
  const Ops a = ops_of(plain), b = ops_of(job);
  const double model_o = wl::gemm_cost(plain.gpu, wl::Precision::bf16, {.m = 4096, .n = 4096, .k = 4096}).seconds;
  // Attention: the table's 4096-token forward, per layer.
  const double flash = 32 * 32 * 4096.0 * 4096 * 256 / plain.gpu.attention[0].forward;
  expect_within("forward with the table", a.forward.seconds + 32 * (2e-4 - model_o) + (32 * 1e-3 - flash),
                b.forward.seconds, 1e-9);
}

TEST_CASE("Measured attention times interpolate over sequence length")
{
  json j                = llama8b();
  j["measured_kernels"] = {{"attention", "measured/attention.csv"}};
  const auto& mk        = parse(j).gpu.measured;
  auto flops            = [](double s) { return 2 * s * s * 128 * 32; };
  const double r1 = flops(4096) / 1e-3, r2 = flops(16384) / 12e-3;
  expect_within("forward at 8192", flops(8192) / ((r1 + r2) / 2), *mk.attention_seconds(false, 8192, 32, 128), 1e-12);
  CHECK(mk.attention_seconds(true, 4096, 32, 128) == Approx(2.5e-3).epsilon(1e-12));
  CHECK_FALSE(mk.attention_seconds(false, 32768, 32, 128));
  CHECK_FALSE(mk.attention_seconds(false, 8192, 8, 128));
}

TEST_CASE("Bad measured tables are refused with the file and line")
{
  auto error_of = [](const json& measured) {
    json j                = llama8b();
    j["measured_kernels"] = measured;
    try {
      parse(j);
    } catch (const spansim::SpecError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto header = error_of({{"gemm", "measured/bad_header.csv"}});
  INFO(header);
  CHECK(header.find("bad_header.csv") != std::string::npos);
  CHECK(header.find("the header must be \"op,m,n,k,dtype,seconds\"") != std::string::npos);
  const auto value = error_of({{"gemm", "measured/bad_value.csv"}});
  INFO(value);
  CHECK(value.find("line 2") != std::string::npos);
  CHECK(value.find("seconds: \"-1\" is not a number greater than zero") != std::string::npos);
  const auto missing = error_of({{"gemm", "measured/none.csv"}});
  INFO(missing);
  CHECK(missing.find("$.measured_kernels.gemm") != std::string::npos);
  const auto unknown = error_of({{"gemms", "measured/gemm.csv"}});
  INFO(unknown);
  CHECK(unknown.find("unknown key \"gemms\"") != std::string::npos);
}

TEST_CASE("The shipped H100 kernel tables load, and the GPU file's rates lie near them at the reference shapes")
{
  json j                = llama8b();
  const std::string dir = std::string(SPANSIM_SOURCE_DIR) + "/workload/gpus/measured/h100-sxm/";
  j["measured_kernels"] = {{"gemm", dir + "gemm.csv"}, {"attention", dir + "attention-flash.csv"}};
  const wl::JobSpec job = parse(j);
  const auto& mk        = job.gpu.measured;
  CHECK(mk.gemm.size() == 768);
  // The GPU file's BF16 ceiling (ml-engineering's MAMF, 794.5 TFLOP/s) against the best measured shape.
  double best = 0;
  for (const auto& g : mk.gemm)
    if (g.dtype == wl::Precision::bf16)
      best = std::max(best, 2 * g.m * g.n * g.k / g.seconds);
  expect_within("BF16 GEMM ceiling", job.gpu.gemm.ceiling_bf16, best, 0.05);
  // FlashAttention-2's causal forward at 8K (arXiv 2407.08608 Fig. 5d) against SDPA's flash backend, 16 heads.
  const double fwd = 2 * 8192.0 * 8192 * 128 * 16 / *mk.attention_seconds(false, 8192, 16, 128);
  expect_within("flash forward at 8K", job.gpu.attention[0].forward, fwd, 0.05);
}
