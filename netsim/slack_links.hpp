#pragma once
/// @file
/// @brief Internal to netsim: link directions that no set of a graph's flows can fill, left out of SimGrid's
/// routes (netsim/README.md, "Slack links").

#include "netsim/netsim.hpp"

#include <vector>

namespace spansim::netsim::detail {

/// @brief Per link direction (2 x link + 0 forward, + 1 backward), whether it is slack for `graph`'s transfers:
/// it is neither the first nor the last hop of any of them, and the distinct first hops (or the distinct last
/// hops) of the transfers through it add up to no more than its capacity. Every flow through it then crosses one
/// of those hops, so their constraints keep its load under its capacity: the max-min shares are the same without
/// its constraint. Only directions SimgridPlatform routes hop by hop are marked (hop_routed). Routes are assumed
/// to cross a direction at most once, as the tree's and shortest paths do.
std::vector<bool> slack_links(const topology::Topology& topology, const FlowGraph& graph);

/// @brief Whether SimGrid's shares under `settings` are plain max-min with one coefficient per flow on every link
/// of its route, which the argument of slack_links() needs (CM02 without cross traffic or weight-S).
bool slack_links_apply(const SimgridSettings& settings);

} // namespace spansim::netsim::detail
