#pragma once
/// @file
/// @brief The network section of validation: measured nccl-tests results from real clusters (validation/
/// network-runs.json), each simulated as `spansim collective` runs it (NCCL's tuner and layout) on the cluster's
/// topology, and the fit of the section's free parameters: each fabric's NCCL efficiency and net latency
/// (topology/fabrics.json).

#include "calibration/calibration.hpp"
#include "netsim/collectives.hpp"
#include "topology/topology.hpp"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace spansim::calibration {

/// @brief One measured point.
struct NetworkRun {
  std::string name;
  Role role = Role::check;
  std::string source;
  std::string cluster;
  std::string note;
  std::string excluded_because; ///< excluded rows: why
  // What it ran on and what it ran (not for excluded rows).
  topology::TopologySpec topology;
  /// @brief Which of the fitted parameters the preset or the row states (kept as stated, not fitted values).
  struct Stated {
    bool nccl_efficiency  = false; ///< pod
    bool net_latency      = false; ///< pod
    bool step_latency     = false; ///< node
    bool nvls_warp_rate   = false; ///< node
    bool p2p_channel_rate = false; ///< node (and its LL rate)
  } stated;
  std::vector<int> gpus;
  CollectiveOp op = CollectiveOp::all_reduce;
  double bytes    = 0;
  netsim::NcclSettings nccl;
  double published_busbw = 0; ///< bytes/s, as nccl-tests reports it
};

/// @brief A file of measured points.
struct NetworkDataset {
  std::string file;
  std::vector<NetworkRun> runs;
};

/// @brief Reads a network dataset. @throws SpecError naming the file, JSON path and allowed values.
NetworkDataset load_network_dataset(const std::string& path);
/// @brief The shipped dataset (validation/network-runs.json).
std::string default_network_dataset_path();

/// @brief Free parameters for one simulation in place of the shipped ones (a candidate of the fit).
struct Candidate {
  std::optional<topology::Fabric> fabric; ///< this fabric's NCCL efficiency and net latency are `value`'s
  topology::FabricDefaults value;
  std::optional<topology::NvLink> nvlink; ///< this generation's step latency is `step_latency`
  double step_latency = 0;
  /// @brief Every generation's NVLS warp rate in place of the shipped ones (a fit's: 0, none, for those not yet
  /// fitted).
  std::optional<std::map<topology::NvLink, double>> nvls_warp_rate;
  /// @brief The same for every generation's send/recv channel rate.
  std::optional<std::map<topology::NvLink, double>> p2p_channel_rate;
  std::optional<std::map<topology::NvLink, double>> p2p_ll_channel_rate;
};

/// @brief What one point's simulation gives: nccl-tests' bus bandwidth and NCCL's pick.
struct NetworkSimulation {
  double busbw = 0; ///< bytes/s
  double time  = 0; ///< seconds
  netsim::Lowered call;
};

/// @brief Simulates a point: its fabric's and NVLink's parameters from topology/fabrics.json, or the candidate's.
NetworkSimulation simulate_network_run(const NetworkRun& run, netsim::Fidelity fidelity,
                                       const Candidate& candidate = {});

/// @brief One row of the network section.
struct NetworkRow {
  const NetworkRun* run = nullptr;
  NetworkSimulation simulated;
  double error = 0; ///< simulated over published bus bandwidth, minus 1 (+: the simulation is faster)
};

/// @brief The section: its rows and mean absolute errors by role and size.
struct NetworkReport {
  std::vector<NetworkRow> rows;
  struct Mape {
    double all = 0, large = 0, small = 0; ///< all sizes, 128 MiB and above, 16 MiB and below
    std::size_t rows = 0, large_rows = 0, small_rows = 0;
    double worst = 0; ///< the largest absolute error
  };
  Mape fit, check;
};

/// @brief Simulates every row that is not excluded.
NetworkReport validate_network(const NetworkDataset& dataset, netsim::Fidelity fidelity);

/// @brief One fitted group: a fabric (its NCCL efficiency and net latency, on the fit rows across nodes), an NVLink
/// generation's step latency (on the fit rows inside one node), its NVLS warp rate (on the fit rows whose
/// all-reduce runs NVLS or NVLSTree) or its send/recv channel rate (on the all-to-all and send/recv fit rows inside
/// one node); least squares of the log of simulated over published bus bandwidth on bounded
/// grids, efficiency and latency in turns.
struct NetworkFit {
  std::optional<topology::Fabric> fabric;
  std::optional<topology::NvLink> nvlink;
  bool nvls = false;              ///< an NVLink generation's NVLS warp rate (else its step latency)
  bool p2p  = false;              ///< an NVLink generation's send/recv channel rate
  topology::FabricDefaults value; ///< a fabric's
  double step_latency        = 0; ///< an NVLink generation's, seconds
  double nvls_warp_rate      = 0; ///< an NVLink generation's, bytes/s (0: none)
  double p2p_channel_rate    = 0; ///< an NVLink generation's, bytes/s (0: none)
  double p2p_ll_channel_rate = 0; ///< the same for LL sends (wire bytes/s)
  std::vector<std::string> rows;
  double mape_before = 0, mape_after = 0; ///< the rows' MAPE at the shipped values and at the fitted ones
};
/// @brief NVLink generations' step latencies first (their rows do not touch a fabric), then fabrics with those values
/// in force, then the generations' NVLS warp rates and send/recv channel rates with those in force. Every search starts
/// from a neutral point (no latency, efficiency 0.94, no warp bound), so that a refit on the same rows gives the same
/// file.
std::vector<NetworkFit> fit_network(const NetworkDataset& dataset, netsim::Fidelity fidelity, const Progress& progress);

/// @brief topology/fabrics.json with the fitted values in place (the others kept).
nlohmann::json fabrics_document(const std::vector<NetworkFit>& fits, const std::string& dataset);

} // namespace spansim::calibration
