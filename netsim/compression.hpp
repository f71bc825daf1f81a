#pragma once
/// @file
/// @brief Compression of boundary-crossing communication: which collectives and pipeline transfers of a step are
/// compressed, by how much, and at what GPU cost.
///
/// A rule names a dimension (and optionally the purposes within it, e.g. only `grad_reduce`), the boundary a group
/// must cross for it to apply (`building`: any building boundary, regions included; `region`: only groups that span
/// regions), a ratio and the GPU's compression and decompression rates. A compressed op moves bytes / ratio on the
/// wire, under the same algorithm; its communication stream first compresses the op's buffer (buffer / compress
/// rate) and last decompresses it (buffer / decompress rate). Those kernels run on the communication stream (as
/// NCCL's reduction kernels do), so they are hidden under compute or exposed exactly as the schedule allows.

#include "topology/topology.hpp"
#include "workload/workload.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <optional>
#include <string_view>
#include <vector>

namespace spansim::spec {
class ObjectReader;
}

namespace spansim::netsim {

/// @brief The widest boundary a group or transfer crosses.
enum class Boundary { none, building, region };
constexpr std::array<std::string_view, 3> enum_names(Boundary)
{
  return {"none", "building", "region"};
}

/// @brief One compression rule (see the file comment).
struct CompressionRule {
  workload::Dim dim = workload::Dim::dp;
  Boundary across   = Boundary::region;    ///< applies to groups crossing at least this boundary
  std::vector<workload::Purpose> purposes; ///< empty: every purpose of the dimension
  double ratio           = 1;              ///< buffer bytes / bytes on the wire
  double compress_rate   = 0;              ///< buffer bytes per second a GPU compresses; 0: free
  double decompress_rate = 0;              ///< likewise for decompression; 0: free

  /// @brief GPU seconds of compressing and decompressing a buffer of `bytes`.
  double cost(double bytes) const;
  /// @brief As a scenario writes it (rates exact, in bytes/s; absent when free).
  nlohmann::json to_json() const;
  /// @brief A short label, e.g. "dp/region x4".
  std::string label() const;
  bool operator==(const CompressionRule&) const = default;
};

/// @brief The compression rules of a scenario (empty: nothing is compressed).
struct CompressionSpec {
  std::vector<CompressionRule> rules;

  bool empty() const { return rules.empty(); }
  /// @brief The rule for an op of `dim` and `purpose` whose group crosses `crossed`: the most specific of those
  /// whose boundary it crosses (a region rule before a building one); none when no rule applies.
  const CompressionRule* rule_for(workload::Dim dim, workload::Purpose purpose, Boundary crossed) const;
  nlohmann::json to_json() const;
  /// @brief "none", or the rules' labels joined by "+".
  std::string label() const;
  bool operator==(const CompressionSpec&) const = default;
};

/// @brief Reads a scenario's `compression` list. @throws SpecError naming the element and the allowed values.
CompressionSpec read_compression(const nlohmann::json& list, const std::string& file, const std::string& json_path);

/// @brief The widest boundary between any two of `gpus`.
Boundary crossed(const topology::Topology& topology, const std::vector<int>& gpus);

} // namespace spansim::netsim
