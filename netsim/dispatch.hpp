#pragma once
/// @file
/// @brief Internal to netsim: a MoE layer's dispatch or combine on one EP group as a size matrix, the way its
/// dispatcher moves the token copies (flat, or deduplicated per node and GPU as DeepEP does), with the routing's
/// busiest member receiving (or sending) the most.

#include "topology/topology.hpp"
#include "workload/workload.hpp"

#include <vector>

namespace spansim::netsim::detail {

/// @brief Bytes from member i to member j of `gpus` (an EP group, in rank order) for one expert all-to-all `op` of
/// `job`: `op.bytes x op.count` is one member's whole send buffer of token copies (the flat all-to-all's). Flat
/// dispatchers send each copy once, spread evenly; "deepep" sends a token once over the scale-out network to each
/// node it reaches (to the member of the same local index) and once over NVLink to each GPU it reaches there
/// (workload::dispatch_rates). `hot_member` receives (dispatch) or sends (combine) op.imbalance times the mean, the
/// others evenly less.
std::vector<std::vector<double>> dispatch_matrix(const topology::Topology& topology, const std::vector<int>& gpus,
                                                 const workload::JobSpec& job, const workload::Op& op, int hot_member);

} // namespace spansim::netsim::detail
