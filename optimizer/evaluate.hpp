#pragma once
/// @file
/// @brief Evaluating one point of the search (internal to the optimizer): built as a typed job on its site, bounded
/// by compute and bubble, scored with the collapsed analytical step, re-simulated at the refine fidelity, and its
/// ETTR under the spec's reliability block.

#include "optimizer/protocol.hpp"

#include <memory>

namespace spansim::optimizer {

/// @brief Buildings the job spans: the spec's list, else as many as its GPUs need.
int buildings_used(const OptimizeSpec& spec, const topology::Topology& topo);

/// @brief Bounds a point (compute and bubble with free communication), or names why it cannot run.
Outcome bound_point(const OptimizeSpec& spec, const topology::Topology& topo, const Point& p);
/// @brief Scores a point with the collapsed analytical step, or names why it cannot run.
Outcome score_point(const OptimizeSpec& spec, const topology::Topology& topo, const Point& p);
/// @brief Re-simulates a point at the refine fidelity (routed by OptimizeSpec::refine_multipath where set).
Outcome refine_point(const OptimizeSpec& spec, const topology::Topology& topo, const Point& p);
/// @brief ETTR of a re-simulated point under the spec's reliability block. Replica recovery needs replicas (HSDP or
/// DDP); an FSDP point recovers synchronously.
void goodput(const OptimizeSpec& spec, const topology::Topology& topo, Evaluation& e);

} // namespace spansim::optimizer
