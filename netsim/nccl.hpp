#pragma once
/// @file
/// @brief NCCL's transport as it bounds a collective over links of unequal latency: protocols (LL, LL128, Simple),
/// channels, the slots of each connection (NCCL_STEPS = 8, freed only when the receiver has consumed them, so at
/// most a window of slots per round trip) and the tuner's choice of protocol and channels, which never sees the
/// real latency. Constants are NCCL's (2.21-2.30; netsim/README.md lists file and line).

#include "common/collective.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <string_view>

namespace spansim::spec {
class ObjectReader;
}

namespace spansim::netsim {

/// @brief NCCL's protocols (names: "auto", "LL", "LL128", "Simple"); `automatic`: as NCCL's tuner picks.
enum class Protocol { automatic, ll, ll128, simple };
constexpr std::array<std::string_view, 4> enum_names(Protocol)
{
  return {"auto", "LL", "LL128", "Simple"};
}

/// @brief NCCL's settings for a scenario's collectives, as the environment variables set them; defaults are NCCL's
/// own on a DGX H100 (8 NICs per node).
struct NcclSettings {
  Protocol protocol = Protocol::automatic; ///< NCCL_PROTO
  /// @brief Channels of a collective whose group spans nodes (NCCL_MIN/MAX_NCHANNELS): 16 on DGX H100, 8 rings from
  /// the topology search, doubled (NCCL issues #1041, #1453). 0: that default. The tuner still drops channels for
  /// small messages unless `fixed_channels`.
  int channels              = 0;
  bool fixed_channels       = false;   ///< channels were pinned (NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS)
  double buffsize           = 4194304; ///< NCCL_BUFFSIZE: Simple's buffer per connection, 8 slots
  double ll_buffsize        = 524288;  ///< NCCL_LL_BUFFSIZE (wire bytes; half is payload)
  double ll128_buffsize     = 4915200; ///< NCCL_LL128_BUFFSIZE (wire bytes; 120 of each 128 are payload)
  double p2p_chunk          = 131072;  ///< NCCL_P2P_NET_CHUNKSIZE: a send/recv slot over the network
  int p2p_channels_per_peer = 0;       ///< NCCL_NCHANNELS_PER_NET_PEER; 0: NCCL's (2, 1 above 32 ranks)
  /// @brief Slots per connection (NCCL_STEPS, a compile-time constant of NCCL: 8).
  int slots = 8;
  /// @brief Model the slot windows at all (false: every transfer runs at its links' share, as before wave 3).
  bool windows = true;

  int effective_channels() const { return channels > 0 ? channels : kDefaultChannels; }
  static constexpr int kDefaultChannels = 16;
  nlohmann::json to_json() const;
  bool operator==(const NcclSettings&) const = default;
};

/// @brief Reads a scenario's `nccl` block. @throws SpecError naming the key and the allowed values.
NcclSettings read_nccl(spec::ObjectReader& r);

/// @brief What the lowering of one collective call runs under.
struct NcclCall {
  Protocol protocol = Protocol::simple;
  int channels      = 1; ///< NCCL channels the call runs on
  double step_bytes = 0; ///< payload of one pipeline step (unit) of one channel
  double wire       = 1; ///< wire bytes per payload byte (LL 2, LL128 128/120)
  /// @brief Wire bytes one connection (one channel's edge) may have in flight: the slots it may fill ahead of the
  /// receiver, each holding what one step carries (a small message leaves slots mostly empty). 0: no window.
  double window = 0;
};

/// @brief The shape of a call the tuner reads: the group's ranks and nodes, and the narrowest bandwidth between
/// consecutive ranks (what NCCL's topology search would find).
struct CallShape {
  CollectiveOp op      = CollectiveOp::all_reduce;
  bool tree            = false; ///< a tree (double binary tree) rather than a ring or chain
  int ranks            = 2;
  int nodes            = 1;
  double bytes         = 0; ///< nccl-tests size
  double bus_bandwidth = 0; ///< bytes/s of the narrowest edge
};

/// @brief The protocol NCCL's tuner (src/graph/tuning.cc, enqueue.cc) picks for a ring or tree call, from its
/// latency and bandwidth tables for Hopper and the call's shape; it never sees the links' real latency.
Protocol tuner_protocol(const CallShape& shape, int channels);

/// @brief Channels NCCL runs a call on: the configured ones, fewer for small messages (enqueue.cc's thread
/// thresholds: 32 KiB per channel for Simple, 4 KiB x ranks for ring LL, 5 KiB for LL128).
int tuner_channels(const CallShape& shape, Protocol protocol, const NcclSettings& settings);

/// @brief The protocol, channels, step and window of a ring, chain or tree call (ring AllReduce, AllGather,
/// ReduceScatter: Simple steps of up to 2 MiB taking 4 slots each, so 2 steps in flight; LL and LL128 one slot a
/// step, 8 in flight; tree and chain steps one slot each).
NcclCall plan_collective(const CallShape& shape, const NcclSettings& settings);

/// @brief The window of a send/recv between two GPUs over the network (Simple, slots of the p2p chunk, at most
/// min(8, 16 / peers sharing the channel) per peer and channel): the wire bytes one transfer may have in flight,
/// over all its channels. `peers` is how many peers the rank sends to at once (an all-to-all's group less one).
double p2p_window(double bytes, int peers, int ranks, const NcclSettings& settings);

} // namespace spansim::netsim
