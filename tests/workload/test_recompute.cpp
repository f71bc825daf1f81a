// Megatron's recompute modules: what each re-runs before the backward and what it frees, by hand; the spec's errors.
#include "common/error.hpp"
#include "roofline.hpp"
#include "tests/support.hpp"
#include "workload/cost_model.hpp"
#include "workload/workload.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace wl = spansim::workload;
using nlohmann::json;
using spansim::test::expect_within;

namespace {

// DeepSeek-V3 (61 layers: 3 dense, 58 MoE; MLA) on one stage of 8 H100, EP 8, one 4K sequence a micro-batch, BF16,
// the roofline model (no gaps, full clock); `modules` under selective recompute (none: no recompute).
json deepseek(const std::vector<std::string>& modules)
{
  json j = {{"model", "deepseek-v3"},
            {"gpu", "h100"},
            {"gpus", 8},
            {"parallelism", {{"tp", 1}, {"pp", 1}, {"dp", 8}, {"ep", 8}}},
            {"batch", {{"global_sequences", 8}, {"sequence_length", 4096}, {"micro_batch", 1}}},
            {"schedule", {{"kind", "1f1b"}}},
            {"recompute", modules.empty() ? "none" : "selective"}};
  if (!modules.empty())
    j["recompute_modules"] = modules;
  return workload_test::roofline(j);
}

struct Chunk {
  double recompute   = 0; ///< seconds
  double attention   = 0; ///< the chunk's attention forward, seconds
  double activations = 0; ///< bytes kept per micro-batch
  double mem_rate    = 0; ///< element-wise bytes/s
};

Chunk chunk_of(const std::vector<std::string>& modules)
{
  const wl::JobSpec job = wl::parse_job(deepseek(modules), "recompute.json");
  const wl::detail::Context c(job);
  const auto chunks = wl::detail::chunk_costs(c);
  return {chunks[0].recompute_seconds, chunks[0].attention_fwd_seconds, wl::detail::stored_activations(c, chunks[0]),
          job.gpu.hbm_bandwidth * job.gpu.elementwise_efficiency};
}

} // namespace

TEST_CASE("Recompute modules re-run their forward and free their activations: a hand count per module")
{
  // Per token, in BF16 elements: hidden h 7168; Q 128 heads x 192, K and V 128 x (192 + 128); the attention output
  // 128 x 128; the dense layers' SwiGLU 3 x 18432 (gate, up, product), a MoE layer's routed experts' 8 x 2048 (the
  // product only: moe_act discards the activation's output) and its shared expert's 3 x 2048.
  const double t = 4096 * 2.0, h = 7168, layers = 61, dense = 3, moe = 58;
  const double q = 128 * 192, kv = 128 * (192 + 128), o = 128 * 128;
  const Chunk none = chunk_of({});
  struct Case {
    const char* module;
    double freed;
  };
  for (const Case& k : {Case{"core_attn", layers * t * o}, Case{"layernorm", layers * t * 2 * h},
                        Case{"mla_up_proj", layers * t * (q + kv)}, Case{"mlp", dense * t * 3 * 18432},
                        Case{"moe_act", moe * t * 8 * 2048}, Case{"shared_experts", moe * t * 3 * 2048}})
    expect_within(std::string("activations freed by ") + k.module, k.freed,
                  none.activations - chunk_of({k.module}).activations, 1e-12);

  // The whole MoE layer: the expert intermediates (3 x (8 + 1) x 2048) and the rank's token copies (8 x h).
  expect_within("activations freed by moe", moe * t * (3 * 9 * 2048 + 8 * h),
                none.activations - chunk_of({"moe"}).activations, 1e-12);
  // ...and its dispatch and combine run again before the backward: six all-to-alls a MoE layer instead of four.
  auto ep_bytes = [](const std::vector<std::string>& modules) {
    const wl::JobSpec job = wl::parse_job(deepseek(modules), "recompute.json");
    return wl::summarize(wl::build_step_graph(job, wl::BuildOptions{false})).traffic[wl::Dim::ep].per_gpu_max;
  };
  expect_within("ep bytes with moe recomputed", 1.5 * ep_bytes({}), ep_bytes({"moe"}), 1e-12);

  // The norms: both read and write a token's h, forward only.
  const Chunk norms = chunk_of({"layernorm"});
  expect_within("layernorm re-runs both norms", layers * t * 4 * h / norms.mem_rate, norms.recompute, 1e-12);
  // The core attention: the chunk's attention forward.
  const Chunk attention = chunk_of({"core_attn"});
  expect_within("core_attn re-runs the attention forward", attention.attention, attention.recompute, 1e-12);
  // MLA's two up-projections in BF16 (the GEMM model's own cost at full clock) and RoPE with the concatenation into
  // Q and K (read and written, q_rank wide each).
  const wl::JobSpec job = wl::parse_job(deepseek({}), "recompute.json");
  const double tokens   = 4096;
  const double up = wl::gemm_cost(job.gpu, wl::Precision::bf16, {.m = tokens, .n = 128 * 192, .k = 1536}).seconds +
                    wl::gemm_cost(job.gpu, wl::Precision::bf16, {.m = tokens, .n = 128 * 256, .k = 512}).seconds;
  const Chunk mla = chunk_of({"mla_up_proj"});
  expect_within("mla_up_proj re-runs the up-projections and RoPE", layers * (up + t * 4 * q / mla.mem_rate),
                mla.recompute, 1e-12);
  // Modules add up.
  expect_within("layernorm with mla_up_proj", norms.recompute + mla.recompute,
                chunk_of({"layernorm", "mla_up_proj"}).recompute, 1e-12);
}

TEST_CASE("Recompute modules the job cannot run are refused with the module and the allowed names")
{
  auto refused = [](json j, const std::string& needle) {
    try {
      wl::parse_job(j, "modules.json");
      FAIL("accepted: " + j.dump());
    } catch (const spansim::SpecError& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find("recompute_modules") != std::string::npos);
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  };
  refused(deepseek({"moe", "moe_act"}), "list one");
  json paired                         = deepseek({"moe"});
  paired["schedule"]                  = {{"kind", "interleaved-1f1b"}, {"virtual_stages", 2}, {"ep_overlap", true}};
  paired["parallelism"]["pp"]         = 2;
  paired["parallelism"]["dp"]         = 8;
  paired["gpus"]                      = 16;
  paired["batch"]["global_sequences"] = 32;
  refused(paired, "ep_overlap");
  refused(deepseek({"attention"}), "\"core_attn\", \"layernorm\"");
  refused(deepseek({"layernorm", "layernorm"}), "listed twice");
  json full         = deepseek({"layernorm"});
  full["recompute"] = "full";
  refused(full, "only with \"recompute\": \"selective\"");
  json llama           = deepseek({"mla_up_proj"});
  llama["model"]       = "llama3-8b";
  llama["parallelism"] = {{"tp", 1}, {"pp", 1}, {"dp", 8}};
  refused(llama, "no multi-latent attention");
  json qwen     = deepseek({"mlp"});
  qwen["model"] = "qwen3-30b-a3b";
  refused(qwen, "no dense MLP layer");
}
