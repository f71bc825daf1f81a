#pragma once
/// @file
/// @brief NCCL's transport as it bounds a collective over links of unequal latency: protocols (LL, LL128, Simple),
/// channels, the slots of each connection (NCCL_STEPS = 8, freed only when the receiver has consumed them, so at
/// most a window of slots per round trip) and the tuner's choice of protocol and channels, which never sees the
/// real latency. Constants are NCCL's (2.21-2.30; netsim/README.md lists file and line).

#include "common/collective.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <string>
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

/// @brief NCCL's algorithms, in NCCL's order (names as NCCL_ALGO spells them).
enum class NcclAlgorithm { tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree, pat };
constexpr std::array<std::string_view, 7> enum_names(NcclAlgorithm)
{
  return {"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"};
}
inline constexpr int kNcclAlgorithms = 7;

/// @brief An NCCL release series whose tuner tables spansim has: 2.18 to 2.30 ("2.27", or a release "2.27.7").
struct NcclVersion {
  int minor = 27; ///< 2.minor
  /// @brief Reads "2.M" or "2.M.P". @throws UsageError for another form or an unknown series, naming the allowed.
  static NcclVersion parse(std::string_view text);
  std::string name() const { return "2." + std::to_string(minor); }
  bool at_least(int m) const { return minor >= m; }
  bool operator==(const NcclVersion&) const = default;
  static constexpr int kOldest = 18, kNewest = 30;
};

/// @brief The algorithms NCCL may pick, as NCCL_ALGO sets them ("Ring,Tree", "^NVLS,NVLSTree"; names as NCCL
/// spells them, any case).
struct NcclAlgorithmSet {
  unsigned bits = (1u << kNcclAlgorithms) - 1;
  bool has(NcclAlgorithm a) const { return (bits >> static_cast<unsigned>(a)) & 1u; }
  /// @brief Reads an NCCL_ALGO value. @throws UsageError naming an unknown algorithm and the allowed ones.
  static NcclAlgorithmSet parse(std::string_view text);
  /// @brief The value NCCL_ALGO would hold ("all" for every algorithm).
  std::string name() const;
  bool operator==(const NcclAlgorithmSet&) const = default;
};

/// @brief NCCL's settings for a scenario's collectives, as the environment variables set them; defaults are NCCL's
/// own on a DGX H100 (8 NICs per node).
struct NcclSettings {
  NcclVersion version;                     ///< the release whose tuner and channel rules apply
  NcclAlgorithmSet algorithms;             ///< NCCL_ALGO
  bool nvls         = true;                ///< NCCL_NVLS_ENABLE: NVLS where the node's NVSwitch reduces
  bool collnet      = false;               ///< NCCL_COLLNET_ENABLE: CollNet where the fabric has SHARP
  bool pxn          = true;                ///< PXN (NCCL_PXN_DISABLE unset): sends leave by the destination's rail
  Protocol protocol = Protocol::automatic; ///< NCCL_PROTO
  /// @brief Channels pinned by NCCL_MIN/MAX_NCHANNELS (with `fixed_channels`); 0: NCCL's own (its graph search's,
  /// netsim/nccl_layout.hpp), fewer for small messages.
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

  nlohmann::json to_json() const;
  bool operator==(const NcclSettings&) const = default;
};

/// @brief Reads a scenario's `nccl` block. @throws SpecError naming the key and the allowed values.
NcclSettings read_nccl(spec::ObjectReader& r);

/// @brief What the lowering of one collective call (or one part of it) runs under: NCCL's pick and its plan.
struct NcclCall {
  NcclAlgorithm algorithm = NcclAlgorithm::ring;
  Protocol protocol       = Protocol::simple;
  int channels            = 1; ///< NCCL channels the call runs on
  double step_bytes       = 0; ///< payload of one pipeline step (unit) of one channel
  double wire             = 1; ///< wire bytes per payload byte (LL 2, LL128 128/120)
  /// @brief Wire bytes one connection (one channel's edge) may have in flight: the slots it may fill ahead of the
  /// receiver, each holding what one step carries (a small message leaves slots mostly empty). 0: no window.
  double window  = 0;
  double latency = 0; ///< seconds: the tuner's latency for the pick, the least the call takes
  /// @brief bytes/s: the algorithm bandwidth the pick's kernels reach at most (NCCL's per-channel tables); 0: none.
  double kernel_algbw = 0;
};

struct NcclComm;
struct NcclPick;

/// @brief The plan of a call NCCL's tuner picked (`pick` on `comm`): its runtime channels (fewer for small messages
/// unless pinned), its step and slot window (ring AllReduce, AllGather, ReduceScatter: Simple steps of up to 2 MiB
/// taking 4 slots each, so 2 steps in flight; LL and LL128 one slot a step, 8 in flight; everything else one slot a
/// step), its latency and kernel cap.
NcclCall nccl_call(const NcclComm& comm, const NcclPick& pick, CollectiveOp op, double bytes,
                   const NcclSettings& settings);

/// @brief The window of a send/recv between two GPUs over the network (Simple, slots of the p2p chunk, at most
/// min(8, 16 / peers sharing the channel) per peer and channel): the wire bytes one transfer may have in flight,
/// over all its channels. `peers` is how many peers the rank sends to at once (an all-to-all's group less one).
double p2p_window(double bytes, int peers, int ranks, const NcclSettings& settings);

/// @brief The channels one peer's sends are split over: NCCL_NCHANNELS_PER_NET_PEER, or NCCL's own (2; 1 above 32
/// ranks, where NCCL halves them to fit every peer in one round).
int p2p_channels_per_peer(int ranks, const NcclSettings& settings);

/// @brief The waves in which a rank's sends to `peers` peers run (src/enqueue.cc): each channel runs at most 8 peers
/// at once (NCCL_MAX_DEV_WORK_P2P_PER_BATCH), its batches one after another, over p2pnChannels / channels per peer.
int p2p_waves(int peers, int ranks, const NcclSettings& settings);

/// @brief A communicator's point-to-point channels (src/graph/paths.cc, ncclTopoComputeP2pChannels): p2pnChannels,
/// the power of two at or above its collective channels; p2pnChannelsPerPeer, the fewest any peer takes (inside one
/// node every NVLink peer takes them all; across nodes a network peer 2, halved while 2 x ranks exceeds 4 x
/// p2pnChannels, or NCCL_NCHANNELS_PER_NET_PEER); and the Simple step (NCCL_P2P_NVL_CHUNKSIZE 512 KiB on one node of
/// NVLink, NCCL_P2P_NET_CHUNKSIZE across nodes, at most an eighth of NCCL_BUFFSIZE).
struct P2pComm {
  int channels   = 16;
  int per_peer   = 2;
  int ranks      = 2;
  int nodes      = 1;
  double step    = 131072; ///< bytes of a Simple step
  double ll_step = 65536;  ///< wire bytes of an LL step (NCCL_LL_BUFFSIZE / 8)
};
/// @brief The p2p channels of a communicator of `ranks` over `nodes` nodes whose collectives run `channels` channels.
P2pComm p2p_comm(int channels, int ranks, int nodes, bool all_nvlink, const NcclSettings& settings);

/// @brief How NCCL runs one send of a group (src/enqueue.cc, addP2pToPlan, 2.27-2.30): LL when its bytes are at most
/// NCCL_P2P_LL_THRESHOLD (16 KiB) a channel of p2pnChannelsPerPeer, else Simple; over as many channels as parts of
/// at least a step / 8 (a step / 2 across nodes) fill, from p2pnChannelsPerPeer halved until every rank's peer fits
/// the channels once, doubled while a part exceeds 32 steps (one step across nodes), up to p2pnChannelsPerPeer.
struct P2pPlan {
  Protocol protocol = Protocol::simple;
  int channels      = 1;
};
P2pPlan p2p_plan(const P2pComm& comm, double bytes);

/// @brief NCCL_P2P_LL_THRESHOLD: a send of at most this many bytes per channel runs LL, a larger one Simple.
inline constexpr double kP2pLLThreshold = 16384;

/// @brief Wire bytes per payload byte under protocol `p`: LL 2 (a 16-byte line holds 8 bytes of data and two 4-byte
/// flags), LL128 128/120, Simple 1.
inline double wire_factor(Protocol p)
{
  return p == Protocol::ll ? 2.0 : p == Protocol::ll128 ? 128.0 / 120.0 : 1.0;
}

} // namespace spansim::netsim
