#pragma once
/// @file
/// @brief The network simulation stage: flow graphs, and the engines that run them at three fidelities.
///
/// A flow graph is a DAG of transfers between GPUs and delays. Every engine takes the same graph on the same
/// topology::Topology and routes each transfer over `Topology::route`; collectives are lowered into flow
/// graphs by netsim/collectives.hpp.

#include "topology/topology.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace spansim::netsim {

/// @brief One operation of a flow graph: a transfer between two GPUs, or a delay (latency terms, compute).
struct Op {
  enum class Kind { transfer, delay };
  Kind kind       = Kind::delay;
  int src         = -1;  ///< source GPU (transfer)
  int dst         = -1;  ///< destination GPU (transfer)
  double bytes    = 0;   ///< transfer size
  double duration = 0;   ///< delay length in seconds
  int qp          = 0;   ///< queue pair of a transfer (ECMP hashes it with the ends)
  std::vector<int> deps; ///< ops that must end before this one starts (always earlier indices)
  /// @brief A transfer moves its bytes as if they were this many times as many (a transport that gets less than its
  /// share of the links: NCCL's all-to-all over the scale-out network); its links still carry `bytes`.
  double stretch = 1;
  /// @brief Bytes the transfer may have in flight (unacknowledged), as NCCL's slots per connection allow; the
  /// transfer then runs at most at window / round trip. 0: the site's window (topology spec), if any.
  double window = 0;
  /// @brief Bytes/s the transfer may use at most (its sender's share of an uplink it does not see as a link, such as
  /// a DiLoCo worker's); 0: none. Flow level caps the flow; packet level paces the queue pair at it.
  double rate = 0;
};

/// @brief How a transfer moves its bytes, besides its ends and size.
struct TransferTraits {
  double stretch = 1; ///< Op::stretch
  double window  = 0; ///< Op::window, for the whole transfer (its queue pairs share it)
  double rate    = 0; ///< Op::rate, for the whole transfer (its queue pairs share it)
};

/// @brief A DAG of operations; dependencies point backwards, so it is acyclic by construction.
class FlowGraph {
public:
  /// @brief A graph whose transfers each split into `qps` flows (queue pairs) of equal shares, joined by a
  /// zero delay: under ECMP each hashes onto its own path.
  explicit FlowGraph(int qps = 1) : qps_(qps) {}
  /// @brief Adds a transfer of `bytes` from GPU `src` to GPU `dst` (stretched and windowed as `traits` say);
  /// returns its index.
  int add_transfer(int src, int dst, double bytes, std::vector<int> deps = {}, TransferTraits traits = {});
  /// @brief Adds a delay of `seconds`; returns its index.
  int add_delay(double seconds, std::vector<int> deps = {});
  /// @brief Adds an op as it is (a transfer keeps its queue pair and is not split); returns its index.
  int add_op(Op op) { return add(std::move(op)); }
  /// @brief Sets the size of op `op`, a transfer (hybrid fidelity's corrections).
  void set_bytes(int op, double bytes) { ops_.at(op).bytes = bytes; }
  /// @brief Appends a copy of `other` (queue pairs kept); its ops without dependencies wait for the ops `after`.
  /// Returns the index its first op got: op i of `other` is op base + i.
  int append(const FlowGraph& other, const std::vector<int>& after);
  /// @brief Sets the length of op `op`, a delay (compute lengthened by SM contention).
  void set_duration(int op, double seconds) { ops_.at(op).duration = seconds; }
  const std::vector<Op>& ops() const { return ops_; }
  std::size_t transfer_count() const;

private:
  int add(Op op);
  std::vector<Op> ops_;
  int qps_ = 1;
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
  /// @brief Bytes carried per link and direction: index 2 * link + (forward ? 0 : 1).
  std::vector<double> link_bytes;
};

/// @brief Bytes every link carries in each direction when the graph runs (the same for every engine).
std::vector<double> link_bytes(const topology::Topology& topology, const FlowGraph& graph);

/// @brief Bytes on the links of each tier, both directions summed, from per-link bytes (RunResult::link_bytes).
std::array<double, topology::kTierCount> tier_bytes(const topology::Topology& topology,
                                                    const std::vector<double>& link_bytes);
/// @brief Bytes on the links between buildings (inter-building links and building uplinks: a byte between regions
/// crosses two uplinks) and between regions.
struct BoundaryBytes {
  double buildings = 0;
  double regions   = 0;
};
BoundaryBytes boundary_bytes(const topology::Topology& topology, const std::vector<double>& link_bytes);

/// @brief SimGrid settings, all pinned explicitly: the defaults (LV08) model TCP, not RDMA.
struct SimgridSettings {
  /// CM02: alpha-beta per flow and max-min sharing. Its shares are weighted by the inverse of each route's
  /// latency; the flow engine keeps latency out of SimGrid (and pays it per flow) so that shares are equal.
  std::string network_model = "CM02";
  /// @brief The LMM solver's update mode: "Lazy" (SimGrid's default: only constraints whose flows changed are
  /// re-solved, and completions come from a heap) or "Full" (every share recomputed at every event). Measured
  /// equal in results and faster (bench/README.md).
  std::string network_optim = "Lazy";
  bool crosstraffic         = false; ///< no ACK traffic in the reverse direction (RDMA)
  double tcp_gamma          = 0;     ///< no TCP window cap on rates
  double latency_factor     = 1;
  double bandwidth_factor   = 1;
  double weight_s           = 0;
  double maxmin_precision   = 1e-5;
  double timing_precision   = 1e-9;
  double gpu_speed          = 1e15; ///< FLOP/s of a GPU host (compute is modelled as delays today)
  /// @brief Leave out of SimGrid's routes the link directions no set of the graph's flows can fill (their flows'
  /// first or last hops add up to no more than their capacity): the same max-min shares, fewer constraints.
  /// Applies under CM02 without cross traffic or weight-S (netsim/README.md).
  bool leave_out_slack_links = true;
  /// @brief KiB of stack per SimGrid actor (contexts/stack-size). SimGrid's 8 MiB default is mapped whole for each
  /// of a large step's thousands of workers, which a worker's data limit (RLIMIT_DATA) counts in full; the
  /// workers' frames need far less (netsim/README.md). 0: 256 KiB, or 8 MiB in sanitizer builds (larger frames).
  std::size_t actor_stack_kib = 0;

  /// @brief Whether SimGrid computes the analytical engine's model under these settings (CM02 with equal shares:
  /// no cross traffic, TCP gamma or weight-S, latency and bandwidth factors 1), so that an analytical run can stand
  /// in for a flow run.
  bool analytical_model() const;
  /// @brief "key:value" strings for Engine::set_config.
  std::vector<std::string> config_lines() const;
  /// @brief The effective settings for results.
  nlohmann::json to_json() const;
};

/// @brief Runs a flow graph at flow fidelity on SimGrid, in a child process (one Engine per process).
/// @throws SimulationError when the engine fails.
RunResult run_flow(const topology::Topology& topology, const FlowGraph& graph, const SimgridSettings& settings = {});

/// @brief How the analytical engine re-solves its max-min shares at an event.
struct AnalyticalSettings {
  /// @brief Re-solve only the flows whose share can change (those at or above the lowest level the event
  /// disturbs, reached from the links it touched); false re-solves the whole connected component, as a
  /// reference for tests.
  bool incremental = true;
};

/// @brief Runs a flow graph analytically: each transfer pays its route latency, then its bytes at max-min fair
/// shares among all flows in flight, recomputed at each event for the flows whose share can change. No SimGrid;
/// the same model as run_flow, built for the optimizer's inner loop.
RunResult run_analytical(const topology::Topology& topology, const FlowGraph& graph,
                         const AnalyticalSettings& settings = {});

/// @brief DCQCN at the reaction point (sender), notification point (receiver) and congestion point (switch port).
/// Defaults are the DCQCN paper's (Zhu et al., SIGCOMM 2015) for 40 Gb/s; its marking thresholds scale with each
/// port's rate and its increase steps with each NIC's, so that a 400 Gb/s NIC recovers in the same time as the
/// paper's; hyper increase (10x additive) and the minimum rate are ours.
struct DcqcnSettings {
  double g              = 1.0 / 256; ///< gain of the alpha average
  double alpha_timer    = 55e-6;     ///< seconds between alpha updates (K)
  double increase_timer = 55e-6;     ///< seconds between rate increases by timer (T)
  double byte_counter   = 10e6;      ///< bytes between rate increases by byte counter (B)
  int fast_recovery     = 5;         ///< increase events of fast recovery (F)
  double additive_rate_at_40g =
      40e6 / 8;                         ///< bytes/s added per additive increase (R_AI) on a 40 Gb/s NIC; scaled by rate
  double hyper_rate_at_40g = 400e6 / 8; ///< bytes/s per hyper increase step (R_HAI), likewise
  double min_rate          = 100e6 / 8; ///< bytes/s: a flow is never throttled below it
  double cnp_interval      = 50e-6;     ///< seconds: at most one CNP per queue pair per interval
  double kmin_at_40g       = 5e3;       ///< bytes: marking starts (on a 40 Gb/s port; scaled by port rate)
  double kmax_at_40g       = 200e3;     ///< bytes: marking reaches pmax, and every packet is marked above
  double pmax              = 0.01;      ///< marking probability at kmax

  /// @brief The settings for results.
  nlohmann::json to_json() const;
};

/// @brief Packet-level (ns-3) settings, all pinned and reported with every result. The default transport is RoCE
/// as Llama 3's cluster runs it: queue pairs start at line rate over deep, lossless queues (PFC's pause is not
/// modelled: queues are deep enough never to drop), without congestion control; DCQCN is selectable. NVLink ports
/// never mark (the scale-up fabric is credit-based and lossless).
struct PacketSettings {
  std::string transport          = "roce"; ///< "roce", "dctcp" (ECN marking on RED queues) or "newreno"
  std::string congestion_control = "none"; ///< roce only: "none" (deep buffers, as Llama 3's cluster) or "dcqcn"
  DcqcnSettings dcqcn;
  int mtu          = 9000; ///< bytes: jumbo frames
  int segment_size = 8948; ///< TCP payload per segment: MTU - 52 bytes of IP and TCP headers (RoCE: MTU - 44, for IP,
                           ///< UDP, BTH and ICRC)
  int send_size            = 65536; ///< bytes handed to the socket per write
  double socket_buffer     = 0;     ///< bytes; 0: sized from the bandwidth-delay product
  int initial_cwnd         = 10;    ///< segments
  double min_rto           = 1e-3;  ///< seconds
  double delayed_ack       = 1e-4;  ///< seconds
  int queue_packets        = 1000;  ///< per port
  int ecn_threshold        = 20;    ///< packets (lower bound of the DCTCP marking threshold)
  int device_queue_packets = 1;     ///< per device, below the queue disc: marking then sees the backlog
  std::uint32_t seed       = 1;     ///< ns-3 RNG seed
  // Limits from measured wall times (RoCE, 2 cores; netsim/README.md): a ring over 1,024 GPUs moving 8 GiB takes
  // 24 s; 1.2-4 s per GiB, so 64 GiB is 1-4 minutes; 90,000 transfers (an all-to-all of 300 GPUs) 36 s and 0.6 GB.
  int max_gpus           = 4096; ///< refuse larger runs: packet level is for up to a few thousand GPUs
  double max_total_bytes = 64.0 * 1073741824.0;
  int max_transfers      = 250000;

  /// @brief The effective settings for results.
  nlohmann::json to_json() const;
};

/// @brief Why packet level refuses `graph` on `topology` (the GPUs, bytes or transfers above the limits of
/// `settings`), or empty when it fits those limits.
std::string packet_refusal(const topology::Topology& topology, const FlowGraph& graph,
                           const PacketSettings& settings = {});

/// @brief Runs a flow graph at packet fidelity on ns-3 (driven directly), in a child process.
/// @throws UsageError when the graph is too large for packet level (see the limits in PacketSettings);
/// SimulationError when ns-3 fails.
RunResult run_packet(const topology::Topology& topology, const FlowGraph& graph, const PacketSettings& settings = {});

/// @brief The fidelities behind one interface (names: "analytical", "flow", "packet", "hybrid"). Hybrid is flow
/// level with each distinct collective of a step corrected by its packet-level run (training steps only).
enum class Fidelity { analytical, flow, packet, hybrid };
constexpr std::array<std::string_view, 4> enum_names(Fidelity)
{
  return {"analytical", "flow", "packet", "hybrid"};
}

/// @brief Hybrid fidelity's packet runs.
struct HybridSettings {
  /// @brief Bytes a pattern's packet run may move: a larger collective is measured at a size scaled down to this
  /// (its correction is a ratio, which no longer depends on size once transfers are far above a round trip's
  /// worth of bytes).
  double max_pattern_bytes = 1073741824.0;
  /// @brief Scaling down stops where a transfer would fall below this many bytes (about 25 bandwidth-delay
  /// products of a 400 Gb/s, 10 us path), so that bandwidth, not latency, still sets the ratio.
  double min_transfer_bytes = 16.0 * 1048576;
  int workers               = 0; ///< parallel packet runs (0: one per core)
};

/// @brief Options of every engine; each run reports its effective settings.
struct EngineOptions {
  SimgridSettings simgrid;
  PacketSettings packet;
  HybridSettings hybrid;
};

/// @brief Runs a flow graph at the given fidelity: the one engine interface behind which the three swap.
RunResult run(const topology::Topology& topology, const FlowGraph& graph, Fidelity fidelity,
              const EngineOptions& options);

/// @brief The SimGrid route between pairs of GPUs, as link names ("nic-12_UP"), computed in a child process.
/// Used to check that the platform routes exactly as Topology::route; with `leave_out_slack`, as a run of one
/// transfer per pair would route them, slack links left out (SimgridSettings::leave_out_slack_links).
std::vector<std::vector<std::string>> simgrid_routes(const topology::Topology& topology,
                                                     const std::vector<std::pair<int, int>>& pairs,
                                                     bool leave_out_slack = false);
/// @brief The same names for a topology route, for comparison with simgrid_routes.
std::vector<std::string> route_link_names(const topology::Topology& topology, const std::vector<topology::Hop>& route);

} // namespace spansim::netsim
