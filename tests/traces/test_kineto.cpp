// Kineto traces: a hand-written profiler trace's GEMM kernels become measured-kernel rows (by op and shape, the
// median of their calls), and replace the model's times in a step whose makespan is computed by hand.
#include "common/error.hpp"
#include "netsim/step.hpp"
#include "placement/placement.hpp"
#include "traces/kineto.hpp"

#include "tests/support.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace spansim;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// One GEMM of the model's shape (M, N, K) as aten::mm of [M, K] x [K, N] and its kernel.
struct Call {
  double m, n, k;
  double micros;
};

json trace_of(const std::vector<Call>& calls)
{
  json events = json::array();
  events.push_back({{"ph", "X"},
                    {"cat", "user_annotation"},
                    {"name", "ProfilerStep#1"},
                    {"pid", 1},
                    {"tid", 1},
                    {"ts", 0.0},
                    {"dur", 5000.0},
                    {"args", {{"External id", 1}}}});
  events.push_back({{"ph", "X"},
                    {"cat", "user_annotation"},
                    {"name", "ProfilerStep#2"},
                    {"pid", 1},
                    {"tid", 1},
                    {"ts", 6000.0},
                    {"dur", 5200.0},
                    {"args", {{"External id", 2}}}});
  std::int64_t id = 100;
  double ts       = 10;
  for (const auto& c : calls) {
    events.push_back({{"ph", "X"},
                      {"cat", "cpu_op"},
                      {"name", "aten::mm"},
                      {"pid", 1},
                      {"tid", 1},
                      {"ts", ts},
                      {"dur", 5.0},
                      {"args",
                       {{"External id", id},
                        {"Input Dims", {{c.m, c.k}, {c.k, c.n}}},
                        {"Input type", {"c10::BFloat16", "c10::BFloat16"}}}}});
    events.push_back({{"ph", "X"},
                      {"cat", "kernel"},
                      {"name", "sm90_gemm_bf16"},
                      {"pid", 0},
                      {"tid", 7},
                      {"ts", ts + 5},
                      {"dur", c.micros},
                      {"args", {{"External id", id}, {"correlation", id + 100000}, {"stream", 7}}}});
    ++id;
    ts += c.micros + 10;
  }
  return {{"schemaVersion", 1}, {"displayTimeUnit", "ms"}, {"traceEvents", events}};
}

std::string write(const json& j, const std::string& name)
{
  const auto path = (fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()) + ".json")).string();
  std::ofstream(path) << j.dump();
  return path;
}

} // namespace

TEST_CASE("a Kineto trace: kernels attach to their ops by shape, median per shape, iteration time", "[traces][kineto]")
{
  std::vector<Call> calls{{128, 768, 256, 100}, {128, 768, 256, 120}, {128, 768, 256, 110}, {128, 256, 256, 40}};
  auto j       = trace_of(calls);
  auto& events = j["traceEvents"];
  // addmm (bias, A, B) and linear (input [2, 64, K], weight [N, K]) spell the same GEMM kinds.
  events.push_back({{"ph", "X"},
                    {"cat", "cpu_op"},
                    {"name", "aten::addmm"},
                    {"pid", 1},
                    {"tid", 1},
                    {"ts", 900.0},
                    {"dur", 3.0},
                    {"args",
                     {{"External id", 900},
                      {"Input Dims", {{1024}, {128, 512}, {512, 1024}}},
                      {"Input type", {"c10::BFloat16", "c10::BFloat16", "c10::BFloat16"}}}}});
  events.push_back({{"ph", "X"},
                    {"cat", "kernel"},
                    {"name", "gemm"},
                    {"pid", 0},
                    {"tid", 7},
                    {"ts", 905.0},
                    {"dur", 30.0},
                    {"args", {{"External id", 900}}}});
  events.push_back({{"ph", "X"},
                    {"cat", "cpu_op"},
                    {"name", "aten::linear"},
                    {"pid", 1},
                    {"tid", 1},
                    {"ts", 950.0},
                    {"dur", 3.0},
                    {"args",
                     {{"External id", 901},
                      {"Input Dims", {{2, 64, 256}, {1000, 256}, {}}},
                      {"Input type", {"c10::BFloat16", "c10::BFloat16", ""}}}}});
  // Its kernel names no op: it reaches the op through its launch's correlation.
  events.push_back({{"ph", "X"},
                    {"cat", "cuda_runtime"},
                    {"name", "cudaLaunchKernel"},
                    {"pid", 1},
                    {"tid", 1},
                    {"ts", 951.0},
                    {"dur", 1.0},
                    {"args", {{"External id", 901}, {"correlation", 77}}}});
  events.push_back({{"ph", "X"},
                    {"cat", "kernel"},
                    {"name", "gemm"},
                    {"pid", 0},
                    {"tid", 7},
                    {"ts", 960.0},
                    {"dur", 50.0},
                    {"args", {{"correlation", 77}}}});
  // Not attached: an element-wise op, an fp32 GEMM, a kernel of no op.
  events.push_back({{"ph", "X"},
                    {"cat", "cpu_op"},
                    {"name", "aten::add"},
                    {"pid", 1},
                    {"tid", 1},
                    {"ts", 1000.0},
                    {"dur", 2.0},
                    {"args", {{"External id", 902}}}});
  events.push_back({{"ph", "X"},
                    {"cat", "kernel"},
                    {"name", "add"},
                    {"pid", 0},
                    {"tid", 7},
                    {"ts", 1001.0},
                    {"dur", 7.0},
                    {"args", {{"External id", 902}}}});
  events.push_back(
      {{"ph", "X"},
       {"cat", "cpu_op"},
       {"name", "aten::mm"},
       {"pid", 1},
       {"tid", 1},
       {"ts", 1010.0},
       {"dur", 2.0},
       {"args", {{"External id", 903}, {"Input Dims", {{8, 8}, {8, 8}}}, {"Input type", {"float", "float"}}}}});
  events.push_back({{"ph", "X"},
                    {"cat", "kernel"},
                    {"name", "sgemm"},
                    {"pid", 0},
                    {"tid", 7},
                    {"ts", 1011.0},
                    {"dur", 3.0},
                    {"args", {{"External id", 903}}}});
  events.push_back({{"ph", "X"},
                    {"cat", "kernel"},
                    {"name", "orphan"},
                    {"pid", 0},
                    {"tid", 7},
                    {"ts", 1020.0},
                    {"dur", 1.0},
                    {"args", json::object()}});
  const auto path = write(j, "kineto");
  const auto k    = traces::read_kineto(path);
  CHECK(k.iteration_seconds() == Approx(5.1e-3).epsilon(1e-12));
  CHECK(k.gpu_kernels == 9);
  CHECK(k.matched_kernels == 6);
  CHECK(k.unmatched.at("aten::add") == 1);
  CHECK(k.unmatched.at("aten::mm") == 1);
  CHECK(k.unmatched.at("no op") == 1);
  REQUIRE(k.kernels.gemm.size() == 4);
  auto seconds = [&](double m, double n, double kk) {
    for (const auto& g : k.kernels.gemm)
      if (g.m == m && g.n == n && g.k == kk && g.dtype == workload::Precision::bf16)
        return g.seconds;
    return -1.0;
  };
  CHECK(seconds(128, 768, 256) == Approx(110e-6).epsilon(1e-12)); // the median of 100, 120 and 110 us
  CHECK(seconds(128, 256, 256) == Approx(40e-6).epsilon(1e-12));
  CHECK(seconds(128, 1024, 512) == Approx(30e-6).epsilon(1e-12)); // addmm
  CHECK(seconds(128, 1000, 256) == Approx(50e-6).epsilon(1e-12)); // linear: M = 2 x 64
  // The tables written read back through the job's measured_kernels path.
  const auto dir     = (fs::temp_directory_path() / ("kineto-tables-" + std::to_string(::getpid()))).string();
  const auto written = traces::write_measured_tables(k, dir);
  REQUIRE(written.size() == 1);
  const json holder = {{"gemm", written[0]}};
  spec::ObjectReader r(holder, spec::Location{dir + "/holder.json"});
  const auto back = workload::read_measured_kernels(r);
  REQUIRE(back.gemm.size() == 4);
  CHECK(back.gemm_seconds(workload::Precision::bf16, 128, 768, 256).value() == Approx(110e-6).epsilon(1e-12));
  fs::remove_all(dir);
  fs::remove(path);
  CHECK_THROWS_WITH(traces::read_kineto(write(json({{"events", 1}}), "not-kineto")),
                    Catch::Contains("not a Chrome trace"));
}

TEST_CASE("a Kineto trace's GEMM times replace the model's: the replayed step is the hand-computed makespan",
          "[traces][kineto]")
{
  // One GPU, two layers, two micro-batches of one 128-token sequence: no communication, so the step is the sum of
  // its compute ops, and measured GEMMs change it by (measured - modelled) per call.
  json model   = {{"name", "tiny"}, {"layers", 2},    {"hidden", 256}, {"ffn", 512},     {"heads", 4},
                  {"kv_heads", 4},  {"head_dim", 64}, {"vocab", 1000}, {"mlp", "swiglu"}};
  json job     = {{"name", "tiny-job"},
                  {"model", model},
                  {"gpu", "h100"},
                  {"gpus", 1},
                  {"parallelism", {{"tp", 1}, {"pp", 1}, {"dp", 1}, {"data_parallel", "ddp"}}},
                  {"batch", {{"global_sequences", 2}, {"sequence_length", 128}, {"micro_batch", 1}}},
                  {"schedule", {{"kind", "1f1b"}}},
                  {"recompute", "none"},
                  {"calibration", "none"}};
  auto spec    = workload::parse_job(job, "tiny-job.json");
  spec.effects = workload::Effects::none();
  // The forward GEMMs of a layer (fused QKV, O, gate+up, down) and the output layer; each also runs as dgrad
  // (M, K, N) and wgrad (N, K, M) in the backward.
  const std::vector<workload::GemmShape> layer{{128, 768, 256}, {128, 256, 256}, {128, 1024, 256}, {128, 256, 512}};
  const workload::GemmShape head{128, 1000, 256};
  auto passes = [](const workload::GemmShape& f) {
    return std::vector<workload::GemmShape>{f, {f.m, f.k, f.n}, {f.n, f.k, f.m, 1, true}};
  };
  std::vector<Call> calls;
  std::map<std::tuple<double, double, double>, double> measured;
  double micros = 20;
  for (const auto& f : layer)
    for (const auto& g : passes(f))
      if (measured.emplace(std::tuple{g.m, g.n, g.k}, micros * 1e-6).second) {
        calls.push_back({g.m, g.n, g.k, micros});
        micros += 7;
      }
  for (const auto& g : passes(head))
    if (measured.emplace(std::tuple{g.m, g.n, g.k}, micros * 1e-6).second) {
      calls.push_back({g.m, g.n, g.k, micros});
      micros += 7;
    }
  const auto path = write(trace_of(calls), "kineto-replay");
  const auto k    = traces::read_kineto(path);
  fs::remove(path);
  // Hand-computed: per micro-batch, every layer's GEMMs and the head's, each measured instead of modelled.
  double delta = 0;
  auto add     = [&](const workload::GemmShape& f, int times) {
    for (const auto& g : passes(f))
      delta += times * (measured.at({g.m, g.n, g.k}) - workload::gemm_cost(spec.gpu, spec.precision, g).seconds);
  };
  for (const auto& f : layer)
    add(f, 2 * 2); // 2 layers x 2 micro-batches
  add(head, 2);

  topology::Topology topo(topology::load_topology_spec("two-buildings"));
  auto simulate = [&](const workload::JobSpec& j) {
    const auto graph = workload::build_step_graph(j);
    placement::Placement place(topo, j, {});
    netsim::StepOptions o;
    o.fidelity = netsim::Fidelity::analytical;
    return netsim::simulate_step(topo, graph, place, o).step_time;
  };
  const double plain    = simulate(spec);
  auto with             = spec;
  with.gpu.measured     = k.kernels;
  const double replayed = simulate(with);
  test::expect_within("replayed step: modelled step + sum of (measured - modelled) GEMMs", plain + delta, replayed,
                      1e-9);
}
