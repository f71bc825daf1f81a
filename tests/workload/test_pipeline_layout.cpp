// Megatron's pipeline layouts (which layers each model chunk holds) and multi-token prediction modules: the chunks
// a layout gives, what an MTP module adds to the parameters, the FLOPs under each convention and the step graph,
// each against hand counts; and the layouts Megatron (or spansim) refuses, each with its JSON path.
#include "common/error.hpp"
#include "workload/workload.hpp"

#include "tests/support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

namespace wl = spansim::workload;
using nlohmann::json;
using spansim::test::expect_within;

namespace {

// DeepSeek-V3 (61 layers) on 64 GPUs: TP 2, PP 8 with 4 virtual stages, DP 4, EP 8 folded over TP x DP.
json deepseek(const std::string& layout, int mtp)
{
  json j = {{"model", "deepseek-v3"},
            {"gpu", "h100"},
            {"gpus", 64},
            {"parallelism", {{"tp", 2}, {"pp", 8}, {"dp", 4}, {"ep", 8}, {"etp", 1}}},
            {"batch", {{"global_sequences", 32}, {"sequence_length", 4096}}},
            {"schedule", {{"kind", "interleaved-1f1b"}, {"virtual_stages", 4}}},
            {"mtp_layers", mtp}};
  if (!layout.empty())
    j["parallelism"]["pipeline_layout"] = layout;
  return j;
}

json llama405b(int mtp)
{
  return {{"model", "llama3-405b"},
          {"gpu", "h100"},
          {"gpus", 8},
          {"parallelism", {{"tp", 8}}},
          {"batch", {{"global_sequences", 2}, {"sequence_length", 8192}}},
          {"schedule", {{"kind", "gpipe"}}},
          {"mtp_layers", mtp}};
}

} // namespace

TEST_CASE("A pipeline layout gives each chunk its layers and the MTP module sits in the last chunk")
{
  // DeepSeek-V3's Megatron-Bridge H100 layout: chunk 0 the embedding and one layer, 30 chunks of two, the last
  // chunk the MTP module and the loss. Chunk g = v x pp + stage, so stage 0 holds chunks 0, 8, 16, 24 and stage 7
  // chunks 7, 15, 23, 31.
  const auto graph =
      wl::build_step_graph(wl::parse_job(deepseek("Et|(tt|)*30mL", 1), "test.json"), wl::BuildOptions{false});
  REQUIRE(graph.stages.size() == 8);
  for (const auto& st : graph.stages) {
    std::vector<int> expected{2, 2, 2, 2};
    if (st.stage == 0)
      expected[0] = 1;
    if (st.stage == 7)
      expected[3] = 1; // the MTP module's transformer layer
    std::cout << "stage " << st.stage << ": chunk layers";
    for (int n : st.chunk_layers)
      std::cout << " " << n;
    std::cout << "\n";
    CHECK(st.chunk_layers == expected);
  }
  // A layout without MTP, with the cosmetic comma of Megatron's examples: the last chunk one layer and the loss.
  json j                          = deepseek("Etttt|(tttt|)*14,tL", 0);
  j["schedule"]["virtual_stages"] = 2;
  const auto g2                   = wl::build_step_graph(wl::parse_job(j, "test.json"), wl::BuildOptions{false});
  CHECK(g2.stages[7].chunk_layers == std::vector<int>{4, 1});
  CHECK(g2.stages[0].chunk_layers == std::vector<int>{4, 4});
  // Megatron's account_for_embedding_in_pipeline_split: the embedding alone in chunk 0. The chunk keeps its
  // pipeline sends, and the step its FLOPs (the causal closed form, as for any split).
  const auto j3 = wl::parse_job(deepseek("E|t|(tt|)*29,ttL", 0), "test.json");
  const auto g3 = wl::build_step_graph(j3, wl::BuildOptions{false});
  CHECK(g3.stages[0].chunk_layers == std::vector<int>{0, 2, 2, 2});
  CHECK(g3.stages[1].chunk_layers == std::vector<int>{1, 2, 2, 2});
  CHECK(g3.stages[7].chunk_layers == std::vector<int>{2, 2, 2, 2});
  expect_within("graph FLOPs with an embedding-only chunk",
                j3.tokens_per_step() * wl::causal_flops_per_token(j3.model, 4096), wl::summarize(g3).model_flops, 1e-9);
}

TEST_CASE("An MTP module adds its layer, eh_proj and norms to the parameters and its logits to the FLOPs")
{
  // Llama 3 405B: 126 layers, hidden 16384, 128 heads of 128, 8 KV heads, SwiGLU 53248, vocabulary 128256.
  const double h = 16384, a = 128, g = 8, d = 128, f = 53248, V = 128256, s = 8192, tokens = 2 * s;
  const auto without = wl::parse_job(llama405b(0), "test.json");
  const auto with    = wl::parse_job(llama405b(1), "test.json");
  const double layer = 2 * h * a * d + 2 * h * g * d + 3 * h * f; // attention and MLP weights
  const double mtp   = 2 * h * h + 3 * h;                         // eh_proj (2h -> h) and three norms
  expect_within("MTP parameters", layer + 2 * h + mtp,
                wl::count_params(with.model).total - wl::count_params(without.model).total, 1e-12);
  // Causal: six FLOPs per weight of the layer, eh_proj and the output projection again, and the layer's attention.
  const double causal = 6 * (layer + 2 * h * h + V * h) + 3 * a * s * 2 * d;
  expect_within("causal FLOPs per token", causal,
                wl::causal_flops_per_token(with.model, s) - wl::causal_flops_per_token(without.model, s), 1e-12);
  // Megatron-LM's num_floating_point_operations: one more layer, the MTP norms and eh_proj, the logits again.
  const double megatron = 12 * h * h * (1 + g / a + s / h) + 12 * h * f * 1.5 + 6 * (3 * h + 2 * h * h) + 6 * h * V;
  const auto c1         = wl::model_flop_counts(with, tokens * wl::causal_flops_per_token(with.model, s));
  const auto c0         = wl::model_flop_counts(without, tokens * wl::causal_flops_per_token(without.model, s));
  expect_within("Megatron FLOPs", tokens * megatron, c1.megatron - c0.megatron, 1e-12);
  // The step graph costs the module as the closed form counts it.
  const auto summary = wl::summarize(wl::build_step_graph(with, wl::BuildOptions{false}));
  expect_within("graph FLOPs with MTP", tokens * wl::causal_flops_per_token(with.model, s), summary.model_flops, 1e-9);
}

TEST_CASE("Layouts Megatron or spansim cannot run are refused at parallelism.pipeline_layout")
{
  struct Case {
    std::string layout;
    int mtp;
    std::string says;
  };
  const std::vector<Case> cases{
      {"Et|(tt|)*29mL", 1, "31 chunks for pp 8 x 4 virtual stages"},
      {"Et|(tt|)*30tL", 0, "holds 62 decoder layers (t); the model has 61"},
      {"Et|(tt|)*30mL", 0, "holds 1 MTP modules (m); the job's mtp_layers is 0"},
      {"Em|(tt|)*30tL", 1, "chunk 0 holds an MTP module"},
      {"Et|(tt|)*30|L", 0, "33 chunks"},
      {"Et|(tt|)*28,tt||ttL", 0, "chunk 30 is empty"},
      {"tE|(tt|)*30tL", 0, "the embedding (E) must come once, first in chunk 0"},
      {"Et|(tt|)*30Lt", 0, "the loss (L) must come once, last in the last chunk"},
      {"Et|(tt|)*28,t|t|tmtL", 1, "decoder layers (t) must come before the MTP modules (m)"},
      {"Et|(tx|)*30mL", 1, "unknown layer character 'x'"},
      {"Et|(tt|*30mL", 1, "unknown layer character '('"},
      {"Et|(tt|)30mL", 1, "unknown layer character '('"}, // a group without its *n stays, as in Megatron
      {"EEt|(tt|)*30mL", 1, "the embedding (E) must come once"},
      {"Et|(tt|)*30mLL", 1, "the loss (L) must come once"},
      // Megatron unrolls x*n in one pass: the second '*' of t*2*1 is left over, as it is there.
      {"Et|(tt|)*29,t*2*1|mL", 1, "unknown layer character '*'"},
      // Unrolled without building what exceeds the limit, and in linear time.
      {"E|((t*9)*999999)*999999|L", 0, "10M characters"},
      {"E|(t*1)*999999|L", 0, "3 chunks for pp 8"},
  };
  for (const auto& c : cases) {
    INFO(c.layout);
    const json j = deepseek(c.layout, c.mtp);
    CHECK_THROWS_WITH(wl::parse_job(j, "test.json"), Catch::Contains("pipeline_layout") && Catch::Contains(c.says));
  }
  json paired                      = deepseek("E|t|(tt|)*29,ttL", 0);
  paired["schedule"]["ep_overlap"] = true;
  CHECK_THROWS_WITH(wl::parse_job(paired, "test.json"),
                    Catch::Contains("pipeline_layout") &&
                        Catch::Contains("chunk 0 (\"E\") holds no transformer layer"));
  json both                           = deepseek("Et|(tt|)*30mL", 1);
  both["parallelism"]["stage_layers"] = json::array({8, 8, 8, 8, 8, 8, 8, 5});
  CHECK_THROWS_WITH(wl::parse_job(both, "test.json"), Catch::Contains("either stage_layers or pipeline_layout"));
  json dual                                    = deepseek("Et|(tt|)*30mL", 1);
  dual["schedule"]                             = {{"kind", "dualpipev"}};
  dual["parallelism"]["reshard_after_forward"] = false;
  dual["batch"]["global_sequences"]            = 64;
  CHECK_THROWS_WITH(wl::parse_job(dual, "test.json"), Catch::Contains("pipeline_layout"));
  json empty                              = deepseek("", 0);
  empty["parallelism"]["pipeline_layout"] = "";
  CHECK_THROWS_WITH(wl::parse_job(empty, "test.json"), Catch::Contains("an empty layout"));
  // Leading zeros are a count like any other.
  CHECK_NOTHROW(wl::parse_job(deepseek("Et|(tt|)*0030mL", 1), "test.json"));
  json many = llama405b(17);
  CHECK_THROWS_WITH(wl::parse_job(many, "test.json"), Catch::Contains("mtp_layers"));
}

TEST_CASE("The MTP module's embedding copy is held where the last chunk is not on the first chunk's stage")
{
  // Llama 3 8B on pp 4: 1F1B puts the last chunk on stage 3, which builds an embedding of its own for the module;
  // DualPipeV's stage 0 holds the first and last chunks and shares one.
  const double h = 4096, V = 128256;
  auto stage_params = [](const std::string& kind, int mtp, int stage) {
    json j         = {{"model", "llama3-8b"},
                      {"gpu", "h100"},
                      {"gpus", 8},
                      {"parallelism", {{"tp", 1}, {"pp", 4}, {"dp", 2}, {"data_parallel", "ddp"}}},
                      {"batch", {{"global_sequences", 16}, {"sequence_length", 4096}}},
                      {"schedule", {{"kind", kind}}},
                      {"mtp_layers", mtp}};
    const auto job = wl::parse_job(j, "test.json");
    return wl::build_step_graph(job, wl::BuildOptions{false}).stages[static_cast<std::size_t>(stage)].params;
  };
  // What the module adds to the model's parameters (its layer, eh_proj and norms; tested by hand above).
  json without        = {{"model", "llama3-8b"},
                         {"gpu", "h100"},
                         {"gpus", 1},
                         {"batch", {{"global_sequences", 1}, {"sequence_length", 4096}}},
                         {"schedule", {{"kind", "gpipe"}}},
                         {"parallelism", json::object()}};
  json with           = without;
  with["mtp_layers"]  = 1;
  const double module = wl::count_params(wl::parse_job(with, "test.json").model).total -
                        wl::count_params(wl::parse_job(without, "test.json").model).total;
  expect_within("1f1b last stage: the module and an embedding copy", module + V * h,
                stage_params("1f1b", 1, 3) - stage_params("1f1b", 0, 3), 1e-12);
  expect_within("dualpipev first stage: the module alone", module,
                stage_params("dualpipev", 1, 0) - stage_params("dualpipev", 0, 0), 1e-12);
}

TEST_CASE("The embedding group's gradients are exchanged between the first and last stages before the optimizer")
{
  // Megatron's _allreduce_word_embedding_grads: where the last chunk holds a copy of the embedding (an MTP module's,
  // or a tied output layer) on another stage than the first chunk, the two stages all-reduce its gradient (vocab / tp
  // x hidden, in the gradient type) after the data-parallel reductions and before the optimizer step.
  auto job = [](const std::string& model, const std::string& kind, int mtp, const std::string& reduce) {
    json j = {{"model", model},
              {"gpu", "h100"},
              {"gpus", 16},
              {"parallelism", {{"tp", 2}, {"pp", 4}, {"dp", 2}, {"data_parallel", "ddp"}}},
              {"batch", {{"global_sequences", 16}, {"sequence_length", 2048}}},
              {"schedule", {{"kind", kind}}},
              {"precision", {{"compute", "bf16"}, {"gradient_reduce", reduce}}},
              {"mtp_layers", mtp}};
    return wl::build_step_graph(wl::parse_job(j, "test.json"), wl::BuildOptions{false});
  };
  struct Exchange {
    int sends = 0, recvs = 0, peer = -1;
    double bytes          = 0;
    bool before_optimizer = false;
  };
  auto exchanges = [](const wl::StepGraph& g, int stage) {
    Exchange e;
    const auto& ops = g.stages[static_cast<std::size_t>(stage)].ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& op = ops[i];
      if ((op.kind != wl::OpKind::send && op.kind != wl::OpKind::recv) || op.purpose != wl::Purpose::grad_reduce)
        continue;
      (op.kind == wl::OpKind::send ? e.sends : e.recvs) += 1;
      e.peer  = op.peer_stage;
      e.bytes = op.bytes;
      if (op.kind == wl::OpKind::recv)
        for (const auto& o : ops)
          if (o.kind == wl::OpKind::optimizer)
            e.before_optimizer = std::find(o.deps.begin(), o.deps.end(), int(i)) != o.deps.end();
    }
    return e;
  };
  // Llama 3 8B (untied) with one MTP module, gradients reduced in FP32: stages 0 and 3 exchange 128256 / 2 x 4096 x 4
  // bytes; stages 1 and 2 take no part.
  const auto mtp = job("llama3-8b", "1f1b", 1, "fp32");
  for (int s : {0, 3}) {
    const auto e = exchanges(mtp, s);
    INFO("stage " << s);
    CHECK(e.sends == 1);
    CHECK(e.recvs == 1);
    CHECK(e.peer == 3 - s);
    CHECK(e.before_optimizer);
    expect_within("MTP, stage " + std::to_string(s) + ": the embedding's gradient", 128256.0 / 2 * 4096 * 4, e.bytes,
                  1e-12);
  }
  for (int s : {1, 2})
    CHECK(exchanges(mtp, s).sends == 0);
  // The same model without MTP has no copy to keep in step; DualPipeV holds both ends on stage 0.
  CHECK(exchanges(job("llama3-8b", "1f1b", 0, "fp32"), 0).sends == 0);
  CHECK(exchanges(job("llama3-8b", "dualpipev", 1, "fp32"), 0).sends == 0);
  // GPT-3 175B's tied embeddings (vocab 50257 in BF16 gradients), interleaved: chunk 0 on stage 0, the last on 3.
  const auto tied = exchanges(job("gpt3-175b", "1f1b", 0, "bf16"), 3);
  CHECK(tied.sends == 1);
  expect_within("tied output layer: the embedding's gradient", 50257.0 / 2 * 12288 * 2, tied.bytes, 1e-12);
}
