#pragma once
/// @file
/// @brief Internal to netsim: hybrid fidelity. Each distinct collective pattern of a lowered step (the collective,
/// its algorithm and size, its group's size and the links its flows cross, hop by hop) runs once at packet and
/// once at flow level, in parallel workers; every occurrence's transfers are then scaled by the pattern's
/// packet-to-flow ratio, and the whole step runs at flow level.

#include "netsim/step_lowering.hpp"

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

namespace spansim::netsim::detail {

/// @brief What the packet runs measured.
struct Corrections {
  std::vector<double> span_factor; ///< per span of LoweredStep::spans: packet time over flow time
  nlohmann::json report;           ///< patterns, packet runs, their wall time, and each correction
};

/// @brief Finds the distinct patterns of `lowered.spans` (lowered on `simulated`: `topology` itself, or its one
/// rail under rail symmetry) and measures each one's correction on `topology`, every rail and channel of the
/// collective as packet level runs it; one too large for packet level is measured on the rail the step simulated,
/// then on fewer of its nodes (netsim/README.md, "hybrid"), and its report row says on what.
/// @throws SimulationError when a packet or flow run fails (a pattern too large for packet level, or whose worker
/// runs out of memory or dies, is skipped with factor 1 and reported).
Corrections measure_corrections(const topology::Topology& topology, const topology::Topology& simulated,
                                const LoweredStep& lowered, const EngineOptions& engine);

/// @brief Multiplies every span's transfers by its factor; returns (op, bytes before) for restore_bytes.
std::vector<std::pair<int, double>> apply_corrections(FlowGraph& graph, const LoweredStep& lowered,
                                                      const std::vector<double>& factor);
/// @brief Puts back the sizes apply_corrections changed, exactly.
void restore_bytes(FlowGraph& graph, const std::vector<std::pair<int, double>>& saved);

} // namespace spansim::netsim::detail
