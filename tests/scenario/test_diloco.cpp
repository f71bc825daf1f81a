// Infrequent synchronization (DiLoCo) against closed forms: inner steps move nothing between workers, the outer
// step all-reduces each rank's share of its stage's pseudo-gradient with the ranks of the other workers that hold
// the same part (one ring per overlap of unequal workers' shards), uplinks cap each worker, and the mean step,
// bytes per step and peak WAN bandwidth follow from H, the overlap and the fragments. The slot windows of NCCL
// are test_long_links' subject: the closed forms here switch them off (plain DiLoCo's figures as before them).
#include "netsim/step.hpp"
#include "placement/placement.hpp"
#include "scenario/scenario.hpp"
#include "sync/sync.hpp"
#include "topology/topology.hpp"

#include "tests/support.hpp"
#include "tests/support_job.hpp"
#include "tests/support_step.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"

#include <catch2/catch.hpp>

using namespace spansim;
using spansim::test::expect_within;

namespace {

double tier_bytes(const topology::Topology& topo, const std::vector<double>& link_bytes, topology::Tier tier)
{
  return netsim::tier_bytes(topo, link_bytes)[static_cast<std::size_t>(tier)];
}

sync::OuterSyncParams at(netsim::Fidelity f)
{
  sync::OuterSyncParams p;
  p.fidelity     = f;
  p.nccl.windows = false;
  return p;
}

/// A job of the test model with `dp` FSDP replicas of `tp` GPUs on the first GPUs of tiny.json.
spansim::test::PlacedStep tiny_job(int tp, int dp)
{
  placement::PlacementSpec first_gpus;
  first_gpus.first_gpu = 0;
  return {spansim::test::tiny_topology(),
          spansim::test::job({{"tp", tp}, {"cp", 1}, {"pp", 1}, {"dp", dp}, {"data_parallel", "fsdp"}},
                             {{"kind", "1f1b"}}, dp, 512),
          first_gpus};
}

/// DP 4 of the test model over two regions (2 ranks in each), holding its state as `data_parallel` says.
spansim::test::PlacedStep dp4_over_two_regions(const std::string& data_parallel)
{
  return {"two-regions",
          spansim::test::job({{"tp", 1}, {"cp", 1}, {"pp", 1}, {"dp", 4}, {"data_parallel", data_parallel}},
                             {{"kind", "1f1b"}}, 4, 512),
          {spansim::test::kDpOutermost, {"east-b0", "west-b0"}}};
}

sync::DilocoSpec read(const std::string& text)
{
  const auto holder = nlohmann::json::parse(text);
  spec::ObjectReader root(holder, spec::Location{"scenario.json"});
  auto r = root.object("diloco");
  return sync::read_diloco(r);
}

} // namespace

TEST_CASE("DiLoCo: inner steps keep DP inside regions, the outer step and its average match closed forms", "[diloco]")
{
  // DP 4 over two regions (2 ranks in each), FSDP: no all-gather after the outer all-reduce.
  const auto placed = dp4_over_two_regions("fsdp");
  netsim::StepOptions o;
  o.fidelity          = netsim::Fidelity::analytical;
  const auto together = placed.simulate(o);
  REQUIRE(tier_bytes(placed.topo, together.link_bytes, topology::Tier::inter_region) > 0);
  o.dp_within_regions = true;
  const auto inner    = placed.simulate(o);
  CHECK(tier_bytes(placed.topo, inner.link_bytes, topology::Tier::inter_region) == 0);
  CHECK(inner.step_time < together.step_time);

  sync::DilocoSpec spec;
  spec.every = 8;
  for (auto f : {netsim::Fidelity::analytical, netsim::Fidelity::flow}) {
    const auto outer     = sync::simulate_outer_sync(placed.topo, placed.graph, placed.place, spec, at(f));
    const std::string at = " at " + std::string(name_of(f));
    CHECK(outer.regions == 2);
    CHECK(outer.workers == 2);
    CHECK(outer.members_per_worker == 2);
    CHECK(outer.segments == 2);
    // Each rank all-reduces x = P / m with its one counterpart: a ring of 2 moves x each way per pair.
    const double x = placed.graph.stages[0].params * placed.job.gradient_reduce_bytes / 2;
    expect_within("shard per rank" + at, x, outer.shard_bytes, 1e-12);
    expect_within("outer bytes across regions" + at, 4 * x, outer.bytes_across_regions, 1e-12);
    // The two pairs use different NICs and the long haul is wide: each is a lone ring over 2 ranks.
    auto route = placed.topo.route(placed.place.gpu(0), placed.place.gpu(2));
    REQUIRE(placed.topo.locate(placed.place.gpu(0)).region != placed.topo.locate(placed.place.gpu(2)).region);
    const double a = placed.topo.route_latency(route), b = placed.topo.route_bandwidth(route);
    expect_within("outer synchronization" + at, x / b + 2 * a, outer.seconds, 0.02);

    // Averages: blocking, then overlapped with one inner step, then hidden entirely.
    const double tokens = placed.job.tokens_per_step();
    const sync::InnerStep step{inner.step_time, inner.stages[0].compute, tokens};
    auto blocking = sync::average(spec, step, outer);
    expect_within("mean step, blocking" + at, inner.step_time + outer.seconds / 8, blocking.mean_step, 1e-12);
    expect_within("bytes across regions per step = outer / H" + at, 4 * x / 8, blocking.bytes_across_regions_per_step,
                  1e-12);
    expect_within("tokens/s" + at, tokens / blocking.mean_step, blocking.tokens_per_second, 1e-12);
    auto streaming          = spec;
    streaming.overlap_steps = 1;
    const double hidden     = std::max(0.0, outer.seconds - inner.step_time);
    expect_within("mean step, one step of overlap" + at, inner.step_time + hidden / 8,
                  sync::average(streaming, step, outer).mean_step, 1e-12);
    expect_within("compute utilization = compute / mean step" + at, inner.stages[0].compute / blocking.mean_step,
                  blocking.compute_utilization, 1e-12);
  }

  // Compression divides the outer bytes by its ratio and adds its GPU cost to the outer step.
  auto compressed                       = spec;
  compressed.compression                = netsim::CompressionRule{};
  compressed.compression->ratio         = 4;
  compressed.compression->compress_rate = 100e9;
  const auto plain =
      sync::simulate_outer_sync(placed.topo, placed.graph, placed.place, spec, at(netsim::Fidelity::analytical));
  const auto small =
      sync::simulate_outer_sync(placed.topo, placed.graph, placed.place, compressed, at(netsim::Fidelity::analytical));
  expect_within("compressed outer bytes across regions", plain.bytes_across_regions / 4, small.bytes_across_regions,
                1e-12);
  const double x = plain.shard_bytes;
  auto route     = placed.topo.route(placed.place.gpu(0), placed.place.gpu(2));
  expect_within("compressed outer synchronization",
                x / 4 / placed.topo.route_bandwidth(route) + 2 * placed.topo.route_latency(route) + x / 100e9,
                small.seconds, 0.02);
}

TEST_CASE("DiLoCo on capped uplinks: the ring pays its bytes at the cap and its chain of long-haul latencies",
          "[diloco]")
{
  // DP 4 over two regions: two rings of 2 ranks across the long haul, each rank sending x = P / 2 once. Each
  // region's uplink U is shared by its two rings (U / 2 a rank), set so that the bytes take 10 long-haul latencies;
  // the ring's 2 (K - 1) = 2 dependent steps each cross the long haul once: x / (U / 2) + 2 a. A cap is not a
  // window's credit stall: it does not hide the chain.
  const auto placed = dp4_over_two_regions("fsdp");
  const double x    = placed.graph.stages[0].params * placed.job.gradient_reduce_bytes / 2;
  const auto route  = placed.topo.route(placed.place.gpu(0), placed.place.gpu(2));
  const double a    = placed.topo.route_latency(route);
  sync::DilocoSpec spec;
  spec.every  = 8;
  spec.uplink = 2 * x / (10 * a);
  REQUIRE(spec.uplink / 2 < placed.topo.route_bandwidth(route));
  for (auto f : {netsim::Fidelity::analytical, netsim::Fidelity::flow}) {
    const auto outer = sync::simulate_outer_sync(placed.topo, placed.graph, placed.place, spec, at(f));
    expect_within("outer exchange on capped uplinks at " + std::string(name_of(f)) + ": 10 a + 2 a", 12 * a,
                  outer.seconds, f == netsim::Fidelity::analytical ? 1e-6 : 0.005);
  }
}

TEST_CASE("DiLoCo with DDP: the replicas all-gather the updated shards inside each region", "[diloco]")
{
  const auto placed = dp4_over_two_regions("ddp");
  sync::DilocoSpec spec;
  spec.every = 4;
  const auto outer =
      sync::simulate_outer_sync(placed.topo, placed.graph, placed.place, spec, at(netsim::Fidelity::analytical));
  const double p = placed.graph.stages[0].params * placed.job.gradient_reduce_bytes;
  // The cross-region part is FSDP's; then a ring all-gather of P over the 2 ranks of each region, in node or across
  // the pod: it adds time but no cross-region byte.
  expect_within("outer bytes across regions", 4 * (p / 2), outer.bytes_across_regions, 1e-12);
  auto route        = placed.topo.route(placed.place.gpu(0), placed.place.gpu(2));
  const double ar   = p / 2 / placed.topo.route_bandwidth(route) + 2 * placed.topo.route_latency(route);
  auto local        = placed.topo.route(placed.place.gpu(0), placed.place.gpu(1));
  const double gath = p / 2 / placed.topo.route_bandwidth(local) + placed.topo.route_latency(local);
  expect_within("outer synchronization with the all-gather", ar + gath, outer.seconds, 0.02);
}

TEST_CASE("DiLoCo workers of unequal sizes on their own uplinks: one ring per shard overlap, the slowest uplink binds",
          "[diloco]")
{
  // DP 12 with FSDP on GPUs 0-11 (three nodes of 4); workers of 6, 4 and 2 ranks on 2, 1 and 0.5 Gb/s uplinks.
  const auto t   = tiny_job(1, 12);
  auto spec      = read(R"({"diloco": {"every": 10, "workers": [
      {"name": "big", "gpus": "0-5", "uplink": "2Gbps"},
      {"name": "mid", "gpus": ["6-8", "9"], "uplink": "1Gbps"},
      {"name": "small", "gpus": "10-11", "uplink": "500Mbps"}]}})");
  const double p = t.graph.stages[0].params * t.job.gradient_reduce_bytes;
  // The shards' cuts at 1/6 .. 5/6, 1/4, 1/2, 3/4: 8 segments, each a ring of 3 ranks.
  for (auto f : {netsim::Fidelity::analytical, netsim::Fidelity::flow}) {
    const std::string where = std::string(" at ") + std::string(name_of(f));
    const auto outer        = sync::simulate_outer_sync(t.topo, t.graph, t.place, spec, at(f));
    CHECK(outer.workers == 3);
    CHECK(outer.segments == 8);
    CHECK(outer.members_per_worker == 6);
    expect_within("largest shard: P / 2 (the small worker's)" + where, p / 2, outer.shard_bytes, 1e-12);
    // A ring of W = 3 sends 2 (W - 1) / W of its bytes from each rank: every worker sends 4/3 P in all.
    REQUIRE(outer.traffic.size() == 3);
    for (const auto& w : outer.traffic) {
      expect_within("bytes out of worker " + w.name + where, 4.0 / 3 * p, w.bytes_out, 1e-9);
      expect_within("bytes into worker " + w.name + where, 4.0 / 3 * p, w.bytes_in, 1e-9);
    }
    CHECK(outer.traffic[0].gpus == 6);
    CHECK(outer.traffic[1].gpus == 4);
    // The 0.5 Gb/s uplink binds: its rings share it by their bytes and end together, each after its own edge's
    // latency (the longest: a ring edge between nodes of one pod).
    double latency = 0;
    for (int a : {10, 11})
      for (int b = 0; b < 10; ++b)
        latency = std::max(latency, t.topo.route_latency(t.topo.route(a, b)));
    expect_within("outer exchange: 4/3 P over the slowest uplink" + where, 4.0 / 3 * p / (0.5e9 / 8) + latency,
                  outer.seconds, 0.01);
  }
  // Quantized to 4 bits from fp32 gradients: 1/8 of the bytes, plus the memory-bound (de)quantization of the
  // largest shard: once each way and once per reduce hop (W - 1 = 2 hops of 1/3), each pass reading 4 B and
  // writing 0.5 B per element at the GPU's HBM bandwidth.
  spec.quantization = sync::Quantization{4, 0};
  const auto q      = sync::simulate_outer_sync(t.topo, t.graph, t.place, spec, at(netsim::Fidelity::analytical));
  expect_within("4-bit bytes out of the small worker", 4.0 / 3 * p / 8, q.traffic[2].bytes_out, 1e-9);
  const double pass = p / 2 / 4 * (4 + 0.5) / t.job.gpu.hbm_bandwidth;
  expect_within("quantization GPU seconds", 2 * pass * (1 + 2.0 / 3), q.compression_seconds, 1e-12);
  expect_within("4-bit outer exchange", 4.0 / 3 * p / 8 / (0.5e9 / 8) + q.compression_seconds, q.seconds, 0.01);
}

TEST_CASE("streaming DiLoCo: each fragment's exchange moves 1/P of the bytes, P times as often, at 1/P of the peak "
          "WAN bandwidth",
          "[diloco]")
{
  const auto t     = dp4_over_two_regions("fsdp");
  auto plain       = read(R"({"diloco": {"every": 16, "overlap_steps": 1}})");
  auto streaming   = read(R"({"diloco": {"every": 16, "overlap_steps": 1, "fragments": 4}})");
  const auto whole = sync::simulate_outer_sync(t.topo, t.graph, t.place, plain, at(netsim::Fidelity::analytical));
  const auto part  = sync::simulate_outer_sync(t.topo, t.graph, t.place, streaming, at(netsim::Fidelity::analytical));
  expect_within("a fragment's bytes across regions", whole.bytes_across_regions / 4, part.bytes_across_regions, 1e-12);
  expect_within("a fragment's shard", whole.shard_bytes / 4, part.shard_bytes, 1e-12);
  const sync::InnerStep inner{0.5 * part.seconds, 0.4 * part.seconds, 1e6}; // an exchange outlasts a step
  const auto a = sync::average(plain, inner, whole);
  const auto b = sync::average(streaming, inner, part);
  expect_within("plain: inner + (outer - inner) / 16", inner.seconds + (whole.seconds - inner.seconds) / 16,
                a.mean_step, 1e-12);
  expect_within("streaming: inner + 4 (fragment - inner) / 16", inner.seconds + 4 * (part.seconds - inner.seconds) / 16,
                b.mean_step, 1e-12);
  expect_within("same bytes per step", a.bytes_across_regions_per_step, b.bytes_across_regions_per_step, 1e-12);
  expect_within("peak WAN: a fragment's bytes over one inner step", part.bytes_across_regions / inner.seconds,
                b.peak_wan_bandwidth, 1e-12);
  expect_within("plain DiLoCo's peak, 4 times as high", a.peak_wan_bandwidth, b.plain_peak_wan_bandwidth, 1e-12);
  expect_within("plain's peak reported against itself", a.peak_wan_bandwidth, a.plain_peak_wan_bandwidth, 1e-12);
}

TEST_CASE("DiLoCo workers by level: nodes split the inner steps' groups, a worker that splits a replica is refused",
          "[diloco]")
{
  const auto t = tiny_job(2, 8);
  auto spec    = read(R"({"diloco": {"every": 4, "workers": "node"}})");
  const auto workers =
      sync::resolve_workers(t.topo, t.graph, t.place, spec, spec::Location{"scenario.json", "$.diloco"});
  CHECK(workers.names.size() == 4); // 16 GPUs, 4 per node
  netsim::StepOptions o;
  o.fidelity      = netsim::Fidelity::analytical;
  o.dp_workers    = workers.of_gpu;
  const auto step = netsim::simulate_step(t.topo, t.graph, t.place, o);
  CHECK(tier_bytes(t.topo, step.link_bytes, topology::Tier::nic) == 0); // nothing of DP leaves a node
  const auto outer = sync::simulate_outer_sync(t.topo, t.graph, t.place, spec, at(netsim::Fidelity::analytical));
  CHECK(outer.workers == 4);
  CHECK(outer.members_per_worker == 2);
  // Ranges that cut through a TP pair: GPUs 0 and 1 hold one replica's two tensor shards.
  auto split = read(R"({"diloco": {"every": 4, "workers": [{"gpus": "0"}, {"gpus": "1-15"}]}})");
  CHECK_THROWS_WITH(sync::resolve_workers(t.topo, t.graph, t.place, split, spec::Location{"scenario.json", "$.diloco"}),
                    Catch::Contains("scenario.json") && Catch::Contains("$.diloco.workers") &&
                        Catch::Contains("whole replicas"));
}

TEST_CASE("DiLoCo's block refuses overlapping or missing workers, 0 fragments, 0-bit quantization",
          "[diloco][bad-input]")
{
  const auto t = tiny_job(1, 8);
  auto resolve = [&](const std::string& text) {
    return sync::resolve_workers(t.topo, t.graph, t.place, read(text), spec::Location{"scenario.json", "$.diloco"});
  };
  CHECK_THROWS_WITH(resolve(R"({"diloco": {"every": 4, "workers": [{"gpus": "0-4"}, {"gpus": "4-7"}]}})"),
                    Catch::Contains("$.diloco.workers[1].gpus") && Catch::Contains("GPU 4") &&
                        Catch::Contains("overlap"));
  CHECK_THROWS_WITH(resolve(R"({"diloco": {"every": 4, "workers": [{"gpus": "0-3"}, {"gpus": "4-6"}]}})"),
                    Catch::Contains("$.diloco.workers") && Catch::Contains("GPU 7") && Catch::Contains("no worker"));
  CHECK_THROWS_WITH(resolve(R"({"diloco": {"every": 4, "workers": [{"gpus": "0-3"}, {"gpus": "4-9"}]}})"),
                    Catch::Contains("GPU 8") && Catch::Contains("not one of the job's GPUs"));
  CHECK_THROWS_WITH(read(R"({"diloco": {"every": 4, "workers": [{"gpus": "7-3"}, {"gpus": "4-6"}]}})"),
                    Catch::Contains("$.diloco.workers[0].gpus") && Catch::Contains("7-3"));
  CHECK_THROWS_WITH(read(R"({"diloco": {"every": 4, "fragments": 0}})"),
                    Catch::Contains("scenario.json") && Catch::Contains("$.diloco.fragments"));
  CHECK_THROWS_WITH(read(R"({"diloco": {"every": 4, "fragments": 8}})"), Catch::Contains("at most"));
  CHECK_THROWS_WITH(read(R"({"diloco": {"every": 4, "quantization": {"bits": 0}}})"),
                    Catch::Contains("$.diloco.quantization.bits"));
  CHECK_THROWS_WITH(read(R"({"diloco": {"every": 4, "workers": "rack"}})"),
                    Catch::Contains("$.diloco.workers") && Catch::Contains("node"));
  CHECK_THROWS_WITH(read(R"({"diloco": {"every": 8, "fragments": 4, "overlap_steps": 2}})"),
                    Catch::Contains("$.diloco.overlap_steps"));
}

TEST_CASE("DiLoCo workers of unequal sizes run under the default auto collectives: each worker's inner group as "
          "NCCL picks for it",
          "[diloco]")
{
  // Llama 3 8B on 48 H100 (TP 8, DP 6) with workers of 3, 2 and 1 replicas: the inner data-parallel groups are 3, 2
  // and 1 GPUs wide. auto once tried halving-doubling on them and refused the documented input.
  const auto sc = scenario::parse_scenario(
      nlohmann::json::parse(R"({"name": "diloco-unequal", "topology": "two-regions", "fidelity": "analytical",
        "job": {"name": "j", "model": "llama3-8b", "gpu": "h100", "gpus": 48,
                "parallelism": {"tp": 8, "pp": 1, "dp": 6, "data_parallel": "fsdp"},
                "batch": {"global_tokens": 196608, "sequence_length": 8192, "micro_batch": 1},
                "schedule": {"kind": "1f1b"}, "recompute": "none"},
        "collectives": {"dp": "auto"},
        "diloco": {"every": 8, "workers": [{"name": "a", "gpus": "0-23"}, {"name": "b", "gpus": "24-39"},
                                           {"name": "c", "gpus": "40-47"}]}})"),
      "diloco-unequal.json");
  const auto run = scenario::run_scenario(sc);
  REQUIRE(run.diloco.has_value());
  CHECK(run.diloco->outer.workers == 3);
  CHECK(run.diloco->inner_step > 0);
  CHECK(run.diloco->mean_step >= run.diloco->inner_step);
}
