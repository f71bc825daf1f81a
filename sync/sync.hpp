#pragma once
/// @file
/// @brief Infrequent synchronization between workers (DiLoCo, local SGD): data-parallel replicas synchronize inside
/// their worker (a region, building, pod, node or GPU ranges) every step (inner steps) and between workers every H
/// steps (the outer step), optionally compressed or quantized, overlapped with the next inner steps, and streamed
/// in fragments (Streaming DiLoCo).
///
/// A network simulator measures only time: what fewer synchronizations cost in convergence (more steps to the same
/// loss) is outside it. Results are tokens per second of wall time, averaged over the H steps.

#include "netsim/compression.hpp"
#include "netsim/nccl.hpp"
#include "netsim/netsim.hpp"
#include "placement/placement.hpp"
#include "workload/workload.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace spansim::spec {
class ObjectReader;
struct Location;
} // namespace spansim::spec

namespace spansim::sync {

/// @brief What one DiLoCo worker is: a level of the site (every node, pod, building or region holding the job's
/// GPUs is one worker) or the GPU ranges a scenario lists.
enum class WorkerLevel { region, building, pod, node, ranges };
constexpr std::array<std::string_view, 5> enum_names(WorkerLevel)
{
  return {"region", "building", "pod", "node", "ranges"};
}

/// @brief A worker given by GPU ranges.
struct WorkerRange {
  std::string name;
  std::vector<std::pair<int, int>> gpus;         ///< inclusive GPU index ranges
  double uplink                             = 0; ///< bytes/s; 0: the scenario's `uplink`, or the network alone
  bool operator==(const WorkerRange&) const = default;
};

/// @brief Quantized outer exchange (int8, 4-bit): the pseudo-gradients cross in `bits` per element, and each rank
/// quantizes and dequantizes its share on the GPU.
struct Quantization {
  int bits = 8;
  /// @brief Bytes/s of the (de)quantization kernel over its input and output; 0: the GPU's HBM bandwidth (the
  /// kernels are memory-bound: one read of the wide values and one write of the narrow ones, and back).
  double rate                                = 0;
  bool operator==(const Quantization&) const = default;
};

/// @brief A scenario's `diloco` block.
struct DilocoSpec {
  int every = 1; ///< H: inner steps per outer step (1: every step, still through the outer path)
  /// @brief Inner steps an outer synchronization may run under; 0: the replicas wait for it.
  int overlap_steps = 0;
  /// @brief Streaming DiLoCo: the model in this many fragments, fragment p synchronized every H steps at offset
  /// p H / fragments, so that each exchange moves 1/fragments of the pseudo-gradients.
  int fragments       = 1;
  WorkerLevel workers = WorkerLevel::region;
  std::vector<WorkerRange> ranges; ///< workers when `workers` is `ranges`
  double uplink = 0;               ///< bytes/s of each worker's uplink for the outer exchange; 0: the network alone
  /// @brief The pseudo-gradients' compression on the wire (its dimension and boundary are not used).
  std::optional<netsim::CompressionRule> compression;
  std::optional<Quantization> quantization;

  nlohmann::json to_json() const;
  /// @brief A short label, e.g. "H8" or "H32 overlap1 x4".
  std::string label() const;
  bool operator==(const DilocoSpec&) const = default;
};

/// @brief Reads a `diloco` block. @throws SpecError naming the key and the allowed values.
DilocoSpec read_diloco(spec::ObjectReader& r);

/// @brief The workers of a placed job.
struct Workers {
  std::vector<int> of_gpu;        ///< worker of each GPU of the site; -1 for GPUs outside the job
  std::vector<std::string> names; ///< per worker
  std::vector<int> gpus;          ///< GPUs of the job in each worker
  std::vector<double> uplink;     ///< bytes/s per worker; 0: none
};

/// @brief The workers `spec` names on a placed step: each must hold whole data-parallel replicas (every GPU of a
/// replica in one worker), and ranges must cover every GPU of the job exactly once.
/// @throws SpecError (ranges that overlap, miss GPUs of the job or name GPUs outside it; a worker that splits a
/// replica), naming `where` (the scenario file and the block's JSON path).
Workers resolve_workers(const topology::Topology& topology, const workload::StepGraph& graph,
                        const placement::Placement& placement, const DilocoSpec& spec, const spec::Location& where);

/// @brief Traffic of one worker's uplink in one outer exchange.
struct WorkerTraffic {
  std::string name;
  int gpus         = 0;
  double bytes_out = 0; ///< what its GPUs send to other workers
  double bytes_in  = 0;
  double uplink    = 0; ///< bytes/s; 0: none
};

/// @brief One outer synchronization (of one fragment under streaming), simulated.
struct OuterSync {
  double seconds                = 0; ///< makespan of the outer synchronization alone
  double bytes_across_regions   = 0;
  double bytes_across_buildings = 0; ///< building boundaries, those between regions included
  int regions                   = 0; ///< regions a data-parallel group spans
  int workers                   = 0; ///< workers a data-parallel group spans
  int members_per_worker        = 0; ///< the most ranks of a data-parallel group in one worker
  int segments                  = 0; ///< rings per data-parallel group: where the workers' shards overlap
  /// @brief Pseudo-gradient bytes a rank all-reduces with its counterparts (before compression), on the stage with
  /// the most parameters.
  double shard_bytes         = 0;
  double compression_seconds = 0; ///< GPU seconds of compressing (or quantizing) and back, on that stage
  std::vector<WorkerTraffic> traffic;
  std::size_t transfers = 0;
  nlohmann::json engine; ///< effective engine settings
};

/// @brief How to simulate an outer synchronization.
struct OuterSyncParams {
  netsim::Fidelity fidelity = netsim::Fidelity::analytical;
  netsim::EngineOptions engine;
  netsim::NcclSettings nccl;     ///< the outer all-reduces are NCCL rings under these slots and channels
  std::string file = "scenario"; ///< where the `diloco` block came from, for errors about its workers
  std::string path = "$.diloco"; ///< its JSON path
};

/// @brief The outer synchronization of a placed step. Each worker holds the pseudo-gradient of a stage sharded
/// over its ranks of a data-parallel group (FSDP; with DDP too, then all-gathered inside the worker); where the
/// shards of different workers overlap (a segment), the owning ranks, one per worker, all-reduce it in a ring, so
/// unequal workers exchange exactly their overlaps. A worker's uplink caps its sends (shared by its rings in
/// proportion to their bytes). All stages at once, at `fidelity` (hybrid runs at flow level); under streaming, one
/// fragment's share.
OuterSync simulate_outer_sync(const topology::Topology& topology, const workload::StepGraph& graph,
                              const placement::Placement& placement, const DilocoSpec& spec,
                              const OuterSyncParams& params);

/// @brief What an inner step gives the average.
struct InnerStep {
  double seconds = 0;
  double compute = 0; ///< compute seconds of the busiest stage
  double tokens  = 0; ///< tokens per step
};

/// @brief A step averaged over the H steps of one outer step.
struct DilocoResult {
  DilocoSpec spec;
  double inner_step = 0;                    ///< a step whose data parallelism stays inside each worker
  OuterSync outer;                          ///< one exchange (one fragment's under streaming)
  double exposed_outer                 = 0; ///< per exchange: max(0, outer - overlap x inner)
  double mean_step                     = 0; ///< inner + fragments x exposed_outer / H
  double tokens_per_second             = 0; ///< per mean step
  double compute_utilization           = 0; ///< compute seconds over wall seconds, outer exchanges included
  double bytes_across_regions_per_step = 0; ///< fragments x outer bytes / H (inner steps move none)
  /// @brief The WAN rate an exchange needs to stay hidden: its bytes across regions over its overlap window (one
  /// inner step when it blocks); and the same for plain DiLoCo (one fragment) with the same quantization.
  double peak_wan_bandwidth = 0, plain_peak_wan_bandwidth = 0;

  nlohmann::json to_json() const;
};

/// @brief The step averaged over H: inner + fragments x max(0, outer - overlap_steps x inner) / H.
DilocoResult average(const DilocoSpec& spec, const InnerStep& inner, const OuterSync& outer);

} // namespace spansim::sync
