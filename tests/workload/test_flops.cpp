// Model FLOPs under the three conventions against hand sums for Llama 3 405B at 8K and 128K tokens, and the step
// graph's own FLOPs against the causal closed form.
#include "workload/workload.hpp"

#include "tests/support.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>

namespace wl = spansim::workload;
using nlohmann::json;
using spansim::test::expect_within;

namespace {

wl::JobSpec llama405b(int sequence, int global_sequences)
{
  json j = {{"model", "llama3-405b"},
            {"gpu", "h100"},
            {"gpus", 8},
            {"parallelism", {{"tp", 8}}},
            {"batch", {{"global_sequences", global_sequences}, {"sequence_length", sequence}}},
            {"schedule", {{"kind", "gpipe"}}}};
  return wl::parse_job(j, "test.json");
}

} // namespace

TEST_CASE("Causal, Megatron and torchtitan FLOPs of Llama 3 405B equal hand sums at 8K and 128K")
{
  // Llama 3 405B: 126 layers, hidden 16384, 128 heads of 128, 8 KV heads, SwiGLU 53248, vocabulary 128256,
  // untied output layer (arXiv 2407.21783 Table 3).
  const double L = 126, h = 16384, a = 128, g = 8, d = 128, f = 53248, V = 128256;
  const double attention_params = 2 * h * a * d + 2 * h * g * d; // Q, O; K, V
  const double matmul_active    = L * (attention_params + 3 * h * f) + V * h;
  const double torchtitan_n     = matmul_active + L * 2 * h + h; // plus the norms, less the input embedding
  for (int s : {8192, 131072}) {
    const auto job        = llama405b(s, 2);
    const double tokens   = 2.0 * s;
    const double causal   = tokens * (6 * matmul_active + 3 * L * a * s * 2 * d);
    const double megatron = tokens * (12 * h * h * L * (1 + g / a + s / h) + 12 * h * L * f * 1.5 + 6 * h * V);
    const double titan    = tokens * (6 * torchtitan_n + 12 * L * a * d * s);
    const auto counts     = wl::model_flop_counts(job, tokens * wl::causal_flops_per_token(job.model, s));
    const std::string at  = " at " + std::to_string(s) + " tokens";
    expect_within("causal" + at, causal, counts.causal, 1e-12);
    expect_within("megatron" + at, megatron, counts.megatron, 1e-12);
    expect_within("torchtitan" + at, titan, counts.torchtitan, 1e-12);
    // Full attention counts twice the causal score work: the gap grows with the sequence (1.40 at 128K).
    std::cout << "torchtitan / causal" << at << ": " << counts.torchtitan / counts.causal << "\n";
  }
}

TEST_CASE("The step graph's model FLOPs equal the causal closed form")
{
  for (int s : {8192, 131072}) {
    const auto job     = llama405b(s, 2);
    const auto graph   = wl::build_step_graph(job, wl::BuildOptions{false});
    const auto summary = wl::summarize(graph);
    expect_within("graph FLOPs at " + std::to_string(s), 2.0 * s * wl::causal_flops_per_token(job.model, s),
                  summary.model_flops, 1e-9);
  }
}
