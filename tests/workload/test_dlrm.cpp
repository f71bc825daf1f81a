// DLRM jobs: the sharding plan's bytes per GPU against the hand-computed formulas, the planner's choice, the
// graph's traffic, and the MLPerf DLRM-DCNv2 zoo entry.
#include "common/error.hpp"
#include "workload/workload.hpp"

#include "tests/support.hpp"
#include "tests/support_job.hpp"

#include <catch2/catch.hpp>

#include <iostream>

using namespace spansim;
using namespace spansim::workload;
using nlohmann::json;
using spansim::test::expect_within;

namespace {

json dlrm_job(int gpus, int per_gpu, const std::string& sharding, json extra = json::object())
{
  json j = {{"name", "dlrm-test"},
            {"kind", "dlrm"},
            {"model", test::small_dlrm_model(8)},
            {"gpu", "h100"},
            {"gpus", gpus},
            {"batch", {{"global_samples", per_gpu * gpus}}},
            {"sharding", sharding},
            {"embedding_precision", "fp32"}};
  for (auto& [k, v] : extra.items())
    j[k] = v;
  return j;
}

} // namespace

TEST_CASE("DLRM sharding plans: bytes per GPU against the hand-computed formulas", "[dlrm]")
{
  const double b = 16, tables = 8, dim = 64, e = 4;
  struct Case {
    int gpus;
    const char* sharding;
    double buffer; // per rank, hand-computed
  };
  // Table-wise (8 tables on 8 GPUs) and column-wise (each table's 64 columns split over 16 / 8 = 2 GPUs): each
  // GPU receives its b samples' pooled vector of every table, b T D e. Row-wise: every GPU holds partial sums of
  // every table for all N b samples of the job, reduce-scattered: N b T D e.
  for (auto c : {Case{8, "table-wise", b * tables * dim * e}, Case{16, "column-wise", b * tables * dim * e},
                 Case{8, "row-wise", 8 * b * tables * dim * e}, Case{16, "row-wise", 16 * b * tables * dim * e}}) {
    const auto job  = parse_job(dlrm_job(c.gpus, 16, c.sharding), "dlrm.json");
    const auto plan = dlrm_plan(job);
    const double n  = c.gpus;
    expect_within(std::string(c.sharding) + " on " + std::to_string(c.gpus) + " GPUs: buffer per rank", c.buffer,
                  plan.buffer_bytes, 1e-12);
    expect_within(std::string(c.sharding) + " on " + std::to_string(c.gpus) + " GPUs: bytes sent per GPU",
                  c.buffer * (n - 1) / n, plan.wire_bytes_per_gpu, 1e-12);
    // The graph: the exchange in both passes, plus the sparse IDs (8 bytes each, 2 per table per sample) to their
    // rows' GPUs (column-wise: to each of a table's n / T column shards), all accounted to EP.
    const auto graph    = build_step_graph(job);
    const auto summary  = summarize(graph);
    const double shards = std::string(c.sharding) == "column-wise" ? n / tables : 1;
    const double ids    = b * tables * 2 * 8 * shards * (n - 1) / n;
    expect_within(std::string(c.sharding) + ": EP bytes per GPU in the graph", 2 * c.buffer * (n - 1) / n + ids,
                  summary.traffic[Dim::ep].per_gpu_max, 1e-12);
  }
}

TEST_CASE("DLRM sharding: the planner's choice, and plans that do not apply are refused", "[dlrm]")
{
  // 8 tables on 8 GPUs: table-wise sends 1/8 of row-wise's bytes.
  CHECK(dlrm_plan(parse_job(dlrm_job(8, 16, "auto"), "dlrm.json")).sharding == Sharding::table_wise);
  // 8 tables on 16 GPUs: column-wise (2 GPUs per table).
  CHECK(dlrm_plan(parse_job(dlrm_job(16, 16, "auto"), "dlrm.json")).sharding == Sharding::column_wise);
  // 8 tables on 24 GPUs: neither splits evenly; row-wise.
  CHECK(dlrm_plan(parse_job(dlrm_job(24, 16, "auto"), "dlrm.json")).sharding == Sharding::row_wise);
  try {
    parse_job(dlrm_job(24, 16, "table-wise"), "dlrm.json");
    FAIL("table-wise on 24 GPUs was accepted");
  } catch (const InfeasibleError& e) {
    std::cout << e.what() << "\n";
    CHECK(e.json_path() == "$.sharding");
    CHECK(std::string(e.what()).find("row-wise always applies") != std::string::npos);
  }
}

TEST_CASE("DLRM-DCNv2 from the zoo: MLPerf's tables, and the step's dense FLOPs by hand", "[dlrm]")
{
  json j         = {{"name", "dlrm-mlperf"}, {"kind", "dlrm"}, {"model", "dlrm-dcnv2"},
                    {"gpu", "h100"},         {"gpus", 8},      {"batch", {{"global_samples", 65536}}}};
  const auto job = parse_job(j, "dlrm.json");
  const auto& m  = job.dlrm->model;
  CHECK(m.table_count() == 26);
  CHECK(m.dim() == 128);
  double rows = 0, pooled = 0;
  for (const auto& t : m.tables) {
    rows += t.rows;
    pooled += t.pooling;
  }
  CHECK(rows == 204184588); // the sum of MLPerf's num_embeddings_per_feature
  CHECK(pooled == 214);     // the sum of its multi_hot_sizes
  // Dense FLOPs per sample, forward: 2 x (13x512 + 512x256 + 256x128) bottom, 2 x 3 x 2 x 3456 x 512 cross,
  // 2 x (3456x1024 + 1024x1024 + 1024x512 + 512x256 + 256x1) top; backward twice that.
  const double fwd = 2.0 * (13 * 512 + 512 * 256 + 256 * 128) + 2.0 * 3 * 2 * 3456 * 512 +
                     2.0 * (3456 * 1024 + 1024 * 1024 + 1024 * 512 + 512 * 256 + 256);
  const auto summary = summarize(build_step_graph(job));
  expect_within("model FLOPs per step: 3 x forward x 65,536 samples", 3 * fwd * 65536, summary.model_flops, 1e-9);
  // 8 GPUs of 80 GB hold the 97 GiB of fp32 tables and their Adagrad state (25 GiB each).
  json on_two    = j;
  on_two["gpus"] = 2;
  CHECK_THROWS_AS(build_step_graph(parse_job(on_two, "dlrm.json")), InfeasibleError);
}
