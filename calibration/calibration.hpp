#pragma once
/// @file
/// @brief The calibration stage: published training runs (validation/published-runs.json) simulated and compared
/// with what was published; the compute model's free parameters fitted on the `fit` rows of one GPU (a
/// calibration profile); every row validated against the profiles, with leave-one-out figures for the fit rows.

#include "common/process.hpp"
#include "netsim/netsim.hpp"
#include "netsim/step.hpp"
#include "placement/placement.hpp"
#include "sync/sync.hpp"
#include "topology/topology.hpp"
#include "workload/workload.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace spansim::calibration {

/// @brief What a row is for: fitting the parameters, checking them (held out), or nothing (kept with the reason).
enum class Role { fit, check, excluded };
constexpr std::array<std::string_view, 3> enum_names(Role)
{
  return {"fit", "check", "excluded"};
}

/// @brief The figure a source published.
/// `compute_utilization` (cross-site rows): compute time over wall time with the outer synchronizations counted,
/// the fraction the DiLoCo papers publish.
enum class Metric { step_time, tokens_per_second_per_gpu, tflops_per_gpu, mfu, compute_utilization };
constexpr std::array<std::string_view, 5> enum_names(Metric)
{
  return {"step_time", "tokens_per_second_per_gpu", "tflops_per_gpu", "mfu", "compute_utilization"};
}

/// @brief A published figure and what is needed to turn it into a step time.
struct Published {
  Metric metric         = Metric::step_time;
  double value          = 0;
  double flops_per_step = 0; ///< tflops_per_gpu and mfu: FLOPs per step under the source's own formula
  double peak           = 0; ///< mfu: the peak (FLOP/s) the source divided by
  /// @brief The formula the figure's FLOPs follow (causal, megatron, torchtitan, megatron-sc21, mosaicml, nemo, 6n)
  /// or "none" for a time, token rate or utilization.
  std::string flop_convention = "none";
  /// @brief compute_utilization of a source that fixed the inner step (a simulation of its own): that step, in
  /// place of spansim's, so that only the synchronization is compared. 0: spansim's inner step.
  double inner_step = 0;
};

/// @brief The cluster a run ran on: one building of 8-GPU (or other) nodes, as published or assumed.
struct Cluster {
  int gpus_per_node        = 8;
  double nvlink_bandwidth  = 0; ///< bytes/s per GPU per direction
  double nvlink_efficiency = 1;
  double nic_bandwidth     = 0; ///< bytes/s per GPU per direction
  double nic_efficiency    = 1;
  std::string fabric       = "ib";
  bool rail_optimized      = true;
};

/// @brief One published run.
struct PublishedRun {
  std::string name;
  Role role = Role::fit;
  std::string confidence;
  std::string excluded_because;
  std::optional<workload::JobSpec> job; ///< absent for excluded rows
  Cluster cluster;
  Published published;
  std::string source;
  /// @brief Cross-site rows: the site as an inline topology (instead of `cluster`), the placement and the DiLoCo
  /// block of the run.
  std::optional<topology::TopologySpec> site;
  placement::PlacementSpec placement;
  std::optional<sync::DilocoSpec> diloco;
  /// @brief A MoE row's conditions as published (dispatcher, routing balance, drop policy, overlap, precision
  /// recipe, FLOP convention), by key; a simulated MoE row must state them.
  std::map<std::string, std::string> conditions;

  /// @brief Whether the row is a run across sites (a `site` with several buildings or a DiLoCo block).
  bool cross_site() const { return site.has_value() || diloco.has_value(); }
  /// @brief The step time the published figure implies; `inner_step` is the inner step of a compute_utilization
  /// row (the utilization is inner over mean step).
  double published_step_time(double inner_step = 0) const;
  /// @brief A step time expressed in the published metric (to compare like with like).
  double in_published_metric(double step_time, double inner_step = 0) const;
};

/// @brief A dataset of published runs.
struct Dataset {
  std::string file;
  std::vector<PublishedRun> runs;
};

/// @brief Reads a dataset (format: validation/README.md). @throws SpecError naming the file and JSON path.
Dataset load_dataset(const std::string& path);
/// @brief Path of the shipped dataset.
std::string default_dataset_path();
/// @brief A dataset path as a profile records it: relative to the source tree when inside it, so that a shipped
/// profile names no machine's directories.
std::string recorded_path(const std::string& path);

/// @brief The topology a run is simulated on: its cluster as one pod of one building.
topology::TopologySpec cluster_topology(const PublishedRun& run);

/// @brief A simulated step: its time and its breakdown.
struct SimulatedStep {
  double step_time  = 0;                             ///< seconds (with DiLoCo: the mean over an outer step)
  double inner_step = 0;                             ///< with DiLoCo: the inner step (the published one if fixed)
  std::array<double, netsim::kParts.size()> parts{}; ///< seconds of each part, mean over the stages
};
/// @brief Simulates one step of a run with `calibration` in place of the job's, at `fidelity`.
SimulatedStep simulate_run(const PublishedRun& run, const workload::Calibration& calibration,
                           netsim::Fidelity fidelity);
/// @brief The step time (seconds) of simulate_run.
double simulate_step_time(const PublishedRun& run, const workload::Calibration& calibration, netsim::Fidelity fidelity);

/// @brief The bounds of the fitted parameters.
struct Bounds {
  double clock_min = 0.6, clock_max = 1.0;
  double gap_min = 0, gap_max = 100e-6;
  double alltoall_min = 0.2, alltoall_max = 1.0; ///< NCCL all-to-all's share, fitted on MoE rows
  double moe_host_min = 0, moe_host_max = 20e-3; ///< host seconds per MoE layer and micro-batch, fitted on MoE rows
  /// @brief Host seconds the all-to-all overlap adds per MoE layer and micro-batch, fitted on its MoE rows.
  double moe_overlap_min = 0, moe_overlap_max = 20e-3;
};

/// @brief Progress of a long run: what is being done, items done, items in all.
using Progress = std::function<void(const std::string&, std::size_t, std::size_t)>;

/// @brief How to fit.
struct FitOptions {
  std::vector<std::string> gpus; ///< the GPU files whose fit rows are used (one chip: "a100", "a100-40gb")
  std::string name;              ///< the profile's name (default: the first GPU's, "-published")
  netsim::Fidelity fidelity = netsim::Fidelity::analytical;
  Bounds bounds;
  int workers = 0; ///< worker processes (0: one per core)
  Progress progress;
  /// @brief Where the GPUs have no MoE fit rows: the profile (a shipped name or a path) whose NCCL all-to-all share
  /// and MoE host seconds to carry over; empty: 1 and 0. Both are the software's and the host CPU's, not the GPU's.
  std::string moe_from;
};

/// @brief A row's published and simulated step.
struct Residual {
  std::string name;
  Role role             = Role::fit;
  double published_step = 0;
  double simulated_step = 0;
  std::string source; ///< where the published figure comes from (the row's `source`)
  /// @brief log(simulated / published): what the fit minimises the squares of.
  double log_error() const;
};

/// @brief A fitted profile: the parameters, and each fit row's residual at them.
struct Profile {
  workload::Calibration calibration;
  Bounds bounds;
  std::vector<Residual> residuals;
  std::string dataset;
  /// @brief The profile file (validation/profiles/NAME.json format).
  nlohmann::json to_json() const;
};

/// @brief Fits clock_fraction and kernel_gap on the dense fit rows of options.gpu (bounded least squares on the log
/// of simulated over published step time), then alltoall_efficiency and moe_host on its MoE fit rows with those two
/// fixed, and moe_host_overlap on those of them that run ep_overlap (each in one dimension, in turn; 1, 0 and 0
/// without such rows; with --moe-from the first two are the donor's and a GPU's own fit rows may only be ep_overlap
/// runs, which fit the third). Deterministic. @throws UsageError when the GPU
/// has no dense fit rows.
Profile fit_profile(const Dataset& dataset, const FitOptions& options);

/// @brief One row of a validation.
struct ValidationRow {
  std::string name;
  std::string gpu;
  Role role        = Role::fit;
  Metric metric    = Metric::step_time;
  double published = 0;            ///< in the published metric
  double simulated = 0;            ///< the same metric from the simulated step
  double error     = 0;            ///< throughput error: published step time / simulated step time - 1
  std::optional<double> loo_error; ///< fit rows: the error with a profile fitted without this row
  std::array<double, netsim::kParts.size()> parts{}; ///< the simulated step's breakdown (mean over stages)
  std::string profile;                               ///< the profile in force
  std::string section;                               ///< "dense", "moe" or "cross_site" (the MAPE it counts in)
  std::string excluded_because;
  std::string flop_convention = "none"; ///< the published figure's, which the simulated figure follows
};

/// @brief A validation of a dataset.
struct ValidationReport {
  std::vector<ValidationRow> rows;
  double mape_fit = 0, mape_check = 0, mape_loo = 0; ///< mean absolute percentage errors
  std::size_t fit_rows = 0, check_rows = 0;
  /// @brief The same over the dense rows alone and over the MoE rows alone.
  struct Mape {
    double fit = 0, check = 0, loo = 0;
    std::size_t fit_rows = 0, check_rows = 0, loo_rows = 0;
  };
  Mape dense, moe, cross_site; ///< cross-site rows count in cross_site only
};

/// @brief How to validate.
struct ValidateOptions {
  netsim::Fidelity fidelity = netsim::Fidelity::analytical;
  bool leave_one_out        = true;
  int workers               = 0;
  Progress progress;
  /// @brief Where the simulations run (a Slurm job array); unset: `workers` worker processes here.
  process::Mapper map;
};

/// @brief Simulates every row with the job's profile (the shipped one for its GPU unless the row names another)
/// and, for fit rows, refits the profile without the row (leave one out).
ValidationReport validate(const Dataset& dataset, const ValidateOptions& options);

} // namespace spansim::calibration
