#pragma once
/// @file
/// @brief Internal to topology/: the node and pod blocks of a spec, read and written by one piece of code for the
/// template and for a building's own.

#include "topology/topology.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace spansim::topology::detail {

/// @brief Reads a `node` block into `node`. `required`: the template's (gpus, NVLink bandwidth and latency must be
/// given); otherwise a building's own, where a key not given keeps `node`'s value. Checks NVLS against the NVLink
/// generation and the NICs against the GPUs. @throws SpecError at the key's JSON path.
void read_node(spec::ObjectReader& r, NodeSpec& node, bool required);
/// @brief Reads a `pod` block into `pod` (as read_node). @throws SpecError (SHARP on a fabric without it, ...).
void read_pod(spec::ObjectReader& r, PodSpec& pod, bool required);
/// @brief The blocks as the effective configuration writes them (explicit units).
nlohmann::json node_json(const NodeSpec& node);
nlohmann::json pod_json(const PodSpec& pod);

/// @brief A number exact enough to read back (%.15g), and a bandwidth, time or distance in the spec's units.
std::string config_number(double v);
std::string config_bandwidth(double bytes_per_second);
std::string config_time(double seconds);
std::string config_distance(double meters);

} // namespace spansim::topology::detail
