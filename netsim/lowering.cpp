// spansim's own lowerings (ring in rank order, chain, heap trees, halving-doubling, direct, hierarchical) and the
// pipelined flows every ring, chain and tree becomes: long-lived flows that all start together and carry the whole
// volume of their edge, plus one delay for the latency of the pipeline steps beyond the first (which the flows pay
// themselves). Step-synchronous algorithms (halving-doubling) become one flow per step with dependencies.
#include "netsim/lowering.hpp"

#include "netsim/nccl_tuner.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <unordered_map>

namespace spansim::netsim::detail {

using topology::Topology;

namespace {

} // namespace

bool is_power_of_two(std::size_t k)
{
  return k > 0 && (k & (k - 1)) == 0;
}

int tree_levels(int k)
{
  int depth = 0;
  while ((1 << (depth + 1)) <= k)
    ++depth;
  return depth; // heap layout: the last position k-1 sits at depth floor(log2 k)
}

namespace {

/// @brief The edges of the two binary trees of NCCL's double binary tree: a heap over the ranks, and the same
/// heap over the ranks reversed, so that (for powers of two) every rank is interior in one tree, leaf in the other.
} // namespace

std::vector<std::pair<int, int>> tree_edges(int k, bool mirrored)
{
  std::vector<std::pair<int, int>> edges; // (child, parent) as rank indices
  auto rank = [&](int position) { return mirrored ? k - 1 - position : position; };
  for (int p = 1; p < k; ++p)
    edges.emplace_back(rank(p), rank((p - 1) / 2));
  return edges;
}

std::vector<std::pair<int, int>> ring_pairs(const std::vector<int>& gpus)
{
  std::vector<std::pair<int, int>> pairs;
  for (std::size_t i = 0; i < gpus.size(); ++i)
    pairs.emplace_back(gpus[i], gpus[(i + 1) % gpus.size()]);
  return pairs;
}

bool regular_hierarchy(const Topology& t, const std::vector<int>& gpus, Hierarchy& h)
{
  // The sites whose members reduce-scatter among themselves before the long haul: the regions when the group spans
  // several (NeMo's multi-data-center scheme: reduce-scatter inside each site, all-reduce between sites, all-gather
  // inside), else its buildings.
  std::set<int> regions;
  for (int g : gpus)
    regions.insert(t.locate(g).region);
  const bool by_region = regions.size() > 1;
  std::map<int, int> node_index;
  std::vector<std::vector<int>> by_node;
  std::vector<int> building;
  for (int g : gpus) {
    auto loc      = t.locate(g);
    auto [it, ok] = node_index.emplace(loc.node, static_cast<int>(by_node.size()));
    if (ok) {
      by_node.emplace_back();
      building.push_back(by_region ? loc.region : loc.building);
    }
    by_node[it->second].push_back(g);
  }
  std::vector<int> locals;
  for (std::size_t n = 0; n < by_node.size(); ++n) {
    auto& members = by_node[n];
    std::sort(members.begin(), members.end(), [&](int a, int b) { return t.locate(a).local < t.locate(b).local; });
    std::vector<int> l;
    for (int g : members)
      l.push_back(t.locate(g).local);
    if (n == 0)
      locals = l;
    else if (l != locals)
      return false;
  }
  std::map<int, int> per_building;
  for (int b : building)
    per_building[b]++;
  std::set<int> counts;
  for (auto [b, c] : per_building)
    counts.insert(c);
  if (counts.size() != 1)
    return false;
  h.per_node         = static_cast<int>(locals.size());
  h.nodes            = static_cast<int>(by_node.size());
  h.buildings        = static_cast<int>(per_building.size());
  h.by_node          = std::move(by_node);
  h.building_of_node = std::move(building);
  return true;
}

/// @brief Latency of the chain of dependent steps a pipelined collective runs through: a ring's `steps` consecutive
/// edges from the worst start (each step waits for the previous one's data from the predecessor, with no barrier
/// between steps), summed without wrapping for an open chain.
double chain_latency(const std::vector<double>& latency, double steps, bool cyclic)
{
  const auto k = latency.size();
  double total = 0;
  for (double l : latency)
    total += l;
  if (!cyclic || k == 0)
    return total;
  const auto n    = static_cast<std::size_t>(steps);
  const auto full = n / k, rest = n % k;
  double best = 0, window = 0;
  for (std::size_t i = 0; i < rest; ++i)
    window += latency[i];
  best = window;
  for (std::size_t s = 1; s < k && rest > 0; ++s) {
    window += latency[(s + rest - 1) % k] - latency[s - 1];
    best = std::max(best, window);
  }
  return static_cast<double>(full) * total + best;
}

Lowering::Lowering(FlowGraph& graph, const Topology& topology, const Collective& c)
    : graph_(graph), topology_(topology), flows_per_pair_(c.flows_per_pair), stretch_(c.stretch), nccl_(c.nccl),
      members_(c.gpus.begin(), c.gpus.end()), rail_(c.rails > 0 ? c.rail : -1), rails_(c.rails)
{
  if (rail_ >= 0)
    by_rail_.assign(static_cast<std::size_t>(c.rails), {0, 0.0});
  for (std::size_t i = 0; i < c.send_rate.size() && i < c.gpus.size(); ++i)
    if (c.send_rate[i] > 0)
      send_rate_[c.gpus[i]] = c.send_rate[i];
}

void Lowering::transfer(int src, int dst, double bytes, const std::vector<int>& deps, std::vector<int>& out,
                        double window, double rate)
{
  // A stretched transfer moves stretch times its bytes at the engines' rates: its window and rate cap, which
  // bound its real bytes, scale with it. A sender's share of an uplink and the call's kernel cap both bound it.
  if (rail_ >= 0) {
    // Rail symmetry: between nodes only the simulated rail's transfers, each standing for its images on the others.
    const auto s = topology_.locate(src);
    if (s.node != topology_.locate(dst).node) {
      if (static_cast<std::size_t>(s.local) >= by_rail_.size())
        by_rail_.resize(static_cast<std::size_t>(s.local) + 1, {0, 0.0});
      auto& [count, moved] = by_rail_[static_cast<std::size_t>(s.local)];
      ++count;
      moved += bytes;
      if (s.local % rails_ != rail_)
        return;
    }
  }
  const double share = rate_of(src, dst);
  const double cap   = share > 0 && rate > 0 ? std::min(share, rate) : std::max(share, rate);
  const int flows    = flows_per_pair_;
  for (int c = 0; c < flows; ++c) {
    out.push_back(graph_.add_transfer(src, dst, bytes / flows, deps,
                                      {stretch_, stretch_ * window / flows, stretch_ * cap / flows}));
    ++flows_;
  }
}

bool Lowering::rails_differ() const
{
  // Each rail of the group against the simulated one of its block, where the group holds that one too (a group at
  // one offset of the blocks is another group's image, checked when the rails were found symmetric).
  std::vector<char> held(by_rail_.size(), 0); // the group's rails
  for (int gpu : members_)
    if (const auto l = static_cast<std::size_t>(topology_.locate(gpu).local); l < held.size())
      held[l] = 1;
  for (std::size_t r = 0; r < by_rail_.size(); ++r) {
    const std::size_t simulated = r - r % static_cast<std::size_t>(rails_);
    if (!held[r] || !held[simulated])
      continue;
    const auto& [count, moved] = by_rail_[r];
    const auto& [first, base]  = by_rail_[simulated];
    if (count != first || std::abs(moved - base) > 1e-9 * moved)
      return true;
  }
  return false;
}

NcclCall Lowering::plan(CollectiveOp op, const NcclLayout& layout, double bytes, NcclAlgorithm algorithm) const
{
  // A part NCCL does not model as `algorithm` (a piece of spansim's own algorithms) runs as NCCL's ring would.
  bool modelled = false;
  for (Protocol p : {Protocol::ll, Protocol::ll128, Protocol::simple})
    modelled = modelled || nccl_time(layout.comm, op, bytes, algorithm, p) >= 0;
  const NcclAlgorithm a = modelled ? algorithm : NcclAlgorithm::ring;
  Protocol protocol     = nccl_.protocol;
  if (protocol != Protocol::automatic && nccl_time(layout.comm, op, bytes, a, protocol) < 0)
    protocol = Protocol::automatic; // a forced protocol the algorithm lacks (NVLS runs Simple only)
  const NcclPick pick = nccl_pick(layout.comm, op, bytes, NcclAlgorithmSet{1u << static_cast<unsigned>(a)}, protocol);
  return nccl_call(layout.comm, pick, op, bytes, nccl_);
}

int Lowering::pipelined(const std::vector<std::pair<int, int>>& pairs, double volume, double chain,
                        const NcclCall& call, const std::vector<int>& deps, int channels_per_edge, double bytes)
{
  if (pairs.empty())
    return barrier(deps);
  std::vector<int> ops;
  const double wire   = volume * call.wire;
  const double window = call.window * (channels_per_edge > 0 ? channels_per_edge : call.channels);
  // A ring's hops inside a node recur in most of its channels: each distinct pair's route is walked once (in the
  // order pairs first appear, so that ties below resolve as over every pair), and the estimates are maxima over them.
  struct Edge {
    std::pair<int, int> pair;
    int times = 0;
    std::vector<topology::Hop> route;
    double latency = 0, bandwidth = 0;
  };
  std::vector<Edge> edges;
  std::vector<std::size_t> edge_of(pairs.size());
  {
    std::unordered_map<std::uint64_t, std::size_t> index;
    index.reserve(pairs.size());
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const auto [a, b] = pairs[i];
      const auto key =
          (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
      auto [it, fresh] = index.emplace(key, edges.size());
      if (fresh) {
        Edge e;
        e.pair      = pairs[i];
        e.route     = topology_.route(a, b);
        e.latency   = topology_.route_latency(e.route);
        e.bandwidth = topology_.route_bandwidth(e.route);
        edges.push_back(std::move(e));
      }
      ++edges[it->second].times;
      edge_of[i] = it->second;
    }
  }
  // The call's kernels move its bytes no faster than their per-channel limit: each edge carries its volume in at
  // least that time.
  // A cap that cannot bind (above the edge's own links) is left off: it would change nothing, and TCP's packet
  // transports pace no flow.
  const double kernel_rate = call.kernel_algbw > 0 && bytes > 0 ? wire * call.kernel_algbw / bytes : 0;
  if (rail_ >= 0) {
    // Rail symmetry: a pair several channels share (the rings' hops inside a node) is one flow carrying them all.
    std::vector<std::size_t> sorted(edges.size());
    std::iota(sorted.begin(), sorted.end(), std::size_t{0});
    std::sort(sorted.begin(), sorted.end(),
              [&](std::size_t x, std::size_t y) { return edges[x].pair < edges[y].pair; });
    for (std::size_t k : sorted) {
      const auto& e = edges[k];
      const int n   = e.times;
      transfer(e.pair.first, e.pair.second, n * wire, deps, ops, n * window,
               n * kernel_rate < e.bandwidth ? n * kernel_rate : 0);
    }
  } else {
    for (std::size_t i = 0; i < pairs.size(); ++i)
      transfer(pairs[i].first, pairs[i].second, wire, deps, ops, window,
               kernel_rate < edges[edge_of[i]].bandwidth ? kernel_rate : 0);
  }
  if (ops.empty())
    ops = deps; // every pair left to another rail
  // NCCL's own latency for the call is the least its chain of steps takes; beyond it, every step an edge takes
  // (its volume in steps of the call's step size, one loop after another) pays the step latency of its path
  // (the node's inside a node, the fabric's between nodes: topology/fabrics.json's fitted values).
  double steps_overhead = 0;
  if (call.step_bytes > 0) {
    const double per_channel = volume / std::max(1, channels_per_edge > 0 ? channels_per_edge : call.channels);
    const double steps       = std::ceil(per_channel / call.step_bytes - 1e-9);
    std::map<std::pair<int, bool>, double> per_step; // (building, inside a node) -> the step latency there
    for (const auto& e : edges) {
      const auto la = topology_.locate(e.pair.first), lb = topology_.locate(e.pair.second);
      auto [it, fresh] = per_step.emplace(std::pair{la.building, la.node == lb.node}, 0.0);
      if (fresh)
        it->second = topology_.step_latency(e.pair.first, e.pair.second);
      steps_overhead = std::max(steps_overhead, steps * it->second);
    }
  }
  chain = std::max(chain, call.latency) + steps_overhead;
  // A tree's edges share link directions (a GPU's up and down edges, of both trees, on one NVLink or NIC) and split
  // them: the estimate reported for the call counts them; the chain's delay below keeps the edge alone. A ring's
  // edges leave each GPU once, so its estimate needs no count.
  std::map<std::pair<int, bool>, int> sharing;
  if (channels_per_edge > 0)
    for (const auto& e : edges)
      for (const auto& hop : e.route)
        sharing[{hop.link, hop.forward}] += e.times;
  double shared_worst = 0;
  for (std::size_t k = 0; k < (sharing.empty() ? 0 : edges.size()); ++k) {
    double bandwidth = std::numeric_limits<double>::infinity();
    for (const auto& hop : edges[k].route)
      bandwidth =
          std::min(bandwidth, topology_.hop_bandwidth(hop.link, hop.forward) / sharing[{hop.link, hop.forward}]);
    shared_worst = std::max(shared_worst, edges[k].latency + wire / bandwidth);
  }
  // The bottleneck edge alone on its links: latency, then its bytes at the smaller of bandwidth and window rate.
  double worst = -1, latency = 0, stall = 0, at_window = 0, at_bandwidth = 0;
  // The engines apply the site's window to each flow: the transfer's channels, each split into queue pairs.
  const double flows = static_cast<double>(flows_per_pair_) * std::max(1, topology_.spec().multipath.qps);
  const double w     = flows * topology_.effective_window(window / flows);
  for (const auto& e : edges) {
    const auto [a, b]      = e.pair;
    const double l         = e.latency;
    const double bandwidth = e.bandwidth;
    const double rtt       = w > 0 ? l + topology_.route_latency(topology_.route(b, a)) : 0;
    // A sender's cap (its share of an uplink) limits the rate as a thinner link would; only a window's credit
    // stall, which waits out round trips, hides the chain.
    const double cap   = rate_of(a, b) > 0 ? rate_of(a, b) : std::numeric_limits<double>::infinity();
    const double plain = std::min(bandwidth, cap);
    const double rate  = w > 0 && rtt > 0 ? w / rtt : std::numeric_limits<double>::infinity();
    const double t     = l + wire / std::min(plain, rate);
    if (t > worst) {
      worst        = t;
      latency      = l;
      at_bandwidth = wire / plain;
      at_window    = std::isfinite(rate) ? wire / rate : 0;
      stall        = std::max(0.0, at_window - at_bandwidth);
    }
  }
  const double delay = std::max(0.0, chain - latency - stall);
  note(call, std::max(worst, shared_worst) + delay, chain, at_window, at_bandwidth);
  return graph_.add_delay(delay, ops);
}

int Lowering::ring(CollectiveOp op, const std::vector<int>& gpus, double bytes, const std::vector<int>& deps)
{
  const double k = static_cast<double>(gpus.size());
  if (gpus.size() < 2)
    return barrier(deps);
  const double steps = op == CollectiveOp::all_reduce ? 2 * (k - 1) : k - 1;
  const auto pairs   = ring_pairs(gpus);
  const auto call    = plan(op, nccl_layout(topology_, gpus, nccl_), bytes, NcclAlgorithm::ring);
  return pipelined(pairs, wire_bytes_per_rank(op, static_cast<int>(gpus.size()), bytes),
                   chain_latency(latencies(pairs), steps, true), call, deps, 0, bytes);
}

int Lowering::chain(CollectiveOp op, const std::vector<int>& gpus, int root, double bytes, const std::vector<int>& deps)
{
  const int k = static_cast<int>(gpus.size());
  std::vector<std::pair<int, int>> pairs;
  for (int i = 0; i + 1 < k; ++i) {
    int from = gpus[(root + i) % k];
    int to   = gpus[(root + i + 1) % k];
    pairs.emplace_back(op == CollectiveOp::reduce ? std::pair{to, from} : std::pair{from, to});
  }
  const auto call = plan(op, nccl_layout(topology_, gpus, nccl_), bytes, NcclAlgorithm::ring);
  return pipelined(pairs, bytes, chain_latency(latencies(pairs), k - 1, false), call, deps, 0, bytes);
}

// Broadcast or reduce over one heap-shaped tree rooted at `root` (positions rotated so that the root is position 0).
int Lowering::tree(CollectiveOp op, const std::vector<int>& gpus, int root, double bytes, const std::vector<int>& deps)
{
  const int k = static_cast<int>(gpus.size());
  if (k < 2)
    return barrier(deps);
  const auto edges = tree_edges(k, false);
  std::vector<std::pair<int, int>> pairs;
  for (auto [child, parent] : edges) {
    int c = gpus[(child + root) % k];
    int p = gpus[(parent + root) % k];
    pairs.emplace_back(op == CollectiveOp::reduce ? std::pair{c, p} : std::pair{p, c});
  }
  const auto call = plan(op, nccl_layout(topology_, gpus, nccl_), bytes, NcclAlgorithm::tree);
  return pipelined(pairs, bytes, deepest(edges, pairs, k), call, deps, 0, bytes);
}

int Lowering::halving_doubling(CollectiveOp op, const std::vector<int>& gpus, double bytes,
                               const std::vector<int>& deps)
{
  const int k = static_cast<int>(gpus.size());
  std::vector<std::vector<int>> last(k, deps); // per rank: what its next step waits for
  auto step = [&](int distance, double size) {
    // Each step is a send/recv between partners, on the slots of point-to-point transfers.
    std::vector<std::vector<int>> sent(k);
    for (int r = 0; r < k; ++r)
      transfer(gpus[r], gpus[r ^ distance], size, last[r], sent[r], p2p_window(size, 1, k, nccl_));
    for (int r = 0; r < k; ++r) {
      // A rank goes on once it has sent its part and received its partner's.
      last[r] = sent[r];
      last[r].insert(last[r].end(), sent[r ^ distance].begin(), sent[r ^ distance].end());
    }
  };
  if (op != CollectiveOp::all_gather)
    for (int d = k / 2, s = 1; d >= 1; d /= 2, ++s)
      step(d, bytes / (1 << s));
  if (op != CollectiveOp::reduce_scatter)
    for (int d = 1, s = tree_levels(k); d < k; d *= 2, --s)
      step(d, bytes / (1 << s));
  std::vector<int> all;
  for (const auto& l : last)
    all.insert(all.end(), l.begin(), l.end());
  return barrier(all);
}

int Lowering::direct(CollectiveOp op, const Collective& c, const std::vector<int>& deps)
{
  const auto& gpus = c.gpus;
  const int k      = static_cast<int>(gpus.size());
  std::vector<P2pSend> sends;
  switch (op) {
  case CollectiveOp::all_to_all:
  case CollectiveOp::all_gather:
  case CollectiveOp::reduce_scatter:
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < k; ++j)
        if (i != j && (c.matrix.empty() || c.matrix[i][j] > 0)) { // a size matrix sends nothing where it says 0
          const double size = c.matrix.empty() ? c.bytes / k : c.matrix[i][j];
          sends.push_back({gpus[i], gpus[j], size, p2p_window(size, k - 1, k, nccl_), true});
        }
    break;
  case CollectiveOp::all_reduce: {
    int mid = direct(CollectiveOp::reduce_scatter, c, deps);
    return direct(CollectiveOp::all_gather, c, {mid});
  }
  case CollectiveOp::broadcast:
  case CollectiveOp::reduce:
    for (int i = 0; i < k; ++i)
      if (i != c.root) {
        const int a = gpus[c.root], b = gpus[i];
        const double w = p2p_window(c.bytes, k - 1, k, nccl_);
        sends.push_back(op == CollectiveOp::broadcast ? P2pSend{a, b, c.bytes, w, false}
                                                      : P2pSend{b, a, c.bytes, w, false});
      }
    break;
  case CollectiveOp::send_recv:
    // Two GPUs: the first sends to the second; more: each sends to the next, around (nccl-tests' sendrecv_perf).
    for (int i = 0; i < (k == 2 ? 1 : k); ++i)
      sends.push_back({gpus[i], gpus[(i + 1) % k], c.bytes, p2p_window(c.bytes, 1, k, nccl_), true});
    break;
  }
  const auto layout = nccl_layout(topology_, gpus, nccl_);
  bool all_nvlink   = true;
  for (int g : gpus)
    all_nvlink = all_nvlink && topology_.node_gpus_of(g) > 1;
  return p2p_group(sends, p2p_comm(layout.comm.channels, k, layout.comm.nodes, all_nvlink, nccl_), deps);
}

int Lowering::p2p_group(const std::vector<P2pSend>& sends, const P2pComm& comm, const std::vector<int>& deps)
{
  const int ranks = comm.ranks;
  std::vector<int> ops;
  std::unordered_map<int, int> peers; // sender -> its peers
  for (const auto& s : sends)
    ++peers[s.src];
  for (const auto& s : sends) {
    // LL writes each 8 bytes of data with two 4-byte flags in a 16-byte line (ncclLLFifoLine, src/include/device.h):
    // twice the bytes on the wire, as a pipelined call's LL pays them (NcclCall::wire).
    // Inside a node a send moves at most what its channels' kernels copy (the node's p2p_channel_rate, or for LL its
    // p2p_ll_channel_rate of wire bytes; NCCL's channels a send takes, src/enqueue.cc addP2pToPlan). Where a rank's
    // sends take more channels than the communicator's p2pnChannels, several share a channel, whose warps NCCL splits
    // among its works (src/device/sendrecv.h): the rank's sends then move at most p2pnChannels channels' worth.
    const auto plan   = p2p_plan(comm, s.bytes);
    const double wire = wire_factor(plan.protocol) * s.bytes;
    double rate       = 0;
    if (const auto a = topology_.locate(s.src); a.node == topology_.locate(s.dst).node) {
      const auto& node         = *topology_.spec().site_of(topology_.building_name(a.building)).node;
      const double per_channel = plan.protocol == Protocol::ll ? node.p2p_ll_channel_rate : node.p2p_channel_rate;
      const double channels    = std::min<double>(plan.channels, double(comm.channels) / peers.at(s.src));
      rate                     = per_channel > 0 ? channels * per_channel : 0;
    }
    s.pxn ? p2p(s.src, s.dst, wire, deps, ops, s.window, rate)
          : transfer(s.src, s.dst, wire, deps, ops, s.window, rate);
  }
  if (ops.empty())
    ops = deps; // every transfer left to another rail
  if (sends.empty())
    return barrier(ops);
  // NCCL's tuner has no latency for send/recv, and a group of them is one kernel call: spansim charges it what the
  // tables charge a ring call (its launch, baseLat, once) and, per wave of peers, one step over the slowest path
  // (hwLat there, plus the step latency topology/fabrics.json fits for it, as every pipelined step pays), under the
  // protocol NCCL plans for the sends (LL's bytes doubled on the wire above). The flows already pay their routes'
  // latency.
  int most = 0;
  for (const auto& [gpu, n] : peers)
    most = std::max(most, n);
  double base = 0, step = 0, route = 0;
  bool all_ll = true;
  std::set<std::tuple<int, bool, bool>> seen; // (building, inside a node, LL)
  for (const auto& s : sends) {
    const auto la = topology_.locate(s.src), lb = topology_.locate(s.dst);
    const bool inside = la.node == lb.node;
    const bool ll     = p2p_plan(comm, s.bytes).protocol == Protocol::ll;
    all_ll            = all_ll && ll;
    if (!seen.emplace(la.building, inside, ll).second)
      continue;
    const auto tables = nccl_p2p_latency(nccl_.version, ll ? Protocol::ll : Protocol::simple,
                                         inside ? NcclPath::nvlink : NcclPath::net);
    base              = std::max(base, tables.base_us * 1e-6);
    step              = std::max(step, tables.step_us * 1e-6 + topology_.step_latency(s.src, s.dst));
    route             = std::max(route, topology_.route_latency(topology_.route(s.src, s.dst)));
  }
  const double chain = base + p2p_waves(most, ranks, nccl_) * step;
  if (estimate_ < 0) { // the call as results name it (no pipelined part noted one)
    call_.protocol = all_ll ? Protocol::ll : Protocol::simple;
    call_.latency  = chain;
  }
  return graph_.add_delay(std::max(0.0, chain - route), ops);
}

int Lowering::hierarchical(const Hierarchy& h, double bytes, const std::vector<int>& deps)
{
  std::vector<int> ends;
  for (const auto& node : h.by_node)
    ends.push_back(ring(CollectiveOp::reduce_scatter, node, bytes, deps));
  int phase1 = barrier(ends);
  ends.clear();
  const double shard     = bytes / h.per_node;
  const int per_building = h.nodes / h.buildings;
  for (int l = 0; l < h.per_node; ++l) {
    std::vector<int> rail;
    for (const auto& node : h.by_node)
      rail.push_back(node[l]);
    if (h.buildings < 2 || per_building < 2) {
      ends.push_back(ring(CollectiveOp::all_reduce, rail, shard, {phase1}));
      continue;
    }
    // Nodes of each building, in group order.
    std::map<int, std::vector<int>> in_building;
    for (int n = 0; n < h.nodes; ++n)
      in_building[h.building_of_node[n]].push_back(rail[n]);
    std::vector<int> rs;
    for (auto& [b, members] : in_building)
      rs.push_back(ring(CollectiveOp::reduce_scatter, members, shard, {phase1}));
    int after_rs = barrier(rs);
    std::vector<int> across;
    for (int m = 0; m < per_building; ++m) {
      std::vector<int> peers;
      for (auto& [b, members] : in_building)
        peers.push_back(members[m]);
      across.push_back(ring(CollectiveOp::all_reduce, peers, shard / per_building, {after_rs}));
    }
    int after_across = barrier(across);
    for (auto& [b, members] : in_building)
      ends.push_back(ring(CollectiveOp::all_gather, members, shard, {after_across}));
  }
  int phase2 = barrier(ends);
  ends.clear();
  for (const auto& node : h.by_node)
    ends.push_back(ring(CollectiveOp::all_gather, node, bytes, {phase2}));
  return barrier(ends);
}

double Lowering::rate_of(int src, int dst) const
{
  auto it = send_rate_.find(src);
  return it == send_rate_.end() || src == dst ? 0 : it->second;
}

std::vector<double> Lowering::latencies(const std::vector<std::pair<int, int>>& pairs) const
{
  std::vector<double> l;
  for (auto [a, b] : pairs)
    l.push_back(topology_.route_latency(topology_.route(a, b)));
  return l;
}

double Lowering::deepest(const std::vector<std::pair<int, int>>& edges, const std::vector<std::pair<int, int>>& pairs,
                         int k) const
{
  std::vector<double> depth(static_cast<std::size_t>(k), 0.0);
  double most = 0;
  for (std::size_t i = 0; i < edges.size(); ++i) {
    const auto [child, parent] = edges[i];
    depth[child] = depth[parent] + topology_.route_latency(topology_.route(pairs[i].first, pairs[i].second));
    most         = std::max(most, depth[child]);
  }
  return most;
}

void Lowering::note(const NcclCall& call, double estimate, double chain, double at_window, double at_bandwidth)
{
  if (estimate <= estimate_)
    return;
  estimate_ = estimate;
  call_     = call;
  bound_    = chain >= std::max(at_window, at_bandwidth) ? Bound::latency
              : at_window > at_bandwidth                 ? Bound::window
                                                         : Bound::bandwidth;
}

} // namespace spansim::netsim::detail
