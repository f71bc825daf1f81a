#pragma once
/// @file
/// @brief The network simulation stage: flow graphs, collectives lowered to flows, and the engines that run them.

#include "topology/topology.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace spansim::netsim {

/// @brief One operation of a flow graph: a transfer between two GPUs, or a delay (latency terms, compute).
struct Op {
  enum class Kind { transfer, delay };
  Kind kind       = Kind::delay;
  int src         = -1; ///< source GPU (transfer)
  int dst         = -1; ///< destination GPU (transfer)
  double bytes    = 0;  ///< transfer size
  double duration = 0;  ///< delay length in seconds
  std::vector<int> deps; ///< ops that must end before this one starts (always earlier indices)
};

/// @brief A DAG of operations; dependencies point backwards, so it is acyclic by construction.
class FlowGraph {
public:
  /// @brief Adds a transfer of `bytes` from GPU `src` to GPU `dst`; returns its index.
  int add_transfer(int src, int dst, double bytes, std::vector<int> deps = {});
  /// @brief Adds a delay of `seconds`; returns its index.
  int add_delay(double seconds, std::vector<int> deps = {});
  const std::vector<Op>& ops() const { return ops_; }
  std::size_t transfer_count() const;

private:
  int add(Op op);
  std::vector<Op> ops_;
};

/// @brief When each op started and ended, in simulated seconds.
struct OpTiming {
  double start = 0;
  double end   = 0;
};

/// @brief The outcome of running a flow graph.
struct RunResult {
  std::vector<OpTiming> ops;
  double makespan = 0;
  nlohmann::json settings; ///< effective engine settings
};

/// @brief SimGrid settings, all pinned explicitly: the defaults (LV08) model TCP, not RDMA.
struct SimgridSettings {
  std::string network_model = "CM02"; ///< pure max-min fair sharing: alpha-beta per flow
  bool crosstraffic         = false;  ///< no ACK traffic in the reverse direction (RDMA)
  double tcp_gamma          = 0;      ///< no TCP window cap on rates
  double latency_factor     = 1;
  double bandwidth_factor   = 1;
  double weight_s           = 0;
  double maxmin_precision   = 1e-5;
  double timing_precision   = 1e-9;
  double gpu_speed          = 1e15; ///< FLOP/s of a GPU host (compute is modelled as delays today)

  /// @brief "key:value" strings for Engine::set_config.
  std::vector<std::string> config_lines() const;
  /// @brief The effective settings for results.
  nlohmann::json to_json() const;
};

/// @brief Runs a flow graph at flow fidelity on SimGrid, in a child process (one Engine per process).
/// @throws SimulationError when the engine fails.
RunResult run_flow(const topology::Topology& topology, const FlowGraph& graph, const SimgridSettings& settings = {});

/// @brief The SimGrid route between pairs of GPUs, as link names ("nic-12:UP"), computed in a child process.
/// Used to check that the platform routes exactly as Topology::route.
std::vector<std::vector<std::string>> simgrid_routes(const topology::Topology& topology,
                                                     const std::vector<std::pair<int, int>>& pairs);
/// @brief The same names for a topology route, for comparison with simgrid_routes.
std::vector<std::string> route_link_names(const topology::Topology& topology, const std::vector<topology::Hop>& route);

/// @brief A ring all-reduce lowered the way NCCL runs it: K long-lived neighbour flows of 2(K-1)/K * S bytes,
/// plus the 2(K-1) step latencies of the slowest ring edge (one is paid by the flows themselves).
struct RingAllReduce {
  std::vector<int> gpus; ///< ring order
  double bytes = 0;      ///< buffer size S per rank
};

/// @brief Adds a ring all-reduce after `deps`; returns the index of the op that marks its end.
int add_ring_allreduce(FlowGraph& graph, const topology::Topology& topology, const RingAllReduce& ring,
                       const std::vector<int>& deps);

/// @brief Alpha-beta time of a ring all-reduce: 2(K-1)/K * S / B + 2(K-1) * alpha.
double ring_allreduce_time(int ranks, double bytes, double bandwidth, double alpha);

} // namespace spansim::netsim
