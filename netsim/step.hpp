#pragma once
/// @file
/// @brief Co-simulation of a placed training step: compute on GPUs, communication lowered to flows, one engine.
///
/// Every rank of a pipeline stage runs the same program, and its collectives keep it in step with the others,
/// so each op of a stage program becomes one node of the flow graph standing for all the stage's ranks.
/// Compute ops take their modelled time; a collective is lowered for every group of the stage (so groups that
/// share links contend), except groups that all sit inside single nodes, which are lowered once: NVLink is
/// theirs alone. Compute ops run one after another (one compute stream); the collectives of each dimension
/// too (one communicator each); pipeline sends and receives start when both sides are ready.

#include "netsim/collectives.hpp"
#include "netsim/compression.hpp"
#include "netsim/netsim.hpp"
#include "placement/placement.hpp"
#include "workload/workload.hpp"

#include <memory>

#include <array>
#include <cstddef>
#include <nlohmann/json.hpp>

namespace spansim::netsim {

/// @brief How the all-to-alls of a step are simulated (see StepOptions::all_to_all).
enum class AllToAllTiming { automatic, flows, isolated };
constexpr std::array<std::string_view, 3> enum_names(AllToAllTiming)
{
  return {"auto", "flows", "isolated"};
}
/// @brief Transfers beyond which `automatic` times all-to-alls in isolation.
inline constexpr double kAllToAllFlowBudget = 2e6;

/// @brief ECMP's rails apart at flow fidelity: a rail runs through SimGrid when the analytical engine's step for it is
/// within this fraction of the slowest rail's (the two engines agree to 1e-6 on the same model).
inline constexpr double kFlowRailMargin = 1e-3;

/// @brief ECMP's rails apart at flow fidelity: a rail lowered to more transfers than this is solved by spansim's own
/// max-min engine rather than SimGrid (SimGrid 3.32 re-solves a rail's one connected system at every flow end: a
/// 2.3M-transfer rail of a 131K-GPU step runs over 12 minutes there). The analytical engine computes SimGrid's model
/// under spansim's pinned settings (bench/README.md measures the two at 4K and 16K GPUs).
inline constexpr std::size_t kOwnSolverAbove = 1000000;

/// @brief Options of a step simulation.
struct StepOptions {
  Fidelity fidelity = Fidelity::flow;
  EngineOptions engine;
  /// @brief Algorithm per dimension; automatic picks per call (or per step, see choose_per_step).
  workload::DimArray<Algorithm> algorithms{};
  int flows_per_pair = 1; ///< flows per GPU pair (spread over ECMP's paths); NCCL's channels are `nccl`'s
  /// @brief NCCL's protocol, channels and buffers: the slot windows of every transfer (netsim/nccl.hpp).
  NcclSettings nccl;
  /// @brief Optimizer's fast mode: each communication op becomes one delay lasting what the op takes alone
  /// (its groups' flows run analytically in isolation, cached per stage, group, kind and size). Contention
  /// between different ops is ignored; `fidelity` is then not used.
  bool collapse_communication = false;
  /// @brief How all-to-alls are simulated: every flow of every group (`flows`); or each one timed alone, with all its
  /// groups running together, and placed in the step as a delay (`isolated`: exact unless other traffic shares its
  /// links; its bytes still count on every link); `automatic`: isolated when the step's all-to-alls would lower to
  /// more than kAllToAllFlowBudget transfers (an MoE step with EP 64 lowers to hundreds of millions).
  AllToAllTiming all_to_all = AllToAllTiming::automatic;
  /// @brief When every rail carries the same traffic (rail-optimized pods, TP filling each node, TP rank r on
  /// rail r), simulate rail 0 alone with the links all rails share divided among them: max-min gives each rail
  /// an equal share of those, so times are the same with 1/rails of the flows. Bytes are scaled back up.
  bool rail_symmetry = true;
  /// @brief Under ECMP, whether the topology's `ecmp_mode` may simulate the rails apart (netsim/README.md); off where
  /// a caller joins lowerings of several jobs.
  bool rails_apart = true;
  /// @brief ECMP's rails apart on a step whose all-to-alls cross nodes: each rail's share of a link direction the rails
  /// share is its share of the flows there while its own flows are there, from a first run of every rail (true);
  /// false: its share of the bytes over the whole step (what dense steps use).
  bool time_resolved_shares = true;
  /// @brief Worker processes running rails apart (0: one per core).
  int rail_workers = 0;
  /// @brief ECMP's rails apart at flow fidelity: SimGrid runs every rail (true), or, where its settings are the
  /// analytical engine's model (SimgridSettings::analytical_model), the rails that engine finds within
  /// kFlowRailMargin of the slowest (false; the others' steps are the analytical engine's).
  bool flow_every_rail = false;
  /// @brief Under ECMP at flow fidelity: a graph of more transfers than this (a rail's, with the rails apart; the
  /// step's, with every rail together) runs on spansim's own max-min engine instead of SimGrid, where SimGrid's
  /// settings are that engine's model (SimgridSettings::analytical_model); results name the engine
  /// (`max_min_engine`, and each rail's in `ecmp.rail_engines`). 0: SimGrid for every graph it runs.
  std::size_t own_solver_above = kOwnSolverAbove;
  /// @brief When a symmetry of the site moving whole regions or buildings maps the lowered step onto itself,
  /// simulate the base building's transfers alone (netsim/symmetry.hpp): exact, at analytical and flow fidelity.
  bool building_symmetry = true;
  /// @brief `automatic` is NCCL's tuner per call (false, the default); true: for each dimension left `automatic` whose
  /// groups span nodes, also run the step analytically under each of spansim's algorithms for all of that
  /// dimension's calls, and keep the fastest (what the whole step would gain from forcing one; up to five
  /// analytical runs per such dimension; not with collapse_communication).
  bool choose_per_step = false;
  /// @brief Boundary-crossing communication compressed (netsim/compression.hpp).
  CompressionSpec compression;
  /// @brief Inner steps of infrequent cross-region synchronization (DiLoCo): every data-parallel collective runs on
  /// its group's members in each region apart, so that nothing of the data-parallel dimension crosses regions.
  bool dp_within_regions = false;
  /// @brief DiLoCo's workers other than regions: the worker of each GPU of the site (-1 outside the job); every
  /// data-parallel collective runs on its group's members in each worker apart. Empty: regions, if
  /// dp_within_regions.
  std::vector<int> dp_workers;
};

/// @brief The parts of a stage's step time, in the order of every report (summary, CSV, campaigns, plots).
enum class Part : std::uint8_t { compute, exposed_tp, exposed_cp, exposed_pp, exposed_dp, exposed_ep, bubble, idle };
constexpr std::array<std::string_view, 8> enum_names(Part)
{
  return {"compute", "exposed_tp", "exposed_cp", "exposed_pp", "exposed_dp", "exposed_ep", "bubble", "idle"};
}
/// @brief Every part, in report order.
inline constexpr std::array kParts{Part::compute,    Part::exposed_tp, Part::exposed_cp, Part::exposed_pp,
                                   Part::exposed_dp, Part::exposed_ep, Part::bubble,     Part::idle};

/// @brief Where one stage's step time went. The parts add up to the step time.
struct StageBreakdown {
  int stage      = 0;
  double compute = 0;
  workload::DimArray<double> exposed{}; ///< communication the compute stream waited for, per dimension
  double bubble = 0;                    ///< waiting for another stage (pipeline fill and drain)
  double idle   = 0;                    ///< done before the step ended (others were slower)
  /// @brief GPU seconds the stage's communication streams spent compressing and decompressing (not a part: what
  /// of it the compute stream waited for is in `exposed`).
  double compression = 0;

  /// @brief Seconds of one part.
  double part(Part p) const;
  /// @brief Exposed communication of every dimension.
  double exposed_total() const;
};

/// @brief Start and end of one op of a stage program.
struct StepOpTiming {
  double start  = 0; ///< when its dependencies were done (a receive is posted early and waits)
  double end    = 0;
  double active = 0; ///< when it began its work: for a send or receive, when both sides were ready
};

/// @brief What a compute op waited for before it could start (one gap of the compute stream).
struct Wait {
  int stage                 = 0;
  int op                    = 0; ///< the compute op that waited (index in the stage program); -1: the end of the step
  workload::WaitCause cause = workload::WaitCause::idle;
  double seconds            = 0;
};

/// @brief A transfer of the lowered graph with its timing (for link utilisation over time).
struct TransferRecord {
  int src, dst;
  double bytes, start, end;
  int qp = 0; ///< its queue pair, which with the ends picks its ECMP route
};

/// @brief The outcome of a step simulation.
struct StepResult {
  double step_time         = 0;
  double tokens_per_second = 0;
  double model_flops       = 0; ///< per step, whole job
  double tflops_per_gpu    = 0; ///< model FLOP/s per GPU, in TFLOP/s
  double mfu               = 0; ///< against the GPU's dense peak at the job's precision
  double peak_flops        = 0; ///< that peak, FLOP/s per GPU
  workload::FlopCounts flops;   ///< the step's model FLOPs under each convention (model_flops is the causal one)
  /// @brief TFLOP/s per GPU and MFU under convention `c` (0 where it has no count).
  double tflops_per_gpu_under(workload::FlopConvention c) const
  {
    return model_flops > 0 ? tflops_per_gpu * flops.get(c) / model_flops : 0;
  }
  double mfu_under(workload::FlopConvention c) const { return model_flops > 0 ? mfu * flops.get(c) / model_flops : 0; }
  std::vector<StageBreakdown> stages;
  std::vector<std::vector<StepOpTiming>> ops; ///< [stage][op of the stage program]
  std::vector<Wait> waits;                    ///< every gap of every stage's compute stream, by cause
  std::vector<TransferRecord> transfers;
  /// @brief Per link and direction, as RunResult::link_bytes; the routes of groups a representative stood for
  /// carry the representative's transfers, member for member.
  std::vector<double> link_bytes;
  std::size_t flow_ops = 0; ///< ops of the lowered flow graph
  /// @brief Identical rails one simulated rail stood for (1 without rail symmetry); each TransferRecord stands
  /// for this many transfers, one per rail.
  int rails = 1;
  /// @brief Seconds SM contention added to each stage's compute (see workload::Effects::sm_contention).
  std::vector<double> sm_contention;
  /// @brief Per dimension: bit a set when the per-call policy (`auto`) resolved a collective to algorithm a.
  workload::DimArray<unsigned> auto_picks{};
  nlohmann::json engine; ///< effective engine settings
};

/// @brief Lowers the placed step graph to a flow graph and runs it at the chosen fidelity; with choose_per_step,
/// first settles `auto` per dimension (netsim/tuning.cpp).
/// @throws SimulationError if the programs deadlock.
StepResult simulate_step(const topology::Topology& topology, const workload::StepGraph& graph,
                         const placement::Placement& placement, const StepOptions& options);

/// @brief The same with every option as given: no per-step choice of algorithms.
StepResult simulate_step_as_given(const topology::Topology& topology, const workload::StepGraph& graph,
                                  const placement::Placement& placement, const StepOptions& options);

} // namespace spansim::netsim
