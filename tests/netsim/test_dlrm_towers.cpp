// DLRM towers (DMT) on two buildings: with a tower per building, the pooled-embedding exchange stays inside each
// building and only the tower modules' outputs (compressed by the stated factor) cross; bytes on the
// inter-building link against the hand-computed sum, and the placement check of the towers' level.
#include "common/error.hpp"
#include "netsim/step.hpp"
#include "placement/placement.hpp"
#include "workload/workload.hpp"

#include "tests/support.hpp"
#include "tests/support_job.hpp"

#include <catch2/catch.hpp>

#include <iostream>

using namespace spansim;
using nlohmann::json;
using spansim::test::expect_within;

namespace {

json tower_job(json towers)
{
  json j = {{"name", "dlrm-towers"},   {"kind", "dlrm"}, {"model", test::small_dlrm_model(16)},
            {"gpu", "h100"},           {"gpus", 16},     {"batch", {{"global_samples", 16 * 32}}},
            {"sharding", "table-wise"}};
  if (!towers.is_null())
    j["towers"] = towers;
  return j;
}

struct Crossing {
  double bytes        = 0; ///< both directions of the inter-building link, per step
  double dense_buffer = 0; ///< the dense all-reduce's buffer
};

Crossing crossing(const topology::Topology& t, const workload::JobSpec& job, const nlohmann::json& compression = {})
{
  placement::Placement place(t, job, {});
  const auto graph = placement::build_stage_graph(job, t, place, {});
  netsim::StepOptions o;
  if (!compression.is_null())
    o.compression = netsim::read_compression(compression, "dlrm.json", "$.compression");
  o.fidelity                      = netsim::Fidelity::analytical;
  o.algorithms[workload::Dim::dp] = netsim::Algorithm::ring;
  o.choose_per_step               = false;
  o.nccl.protocol                 = netsim::Protocol::simple; // the ring's payload bytes on the wire
  const auto r                    = netsim::simulate_step_as_given(t, graph, place, o);
  Crossing c;
  for (std::size_t l = 0; l < t.links().size(); ++l)
    if (t.links()[l].tier == topology::Tier::inter_building)
      c.bytes += r.link_bytes[2 * l] + r.link_bytes[2 * l + 1];
  for (const auto& op : graph.stages[0].ops)
    if (op.purpose == workload::Purpose::grad_reduce && op.group.axes.contains(workload::Axis::dp))
      c.dense_buffer = op.bytes; // the job-wide all-reduce (a tower module's stays in its tower)
  return c;
}

} // namespace

TEST_CASE("DLRM towers per building: only the compressed tower outputs cross, by the compression factor",
          "[dlrm][towers]")
{
  test::TwoSites sites;
  sites.gpus     = 8;
  sites.parallel = 1;
  const topology::Topology t(test::two_sites(sites));
  const double b = 32, tables = 16, dim = 64, e = 4, n = 16;
  const double ids = b * tables * 2 * 8; // a GPU's samples' sparse IDs
  // The ring all-reduce of the dense gradients crosses on two of its 16 edges, 2 (n - 1) / n of the buffer each.
  auto ring = [&](double buffer) { return 2 * 2 * (n - 1) / n * buffer; };

  // Every send below is at most 16 KiB (8 KiB, 16 KiB and less): NCCL sends it LL whatever NCCL_PROTO says of the
  // collectives (src/enqueue.cc, addP2pToPlan), and LL's lines carry 8 data bytes in 16 (netsim/README.md).
  const double ll = 2;
  // Without towers: the all-to-all over all 16 GPUs sends buffer / 16 to each peer; 8 x 8 pairs cross each way,
  // in both passes; the IDs likewise, once.
  const auto flat       = crossing(t, workload::parse_job(tower_job(nullptr), "dlrm.json"));
  const double buffer   = b * tables * dim * e;
  const double flat_emb = ll * 2 * 2 * (8 * 8 * buffer / n);
  const double flat_ids = ll * 2 * (8 * 8 * ids / n);
  expect_within("no towers: bytes across the buildings", flat_emb + flat_ids + ring(flat.dense_buffer), flat.bytes,
                1e-9);

  // Two towers of 8 GPUs, one per building, compression 4: inside a tower the exchange stays home; across, each
  // GPU swaps with its one partner half of b x 2 towers x (8 x 64 / 4) outputs, each way and pass; the IDs go to
  // their tower the same way.
  const auto towered = crossing(
      t, workload::parse_job(tower_job({{"count", 2}, {"level", "building"}, {"compression", 4}}), "dlrm.json"));
  const double cross     = b * 2 * (8 * dim / 4) * e;
  const double tower_emb = ll * 2 * 2 * (8 * cross / 2);
  const double tower_ids = ll * 2 * (8 * ids / 2);
  expect_within("two towers: bytes across the buildings", tower_emb + tower_ids + ring(towered.dense_buffer),
                towered.bytes, 1e-9);
  expect_within("the pooled-embedding bytes across, cut by the compression factor", 4.0, flat_emb / tower_emb, 1e-12);

  // The scenario's compression key on EP across buildings (no towers): the exchange and the IDs crossing shrink by
  // its ratio, the dense all-reduce does not.
  const auto lossy = crossing(t, workload::parse_job(tower_job(nullptr), "dlrm.json"),
                              json::array({{{"dim", "ep"}, {"across", "building"}, {"ratio", 4}}}));
  expect_within("no towers, EP compressed x4 across buildings", (flat_emb + flat_ids) / 4 + ring(flat.dense_buffer),
                lossy.bytes, 1e-9);
  std::cout << "across the buildings per step: " << flat.bytes << " bytes without towers, " << towered.bytes
            << " with two (dense all-reduce " << ring(flat.dense_buffer) << " and " << ring(towered.dense_buffer)
            << ")\n";
}

TEST_CASE("DLRM towers must sit inside one unit of their level", "[dlrm][towers]")
{
  test::TwoSites sites;
  sites.gpus     = 8;
  sites.parallel = 1;
  const topology::Topology t(test::two_sites(sites));
  // Towers of 8 GPUs at node level, on one-GPU nodes: each spans 8 nodes.
  const auto job = workload::parse_job(tower_job({{"count", 2}, {"level", "node"}}), "dlrm.json");
  placement::Placement place(t, job, {});
  try {
    placement::build_stage_graph(job, t, place, {});
    FAIL("a tower spanning nodes was accepted");
  } catch (const InfeasibleError& e) {
    std::cout << e.what() << "\n";
    CHECK(std::string(e.what()).find("spans more than one node") != std::string::npos);
  }
}
