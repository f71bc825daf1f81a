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
  // Ring Simple: a step (chunk) is 4 slots, 2 slices of 2; everything else takes one slot per step.
  const bool simple_ring    = ring && call.protocol == Protocol::simple;
  const double chunk        = simple_ring ? slot * settings.slots / 2 : slot;
  const double per_channel  = bytes / call.channels;
  const double steps_in_air = simple_ring ? std::max(1, settings.slots / 4) : settings.slots;
  call.step_bytes           = std::min(chunk, ring ? per_channel / comm.ranks : per_channel);
  call.wire         = call.protocol == Protocol::ll ? 2.0 : call.protocol == Protocol::ll128 ? 128.0 / 120.0 : 1.0;
  call.window       = settings.windows ? steps_in_air * call.step_bytes * call.wire : 0;
  call.latency      = pick.latency_us * 1e-6;
  call.kernel_algbw = pick.kernel_algbw * 1e9;
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

int p2p_waves(int peers, int ranks, const NcclSettings& settings)
{
  constexpr int kPerBatch = 8; // NCCL_MAX_DEV_WORK_P2P_PER_BATCH
  const int at_once       = std::max(1, kP2pChannels / p2p_channels_per_peer(ranks, settings)) * kPerBatch;
  return std::max(1, (std::max(1, peers) + at_once - 1) / at_once);
}

} // namespace spansim::netsim
