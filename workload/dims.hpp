#pragma once
/// @file
/// @brief The vocabulary of parallelism, spelled once: the dimensions (tp, cp, pp, dp, ep), arrays indexed by
/// them, the axes a communication group spans, and what a stalled compute stream waited for.

#include "common/names.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace spansim::workload {

/// @brief A parallelism dimension: the traffic of every communication op is accounted to one.
enum class Dim : std::uint8_t { tp, cp, pp, dp, ep };
constexpr std::array<std::string_view, 5> enum_names(Dim)
{
  return {"tp", "cp", "pp", "dp", "ep"};
}
/// @brief Every dimension, in the order of reports and per-dimension arrays.
inline constexpr std::array kDims{Dim::tp, Dim::cp, Dim::pp, Dim::dp, Dim::ep};
/// @brief The four coordinates of a rank (expert parallelism is carved out of cp x dp, not a coordinate).
inline constexpr std::array kRankDims{Dim::tp, Dim::cp, Dim::pp, Dim::dp};
/// @brief Llama 3's rank order, innermost first: TP fills a node, DP crosses the boundaries.
inline constexpr std::array kProductionOrder{Dim::tp, Dim::cp, Dim::pp, Dim::dp};
/// @brief Megatron-LM's default order (tp-cp-ep-dp-pp), the default of MoE jobs: pp outermost, so that the expert
/// layers' EP groups fold over neighbouring GPUs (inside a node where they fit).
inline constexpr std::array kMegatronOrder{Dim::tp, Dim::cp, Dim::dp, Dim::pp};

/// @brief One value per dimension, indexed by Dim.
template <class T>
struct DimArray {
  std::array<T, kDims.size()> values{};

  constexpr T& operator[](Dim d) { return values[static_cast<std::size_t>(d)]; }
  constexpr const T& operator[](Dim d) const { return values[static_cast<std::size_t>(d)]; }
  constexpr auto begin() { return values.begin(); }
  constexpr auto end() { return values.end(); }
  constexpr auto begin() const { return values.begin(); }
  constexpr auto end() const { return values.end(); }
};

/// @brief An axis a communication group can span: a dimension, or a part of one. The expert layers fold etp x ep x
/// edp over the tp x cp x dp GPUs of a pipeline stage (Megatron's parallel folding); HSDP splits dp into a sharding
/// and a replicating part.
/// Hierarchical context parallelism splits cp into an all-to-all part (`cp_a2a`, innermost) and a ring across it
/// (`cp_p2p`).
enum class Axis : std::uint8_t { tp, cp, pp, dp, ep, edp, dp_shard, dp_replicate, etp, cp_a2a, cp_p2p };
constexpr std::array<std::string_view, 11> enum_names(Axis)
{
  return {"tp", "cp", "pp", "dp", "ep", "edp", "dp_shard", "dp_replicate", "etp", "cp_a2a", "cp_p2p"};
}

/// @brief A set of axes (what a group spans).
class AxisSet {
public:
  constexpr AxisSet() = default;
  constexpr AxisSet(Axis a) : bits_(bit(a)) {} // NOLINT: a single axis is a set
  constexpr AxisSet operator|(AxisSet o) const { return from_bits(bits_ | o.bits_); }
  constexpr bool contains(Axis a) const { return (bits_ & bit(a)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr std::uint16_t bits() const { return bits_; }
  constexpr bool operator==(const AxisSet&) const  = default;
  constexpr auto operator<=>(const AxisSet&) const = default;

private:
  static constexpr std::uint16_t bit(Axis a) { return static_cast<std::uint16_t>(1U << static_cast<unsigned>(a)); }
  static constexpr AxisSet from_bits(std::uint16_t b)
  {
    AxisSet s;
    s.bits_ = b;
    return s;
  }
  std::uint16_t bits_ = 0;
};
constexpr AxisSet operator|(Axis a, Axis b)
{
  return AxisSet(a) | AxisSet(b);
}

/// @brief A communication group: the axes it spans, and its size.
struct Group {
  Group() = default;
  Group(AxisSet a, int s) : axes(a), size(s) {}
  AxisSet axes;
  int size = 1;
  /// @brief A foreign trace's sub-groups: the ranks of each group the collective runs over, where they are not every
  /// rank along `axes` (ASTRA-sim's groups [0,2] and [1,3] of eight ranks); null for groups along whole axes.
  std::shared_ptr<const std::vector<std::vector<int>>> members;
  /// @brief Numbers the distinct `members` partitions of a step (0: none), so that caches tell them apart.
  std::uint32_t partition = 0;
  /// @brief What tells groups apart in caches and symmetry: the axes and the partition.
  std::uint32_t key() const { return axes.bits() | (partition << 16); }
};
/// @brief Names a group by its axes, e.g. "cp+dp" ("none" for the empty set).
std::string group_name(const Group& group);

/// @brief What a compute stream waited for in a gap: exposed communication of one dimension, a pipeline peer
/// (bubble), or nothing (idle: done before the step ended).
enum class WaitCause : std::uint8_t { tp, cp, pp, dp, ep, bubble, idle };
constexpr std::array<std::string_view, 7> enum_names(WaitCause)
{
  return {"tp", "cp", "pp", "dp", "ep", "bubble", "idle"};
}
/// @brief The cause "exposed communication of `d`".
constexpr WaitCause exposed(Dim d)
{
  return static_cast<WaitCause>(d);
}
/// @brief The dimension of an exposed-communication cause; none for bubble and idle.
constexpr std::optional<Dim> dim_of(WaitCause c)
{
  if (c == WaitCause::bubble || c == WaitCause::idle)
    return std::nullopt;
  return static_cast<Dim>(c);
}

} // namespace spansim::workload
