#pragma once
/// @file
/// @brief Internal to netsim: a placed step graph lowered to one flow graph, and what is needed to read the stage
/// timelines back from the run (netsim/step.cpp, netsim/breakdown.cpp).

#include "netsim/step.hpp"

#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace spansim::netsim::detail {

/// @brief The flow-graph nodes standing for one op of a stage program.
struct Node {
  int start = -1; ///< ends when the op may begin (its dependencies are done)
  int end   = -1; ///< ends when the op is done
};

/// @brief One collective on one group, lowered into ops [begin, end) of the graph (hybrid fidelity's patterns).
struct CollectiveSpan {
  Collective collective; ///< with the algorithm it was lowered with
  int begin = 0;
  int end   = 0;
};

/// @brief A step graph lowered to flows.
struct LoweredStep {
  FlowGraph graph;
  std::vector<std::vector<Node>> nodes;               ///< [stage][op]
  std::vector<std::vector<int>> stream_prev;          ///< [stage][op]: the previous op of its stream, -1 for none
  std::vector<std::vector<std::pair<int, int>>> peer; ///< [stage][op]: a send's or receive's peer (stage, op)
  /// @brief Bytes per link and direction that `graph` does not carry: the collectives timed in isolation, and the
  /// groups a node-local representative stands for (its transfers over their routes).
  std::vector<double> isolated_link_bytes;
  bool all_to_all_isolated = false;          ///< whether all-to-alls were timed in isolation
  std::vector<CollectiveSpan> spans;         ///< at hybrid fidelity: every collective lowered as flows
  std::vector<double> compression;           ///< [stage]: GPU seconds of compressing and decompressing its traffic
  workload::DimArray<unsigned> auto_picks{}; ///< per dimension: bit a set when `auto` resolved a call to algorithm a
  /// @brief Under rail symmetry: a call over several rails moved different bytes between nodes from rail to rail
  /// (NCCL's channels leave by fewer NICs than the node has, a busiest member): rail 0 cannot stand for the others.
  bool rails_differ = false;
};

/// @brief lower_step's `rail` for every rail.
inline constexpr int kAllRails = -1;

/// @brief Lowers every op of every stage program: compute as delays, collectives through netsim/collectives.hpp on
/// the placement's groups (node-local groups once; with a `rail` other than kAllRails, the groups and pipeline
/// senders of that rail alone), pipeline sends and receives as transfers from every rank of the sending stage to
/// its counterpart.
/// @throws SimulationError if the programs deadlock.
/// With `rails` (rail symmetry: rail 0 standing for that many), a group over several rails keeps every transfer
/// inside a node (identical pairs of one call merged) and, between nodes, those leaving rail 0; a call whose
/// transfers between nodes differ from rail to rail sets LoweredStep::rails_differ.
LoweredStep lower_step(const topology::Topology& topology, const workload::StepGraph& graph,
                       const placement::Placement& placement, const StepOptions& options, int rail, int rails = 0);

/// @brief Fills `result.stages` and `result.waits` from the op timings in `result.ops`.
void account_stages(const workload::StepGraph& graph, const LoweredStep& lowered, StepResult& result);

/// @brief One rail of a step whose rails are simulated apart under ECMP (netsim/rails_apart.cpp).
struct RailApart {
  std::vector<double> link_bytes;  ///< per hop, on the whole site's routes
  std::vector<double> link_factor; ///< per hop: the rail's share of the link directions rails share (1 elsewhere)
};

/// @brief A step lowered for its run: on one rail's topology when the rails are symmetric, or rail by rail when
/// ECMP keeps them apart.
struct PreparedStep {
  int rails = 1; ///< identical rails, rail 0 simulated (1: every rail simulated)
  std::optional<topology::Topology> one_rail;
  /// @brief The step's flows; with `apart`, the slowest rail's, set by its run (each rail is lowered in a worker).
  LoweredStep lowered;
  /// @brief Under ECMP with the rails apart: every rail's bytes and shares (empty: all rails in `lowered`).
  std::vector<RailApart> apart;
  int slowest = 0;     ///< with `apart`: the rail whose run gave the step (set by the run)
  nlohmann::json ecmp; ///< under ECMP: how the step was simulated, for results (null otherwise)
  /// @brief Hybrid fidelity: each span's packet/flow correction and their report, measured at the first run and kept
  /// for a second one on the same lowering (compute retimed for SM contention: the collectives are the same).
  std::optional<std::pair<std::vector<double>, nlohmann::json>> corrections;
  /// @brief The topology the flows run on.
  const topology::Topology& simulated(const topology::Topology& full) const { return one_rail ? *one_rail : full; }
};

/// @brief Runs a graph of a step at `fidelity`. Under ECMP at flow fidelity, a graph of more than
/// `options.own_solver_above` transfers runs on spansim's own max-min engine instead of SimGrid where SimGrid's
/// settings are that engine's model (SimGrid 3.32 re-solves an ECMP fabric's one connected system at every flow's
/// end); `settings["max_min_engine"]` then names the engine that ran it ("simgrid" or spansim's, with the counts).
RunResult run_max_min(const topology::Topology& topology, const FlowGraph& graph, Fidelity fidelity,
                      const StepOptions& options);

/// @brief Whether run_max_min runs `graph` on spansim's own max-min engine (at flow fidelity it gives the analytical
/// engine's run).
bool own_solver_runs(const topology::Topology& topology, const FlowGraph& graph, Fidelity fidelity,
                     const StepOptions& options);

/// @brief Why a step under ECMP keeps its rails together ("" when prepare_rails_apart would lower them apart, unless
/// a lowered transfer then joins two rails). @throws UsageError as prepare_rails_apart.
std::string rails_apart_decision(const topology::Topology& topology, const workload::StepGraph& graph,
                                 const placement::Placement& placement, const StepOptions& options);

/// @brief Whether `prepared` should run its rails apart under ECMP, and if so lowers each rail (filling `apart`)
/// and sets the shares of the links they share; otherwise leaves `apart` empty and says why in `ecmp`.
/// @throws UsageError when `ecmp_mode` asks for rails apart and the step's rails do not separate.
void prepare_rails_apart(const topology::Topology& topology, const workload::StepGraph& graph,
                         const placement::Placement& placement, const StepOptions& options, PreparedStep& prepared);

/// @brief Lowers `graph` rail by rail and runs each rail of `prepared.apart` (in worker processes; at flow fidelity
/// only the rails the analytical engine finds near the slowest, see StepOptions::flow_every_rail), sets
/// `prepared.slowest` and `prepared.lowered` (its lowering), and returns the slowest rail's run with every rail's
/// bytes on the links.
RunResult run_rails_apart(const topology::Topology& topology, PreparedStep& prepared, const workload::StepGraph& graph,
                          const placement::Placement& placement, const StepOptions& options);

/// @brief Lowers a step (the first half of simulate_step_as_given).
PreparedStep prepare_step(const topology::Topology& topology, const workload::StepGraph& graph,
                          const placement::Placement& placement, const StepOptions& options);

/// @brief Runs a prepared step and reads its result back (the second half of simulate_step_as_given). `graph` is
/// the step graph it was prepared from, or one that differs only in compute seconds, set by retime_compute().
StepResult run_prepared(const topology::Topology& topology, PreparedStep& prepared, const workload::StepGraph& graph,
                        const placement::Placement& placement, const StepOptions& options);

/// @brief Reads a run of a prepared step back into a step result (the end of run_prepared); `run_result`'s op
/// timings are the prepared graph's, counted from the step's start.
StepResult read_back(const topology::Topology& topology, const PreparedStep& prepared, const workload::StepGraph& graph,
                     const placement::Placement& placement, RunResult run_result);

/// @brief How many rails carry the same traffic, so that rail 0 can stand for them all (netsim/README.md): the
/// node's GPUs when TP fills it, the used GPUs of each node when turning them one place maps the step onto itself;
/// 0 when the rails differ. `turned` false: only the first (packet level, where merged channels would change the
/// transport).
int symmetric_rails(const topology::Topology& topology, const workload::StepGraph& graph,
                    const placement::Placement& placement, bool turned = true);

/// @brief Sets the delays standing for compute ops to `graph`'s seconds: a step graph that differs from the
/// prepared one only there runs without being lowered again.
void retime_compute(PreparedStep& prepared, const workload::StepGraph& graph);

} // namespace spansim::netsim::detail
