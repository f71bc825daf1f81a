// Job, model and GPU specs: the zoo against the published shapes, units, and every kind of inconsistent job refused
// with a SpecError at the right JSON path.
#include "common/error.hpp"
#include "tests/support.hpp"
#include "workload/workload.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace wl = spansim::workload;
using nlohmann::json;
using spansim::test::expect_within;

namespace {

const std::string kSource = SPANSIM_SOURCE_DIR;

// Parameters of a GQA transformer with a gated MLP, from the shapes alone: per layer Q and O (h x h), K and V
// (h x kv*hd each), gate/up/down (3 h f), two norms (2h); input embedding, output head, final norm.
double dense_gqa_params(double L, double h, double f, double heads, double kv, double vocab, bool tied)
{
  const double hd = h / heads;
  return L * (2 * h * h + 2 * h * kv * hd + 3 * h * f + 2 * h) + vocab * h * (tied ? 1 : 2) + h;
}

// A GPU file in the current format, to break one field at a time.
json inline_gpu()
{
  return {{"name", "x"},
          {"peak_bf16", "989TFLOPs"},
          {"peak_fp8", "1979TFLOPs"},
          {"hbm_bandwidth", "3.35TB/s"},
          {"hbm_capacity", "80GiB"},
          {"gemm",
           {{"ceiling_bf16", "794.5TFLOPs"},
            {"ceiling_fp8", "1402.6TFLOPs"},
            {"sms", 132},
            {"tiles", json::array({json::array({128, 256})})}}},
          {"attention", {{"default", "flash2"}, {"flash2", {{"forward", "333TFLOPs"}, {"backward", "318TFLOPs"}}}}},
          {"efficiency", {{"elementwise", 0.8}}}};
}

} // namespace

TEST_CASE("FLOP rates parse with their units")
{
  expect_within("989TFLOPs", 989e12, wl::parse_flop_rate("989TFLOPs"), 1e-12);
  expect_within("2.25PFLOPs", 2.25e15, wl::parse_flop_rate("2.25PFLOPs"), 1e-12);
  expect_within("500 GFLOP/s", 500e9, wl::parse_flop_rate("500 GFLOP/s"), 1e-12);
  CHECK_THROWS_AS(wl::parse_flop_rate("989TB/s"), spansim::UsageError);
  CHECK_THROWS_AS(wl::parse_flop_rate("TFLOPs"), spansim::UsageError);
}

TEST_CASE("Dense zoo models match their shapes and published sizes")
{
  struct Case {
    const char* name;
    double L, h, f, heads, kv, vocab;
    bool tied;
    double published; // total parameters as announced
  };
  // Llama 3: arXiv 2407.21783 Table 3; GPT-3: arXiv 2005.14165 Table 2.1 (biases not modeled: 0.1% of 175B).
  const Case cases[] = {{"llama3-8b", 32, 4096, 14336, 32, 8, 128256, false, 8.03e9},
                        {"llama3-70b", 80, 8192, 28672, 64, 8, 128256, false, 70.6e9},
                        {"llama3-405b", 126, 16384, 53248, 128, 8, 128256, false, 405e9},
                        {"gpt3-175b", 96, 12288, 49152, 96, 96, 50257, true, 175e9}};
  for (const auto& c : cases) {
    const wl::ModelSpec m   = wl::load_model(c.name);
    const wl::ModelParams p = wl::count_params(m);
    double expected         = dense_gqa_params(c.L, c.h, c.f, c.heads, c.kv, c.vocab, c.tied);
    if (m.mlp == wl::MlpKind::plain) // GPT-3: two MLP matrices, not three
      expected -= c.L * c.h * c.f;
    expect_within(std::string(c.name) + " params vs closed form", expected, p.total, 1e-12);
    expect_within(std::string(c.name) + " params vs published", c.published, p.total, 0.01);
    expect_within(std::string(c.name) + " dense: active == total", p.total, p.active, 1e-12);
  }
}

TEST_CASE("MoE zoo models match their published total and active sizes")
{
  // Llama 4 (model card): Scout 109B total / 17B active, Maverick ~400B / 17B. DeepSeek-V3 (arXiv 2412.19437):
  // 671B total / 37B active (the 14B multi-token-prediction module excluded, as here).
  struct Case {
    const char* name;
    double total, active, tolerance;
  };
  const Case cases[] = {
      {"llama4-scout", 109e9, 17e9, 0.03}, {"llama4-maverick", 400e9, 17e9, 0.03}, {"deepseek-v3", 671e9, 37e9, 0.03}};
  for (const auto& c : cases) {
    const wl::ModelParams p = wl::count_params(wl::load_model(c.name));
    expect_within(std::string(c.name) + " total", c.total, p.total, c.tolerance);
    expect_within(std::string(c.name) + " active", c.active, p.active, c.tolerance);
  }

  // Scout, exactly: 48 layers of attention (2 h^2 + 2 h 1024) and 17 SwiGLU experts of 3 h 8192 (16 routed +
  // 1 shared) plus the router, norms; untied embeddings.
  const double h = 5120, e = 3 * h * 8192, attn = 2 * h * h + 2 * h * 8 * 128;
  const double scout = 48 * (attn + 17 * e + h * 16 + 2 * h) + 2 * 202048.0 * h + h;
  expect_within("llama4-scout params vs closed form", scout, wl::count_params(wl::load_model("llama4-scout")).total,
                1e-12);
  // Maverick alternates: 24 dense layers (FFN 16384) and 24 MoE layers (128 routed + 1 shared).
  const double mav =
      24 * (attn + 3 * h * 16384 + 2 * h) + 24 * (attn + 129 * e + h * 128 + 2 * h) + 2 * 202048.0 * h + h;
  expect_within("llama4-maverick params vs closed form", mav, wl::count_params(wl::load_model("llama4-maverick")).total,
                1e-12);
  const wl::ModelSpec mv = wl::load_model("llama4-maverick");
  CHECK_FALSE(mv.is_moe_layer(0));
  CHECK(mv.is_moe_layer(1));
  const wl::ModelSpec ds = wl::load_model("deepseek-v3");
  CHECK_FALSE(ds.is_moe_layer(2));
  CHECK(ds.is_moe_layer(3));
}

TEST_CASE("GPU zoo reads peaks with units")
{
  const wl::GpuSpec h100 = wl::load_gpu("h100");
  expect_within("h100 bf16", 989e12, h100.peak_bf16_flops, 1e-12);
  expect_within("h100 fp8", 1979e12, h100.peak_fp8_flops, 1e-12);
  expect_within("h100 HBM bandwidth", 3.35e12, h100.hbm_bandwidth, 1e-12);
  expect_within("h100 HBM", 80.0 * 1024 * 1024 * 1024, h100.hbm_capacity, 1e-12);
  for (const char* g : {"h100", "h200", "b200"}) {
    const wl::GpuSpec s = wl::load_gpu(g);
    INFO(g << " must say where its efficiency factors come from");
    CHECK(s.source.find("fficiency") != std::string::npos);
    CHECK(s.gemm.ceiling_bf16 > 0);
    CHECK(s.gemm.ceiling_bf16 <= s.peak_bf16_flops);
    CHECK(s.gemm.sms > 0);
    CHECK_FALSE(s.gemm.tiles.empty());
  }
  CHECK(wl::load_gpu("b200").peak_bf16_flops > h100.peak_bf16_flops);
}

TEST_CASE("Example jobs parse, and the Llama 3 405B one is the paper's configuration")
{
  const wl::JobSpec j = wl::load_job(kSource + "/examples/jobs/llama3-405b-8k-h100.json");
  CHECK(j.gpus == 8192);
  CHECK(j.parallelism.tp == 8);
  CHECK(j.parallelism.cp == 1);
  CHECK(j.parallelism.pp == 16);
  CHECK(j.parallelism.dp == 64);
  CHECK(j.batch.sequence_length == 8192);
  CHECK(j.tokens_per_step() == 16.0 * 1024 * 1024);
  CHECK(j.schedule.kind == wl::ScheduleKind::interleaved_1f1b);
  CHECK(j.parallelism.dp_mode == wl::DataParallelMode::fsdp);
  CHECK_FALSE(j.parallelism.reshard_after_forward);
  // 16M tokens / 8192 per sequence / 64 replicas / micro-batch 1.
  CHECK(j.micro_batches() == 16 * 1024 * 1024 / 8192 / 64);
}

TEST_CASE("Every example job parses and fits in its GPUs' memory")
{
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(kSource + "/examples/jobs")) {
    if (e.path().extension() != ".json")
      continue;
    INFO(e.path().string());
    const wl::JobSpec j   = wl::load_job(e.path().string());
    const wl::StepGraph g = wl::build_step_graph(j); // refuses a job that does not fit
    CHECK(g.stages.size() == std::size_t(j.parallelism.pp));
    ++n;
  }
  CHECK(n >= 5);
}

namespace {

json good_job()
{
  return json::parse(R"({
    "model": "llama3-8b", "gpu": "h100", "gpus": 16,
    "parallelism": {"tp": 2, "cp": 1, "pp": 4, "dp": 2},
    "batch": {"global_sequences": 32, "sequence_length": 4096, "micro_batch": 1},
    "schedule": {"kind": "1f1b"}
  })");
}

void expect_spec_error(const json& j, const std::string& path, const std::string& fragment)
{
  INFO("expected a SpecError at " << path << " mentioning \"" << fragment << "\" for " << j.dump());
  try {
    wl::parse_job(j, "job.json");
    FAIL("the job was accepted");
  } catch (const spansim::SpecError& e) {
    INFO("actual: path " << e.json_path() << ", message " << e.what());
    CHECK(e.json_path() == path);
    CHECK(std::string(e.what()).find(fragment) != std::string::npos);
  }
}

} // namespace

TEST_CASE("The reference inconsistent-job fixture is valid once repaired")
{
  REQUIRE_NOTHROW(wl::parse_job(good_job(), "job.json"));
}

TEST_CASE("Inconsistent jobs are refused at the offending JSON path")
{
  json j    = good_job();
  j["gpus"] = 32;
  expect_spec_error(j, "$.parallelism", "= 16 but gpus is 32");

  j                      = good_job();
  j["parallelism"]["tp"] = 3;
  j["gpus"]              = 24;
  expect_spec_error(j, "$.parallelism.tp", "heads 32 are not divisible by tp 3");

  j                              = good_job();
  j["batch"]["global_sequences"] = 6; // 3 micro-batches per replica, 4 stages
  expect_spec_error(j, "$.batch", "fewer than the 4 pipeline stages");

  j             = good_job();
  j["schedule"] = {{"kind", "interleaved-1f1b"}, {"virtual_stages", 1}};
  expect_spec_error(j, "$.schedule.virtual_stages", "needs virtual_stages >= 2");

  j             = good_job();
  j["schedule"] = {{"kind", "gpipe"}, {"virtual_stages", 2}};
  expect_spec_error(j, "$.schedule.virtual_stages", "must be 1");

  j             = good_job();
  j["schedule"] = {{"kind", "interleaved-1f1b"}, {"virtual_stages", 2}, {"microbatch_group", 3}};
  expect_spec_error(j, "$.schedule.microbatch_group", "between pp 4");

  j             = good_job();
  j["schedule"] = {{"kind", "interleaved-1f1b"}, {"virtual_stages", 16}};
  expect_spec_error(j, "$.schedule.virtual_stages", "32 layers cannot fill");

  j                              = good_job();
  j["parallelism"]["cp"]         = 2;
  j["parallelism"]["dp"]         = 1;
  j["batch"]["sequence_length"]  = 4098;
  j["batch"]["global_sequences"] = 16;
  expect_spec_error(j, "$.batch.sequence_length", "not divisible by 2 x cp = 4");

  j                              = good_job();
  j["batch"]["global_sequences"] = 33;
  expect_spec_error(j, "$.batch.global_sequences", "not divisible by dp x micro_batch = 2");

  j = good_job();
  j["batch"].erase("global_sequences");
  j["batch"]["global_tokens"] = 4096 * 32 + 1;
  expect_spec_error(j, "$.batch.global_tokens", "not a multiple of sequence_length");

  j                      = good_job();
  j["parallelism"]["ep"] = 2;
  expect_spec_error(j, "$.parallelism.ep", "needs a mixture-of-experts model");

  j                              = good_job();
  j["model"]                     = "llama4-scout";
  j["parallelism"]["ep"]         = 3;
  j["parallelism"]["dp"]         = 6;
  j["gpus"]                      = 48;
  j["batch"]["global_sequences"] = 48;
  expect_spec_error(j, "$.parallelism.ep", "experts 16 are not divisible by ep 3");

  j                                   = good_job();
  j["parallelism"]["data_parallel"]   = "hsdp";
  j["parallelism"]["hsdp_shard_size"] = 3;
  expect_spec_error(j, "$.parallelism.hsdp_shard_size", "dp 2 is not divisible by hsdp_shard_size 3");

  j                                         = good_job();
  j["parallelism"]["data_parallel"]         = "ddp";
  j["parallelism"]["reshard_after_forward"] = true;
  expect_spec_error(j, "$.parallelism.reshard_after_forward", "only meaningful");

  j                         = good_job();
  j["parallelism"]["order"] = {"tp", "pp", "dp"};
  expect_spec_error(j, "$.parallelism.order", "each of");

  j          = good_job();
  j["model"] = "llama3-9000b";
  expect_spec_error(j, "$.model", "unknown model \"llama3-9000b\"");

  j              = good_job();
  j["precision"] = {{"compute", "fp8"}};
  j["gpu"]       = inline_gpu();
  j["gpu"].erase("peak_fp8");
  j["gpu"]["gemm"].erase("ceiling_fp8");
  expect_spec_error(j, "$.precision.compute", "has no fp8 tensor cores");

  // An inline GPU with one entry set wrong, the GEMM and attention measurements among them: refused with the path
  // and the allowed values.
  struct BadGpuEntry {
    json::json_pointer entry;
    json value;
    std::string path;
    std::string message;
  };
  const std::vector<BadGpuEntry> bad_gpu_entries = {
      {json::json_pointer("/peak_bf16"), "989TB/s", "$.gpu.peak_bf16", "invalid FLOP rate"},
      {json::json_pointer("/efficiency/matmul"), 0.75, "$.gpu.efficiency.matmul", "replaced by the \"gemm\" object"},
      {json::json_pointer("/gemm/ceiling_bf16"), "1000TFLOPs", "$.gpu.gemm.ceiling_bf16",
       "exceeds peak_bf16 (989.0 TFLOP/s)"},
      {json::json_pointer("/gemm/ceiling_fp8_blockwise"), "2000TFLOPs", "$.gpu.gemm.ceiling_fp8_blockwise",
       "exceeds peak_fp8 (1979.0 TFLOP/s)"},
      {json::json_pointer("/gemm/tiles"), json::array({json::array({128, 256}), json::array({128})}),
       "$.gpu.gemm.tiles[1]", "expected [M, N]"},
      {json::json_pointer("/attention/default"), "flash3", "$.gpu.attention.default",
       "\"flash3\" has no rates here (listed: \"flash2\")"},
      {json::json_pointer("/attention/flash5"),
       {{"forward", "600TFLOPs"}, {"backward", "500TFLOPs"}},
       "$.gpu.attention",
       "unknown key \"flash5\""},
  };
  for (const auto& bad : bad_gpu_entries) {
    j                   = good_job();
    j["gpu"]            = inline_gpu();
    j["gpu"][bad.entry] = bad.value;
    expect_spec_error(j, bad.path, bad.message);
  }

  j            = good_job();
  j["kernels"] = {{"attention", "xformers"}};
  expect_spec_error(j, "$.kernels.attention",
                    "unknown value \"xformers\" (allowed: \"flash2\", \"flash3\", \"cudnn\", \"flash4\", "
                    "\"triton\", \"unfused\")");

  j            = good_job();
  j["gpu"]     = "b200";
  j["kernels"] = {{"attention", "flash3"}};
  expect_spec_error(j, "$.kernels.attention", "GPU b200 gives no rates for \"flash3\" (listed: \"cudnn\")");
  j["kernels"] = {{"attention", "triton"}};
  expect_spec_error(j, "$.kernels.attention", "GPU b200 gives no rates for \"triton\" (listed: \"cudnn\")");
  j["kernels"] = {{"gemm", "cutlass"}};
  expect_spec_error(j, "$.kernels.gemm", "unknown value \"cutlass\" (allowed: \"cublas\", \"deepgemm\")");
  j["kernels"] = {{"gemm", "deepgemm"}};
  expect_spec_error(j, "$.kernels.gemm", "GPU b200 gives no DeepGEMM rates (gemm.deepgemm)");
  j            = good_job();
  j["kernels"] = {{"gemm", "deepgemm"}};
  expect_spec_error(j, "$.kernels.gemm", "DeepGEMM runs FP8 with block-wise scaling only");

  j            = good_job();
  j["kernels"] = {{"matmul", "cublas"}};
  expect_spec_error(j, "$.kernels", "unknown key \"matmul\"");
  expect_spec_error(j, "$.kernels", "attention");

  j          = good_job();
  j["model"] = {{"name", "odd"}, {"layers", 4},   {"hidden", 512}, {"ffn", 1024},
                {"heads", 8},    {"kv_heads", 3}, {"vocab", 1000}};
  expect_spec_error(j, "$.model.kv_heads", "must divide heads 8");

  j                          = good_job();
  j["parallelism"]["tensor"] = 2;
  expect_spec_error(j, "$.parallelism", "unknown key \"tensor\"");

  // Values big enough to overflow 32-bit arithmetic are refused, not wrapped.
  j             = good_job();
  j["schedule"] = {{"kind", "interleaved-1f1b"}, {"virtual_stages", 1 << 30}};
  expect_spec_error(j, "$.schedule.virtual_stages", "32 layers cannot fill");

  j                              = good_job();
  j["batch"]["global_sequences"] = std::int64_t{1} << 40;
  expect_spec_error(j, "$.batch.global_sequences", "at most 1000000 are supported");

  j          = good_job();
  j["model"] = "llama9-1t";
  expect_spec_error(j, "$.model", "unknown model \"llama9-1t\" (zoo: deepseek-v3");
}

TEST_CASE("Bad job files are refused with the JSON path of the problem")
{
  struct Case {
    const char* file;
    const char* path;
    const char* fragment;
  };
  const Case cases[] = {{"bad_degrees.json", "$.parallelism", "but gpus is 8192"},
                        {"bad_heads_tp.json", "$.parallelism.tp", "not divisible by tp 6"},
                        {"bad_1f1b_microbatches.json", "$.batch", "fewer than the 16 pipeline stages"},
                        {"bad_unknown_key.json", "$.batch", "unknown key \"tokens\""},
                        {"bad_schedule.json", "$.schedule.kind", "unknown value \"zero-bubble\""},
                        {"bad_model_file.json", "$.moe.experts_per_token", "exceeds experts 4"}};
  for (const auto& c : cases) {
    const std::string file = kSource + "/tests/workload/data/" + c.file;
    INFO(file << ": expected " << c.path << " / " << c.fragment);
    try {
      wl::load_job(file);
      FAIL("accepted");
    } catch (const spansim::SpecError& e) {
      INFO("actual " << e.json_path() << ": " << e.what());
      CHECK(e.json_path() == c.path);
      CHECK(std::string(e.what()).find(c.fragment) != std::string::npos);
    }
  }
}
