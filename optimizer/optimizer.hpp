#pragma once
/// @file
/// @brief The optimizer: the configuration with the shortest simulated step for a topology, model, GPU budget
/// and batch, with the evidence (ranked table, named baselines) and a scenario per configuration.
///
/// Multi-fidelity search: every point of the space is built as a typed job and checked (divisibility, memory,
/// placement; infeasible points are counted by the reason code of the error) and bounded below by its compute and
/// pipeline bubble; feasible points are scored in worker processes with the collapsed analytical step (each
/// communication op alone), skipping those whose bound cannot enter the best K; the best K are re-simulated at
/// flow fidelity. A space larger than ScreenSpec::above is first screened in closed form (optimizer/screen.hpp) and
/// only its best fraction goes on as above. Deterministic.

#include "common/process.hpp"
#include "netsim/step.hpp"
#include "placement/placement.hpp"
#include "reliability/reliability.hpp"
#include "sync/sync.hpp"
#include "topology/topology.hpp"
#include "workload/workload.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace spansim::optimizer {

/// @brief The values each knob may take. Every list holds at least one value.
struct SearchSpace {
  std::vector<int> tp{1, 2, 4, 8};
  std::vector<int> cp{1};
  std::vector<int> pp{1, 2, 4, 8, 16};
  std::vector<int> ep{1};
  std::vector<workload::DataParallelMode> data_parallel{workload::DataParallelMode::fsdp};
  std::vector<bool> reshard_after_forward{false};
  std::vector<int> micro_batch{1};
  std::vector<workload::ScheduleKind> schedule{workload::ScheduleKind::one_f_one_b,
                                               workload::ScheduleKind::interleaved_1f1b};
  std::vector<int> virtual_stages{2, 4};
  std::vector<std::vector<workload::Dim>> order{
      {workload::Dim::tp, workload::Dim::cp, workload::Dim::pp, workload::Dim::dp},
      {workload::Dim::tp, workload::Dim::cp, workload::Dim::dp, workload::Dim::pp}};
  std::vector<workload::Recompute> recompute{workload::Recompute::none, workload::Recompute::selective};
  /// @brief Transformer Engine's TP communication overlap (applies where tp >= 2).
  std::vector<bool> tp_overlap{false};
  /// @brief How K/V move between cp ranks (applies where cp >= 2); a2a+p2p's all-to-all groups are the cp ranks
  /// of one node (Point::cp_a2a).
  std::vector<workload::CpComm> cp_comm{workload::CpComm::allgather};
  std::vector<netsim::Algorithm> dp_algorithm{netsim::Algorithm::automatic};
  /// @brief Expert tensor parallelism (0: the point's tp), MoE dispatchers, node limits (0: none) and Megatron's
  /// all-to-all overlap: a MoE job's expert-layer choices.
  std::vector<int> etp{0};
  std::vector<workload::Dispatcher> dispatcher{workload::Dispatcher::alltoall};
  std::vector<int> node_limit{0};
  std::vector<bool> ep_overlap{false};
  std::vector<int> flows_per_pair{1};
  /// @brief Bytes a queue pair may have in flight (the scenario's transport.window); 0: no limit.
  std::vector<double> window{0};
  /// @brief Queue pairs per GPU pair (the scenario's multipath.qps); above 1 needs ECMP routing.
  std::vector<int> qps{1};
  /// @brief Compression alternatives (the scenario's `compression`); an empty spec compresses nothing.
  std::vector<netsim::CompressionSpec> compression{netsim::CompressionSpec{}};
  /// @brief Cross-region synchronization alternatives (the scenario's `diloco`); none: every step.
  std::vector<std::optional<sync::DilocoSpec>> diloco{std::nullopt};
  /// @brief Bandwidth of the inter-building links (bytes/s per direction; overrides scale with it); 0: the
  /// topology's.
  std::vector<double> inter_building{0};
  /// @brief The same for the inter-region links.
  std::vector<double> inter_region{0};
};

/// @brief What long-haul capacity costs (in the user's unit, per Tbps of link bandwidth per direction), and the two
/// questions asked of the capacity front.
struct CapacityCost {
  double per_tbps_inter_building = 0;
  double per_tbps_inter_region   = 0;
  std::string unit               = "cost units";
  double within                  = 0.05; ///< "the cheapest capacity whose best step is within this of the best"
  std::optional<double> budget;          ///< "the best step this budget buys"
  nlohmann::json to_json() const;
};

/// @brief Tier 1 of the search: a space of more than `above` points is screened in closed form (microseconds per
/// point) and only its best `keep` fraction, at least `keep_min` and at most `keep_max` points, goes on to the
/// analytical engine (tier 2); the best `top_k` of those are re-simulated at the refine fidelity (tier 3).
struct ScreenSpec {
  std::uint64_t above  = 5000;
  double keep          = 0.01;
  std::size_t keep_min = 64;
  std::size_t keep_max = 400;
  nlohmann::json to_json() const;
};

/// @brief Most combinations a search space may have (the product of its lists' lengths).
inline constexpr std::uint64_t kMaxCombinations = 1'000'000'000;
/// @brief Most combinations `screen.above` may leave to the plain enumeration, which holds every point in memory.
inline constexpr std::uint64_t kMaxEnumerated = 1'000'000;

/// @brief The three dimensions of the scale-across search, for explanations.
enum class SearchDimension { placement, scheduling, network };
constexpr std::array<std::string_view, 3> enum_names(SearchDimension)
{
  return {"placement", "scheduling", "network"};
}

/// @brief What to optimize: fixed inputs and the search space.
struct OptimizeSpec {
  std::string name;
  std::string file;
  topology::TopologySpec topology;
  workload::JobSpec base;   ///< model, GPU, GPU count and batch (its micro-batch and degrees are searched)
  nlohmann::json model_ref; ///< the model as the spec names it (zoo name or inline), for the scenarios written
  nlohmann::json gpu_ref;   ///< the same for the GPU
  nlohmann::json batch_ref; ///< the same for the batch
  nlohmann::json moe_ref;   ///< a MoE model's routing as the spec gives it ("moe"; dispatcher and node limit searched)
  nlohmann::json precision_ref; ///< the spec's `precision` as given (null: none), in the search's fingerprint
  nlohmann::json kernels_ref;   ///< the spec's `kernels` as given (null: none), in the search's fingerprint
  std::vector<std::string> buildings;
  /// @brief Of each node the job uses its first this many GPUs, the others idle as spares (placement.gpus_per_node:
  /// NVL72 racks with 64 in the job); 0: every GPU.
  int gpus_per_node = 0;
  /// @brief NCCL's settings for every point, as a scenario's `collectives.nccl` (NCCL_MIN/MAX_NCHANNELS, protocol,
  /// buffers); `nccl_ref` as the spec gives it (null: NCCL's defaults), copied into the scenarios written.
  netsim::NcclSettings nccl;
  nlohmann::json nccl_ref;
  SearchSpace space;
  int top_k               = 20;
  netsim::Fidelity refine = netsim::Fidelity::flow;
  /// @brief Set: the re-simulated points (tier 3) route by it rather than by `topology.multipath`, so that the
  /// ranking counts ECMP's collisions while the screen and tier 2 score on ideal routing.
  std::optional<topology::MultipathSpec> refine_multipath;
  int workers = 0; ///< child processes; 0: one per core
  /// @brief Bytes of memory each worker may hold (`worker_memory`); a point past it fails alone, recorded as
  /// failed, instead of the kernel's OOM killer ending a worker or the whole search. 0: the machine's physical
  /// memory over the workers (the same on every run of a machine).
  double worker_memory = 0;
  std::uint64_t seed   = 1; ///< recorded; the search itself has no randomness
  /// @brief Failures and recovery: with it, every re-simulated point gets its ETTR (a Monte Carlo over the block's
  /// horizon; replica recovery where the point's data parallelism has replicas, synchronous otherwise).
  std::optional<reliability::ReliabilitySpec> reliability;
  nlohmann::json reliability_ref; ///< the block as given, for the scenarios written
  bool time_to_train = false;     ///< rank by step time / ETTR (expected time to train) instead of step time
  CapacityCost capacity;          ///< prices of the capacity knobs (search.inter_building, search.inter_region)
  ScreenSpec screen;              ///< when and how much the closed-form screen keeps

  /// @brief The effective spec as JSON (for results).
  nlohmann::json to_json() const;
};

/// @brief Reads an optimize spec. @throws SpecError naming the file, JSON path and allowed values.
OptimizeSpec load_optimize_spec(const std::string& path);

/// @brief One point of the search space.
struct Point {
  int tp = 1, cp = 1, pp = 1, dp = 1, ep = 1;
  workload::DataParallelMode data_parallel = workload::DataParallelMode::fsdp;
  bool reshard_after_forward               = false;
  int micro_batch                          = 1;
  workload::ScheduleKind schedule          = workload::ScheduleKind::one_f_one_b;
  int virtual_stages                       = 1;
  std::vector<workload::Dim> order{workload::kProductionOrder.begin(), workload::kProductionOrder.end()};
  workload::Recompute recompute   = workload::Recompute::none;
  bool tp_overlap                 = false;
  workload::CpComm cp_comm        = workload::CpComm::allgather;
  int cp_a2a                      = 0; ///< a2a+p2p: ranks per all-to-all group (0: another variant, or none fits)
  netsim::Algorithm dp_algorithm  = netsim::Algorithm::automatic;
  int etp                         = 0; ///< expert tensor parallelism; 0: tp
  workload::Dispatcher dispatcher = workload::Dispatcher::alltoall;
  int node_limit                  = 0; ///< at most this many nodes per token (deepep); 0: none
  bool ep_overlap                 = false;
  int flows_per_pair              = 1;
  double window                   = 0; ///< bytes; 0: no limit
  int qps                         = 1;
  netsim::CompressionSpec compression;
  std::optional<sync::DilocoSpec> diloco;
  double inter_building = 0; ///< bytes/s; 0: the topology's
  double inter_region   = 0; ///< bytes/s; 0: the topology's

  /// @brief A short label, e.g. "tp8 cp1 pp16 dp64 fsdp mb1 i1f1b(v4) [tp,cp,pp,dp] selective dp:auto".
  std::string label() const;
  nlohmann::json to_json() const;
  bool operator==(const Point&) const = default;
};

/// @brief The job of a point, built from the spec's base job and checked.
/// @throws InfeasibleError (its reason a workload::JobIssue name) when the point cannot run.
workload::JobSpec job_of(const OptimizeSpec& spec, const Point& point, int buildings);

/// @brief What a simulated point showed.
struct Metrics {
  double step_time      = 0;
  double mfu            = 0;
  double tflops_per_gpu = 0;
  workload::DimArray<double> exposed{};         ///< mean over stages
  double bubble = 0;                            ///< mean over stages
  std::optional<double> bytes_across_buildings; ///< at the refine fidelity
  std::optional<double> bytes_across_regions;
  std::map<std::string, std::string> collectives_chosen; ///< dimension -> what `auto` settled on for the step
  /// @brief With DiLoCo: `step_time` is the mean over an outer step; this is the inner step and the outer sync.
  std::optional<double> inner_step;
  std::optional<double> outer_sync;

  nlohmann::json to_json() const;
};

/// @brief A point and what is known of it.
struct Evaluation {
  Point point;
  double lower_bound = 0;        ///< compute and pipeline bubble with free communication
  double score       = 0;        ///< collapsed analytical step time
  std::optional<double> refined; ///< step time at the refine fidelity
  Metrics metrics;               ///< of the most faithful run
  std::optional<double> ettr;    ///< effective training time ratio under the spec's reliability block
  std::string recovery;          ///< the recovery mode that ETTR assumed
  /// @brief Why its re-simulation failed (out of memory, a worker that died); `refined` is then its analytical
  /// score. Empty: re-simulated.
  std::string failure;
  /// @brief Seconds of wall time per step once failures count (the step time without a reliability block).
  double effective_step() const { return *refined / ettr.value_or(1.0); }
};

/// @brief The outcome of a search.
struct OptimizeResult {
  std::size_t points   = 0;
  std::size_t feasible = 0;
  std::map<std::string, std::size_t> pruned; ///< infeasible points by reason
  /// @brief A point whose evaluation failed (out of memory, a worker that died) in a phase of the search.
  struct Failure {
    std::string point; ///< its label
    std::string phase; ///< "bound", "score" or "refine"
    std::string why;
  };
  std::vector<Failure> failed;  ///< in the order met; scored points that failed count among `pruned` as "failed"
  double worker_memory     = 0; ///< bytes each local worker could hold (OptimizeSpec::worker_memory as it applied)
  std::size_t bound_pruned = 0; ///< feasible points skipped: their bound could not enter the best K
  std::size_t scored       = 0;
  /// @brief Every distinct point re-simulated at the refine fidelity (the screen's best K, the baseline, the best
  /// changes, the capacity runs), fastest first, at most top_k.
  std::vector<Evaluation> ranked;
  Evaluation baseline;           ///< production default: order [tp, cp, pp, dp], DP across, 1F1B
  Evaluation best_single_change; ///< the best one-knob change from the baseline
  std::string single_change;     ///< which knob, e.g. "order = [tp, cp, dp, pp]"
  /// @brief The best one-knob change from the baseline within each dimension of the search, where the space has one.
  struct DimensionChange {
    SearchDimension dimension;
    std::string change;
    Evaluation evaluation;
  };
  std::vector<DimensionChange> by_dimension;
  /// @brief Per capacity choice (inter-building, inter-region): its cost and the best point with it.
  struct CapacityPoint {
    double inter_building = 0, inter_region = 0; ///< bytes/s (the topology's where not searched)
    double cost = 0;
    Evaluation best;
    bool on_front = false; ///< no cheaper-or-equal choice is as fast
  };
  std::vector<CapacityPoint> capacity;        ///< cheapest first; empty when capacity is not searched
  std::optional<std::size_t> cheapest_within; ///< index into `capacity`: cheapest within CapacityCost::within of best
  std::optional<std::size_t> best_in_budget;  ///< index into `capacity`: fastest whose cost fits the budget
  double wall_seconds    = 0;
  double scoring_seconds = 0; ///< wall time of the bound and scoring phases (the fast model over the space)
  /// @brief Tier 1, when the space was large enough for it: combinations screened in closed form (duplicates and
  /// indivisible ones included), the points kept for tier 2, and its wall time.
  std::uint64_t screened  = 0;
  std::size_t screen_kept = 0;
  double screen_seconds   = 0;
};

/// @brief Progress of a search: phase name, points done, points in the phase, and the best step so far (seconds,
/// of the phase's model; 0 before any).
using Progress = std::function<void(const std::string&, std::size_t, std::size_t, double)>;

/// @brief What a worker does with a point in tiers 2 and 3: the collapsed analytical score, or a re-simulation at
/// the refine fidelity.
enum class Work { score, refine };
constexpr std::array<std::string_view, 2> enum_names(Work)
{
  return {"score", "refine"};
}

/// @brief Evaluates a tier's points elsewhere (a Slurm job array): one record per point, in order, each as
/// evaluate_point returns it. Unset: worker processes on this machine.
using Farm = std::function<std::vector<std::string>(Work, const std::vector<Point>&)>;

/// @brief Runs the search; with a farm, tiers 2 and 3 evaluate their points there (the ranking is the same).
OptimizeResult optimize(const OptimizeSpec& spec, const Progress& progress = {}, const Farm& farm = {});

/// @brief How the search's worker processes run, here or in a farm's task: each under the spec's memory limit
/// (OptimizeSpec::worker_memory), and a point whose worker dies recorded as failed (its Outcome::failure) while a
/// new worker takes the rest.
process::MapOptions worker_options(const OptimizeSpec& spec, int workers);

/// @brief One point evaluated as tier 2 or 3 does (what a farm's task runs): the worker's record.
std::string evaluate_point(const OptimizeSpec& spec, const topology::Topology& topo, Work work, const Point& point);

/// @brief A point as one line of hex digits, for a farm's work lists; decode_point reads back the same point.
std::string encode_point(const OptimizeSpec& spec, const Point& point);
/// @brief A work list's line read back. @throws UsageError if it is not a point of this spec's search.
Point decode_point(const OptimizeSpec& spec, const std::string& line);

/// @brief The site a point runs on: the spec's topology with the point's window, queue pairs and long-link
/// capacities; with `refine`, routed as the re-simulated points are (OptimizeSpec::refine_multipath).
topology::TopologySpec topology_of(const OptimizeSpec& spec, const Point& point, bool refine = false);
/// @brief What the long-haul links of `site` cost under the spec's prices.
double capacity_cost(const OptimizeSpec& spec, const topology::Topology& site);

/// @brief A scenario file (for `spansim run`) that reproduces one evaluated point at the refine fidelity.
nlohmann::json scenario_json(const OptimizeSpec& spec, const Point& point);

} // namespace spansim::optimizer
