// NCCL's protocols, channels, slots and tuner, as they bound collectives over long links. The tables are NCCL's
// own (src/graph/tuning.cc of 2.21-2.30, Hopper rows, an x86 host); netsim/README.md says where each comes from.
#include "netsim/nccl.hpp"

#include "common/json_reader.hpp"

#include <algorithm>
#include <cmath>

namespace spansim::netsim {

namespace {

constexpr int kLL = 0, kLL128 = 1, kSimple = 2;
constexpr int kTree = 0, kRing = 1;
// tuning.cc: baseLat[algorithm][protocol] and hwLat[NVLINK|NET][algorithm][protocol], microseconds.
constexpr double kBaseLatency[2][3]   = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}};
constexpr double kNvlinkLatency[2][3] = {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}};
constexpr double kNetLatency[2][3]    = {{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}};
constexpr double kNetOverhead         = 1.0; // us per network step on an x86 host, x3 for Simple
// Bandwidth caps (GB/s): llMaxBws for several nodes on an x86 host (2 nodes, more), and Hopper's per-channel
// limits of ring LL128, tree, and tree LL128 by node count (1, 2, more).
constexpr double kLLMaxBw[2]             = {39.0, 20.4};
constexpr double kRingLL128PerChannel    = 36.7;
constexpr double kTreePerChannel[3]      = {38.7, 41.4, 36.0};
constexpr double kTreeLL128PerChannel[3] = {36.7, 36.7, 29.0};
// enqueue.cc: a channel is dropped while the bytes are below channels x threads x threshold.
constexpr double kThreads[3]   = {512, 640, 512};
constexpr double kThreshold[3] = {8, 8, 64};
constexpr int kSharedSteps     = 16; // NCCL_SHARED_STEPS: a channel's p2p slots over all its peers
constexpr int kP2pChannels     = 16; // p2pnChannels on DGX H100

int index_of(Protocol p)
{
  return p == Protocol::ll ? kLL : p == Protocol::ll128 ? kLL128 : kSimple;
}

int log2i(int n)
{
  int l = 0;
  while ((2 << l) <= n)
    ++l;
  return l;
}

// Ring steps of the call, for the tuner's latency (nsteps) and bandwidth ratio.
double ring_steps(CollectiveOp op, int k)
{
  switch (op) {
  case CollectiveOp::all_reduce:
    return 2.0 * (k - 1);
  case CollectiveOp::broadcast:
  case CollectiveOp::reduce:
    return k;
  default:
    return k - 1.0;
  }
}

// The tuner's estimate (microseconds) of one call under `protocol` (ncclTopoGetAlgoTime with latencyInter = 0).
double tuner_time(const CallShape& s, int protocol, int channels)
{
  const int algorithm = s.tree && s.op == CollectiveOp::all_reduce ? kTree : kRing;
  const int nodes     = std::max(1, s.nodes);
  const int ppn       = std::max(1, s.ranks / nodes);
  double intra        = kNvlinkLatency[algorithm][protocol];
  double inter        = ppn == 1 ? kNetLatency[kTree][protocol] : kNetLatency[algorithm][protocol];
  double latency      = kBaseLatency[algorithm][protocol];
  double bw           = s.bus_bandwidth / 1e9; // GB/s, as the tables
  const int by_nodes  = nodes <= 2 ? nodes - 1 : 2;
  const double ll_cap = nodes == 1 ? 141.0 : kLLMaxBw[nodes == 2 ? 0 : 1];
  if (algorithm == kRing) {
    if (nodes > 1)
      intra = std::max(intra, kNetOverhead * (protocol == kSimple ? 3 : 1));
    const double steps = ring_steps(s.op, s.ranks);
    const double net   = nodes == 1 ? 0 : s.op == CollectiveOp::all_reduce ? 2.0 * (nodes - 1) : nodes - 1.0;
    latency += (steps - net) * intra + net * inter;
    if (protocol == kSimple && nodes > 1 && s.op == CollectiveOp::all_reduce && s.bytes / (channels * s.ranks) >= 64)
      latency *= 1.4; // the ring's plateau on compute capability >= 8.0
    if (protocol == kLL)
      bw = std::min(ll_cap, bw * 0.5);
    else if (protocol == kLL128)
      bw = std::min(bw * 0.92, channels * kRingLL128PerChannel);
    bw *= s.ranks / ring_steps(s.op, s.ranks);
  } else {
    latency += 2 * ((ppn - 1) * intra + log2i(nodes) * inter);
    bw = std::min(bw * 0.92, channels * kTreePerChannel[by_nodes]);
    if (protocol == kLL)
      bw = std::min(bw / 3.8, ll_cap);
    else if (protocol == kLL128)
      bw = std::min(bw * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), channels * kTreeLL128PerChannel[by_nodes]);
    bw *= 0.5;
  }
  return latency + s.bytes / (1000 * std::max(bw, 1e-9));
}

} // namespace

nlohmann::json NcclSettings::to_json() const
{
  nlohmann::json out = {{"protocol", name_of(protocol)},
                        {"channels", channels > 0 ? nlohmann::json(channels) : nlohmann::json("auto")},
                        {"channels_if_auto", kDefaultChannels},
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

Protocol tuner_protocol(const CallShape& shape, int channels)
{
  int best         = kSimple;
  double best_time = tuner_time(shape, kSimple, channels);
  for (int p : {kLL, kLL128}) {
    const double t = tuner_time(shape, p, channels);
    if (t < best_time) {
      best_time = t;
      best      = p;
    }
  }
  return best == kLL ? Protocol::ll : best == kLL128 ? Protocol::ll128 : Protocol::simple;
}

int tuner_channels(const CallShape& shape, Protocol protocol, const NcclSettings& settings)
{
  int channels = settings.effective_channels();
  if (settings.fixed_channels)
    return channels;
  const int p            = index_of(protocol);
  const double threshold = kThreshold[p] * (p == kLL && !shape.tree ? shape.ranks : 1);
  while (channels >= 2 && shape.bytes < channels * kThreads[p] * threshold)
    --channels;
  return channels;
}

NcclCall plan_collective(const CallShape& shape, const NcclSettings& settings)
{
  NcclCall call;
  const int nominal = settings.effective_channels();
  call.protocol     = settings.protocol != Protocol::automatic ? settings.protocol : tuner_protocol(shape, nominal);
  call.channels     = tuner_channels(shape, call.protocol, settings);
  const bool ring   = !shape.tree && (shape.op == CollectiveOp::all_reduce || shape.op == CollectiveOp::all_gather ||
                                    shape.op == CollectiveOp::reduce_scatter);
  const double slot = call.protocol == Protocol::ll      ? settings.ll_buffsize / settings.slots / 2
                      : call.protocol == Protocol::ll128 ? settings.ll128_buffsize / settings.slots * 120 / 128
                                                         : settings.buffsize / settings.slots;
  // Ring Simple: a step (chunk) is 4 slots, 2 slices of 2; everything else takes one slot per step.
  const bool simple_ring    = ring && call.protocol == Protocol::simple;
  const double chunk        = simple_ring ? slot * settings.slots / 2 : slot;
  const double per_channel  = shape.bytes / call.channels;
  const double steps_in_air = simple_ring ? std::max(1, settings.slots / 4) : settings.slots;
  call.step_bytes           = std::min(chunk, ring ? per_channel / shape.ranks : per_channel);
  call.wire   = call.protocol == Protocol::ll ? 2.0 : call.protocol == Protocol::ll128 ? 128.0 / 120.0 : 1.0;
  call.window = settings.windows ? steps_in_air * call.step_bytes * call.wire : 0;
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
  const int per_peer = settings.p2p_channels_per_peer > 0 ? settings.p2p_channels_per_peer : ranks > 32 ? 1 : 2;
  const int sharing  = std::max(1, (std::max(1, peers) * per_peer + kP2pChannels - 1) / kP2pChannels);
  const int depth    = std::max(1, std::min(settings.slots, kSharedSteps / sharing));
  return per_peer * depth * chunk;
}

} // namespace spansim::netsim
