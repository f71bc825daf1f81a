// Infrequent cross-region synchronization (DiLoCo) against closed forms: inner steps move nothing across regions,
// the outer step all-reduces each rank's 1/m share of its stage's pseudo-gradient with its counterpart, and the mean
// step and bytes per step follow from H and the overlap.
#include "netsim/step.hpp"
#include "placement/placement.hpp"
#include "sync/sync.hpp"
#include "topology/topology.hpp"

#include "tests/support.hpp"
#include "tests/support_job.hpp"

#include <catch2/catch.hpp>

using namespace spansim;
using spansim::test::expect_within;

namespace {

double tier_bytes(const topology::Topology& topo, const std::vector<double>& link_bytes, topology::Tier tier)
{
  return netsim::tier_bytes(topo, link_bytes)[static_cast<std::size_t>(tier)];
}

} // namespace

TEST_CASE("DiLoCo: inner steps keep DP inside regions, the outer step and its average match closed forms", "[diloco]")
{
  topology::Topology topo(topology::load_topology_spec("two-regions"));
  // DP 4 over two regions (2 ranks in each), FSDP: no all-gather after the outer all-reduce.
  auto j     = spansim::test::job({{"tp", 1}, {"cp", 1}, {"pp", 1}, {"dp", 4}, {"data_parallel", "fsdp"}},
                                  {{"kind", "1f1b"}}, 4, 512);
  auto graph = workload::build_step_graph(j);
  placement::Placement place(
      topo, j, {{workload::Dim::tp, workload::Dim::cp, workload::Dim::pp, workload::Dim::dp}, {"east-b0", "west-b0"}});
  netsim::StepOptions o;
  o.fidelity          = netsim::Fidelity::analytical;
  const auto together = netsim::simulate_step(topo, graph, place, o);
  REQUIRE(tier_bytes(topo, together.link_bytes, topology::Tier::inter_region) > 0);
  o.dp_within_regions = true;
  const auto inner    = netsim::simulate_step(topo, graph, place, o);
  CHECK(tier_bytes(topo, inner.link_bytes, topology::Tier::inter_region) == 0);
  CHECK(inner.step_time < together.step_time);

  sync::DilocoSpec spec;
  spec.every = 8;
  for (auto f : {netsim::Fidelity::analytical, netsim::Fidelity::flow}) {
    const auto outer     = sync::simulate_outer_sync(topo, graph, place, spec, f, {});
    const std::string at = " at " + std::string(name_of(f));
    CHECK(outer.regions == 2);
    CHECK(outer.members_per_region == 2);
    // Each rank all-reduces x = P / m with its one counterpart: a ring of 2 moves x each way per pair.
    const double x = graph.stages[0].params * j.gradient_reduce_bytes / 2;
    expect_within("shard per rank" + at, x, outer.shard_bytes, 1e-12);
    expect_within("outer bytes across regions" + at, 4 * x, outer.bytes_across_regions, 1e-12);
    // The two pairs use different NICs and the long haul is wide: each is a lone ring over 2 ranks.
    auto route = topo.route(place.gpu(0), place.gpu(2));
    REQUIRE(topo.locate(place.gpu(0)).region != topo.locate(place.gpu(2)).region);
    const double a = topo.route_latency(route), b = topo.route_bandwidth(route);
    expect_within("outer synchronization" + at, x / b + 2 * a, outer.seconds, 0.02);

    // Averages: blocking, then overlapped with one inner step, then hidden entirely.
    const double tokens = j.tokens_per_step();
    auto blocking       = sync::average(spec, inner.step_time, outer, tokens);
    expect_within("mean step, blocking" + at, inner.step_time + outer.seconds / 8, blocking.mean_step, 1e-12);
    expect_within("bytes across regions per step = outer / H" + at, 4 * x / 8, blocking.bytes_across_regions_per_step,
                  1e-12);
    expect_within("tokens/s" + at, tokens / blocking.mean_step, blocking.tokens_per_second, 1e-12);
    auto streaming          = spec;
    streaming.overlap_steps = 1;
    const double hidden     = std::max(0.0, outer.seconds - inner.step_time);
    expect_within("mean step, one step of overlap" + at, inner.step_time + hidden / 8,
                  sync::average(streaming, inner.step_time, outer, tokens).mean_step, 1e-12);
  }

  // Compression divides the outer bytes by its ratio and adds its GPU cost to the outer step.
  auto compressed                       = spec;
  compressed.compression                = netsim::CompressionRule{};
  compressed.compression->ratio         = 4;
  compressed.compression->compress_rate = 100e9;
  const auto plain = sync::simulate_outer_sync(topo, graph, place, spec, netsim::Fidelity::analytical, {});
  const auto small = sync::simulate_outer_sync(topo, graph, place, compressed, netsim::Fidelity::analytical, {});
  expect_within("compressed outer bytes across regions", plain.bytes_across_regions / 4, small.bytes_across_regions,
                1e-12);
  const double x = plain.shard_bytes;
  auto route     = topo.route(place.gpu(0), place.gpu(2));
  expect_within("compressed outer synchronization",
                x / 4 / topo.route_bandwidth(route) + 2 * topo.route_latency(route) + x / 100e9, small.seconds, 0.02);
}

TEST_CASE("DiLoCo with DDP: the replicas all-gather the updated shards inside each region", "[diloco]")
{
  topology::Topology topo(topology::load_topology_spec("two-regions"));
  auto j     = spansim::test::job({{"tp", 1}, {"cp", 1}, {"pp", 1}, {"dp", 4}, {"data_parallel", "ddp"}},
                                  {{"kind", "1f1b"}}, 4, 512);
  auto graph = workload::build_step_graph(j);
  placement::Placement place(
      topo, j, {{workload::Dim::tp, workload::Dim::cp, workload::Dim::pp, workload::Dim::dp}, {"east-b0", "west-b0"}});
  sync::DilocoSpec spec;
  spec.every       = 4;
  const auto outer = sync::simulate_outer_sync(topo, graph, place, spec, netsim::Fidelity::analytical, {});
  const double p   = graph.stages[0].params * j.gradient_reduce_bytes;
  // The cross-region part is FSDP's; then a ring all-gather of P over the 2 ranks of each region, in node or across
  // the pod: it adds time but no cross-region byte.
  expect_within("outer bytes across regions", 4 * (p / 2), outer.bytes_across_regions, 1e-12);
  auto route        = topo.route(place.gpu(0), place.gpu(2));
  const double ar   = p / 2 / topo.route_bandwidth(route) + 2 * topo.route_latency(route);
  auto local        = topo.route(place.gpu(0), place.gpu(1));
  const double gath = p / 2 / topo.route_bandwidth(local) + topo.route_latency(local);
  expect_within("outer synchronization with the all-gather", ar + gath, outer.seconds, 0.02);
}
