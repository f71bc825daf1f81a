#pragma once
/// @file
/// @brief Internal to netsim: SM contention between compute and the communication it overlaps.

#include "netsim/step.hpp"

#include <vector>

namespace spansim::netsim {

/// @brief Seconds each compute op of each stage loses to NCCL's SMs while overlapped communication of its stage
/// runs, from a first simulation of the step ([stage][op]; empty or zero when the effect is off or the GPU file
/// gives no comm_sms).
std::vector<std::vector<double>> contention_seconds(const workload::StepGraph& graph, const StepResult& first);

/// @brief Whether SM contention can lengthen any compute op of `graph` (the effect is on, and the GPU file gives
/// NCCL a share of the SMs or an overlapped op names its own): otherwise a step needs no second look.
bool contention_applies(const workload::StepGraph& graph);

} // namespace spansim::netsim
