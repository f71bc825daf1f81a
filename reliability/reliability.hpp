#pragma once
/// @file
/// @brief The reliability stage: what a training run gets once slow GPUs, jitter and failures are counted.
/// Variability samples step times around a simulated step (its op timeline replayed with per-op factors);
/// failures and recovery turn a step time into the goodput of a whole run (a seeded Monte Carlo, with the
/// exponential-failure closed forms and Young/Daly beside it). Formats and sources: reliability/README.md.
#include "common/json_reader.hpp"
#include "common/random.hpp"
#include "netsim/step.hpp"
#include "placement/placement.hpp"
#include "workload/workload.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace spansim::reliability {

/// @brief A distribution of slowdown factors (duration over the modelled duration).
struct Jitter {
  enum class Kind { none, lognormal, empirical };
  Kind kind    = Kind::none;
  double sigma = 0;            ///< lognormal: shape; its mean is 1 (mu = -sigma^2 / 2)
  std::vector<double> samples; ///< empirical: measured factors, sorted
  std::string file;            ///< empirical: where they came from
  /// @brief The factor at quantile q in (0, 1); `upper_tail` = 1 - q, given to keep precision near 1.
  double quantile(double q, double upper_tail) const;
  /// @brief One draw of the largest of `n` independent factors, from a uniform u in (0, 1).
  double max_of(double n, double u) const;
  bool active() const { return kind != Kind::none; }
};

/// @brief Where GPUs are slow and by how much, and the jitter of ops. Seeded.
struct VariabilitySpec {
  std::uint64_t seed   = 1;
  double slow_fraction = 0;      ///< fraction of GPUs persistently slow
  double slowdown      = 1;      ///< a slow GPU's compute takes this many times as long
  Jitter compute;                ///< per compute op and rank
  Jitter communication;          ///< per collective or transfer, one draw its participants share
  double degraded_fraction  = 0; ///< fraction of scale-out links (NIC and above) persistently degraded
  double degraded_bandwidth = 1; ///< the bandwidth a degraded link keeps, as a fraction
  bool degrades_links() const { return degraded_fraction > 0 && degraded_bandwidth < 1; }
  bool active() const
  {
    return (slow_fraction > 0 && slowdown > 1) || compute.active() || communication.active() || degrades_links();
  }
};

/// @brief Reads a `variability` block. @throws SpecError at its file and JSON path.
VariabilitySpec read_variability(spec::ObjectReader r);
/// @brief The block as it was read (effective configuration for results).
nlohmann::json to_json(const VariabilitySpec& v);

/// @brief One component class that fails: how many of it the job uses comes from its `per` unit.
struct Component {
  std::string name;
  enum class Per { gpu, node, job, building } per = Per::gpu;
  double mttf                                     = 0; ///< seconds, per unit
  /// @brief Whether a failure takes out one data-parallel replica (GPU, node) or the whole job (anything
  /// shared: switches, storage, software across ranks, a building).
  bool replica_scoped = true;
  /// @brief Whether recovering from it needs a healthy node in place of the failed one (hardware), which a pool
  /// of hot spares provides at once; otherwise the job waits for the repair.
  bool hardware = true;
  std::string source;
};
constexpr std::array<std::string_view, 4> enum_names(Component::Per)
{
  return {"gpu", "node", "job", "building"};
}

/// @brief How failures are recovered from.
enum class Recovery { synchronous, replica };
constexpr std::array<std::string_view, 2> enum_names(Recovery)
{
  return {"synchronous", "replica"};
}

/// @brief Failure model, checkpoint and restart costs, recovery mode. Seeded.
struct ReliabilitySpec {
  std::uint64_t seed = 1;
  spec::Location where;   ///< the block, for errors found once the job and topology are known
  std::string model_name; ///< the failure model file's name or path
  std::vector<Component> components;
  Recovery recovery = Recovery::synchronous;
  // Checkpoints.
  double interval          = 0;    ///< seconds between checkpoints; 0: the interval that maximises goodput
  double storage_bandwidth = 2e12; ///< aggregate write (and read) bandwidth of the checkpoint store, bytes/s
  std::string storage_building;    ///< empty: storage in every building; else checkpoints cross to it
  double bytes_per_parameter = 14; ///< bf16 weights + fp32 master weights and Adam moments
  // Restart.
  double launch         = 300;   ///< scheduler, process start
  double nccl_init      = 200;   ///< communicator set-up at `nccl_init_gpus`, linear in GPUs
  double nccl_init_gpus = 98304; ///< GPUs of the `nccl_init` figure
  double data_loader    = 60;    ///< data loader start and fast-forward
  // Replica recovery (FT-HSDP).
  double replica_stall = 180; ///< the healthy replicas' pause when a replica leaves or rejoins
  double horizon_days  = 30;  ///< the run's length when no other is asked for (campaigns, `reliability` alone)
  // Hot spares: without the block, a healthy node is always at hand.
  bool spares_modelled = false;
  int spare_nodes      = 0; ///< the pool of hot spares
  double repair        = 0; ///< seconds until a failed node is back in the pool
};

/// @brief Reads a `reliability` block; `file` anchors a failure-model path. @throws SpecError.
ReliabilitySpec read_reliability(spec::ObjectReader r);
/// @brief The block with its failure model expanded (effective configuration for results).
nlohmann::json to_json(const ReliabilitySpec& r);

// ---------------------------------------------------------------------------------------------------------------
// Order statistics.

/// @brief Phi^-1(p) for p in (0, 1) (Acklam's rational approximation, one Halley step: about 1e-15 relative).
double normal_quantile(double p);
/// @brief Phi^-1(1 - tail), precise for tiny tails.
double normal_upper_quantile(double tail);
/// @brief E[max of n independent standard normals], by numerical integration (a closed form to check against).
double expected_max_normal(double n);

using spansim::Random;

// ---------------------------------------------------------------------------------------------------------------
// Variability: sampled steps.

/// @brief Parameters of step sampling.
struct SampleOptions {
  int steps = 1000;
  /// @brief Called with (phase, steps done, steps) now and then; may be empty.
  std::function<void(const std::string&, std::size_t, std::size_t)> progress;
};

/// @brief Where the time lost to variability went.
struct LossAttribution {
  std::vector<double> stage_compute; ///< per stage: mean seconds of compute added by slowdowns and jitter
  /// @brief Per dimension (tp, cp, pp, dp, ep): mean seconds of communication added by jitter.
  std::array<double, 5> communication{};
  double replica_sync = 0; ///< mean seconds the end-of-step data-parallel synchronisation waits for the slowest replica
};

/// @brief Step times sampled around a deterministic step.
struct SampledSteps {
  double deterministic = 0;       ///< the simulated step
  int degraded_links   = 0;       ///< links degraded (their step, simulated again, is the one sampled around)
  double degraded_step = 0;       ///< the step simulated on the degraded links
  std::vector<double> step_times; ///< one per sampled step, in sampling order
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
  double lost_share  = 0;           ///< mean / deterministic - 1
  int lockstep_group = 1;           ///< ranks whose compute is taken in lockstep (the largest of each op's draws)
  int replicas       = 1;           ///< replicas whose slowest one the step waits for
  std::vector<double> stage_factor; ///< persistent slowdown of each stage (its slowest GPU)
  LossAttribution attribution;
  nlohmann::json to_json() const;
};

/// @brief Samples step times: the simulated op timeline replayed with factors, per-stage representatives whose
/// compute takes the largest of each op's lockstep group's draws (sampled exactly, from the group's
/// extreme-value distribution), and the wait for the slowest of the data-parallel replicas at the end.
SampledSteps sample_steps(const workload::StepGraph& graph, const netsim::StepResult& step,
                          const placement::Placement& placement, const VariabilitySpec& spec,
                          const SampleOptions& options);
/// @brief A simulated step and what it was simulated on: what sampling under degraded links needs to simulate
/// the step again.
struct SimulatedStep {
  const topology::Topology& topology;
  const workload::StepGraph& graph;
  const placement::Placement& placement;
  const placement::PlacementSpec& placement_spec;
  const netsim::StepOptions& options;
  const netsim::StepResult& result;
};
/// @brief sample_steps on a simulated step; when the spec degrades links, the step is first simulated again on
/// the topology with those links degraded (seeded; rail symmetry off, since rails then differ).
SampledSteps sample_steps(const SimulatedStep& step, const VariabilitySpec& spec, const SampleOptions& options);

/// @brief The reference the method is checked against: every rank replayed on its own, collectives waiting for
/// their group's members, transfers for their peer. Feasible for small jobs only.
SampledSteps sample_steps_per_rank(const workload::StepGraph& graph, const netsim::StepResult& step,
                                   const placement::Placement& placement, const VariabilitySpec& spec,
                                   const SampleOptions& options);
/// @brief The step time of the op timeline replayed with every factor 1 (equals the simulated step).
double replay_deterministic(const workload::StepGraph& graph, const netsim::StepResult& step);

// ---------------------------------------------------------------------------------------------------------------
// Failures and goodput.

/// @brief What a training run is: its step, its size, how long.
struct RunShape {
  double step_time       = 0; ///< mean seconds per step (variability included)
  double tokens_per_step = 0;
  double gpus            = 0;
  double nodes           = 0;
  double buildings       = 1;
  double replicas        = 1; ///< data-parallel replicas (the unit of replica recovery)
  double parameters      = 0; ///< model parameters (checkpoint size)
  /// @brief Idle GPUs of each node the job uses (placement.gpus_per_node: NVL72 racks with 64 in the job keep 8), hot
  /// spares that replace a failed GPU inside its node; 0: none.
  double spare_gpus_per_node = 0;
  /// @brief Seconds per checkpoint byte on the busiest link between the job's buildings and the storage building
  /// (0: storage in every building).
  double cross_building_seconds_per_byte = 0;
};
/// @brief The shape of a simulated scenario.
RunShape run_shape(const workload::JobSpec& job, const topology::Topology& topology,
                   const placement::Placement& placement, const ReliabilitySpec& spec, double mean_step_time);

/// @brief Costs derived from the spec and the run's shape.
struct Costs {
  double failure_rate              = 0; ///< job-wide failures per second (every component)
  double replica_rate              = 0; ///< of which replica-scoped
  double hardware_job_rate         = 0; ///< job-scoped failures that need a replacement node
  double hardware_replica_rate     = 0; ///< replica-scoped failures that need a replacement node
  double hardware_gpu_job_rate     = 0; ///< of hardware_job_rate: a GPU's (a spare GPU of its node can replace it)
  double hardware_gpu_replica_rate = 0; ///< of hardware_replica_rate: a GPU's
  double checkpoint_bytes          = 0;
  double checkpoint_write          = 0; ///< seconds, blocking
  double restart                   = 0; ///< launch + NCCL init + data loader + checkpoint read
  double interval                  = 0; ///< the checkpoint interval in force
  double young                     = 0; ///< sqrt(2 delta M)
  double daly                      = 0; ///< Daly's higher-order optimum
  nlohmann::json to_json() const;
};
/// @brief Failure rates, checkpoint and restart costs and the checkpoint interval of a run.
/// @throws SpecError at the block's `failures` when no restart could ever finish.
Costs costs(const ReliabilitySpec& spec, const RunShape& shape);
/// @brief How many of a component the run has (its GPUs, nodes, buildings, or the job itself).
double units_of(const Component& c, const RunShape& shape);

/// @brief ETTR of synchronous recovery under exponential failures (mean time between failures `mtbf`), work
/// `interval` between checkpoints of cost `checkpoint`, restart `restart` (both exposed to failures).
double ettr_exact(double interval, double checkpoint, double restart, double mtbf);
/// @brief Daly's higher-order optimum checkpoint interval (FGCS 22(3), 2006).
double daly_interval(double checkpoint, double mtbf);
/// @brief The interval that maximises ettr_exact (golden-section search).
double optimal_interval(double checkpoint, double restart, double mtbf);

/// @brief How long to run.
struct Horizon {
  double days   = 0; ///< wall-clock days (or 0)
  double tokens = 0; ///< a token budget to train (or 0)
  int trials    = 200;
};

/// @brief A Monte Carlo of the run: means over trials.
struct RunOutcome {
  double wall_seconds     = 0; ///< wall-clock time (the horizon, or the time to train the tokens)
  double tokens           = 0; ///< tokens trained
  double interruptions    = 0; ///< failures (every component)
  double replica_failures = 0; ///< of which recovered by replica recovery
  double ettr             = 0; ///< productive time over wall time (replica-degraded time at its share)
  double ettr_closed_form = 0; ///< synchronous: ettr_exact at the interval in force
  double lost_recompute = 0, lost_restart = 0, lost_checkpoint = 0, lost_degraded = 0, lost_stall = 0; ///< seconds
  double lost_spare_wait = 0; ///< seconds waiting for a repaired node when the spare pool was empty
  double spares_used     = 0; ///< failures a hot spare covered (a spare node, or a spare GPU of the node)
  double gpu_spares_used = 0; ///< of spares_used: failed GPUs replaced by a spare GPU of their own node
  double ettr_stddev     = 0; ///< over trials (sample standard deviation)
  int trials             = 0; ///< the Monte Carlo trials averaged (one: no spread, stddev null in JSON)
  nlohmann::json to_json() const;
};
RunOutcome simulate_run(const ReliabilitySpec& spec, const RunShape& shape, const Costs& costs, const Horizon& horizon);

} // namespace spansim::reliability
