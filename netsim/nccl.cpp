// NCCL's settings, and the plan of a call its tuner picked: protocols, channels, slots and windows, as they bound
// collectives over long links (netsim/README.md says where each constant comes from).
#include "netsim/nccl.hpp"

#include "netsim/nccl_tuner.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"

#include <algorithm>
#include <cmath>

namespace spansim::netsim {

namespace {

constexpr int kSharedSteps = 16; // NCCL_SHARED_STEPS: a channel's p2p slots over all its peers
constexpr int kP2pChannels = 16; // p2pnChannels on DGX H100

// The chunk NCCL's kernels move per step for a call off the ring (src/enqueue.cc, computeColl): each algorithm's
// own size, halved for small messages so that every channel (and head) keeps enough chunks in flight. `slot` is
// the protocol's step (buffsize / NCCL_STEPS, payload); `channels` the call's. A ring's other calls take the slot.
double algorithm_chunk(const NcclComm& comm, const NcclPick& pick, CollectiveOp op, double bytes, int channels,
                       double slot)
{
  const double nc = std::max(1, channels);
  double chunk    = slot;
  // NCCL's halving: while each of `per` (channels, heads) has fewer than `least` whole chunks, down to `floor`.
  const auto shrink = [&](double per, double least, double floor) {
    while (std::floor(bytes / (per * chunk)) < least && chunk > floor)
      chunk /= 2;
  };
  switch (pick.algorithm) {
  case NcclAlgorithm::collnet_chain: {
    const double depth = static_cast<double>(comm.ranks) / std::max(1, comm.nodes);
    chunk              = std::min(262144.0, slot);
    shrink(nc, depth * 64, 131072);
    shrink(nc, depth * 8, 65536);
    shrink(nc, depth, 32768);
    break;
  }
  case NcclAlgorithm::collnet_direct: {
    const double heads = comm.graphs[static_cast<int>(NcclAlgorithm::collnet_direct)].channels;
    const double depth = comm.ranks > comm.nodes ? 2 : 1;
    shrink(nc * heads, depth * 64, 131072);
    shrink(nc * heads, depth * 8, 65536);
    shrink(nc * heads, depth * 8, 32768);
    break;
  }
  case NcclAlgorithm::nvls:
  case NcclAlgorithm::nvls_tree: {
    // NCCL_NVLS_CHUNKSIZE (128 KiB, src/transport/nvls.cc; 2.21 and later for NVLSTree, which took the Simple step
    // before); NVLSTree at most 64 KiB on 4 nodes or more (2.19 and later, NCCL_NVLSTREE_MAX_CHUNKSIZE).
    const double ops = nc * std::max(1, comm.graphs[static_cast<int>(NcclAlgorithm::nvls)].channels);
    if (pick.algorithm == NcclAlgorithm::nvls) {
      double most = 131072;
      // The all-reduce's NVLS bandwidth decides (the pick's own stands in for another op's).
      if (comm.version.at_least(20) && comm.nodes > 1 && pick.algbw > 0 && pick.algbw < 150)
        most = 32768;
      chunk = std::min(chunk, most);
      for (auto [times, to] : {std::pair{64.0, 65536.0}, {8.0, 32768.0}, {2.0, 16384.0}})
        if (bytes < times * ops * chunk && chunk > to)
          chunk = to;
    } else {
      if (comm.version.at_least(21))
        chunk = 131072;
      if (comm.version.at_least(19) && comm.nodes >= 4)
        chunk = std::min(chunk, 65536.0);
      for (auto [times, to] : {std::pair{32.0, 262144.0}, {16.0, 131072.0}, {4.0, 65536.0}, {1.0, 32768.0}})
        if (bytes < times * ops * chunk && chunk > to)
          chunk = to;
    }
    break;
  }
  case NcclAlgorithm::tree:
    if (pick.protocol == Protocol::ll128) {
      const double ppn   = static_cast<double>(comm.ranks) / std::max(1, comm.nodes);
      const double steps = 1 + std::floor(std::log2(std::max(1, comm.nodes))) + 0.1 * ppn;
      shrink(nc, steps * 64 / ppn, 131072);
      shrink(nc, steps * 16 / ppn, 32768);
    }
    break;
  case NcclAlgorithm::pat:
    while (chunk * nc * (op == CollectiveOp::reduce_scatter ? 16 : 32) > bytes && chunk > 65536)
      chunk /= 2;
    break;
  case NcclAlgorithm::ring:
    break;
  }
  return chunk;
}

} // namespace

nlohmann::json NcclSettings::to_json() const
{
  nlohmann::json out = {{"version", version.name()},
                        {"algorithms", algorithms.name()},
                        {"nvls", nvls},
                        {"collnet", collnet},
                        {"pxn", pxn},
                        {"protocol", name_of(protocol)},
                        {"channels", channels > 0 ? nlohmann::json(channels) : nlohmann::json("auto")},
                        {"buffsize", buffsize},
                        {"ll_buffsize", ll_buffsize},
                        {"ll128_buffsize", ll128_buffsize},
                        {"p2p_chunk", p2p_chunk},
                        {"p2p_channels_per_peer",
                         p2p_channels_per_peer > 0 ? nlohmann::json(p2p_channels_per_peer) : nlohmann::json("auto")},
                        {"slots", slots},
                        {"windows", windows}};
  return out;
}

NcclSettings read_nccl(spec::ObjectReader& r)
{
  NcclSettings s;
  // NCCL's own parsers' errors, at the key that holds the value.
  auto parsed = [&](std::string_view key, auto parse) {
    const std::string text = r.string(key);
    try {
      return parse(text);
    } catch (const UsageError& e) {
      r.fail(key, e.what());
    }
  };
  if (r.has("version"))
    s.version = parsed("version", [](const std::string& t) { return NcclVersion::parse(t); });
  if (r.has("algorithms"))
    s.algorithms = parsed("algorithms", [](const std::string& t) { return NcclAlgorithmSet::parse(t); });
  s.nvls    = r.optional_boolean("nvls").value_or(s.nvls);
  s.collnet = r.optional_boolean("collnet").value_or(s.collnet);
  s.pxn     = r.optional_boolean("pxn").value_or(s.pxn);
  if (auto p = r.optional_enumeration<Protocol>("protocol"))
    s.protocol = *p;
  if (r.has("channels") && !(r.raw("channels").is_string() && r.raw("channels").get<std::string>() == "auto")) {
    if (!r.raw("channels").is_number_integer())
      r.fail("channels", "expected \"auto\" or a whole number of channels from 1 to 64");
    s.channels       = static_cast<int>(r.integer("channels", 1, 64));
    s.fixed_channels = true;
  }
  for (auto [key, field] : {std::pair{"buffsize", &s.buffsize}, std::pair{"ll_buffsize", &s.ll_buffsize},
                            std::pair{"ll128_buffsize", &s.ll128_buffsize}, std::pair{"p2p_chunk", &s.p2p_chunk}})
    if (auto b = r.optional_size(key)) {
      if (!(*b >= 4096))
        r.fail(key, "expected a size of at least \"4KiB\" such as \"4MiB\"");
      *field = *b;
    }
  if (auto c = r.optional_integer("p2p_channels_per_peer", 1, 64))
    s.p2p_channels_per_peer = static_cast<int>(*c);
  if (auto n = r.optional_integer("slots", 1, 64))
    s.slots = static_cast<int>(*n);
  if (r.has("windows"))
    s.windows = r.boolean("windows");
  r.finish();
  return s;
}

NcclCall nccl_call(const NcclComm& comm, const NcclPick& pick, CollectiveOp op, double bytes,
                   const NcclSettings& settings)
{
  NcclCall call;
  call.algorithm = pick.algorithm;
  call.protocol  = pick.protocol;
  call.channels  = nccl_call_channels(comm, pick, bytes, settings);
  const bool ring =
      pick.algorithm == NcclAlgorithm::ring &&
      (op == CollectiveOp::all_reduce || op == CollectiveOp::all_gather || op == CollectiveOp::reduce_scatter);
  const double slot = call.protocol == Protocol::ll      ? settings.ll_buffsize / settings.slots / 2
                      : call.protocol == Protocol::ll128 ? settings.ll128_buffsize / settings.slots * 120 / 128
                                                         : settings.buffsize / settings.slots;
  // Ring Simple: a step (chunk) is 4 slots, 2 slices of 2; everything else takes one slot per step, of its
  // algorithm's chunk.
  const bool simple_ring = ring && call.protocol == Protocol::simple;
  const double chunk =
      simple_ring ? slot * settings.slots / 2 : algorithm_chunk(comm, pick, op, bytes, call.channels, slot);
  const double per_channel  = bytes / call.channels;
  const double steps_in_air = simple_ring ? std::max(1, settings.slots / 4) : settings.slots;
  call.step_bytes           = std::min(chunk, ring ? per_channel / comm.ranks : per_channel);
  call.wire                 = wire_factor(call.protocol);
  call.window               = settings.windows ? steps_in_air * call.step_bytes * call.wire : 0;
  call.latency              = pick.latency_us * 1e-6;
  call.kernel_algbw         = pick.kernel_algbw * 1e9;
  return call;
}

double p2p_window(double bytes, int peers, int ranks, const NcclSettings& settings)
{
  if (!settings.windows)
    return 0;
  double chunk = std::min(settings.p2p_chunk, settings.buffsize / settings.slots);
  if (bytes < chunk)
    chunk /= 4;
  else if (bytes < 8 * chunk)
    chunk /= 2;
  const int per_peer = p2p_channels_per_peer(ranks, settings);
  const int sharing  = std::max(1, (std::max(1, peers) * per_peer + kP2pChannels - 1) / kP2pChannels);
  const int depth    = std::max(1, std::min(settings.slots, kSharedSteps / sharing));
  return per_peer * depth * chunk;
}

int p2p_channels_per_peer(int ranks, const NcclSettings& settings)
{
  return settings.p2p_channels_per_peer > 0 ? settings.p2p_channels_per_peer : ranks > 32 ? 1 : 2;
}

P2pComm p2p_comm(int channels, int ranks, int nodes, bool all_nvlink, const NcclSettings& settings)
{
  auto pow2_up = [](int x) {
    int p = 1;
    while (p < x)
      p *= 2;
    return p;
  };
  P2pComm c;
  c.ranks      = ranks;
  c.nodes      = nodes;
  c.channels   = pow2_up(std::max(1, channels));
  int per_peer = c.channels;
  if (nodes > 1) {
    int net = 2;
    while (net * ranks > c.channels * 4 && net > 1)
      net /= 2;
    per_peer = settings.p2p_channels_per_peer > 0 ? settings.p2p_channels_per_peer : net;
  }
  c.per_peer                 = std::min(pow2_up(std::min(per_peer, c.channels)), c.channels);
  constexpr double kNvlChunk = 524288; // NCCL_P2P_NVL_CHUNKSIZE
  c.step    = std::min(nodes == 1 && all_nvlink ? kNvlChunk : settings.p2p_chunk, settings.buffsize / settings.slots);
  c.ll_step = settings.ll_buffsize / settings.slots;
  return c;
}

P2pPlan p2p_plan(const P2pComm& c, double bytes)
{
  P2pPlan p;
  const int most = c.per_peer;
  int least      = most;
  while (least * c.ranks > c.channels && least > 1)
    least /= 2;
  p.protocol            = bytes <= most * kP2pLLThreshold ? Protocol::ll : Protocol::simple;
  const double step     = p.protocol == Protocol::ll ? c.ll_step : c.step;
  const double min_part = c.nodes > 1 ? step / 2 : step / 8;
  const double max_part = c.nodes > 1 ? step : step * 32;
  if (bytes <= 0)
    return p;
  p.channels  = static_cast<int>(std::min<double>(least, std::ceil(bytes / min_part))); // in double: no overflow
  double part = std::max(min_part, std::ceil(bytes / p.channels));
  while (part > max_part && p.channels <= most / 2) {
    p.channels *= 2;
    part = std::ceil(bytes / p.channels);
  }
  return p;
}

int p2p_waves(int peers, int ranks, const NcclSettings& settings)
{
  constexpr int kPerBatch = 8; // NCCL_MAX_DEV_WORK_P2P_PER_BATCH
  const int at_once       = std::max(1, kP2pChannels / p2p_channels_per_peer(ranks, settings)) * kPerBatch;
  return std::max(1, (std::max(1, peers) + at_once - 1) / at_once);
}

} // namespace spansim::netsim
