// NCCL's tuner, release by release: ncclTopoTuneModel's bandwidths and latencies, ncclTopoGetAlgoTime's time and
// the selection loop of getAlgoInfo, with the tables of netsim/nccl/tuner-tables.json. Where a rule changed between
// releases the code names the series (netsim/README.md, "NCCL's tuner", lists the rules and their lines).
#include "netsim/nccl_tuner.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

namespace spansim::netsim {

namespace {

constexpr int kLL = 0, kLL128 = 1, kSimple = 2;
constexpr int kNvlinkHw = 0, kPciHw = 1, kNetHw = 2;

/// @brief One release series' tables.
struct Tables {
  double base[kNcclAlgorithms][3]{};
  double hw[3][kNcclAlgorithms][3]{};
  double ll_max[4][3]{};
  double ring_ll128[4][3]{};
  double tree_ll128[4][3]{};
  double tree[4][3]{};
  double nvls_tree[4][3]{};
  double nvls_efficiency[4]{};
  std::vector<double> tree_correction[3];
};

void fill(const nlohmann::json& j, double* out, std::size_t n)
{
  std::size_t k = 0;
  auto walk     = [&](const auto& self, const nlohmann::json& v) -> void {
    if (v.is_array()) {
      for (const auto& e : v)
        self(self, e);
    } else if (k < n) {
      out[k++] = v.get<double>();
    }
  };
  walk(walk, j);
}

std::map<int, Tables> load_tables()
{
  const std::string path = std::string(SPANSIM_DATA_DIR) + "/netsim/nccl/tuner-tables.json";
  const auto doc         = spec::load_json_file(path);
  std::map<int, Tables> out;
  for (const auto& [name, s] : doc.at("series").items()) {
    Tables t;
    fill(s.at("baseLat"), &t.base[0][0], sizeof t.base / sizeof(double));
    fill(s.at("hwLat"), &t.hw[0][0][0], sizeof t.hw / sizeof(double));
    fill(s.at("llMaxBws"), &t.ll_max[0][0], 12);
    fill(s.at("perChMaxRingLL128Bws"), &t.ring_ll128[0][0], 12);
    fill(s.at("perChMaxTreeLL128Bws"), &t.tree_ll128[0][0], 12);
    fill(s.at("perChMaxTreeBws"), &t.tree[0][0], 12);
    fill(s.at("perChMaxNVLSTreeBws"), &t.nvls_tree[0][0], 12);
    fill(s.at("nvlsEfficiency"), t.nvls_efficiency, 4);
    for (int p = 0; p < 3; ++p)
      t.tree_correction[p] = s.at("treeCorrectionFactor").at(p).get<std::vector<double>>();
    out.emplace(std::stoi(name.substr(2)), std::move(t));
  }
  return out;
}

// Read-only reference data, loaded once per process.
const Tables& tables(NcclVersion v)
{
  static const std::map<int, Tables> all = load_tables();
  return all.at(v.minor);
}

int log2i(long long n)
{
  int l = 0;
  while (n > 1) {
    n >>= 1;
    ++l;
  }
  return l;
}

int proto_index(Protocol p)
{
  return p == Protocol::ll ? kLL : p == Protocol::ll128 ? kLL128 : kSimple;
}

bool is_ag_rs(CollectiveOp op)
{
  return op == CollectiveOp::all_gather || op == CollectiveOp::reduce_scatter;
}

// The algorithms ncclTopoTuneModel models for a collective (others keep bandwidth 0).
bool modelled(NcclVersion v, CollectiveOp op, NcclAlgorithm a)
{
  using A = NcclAlgorithm;
  switch (op) {
  case CollectiveOp::broadcast:
  case CollectiveOp::reduce:
    return a == A::ring;
  case CollectiveOp::all_gather:
  case CollectiveOp::reduce_scatter:
    return a == A::ring || (a == A::nvls && v.at_least(19)) || (a == A::collnet_direct && v.at_least(20)) ||
           (a == A::pat && v.at_least(23));
  case CollectiveOp::all_reduce:
    return a != A::pat;
  default:
    return false;
  }
}

} // namespace

double nccl_time(const NcclComm& comm, CollectiveOp op, double bytes, NcclAlgorithm algorithm, Protocol protocol,
                 NcclPick* detail)
{
  using A          = NcclAlgorithm;
  const auto& v    = comm.version;
  const Tables& t  = tables(v);
  const int a      = static_cast<int>(algorithm);
  const int p      = proto_index(protocol);
  const auto& g    = comm.graphs[a];
  const int nodes  = std::max(1, comm.nodes);
  const int ranks  = comm.ranks;
  const double ppn = static_cast<double>(ranks) / nodes;
  // Blackwell rows exist from 2.25: older releases read Blackwell GPUs as Hopper.
  const int cc     = std::min(comm.arch, v.at_least(25) ? 3 : 2);
  const int index2 = nodes <= 2 ? nodes - 1 : 2;
  if (!modelled(v, op, algorithm) || g.channels <= 0)
    return -1;
  // Simple only for NVLS, NVLSTree, PAT; CollNet's LL and LL128 have no bandwidth.
  if (p != kSimple && (algorithm == A::nvls || algorithm == A::nvls_tree || algorithm == A::pat ||
                       algorithm == A::collnet_direct || algorithm == A::collnet_chain))
    return -1;
  if (p == kLL128 && !g.ll128)
    return -1;
  // Enable rules (tuning.cc and getAlgoInfo): support flags, NVLSTree not on one node, multi-node NVLS through
  // CollNet only, AG/RS over NVLS single node only before 2.27, CollNetDirect with at most 8 local ranks (2.22+).
  if ((algorithm == A::nvls || algorithm == A::nvls_tree) && !comm.nvls)
    return -1;
  if (algorithm == A::nvls_tree && nodes == 1)
    return -1;
  if (algorithm == A::nvls && nodes > 1 && !comm.collnet)
    return -1;
  if (algorithm == A::nvls && is_ag_rs(op) && nodes > 1 && !v.at_least(27))
    return -1;
  if ((algorithm == A::nvls || algorithm == A::nvls_tree) && is_ag_rs(op) && v.at_least(25) &&
      comm.local_ranks_most > 32)
    return -1;
  if ((algorithm == A::collnet_direct || algorithm == A::collnet_chain) && !comm.collnet)
    return -1;
  if (algorithm == A::collnet_direct && v.at_least(22) && comm.local_ranks_most > 8)
    return -1;
  if (algorithm == A::collnet_chain && v.at_least(28) && comm.local_ranks_most > 8)
    return -1;
  if (algorithm == A::pat && !comm.pat)
    return -1;

  // Bandwidth (ncclTopoTuneModel).
  const bool collnet = algorithm == A::collnet_direct || algorithm == A::collnet_chain;
  double bw          = (nodes <= 2 || collnet) ? g.bw_intra : g.bw_inter;
  if (algorithm == A::nvls || algorithm == A::nvls_tree) {
    if (v.at_least(28)) {
      if (g.channels < 2)
        return -1;
      double intra = g.bw_intra * t.nvls_efficiency[cc] * (g.channels - 1) / g.channels;
      intra *= op == CollectiveOp::all_reduce ? 2 : (ppn - 1) / ppn;
      const double inter = g.bw_inter * ((nodes <= 2 && algorithm == A::nvls_tree) ? 2 : 1);
      bw                 = std::min(intra, inter);
      if (algorithm == A::nvls_tree && t.nvls_tree[cc][index2] > 0)
        bw = std::min(bw, t.nvls_tree[cc][index2]);
    } else if (v.at_least(19)) {
      if (algorithm == A::nvls)
        bw = (v.at_least(27) && is_ag_rs(op)) ? std::min(g.bw_intra * (ppn - 1) / ppn, g.bw_inter * 0.9)
                                              : std::min(g.bw_intra, g.bw_inter);
      else
        bw = std::min(g.bw_intra, nodes <= 2 ? g.bw_inter : g.bw_inter / 2);
    }
  }
  double busbw        = g.channels * bw;
  double cap          = 0; // the kernels' own limit, from the per-channel tables
  const double ll_max = t.ll_max[nodes == 1 ? cc : 0][index2] > 0 ? t.ll_max[nodes == 1 ? cc : 0][index2] : 1e30;
  if (algorithm == A::ring && p == kLL) {
    const bool quarter = nodes > 1 || op == CollectiveOp::all_reduce || op == CollectiveOp::reduce;
    busbw              = std::min(ll_max, busbw * (v.at_least(21) ? 0.5 : quarter ? 0.25 : 1.0 / 3));
    cap                = ll_max;
  }
  if (algorithm == A::ring && p == kLL128) {
    const double factor = (!v.at_least(23) && ppn < 2) ? 0.7 : 0.92;
    cap                 = g.channels * t.ring_ll128[cc][index2];
    busbw               = std::min(busbw * factor, cap);
  }
  if (algorithm == A::tree) {
    cap   = g.channels * t.tree[cc][index2];
    busbw = std::min(busbw * 0.92, cap);
    if (p == kLL) {
      busbw = std::min(busbw / 3.8, ll_max);
      cap   = std::min(cap / 3.8, ll_max);
    } else if (p == kLL128) {
      const double c2 = g.channels * t.tree_ll128[cc][index2];
      busbw           = std::min(busbw * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), c2);
      cap             = std::min(cap, c2);
    }
    // NCCL's estimate for a symmetric tree (pattern TREE: each tree leaves and enters a node by one NIC) takes 15%
    // off (tuning.cc); that is the links' sharing, which the engines simulate on the tree's own edges, not a limit
    // of its kernels, so the cap keeps the per-channel table alone.
    if (g.tree_pattern)
      busbw *= 0.85;
  }
  if (algorithm == A::pat)
    busbw *= v.at_least(24) ? 0.75 : 0.85;
  if (algorithm == A::collnet_direct) {
    if (is_ag_rs(op)) {
      busbw = v.at_least(27) ? ppn * std::min(g.bw_intra, g.bw_inter * 0.9) : ppn * bw;
      if (!v.at_least(27)) {
        const double w = (ppn - 1) / 7;
        busbw *= 0.85 * w + 0.95 * (1 - w);
      }
    } else {
      double f = ppn / g.channels;
      f -= (f - 1) / 2;
      busbw /= f;
      if (cc >= 2)
        busbw *= 0.85;
    }
  }
  if (algorithm == A::nvls_tree && v.at_least(28) && t.nvls_tree[cc][index2] > 0)
    cap = g.channels * t.nvls_tree[cc][index2];
  // Bus bandwidth to algorithm bandwidth.
  const double nsteps = op == CollectiveOp::all_reduce ? 2.0 * (ranks - 1) : is_ag_rs(op) ? ranks - 1.0 : ranks;
  double ratio        = 1;
  switch (algorithm) {
  case A::ring:
    ratio = (op == CollectiveOp::broadcast || op == CollectiveOp::reduce) ? 1 : ranks / nsteps;
    break;
  case A::nvls:
  case A::nvls_tree:
    ratio = is_ag_rs(op) && v.at_least(23) ? 1 : v.at_least(28) ? ranks / nsteps : 5.0 / 6.0;
    if (algorithm == A::nvls_tree && !v.at_least(19))
      ratio = 0.70 * nodes / (2.0 * (nodes - 1)); // 2.18
    break;
  case A::tree:
  case A::collnet_chain:
    ratio = 0.5;
    break;
  case A::collnet_direct:
    ratio = is_ag_rs(op) ? 1 : 0.5;
    break;
  case A::pat:
    ratio = 1;
    break;
  }
  double algbw = busbw * ratio;

  // Latency.
  const int intra_hw     = g.pci_intra ? kPciHw : kNvlinkHw;
  double lat             = t.base[a][p];
  double intra_lat       = t.hw[intra_hw][a][p];
  const int ppn_int      = ranks / nodes;
  const double net_lat   = (v.at_least(23) && ppn_int == 1) ? t.hw[kNetHw][0][p] : t.hw[kNetHw][a][p];
  const double inter_lat = net_lat + g.latency_inter + (p == kSimple ? g.latency_inter : 0);
  switch (algorithm) {
  case A::ring:
    if (op == CollectiveOp::broadcast || op == CollectiveOp::reduce) {
      const int hw   = nodes == 1 ? intra_hw : kNetHw;
      const double l = t.hw[hw][a][p];
      lat += nsteps * (p == kSimple ? t.hw[hw][0][kSimple] : l);
    } else {
      const double overhead    = nodes > 1 ? comm.net_overhead_us * (p == kSimple ? 3 : 1) : 0;
      intra_lat                = std::max(intra_lat, overhead);
      const double inter_steps = nodes == 1                       ? 0
                                 : op == CollectiveOp::all_reduce ? (v.at_least(23) ? 2.0 * (nodes - 1) : 2.0 * nodes)
                                                                  : nodes - 1.0;
      lat += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat;
    }
    break;
  case A::tree:
    lat += 2 * ((ppn_int - 1) * intra_lat + log2i(nodes) * inter_lat);
    break;
  case A::collnet_direct:
    lat += 2 * (std::min(1, ppn_int - 1) * intra_lat + (ppn_int - 1) * (v.at_least(19) ? 0.4 : 0.5)) + inter_lat;
    break;
  case A::collnet_chain:
    lat += 2 * (ppn_int - 1) * intra_lat + inter_lat;
    break;
  case A::nvls: // 2.18: baseLat (23 us), plus the network's 18 across nodes; from 2.19 the NVLink latency replaces it
    lat = v.at_least(19) ? intra_lat + (nodes > 1 ? inter_lat : 0) : lat + (nodes > 1 ? t.hw[kNetHw][a][p] : 0);
    break;
  case A::nvls_tree:
    lat = v.at_least(19) ? intra_lat + 2 * log2i(nodes) * inter_lat : lat + 2.0 * (nodes - 1) * t.hw[kNetHw][a][p];
    break;
  case A::pat:
    lat = (v.at_least(28) ? t.base[a][p] : 8) + log2i(nodes) * (inter_lat / 3.5) + ranks * 2.8;
    break;
  }

  // ncclTopoGetAlgoTime.
  // logSize of nBytes >> 6: NCCL corrects trees below 23 (every release) and NVLSTree below 24 (2.29+).
  const int log_size = log2i(static_cast<long long>(std::min(bytes, 1e18)) >> 6);
  if (algorithm == A::tree && (op == CollectiveOp::all_reduce || !v.at_least(23)) && log_size < 23)
    algbw *= t.tree_correction[p][log_size];
  if (algorithm == A::nvls_tree && op == CollectiveOp::all_reduce && v.at_least(29) && cc >= 3 && log_size < 24 &&
      log_size < static_cast<int>(t.tree_correction[p].size()))
    algbw *= t.tree_correction[p][log_size];
  if (algorithm == A::ring && p == kSimple && nodes > 1 && op == CollectiveOp::all_reduce &&
      bytes / (static_cast<double>(comm.channels) * ranks) >= 64)
    lat *= cc >= 1 ? 1.4 : 1.9;
  if (!(algbw > 0))
    return -1;
  const double time = lat + bytes / (1000 * algbw);
  if (detail) {
    detail->algorithm    = algorithm;
    detail->protocol     = protocol;
    detail->latency_us   = lat;
    detail->algbw        = algbw;
    detail->time_us      = time;
    detail->kernel_algbw = cap * ratio;
  }
  return time;
}

NcclPick nccl_pick(const NcclComm& comm, CollectiveOp op, double bytes, const NcclAlgorithmSet& allowed,
                   Protocol protocol)
{
  NcclPick best;
  double best_time = -1;
  for (int a = 0; a < kNcclAlgorithms; ++a) {
    if (!allowed.has(static_cast<NcclAlgorithm>(a)))
      continue;
    for (Protocol p : {Protocol::ll, Protocol::ll128, Protocol::simple}) {
      if (protocol != Protocol::automatic && p != protocol)
        continue;
      NcclPick pick;
      const double time = nccl_time(comm, op, bytes, static_cast<NcclAlgorithm>(a), p, &pick);
      if (time >= 0 && (best_time < 0 || time < best_time)) {
        best_time = time;
        best      = pick;
      }
    }
  }
  if (best_time < 0)
    throw UsageError("NCCL " + comm.version.name() + " has no algorithm for " + std::string(name_of(op)) + " on " +
                     std::to_string(comm.ranks) + " ranks over " + std::to_string(comm.nodes) +
                     " node(s) among NCCL_ALGO " + allowed.name() + " with NCCL_PROTO " +
                     std::string(name_of(protocol)) + " (NCCL answers ncclInvalidUsage)");
  return best;
}

int nccl_call_channels(const NcclComm& comm, const NcclPick& pick, double bytes, const NcclSettings& settings)
{
  if (pick.algorithm == NcclAlgorithm::nvls || pick.algorithm == NcclAlgorithm::nvls_tree)
    return std::max(1, comm.nvls_channels);
  int channels = comm.channels;
  if (settings.fixed_channels)
    return settings.channels;
  // enqueue.cc: threads per channel and bytes per thread below which a channel is dropped.
  const int p          = proto_index(pick.protocol);
  const double threads = p == kLL128 ? 640 : 512;
  const double threshold =
      (p == kSimple ? 64 : 8) * (p == kLL && pick.algorithm == NcclAlgorithm::ring ? comm.ranks : 1);
  while (channels >= 2 && bytes < channels * threads * threshold)
    --channels;
  return channels;
}

NcclP2pLatency nccl_p2p_latency(NcclVersion version, Protocol protocol, NcclPath path)
{
  const Tables& t = tables(version);
  const int a     = static_cast<int>(NcclAlgorithm::ring);
  const int p     = protocol == Protocol::ll ? kLL : kSimple;
  const int hw    = path == NcclPath::nvlink ? kNvlinkHw : path == NcclPath::pci ? kPciHw : kNetHw;
  return {t.base[a][p], t.hw[hw][a][p]};
}

NcclVersion NcclVersion::parse(std::string_view text)
{
  auto fail = [&] {
    throw UsageError("unknown NCCL version \"" + std::string(text.substr(0, 40)) + "\" (allowed: 2." +
                     std::to_string(kOldest) + " to 2." + std::to_string(kNewest) +
                     ", as \"2.27\" or a release \"2.27.7\"; spansim has these releases' tuner tables)");
  };
  if (text.size() < 4 || text.substr(0, 2) != "2.")
    fail();
  std::size_t i = 2, minor = 0, digits = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) && digits < 3) {
    minor = minor * 10 + static_cast<std::size_t>(text[i] - '0');
    ++i;
    ++digits;
  }
  if (digits == 0)
    fail();
  if (i < text.size()) { // a patch release: ".P" with digits only
    if (text[i] != '.' || i + 1 == text.size())
      fail();
    for (std::size_t k = i + 1; k < text.size(); ++k)
      if (!std::isdigit(static_cast<unsigned char>(text[k])) || k - i > 3)
        fail();
  }
  if (minor < kOldest || minor > kNewest)
    fail();
  return NcclVersion{static_cast<int>(minor)};
}

NcclAlgorithmSet NcclAlgorithmSet::parse(std::string_view text)
{
  NcclAlgorithmSet set{0};
  std::string_view list = text;
  const bool except     = !list.empty() && list.front() == '^';
  if (except)
    list.remove_prefix(1);
  std::string allowed;
  for (auto n : enum_names(NcclAlgorithm{}))
    allowed += (allowed.empty() ? "" : ", ") + std::string(n);
  while (!list.empty()) {
    const auto comma = list.find(',');
    auto item        = list.substr(0, comma);
    list             = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    bool found       = false;
    for (int a = 0; a < kNcclAlgorithms; ++a) {
      const auto n = enum_names(NcclAlgorithm{})[static_cast<std::size_t>(a)];
      if (item.size() == n.size() && std::equal(item.begin(), item.end(), n.begin(), [](char x, char y) {
            return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
          })) {
        set.bits |= 1u << a;
        found = true;
      }
    }
    if (!found)
      throw UsageError("unknown NCCL algorithm \"" + std::string(item.substr(0, 40)) + "\" in NCCL_ALGO \"" +
                       std::string(text.substr(0, 80)) + "\" (allowed: " + allowed + "; a leading ^ excludes them)");
  }
  if (except)
    set.bits = ((1u << kNcclAlgorithms) - 1) & ~set.bits;
  if (set.bits == 0)
    throw UsageError("NCCL_ALGO \"" + std::string(text.substr(0, 80)) + "\" leaves no algorithm (allowed: " + allowed +
                     ")");
  return set;
}

std::string NcclAlgorithmSet::name() const
{
  if (bits == (1u << kNcclAlgorithms) - 1)
    return "all";
  std::string out;
  for (int a = 0; a < kNcclAlgorithms; ++a)
    if (has(static_cast<NcclAlgorithm>(a)))
      out += (out.empty() ? "" : ",") + std::string(name_of(static_cast<NcclAlgorithm>(a)));
  return out;
}

} // namespace spansim::netsim
