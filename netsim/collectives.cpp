// Collective lowering. Pipelined algorithms (ring, chain, tree) become long-lived flows that all start
// together and carry the whole volume of their edge, plus one delay for the latency of the pipeline steps
// beyond the first (which the flows pay themselves). Step-synchronous algorithms (halving-doubling) become
// one flow per step with dependencies between steps.
#include "netsim/collectives.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace spansim::netsim {

using topology::Topology;

namespace {

bool is_power_of_two(std::size_t k)
{
  return k > 0 && (k & (k - 1)) == 0;
}

int tree_depth(int k)
{
  int depth = 0;
  while ((1 << (depth + 1)) <= k)
    ++depth;
  return depth; // heap layout: the last position k-1 sits at depth floor(log2 k)
}

/// @brief The edges of the two binary trees of NCCL's double binary tree: a heap over the ranks, and the same
/// heap over the ranks reversed, so that (for powers of two) every rank is interior in one tree, leaf in the other.
std::vector<std::pair<int, int>> tree_edges(int k, bool mirrored)
{
  std::vector<std::pair<int, int>> edges; // (child, parent) as rank indices
  auto rank = [&](int position) { return mirrored ? k - 1 - position : position; };
  for (int p = 1; p < k; ++p)
    edges.emplace_back(rank(p), rank((p - 1) / 2));
  return edges;
}

/// @brief Slowest latency and narrowest bandwidth over a set of GPU pairs: the alpha-beta parameters.
struct AlphaBeta {
  double alpha     = 0;
  double bandwidth = std::numeric_limits<double>::infinity();
};

AlphaBeta alpha_beta(const Topology& t, const std::vector<std::pair<int, int>>& pairs)
{
  AlphaBeta ab;
  for (auto [a, b] : pairs) {
    auto r       = t.route(a, b);
    ab.alpha     = std::max(ab.alpha, t.route_latency(r));
    ab.bandwidth = std::min(ab.bandwidth, t.route_bandwidth(r));
  }
  return ab;
}

std::vector<std::pair<int, int>> ring_pairs(const std::vector<int>& gpus)
{
  std::vector<std::pair<int, int>> pairs;
  for (std::size_t i = 0; i < gpus.size(); ++i)
    pairs.emplace_back(gpus[i], gpus[(i + 1) % gpus.size()]);
  return pairs;
}

/// @brief A group split by node and by building, when it is regular: every node holds the same local GPU
/// indices of the group, and every building the same number of the group's nodes.
// The levels of a hierarchical all-reduce. "Buildings" are its sites: regions when the group spans several.
struct Hierarchy {
  int per_node  = 0;                     // L
  int nodes     = 0;                     // N
  int buildings = 0;                     // B (sites)
  std::vector<std::vector<int>> by_node; // by_node[n][l], nodes in first-appearance order
  std::vector<int> building_of_node;
};

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

class Lowering {
public:
  Lowering(FlowGraph& graph, const Topology& topology, const Collective& c)
      : graph_(graph), topology_(topology), channels_(c.channels), stretch_(c.stretch), nccl_(c.nccl)
  {
    for (std::size_t i = 0; i < c.send_rate.size() && i < c.gpus.size(); ++i)
      if (c.send_rate[i] > 0)
        send_rate_[c.gpus[i]] = c.send_rate[i];
  }

  std::size_t flows() const { return flows_; }
  /// @brief The call, bound and estimate of the slowest part lowered so far.
  const NcclCall& call() const { return call_; }
  Bound bound() const { return bound_; }
  double estimate() const { return estimate_; }

  /// @brief One logical transfer, spread over the flows that stand for its channels; `window` is what all of its
  /// connections may have in flight together (0: none).
  void transfer(int src, int dst, double bytes, const std::vector<int>& deps, std::vector<int>& out, double window = 0)
  {
    // A stretched transfer moves stretch times its bytes at the engines' rates: its window and rate cap, which
    // bound its real bytes, scale with it.
    const double rate = rate_of(src, dst);
    for (int c = 0; c < channels_; ++c) {
      out.push_back(graph_.add_transfer(src, dst, bytes / channels_, deps,
                                        {stretch_, stretch_ * window / channels_, stretch_ * rate / channels_}));
      ++flows_;
    }
  }

  int barrier(const std::vector<int>& deps) { return graph_.add_delay(0, deps); }

  /// @brief The tuner's view of a call on `gpus`: ranks, nodes, the narrowest edge of `pairs`.
  CallShape shape(CollectiveOp op, const std::vector<int>& gpus, const std::vector<std::pair<int, int>>& pairs,
                  double bytes, bool tree) const
  {
    std::set<int> nodes;
    for (int g : gpus)
      nodes.insert(topology_.locate(g).node);
    CallShape s;
    s.op            = op;
    s.tree          = tree;
    s.ranks         = static_cast<int>(gpus.size());
    s.nodes         = static_cast<int>(nodes.size());
    s.bytes         = bytes;
    s.bus_bandwidth = alpha_beta(topology_, pairs).bandwidth;
    return s;
  }

  /// @brief Pipelined flows over `pairs` (the edges of a ring, chain or tree), each carrying `volume` of payload as
  /// `call` puts it on the wire and under its slot window, all starting together; then a delay for the part of
  /// the chain of dependent steps (`chain`, seconds) that the flows do not already pay: each flow pays its own
  /// route latency, and a flow held by its window waits for credit long enough to hide the chain.
  int pipelined(const std::vector<std::pair<int, int>>& pairs, double volume, double chain, const NcclCall& call,
                const std::vector<int>& deps, int channels_per_edge = 0)
  {
    if (pairs.empty())
      return barrier(deps);
    std::vector<int> ops;
    const double wire   = volume * call.wire;
    const double window = call.window * (channels_per_edge > 0 ? channels_per_edge : call.channels);
    for (auto [a, b] : pairs)
      transfer(a, b, wire, deps, ops, window);
    // A tree's edges share link directions (a GPU's up and down edges, of both trees, on one NVLink or NIC) and split
    // them: the estimate reported for the call counts them; the chain's delay below keeps the edge alone. A ring's
    // edges leave each GPU once, so its estimate needs no count.
    std::map<std::pair<int, bool>, int> sharing;
    if (channels_per_edge > 0)
      for (auto [a, b] : pairs)
        for (const auto& hop : topology_.route(a, b))
          ++sharing[{hop.link, hop.forward}];
    double shared_worst = 0;
    for (std::size_t e = 0; e < (sharing.empty() ? 0 : pairs.size()); ++e) {
      const auto route = topology_.route(pairs[e].first, pairs[e].second);
      double bandwidth = std::numeric_limits<double>::infinity();
      for (const auto& hop : route)
        bandwidth =
            std::min(bandwidth, topology_.hop_bandwidth(hop.link, hop.forward) / sharing[{hop.link, hop.forward}]);
      shared_worst = std::max(shared_worst, topology_.route_latency(route) + wire / bandwidth);
    }
    // The bottleneck edge alone on its links: latency, then its bytes at the smaller of bandwidth and window rate.
    double worst = -1, latency = 0, stall = 0, at_window = 0, at_bandwidth = 0;
    for (auto [a, b] : pairs) {
      const auto route       = topology_.route(a, b);
      const double l         = topology_.route_latency(route);
      const double bandwidth = topology_.route_bandwidth(route);
      // The engines apply the site's window to each flow: the transfer's channels, each split into queue pairs.
      const double flows = static_cast<double>(channels_) * std::max(1, topology_.spec().multipath.qps);
      const double w     = flows * topology_.effective_window(window / flows);
      const double rtt   = topology_.round_trip(a, b);
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

  // Ring all-reduce: 2(K-1) steps of S/K; reduce-scatter and all-gather: K-1 steps.
  int ring(CollectiveOp op, const std::vector<int>& gpus, double bytes, const std::vector<int>& deps)
  {
    const double k = static_cast<double>(gpus.size());
    if (gpus.size() < 2)
      return barrier(deps);
    const double steps = op == CollectiveOp::all_reduce ? 2 * (k - 1) : k - 1;
    const auto pairs   = ring_pairs(gpus);
    const auto call    = plan_collective(shape(op, gpus, pairs, bytes, false), nccl_);
    return pipelined(pairs, wire_bytes_per_rank(op, static_cast<int>(gpus.size()), bytes),
                     chain_latency(latencies(pairs), steps, true), call, deps);
  }

  // Broadcast along the ring from the root (a pipelined chain); reduce is the same chain reversed.
  int chain(CollectiveOp op, const std::vector<int>& gpus, int root, double bytes, const std::vector<int>& deps)
  {
    const int k = static_cast<int>(gpus.size());
    std::vector<std::pair<int, int>> pairs;
    for (int i = 0; i + 1 < k; ++i) {
      int from = gpus[(root + i) % k];
      int to   = gpus[(root + i + 1) % k];
      pairs.emplace_back(op == CollectiveOp::reduce ? std::pair{to, from} : std::pair{from, to});
    }
    const auto call = plan_collective(shape(op, gpus, pairs, bytes, false), nccl_);
    return pipelined(pairs, bytes, chain_latency(latencies(pairs), k - 1, false), call, deps);
  }

  int tree(CollectiveOp op, const std::vector<int>& gpus, int root, double bytes, const std::vector<int>& deps)
  {
    const int k = static_cast<int>(gpus.size());
    if (k < 2)
      return barrier(deps);
    if (op == CollectiveOp::all_reduce) {
      // Two trees, each reducing then broadcasting half of the buffer, all pipelined: the chain runs up the
      // slowest path to the root and down the slowest path from it.
      std::vector<std::pair<int, int>> pairs;
      double chain = 0;
      for (bool mirrored : {false, true}) {
        const auto edges = tree_edges(k, mirrored);
        std::vector<std::pair<int, int>> up, down;
        for (auto [child, parent] : edges) {
          up.emplace_back(gpus[child], gpus[parent]);
          down.emplace_back(gpus[parent], gpus[child]);
          pairs.push_back(up.back());
          pairs.push_back(down.back());
        }
        chain = std::max(chain, deepest(edges, up, k) + deepest(edges, down, k));
      }
      const auto call = plan_collective(shape(op, gpus, pairs, bytes, true), nccl_);
      // NCCL runs the tree and its mirror on half of the channels each.
      return pipelined(pairs, bytes / 2, chain, call, deps, std::max(1, call.channels / 2));
    }
    // Broadcast or reduce: one tree rooted at `root` (positions rotated so that the root is position 0).
    const auto edges = tree_edges(k, false);
    std::vector<std::pair<int, int>> pairs;
    for (auto [child, parent] : edges) {
      int c = gpus[(child + root) % k];
      int p = gpus[(parent + root) % k];
      pairs.emplace_back(op == CollectiveOp::reduce ? std::pair{c, p} : std::pair{p, c});
    }
    const auto call = plan_collective(shape(op, gpus, pairs, bytes, true), nccl_);
    return pipelined(pairs, bytes, deepest(edges, pairs, k), call, deps);
  }

  // Rabenseifner: reduce-scatter by recursive halving, all-gather by recursive doubling; one flow per step.
  int halving_doubling(CollectiveOp op, const std::vector<int>& gpus, double bytes, const std::vector<int>& deps)
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
      for (int d = 1, s = tree_depth(k); d < k; d *= 2, --s)
        step(d, bytes / (1 << s));
    std::vector<int> all;
    for (const auto& l : last)
      all.insert(all.end(), l.begin(), l.end());
    return barrier(all);
  }

  int direct(CollectiveOp op, const Collective& c, const std::vector<int>& deps)
  {
    const auto& gpus = c.gpus;
    const int k      = static_cast<int>(gpus.size());
    std::vector<int> ops;
    switch (op) {
    case CollectiveOp::all_to_all:
    case CollectiveOp::all_gather:
    case CollectiveOp::reduce_scatter:
      for (int i = 0; i < k; ++i)
        for (int j = 0; j < k; ++j)
          if (i != j && (c.matrix.empty() || c.matrix[i][j] > 0)) { // a size matrix sends nothing where it says 0
            const double size = c.matrix.empty() ? c.bytes / k : c.matrix[i][j];
            transfer(gpus[i], gpus[j], size, deps, ops, p2p_window(size, k - 1, k, nccl_));
          }
      return barrier(ops);
    case CollectiveOp::all_reduce: {
      int mid = direct(CollectiveOp::reduce_scatter, c, deps);
      return direct(CollectiveOp::all_gather, c, {mid});
    }
    case CollectiveOp::broadcast:
    case CollectiveOp::reduce:
      for (int i = 0; i < k; ++i)
        if (i != c.root) {
          int a = gpus[c.root], b = gpus[i];
          const double w = p2p_window(c.bytes, k - 1, k, nccl_);
          op == CollectiveOp::broadcast ? transfer(a, b, c.bytes, deps, ops, w) : transfer(b, a, c.bytes, deps, ops, w);
        }
      return barrier(ops);
    case CollectiveOp::send_recv:
      transfer(gpus[0], gpus[1], c.bytes, deps, ops, p2p_window(c.bytes, 1, 2, nccl_));
      return barrier(ops);
    }
    return barrier(deps);
  }

  // Reduce-scatter inside each node, the rest across nodes per local rank (rails), all-gather inside each node.
  // Across buildings, one more level: reduce-scatter inside each building, a ring across buildings of the
  // GPUs holding the same shard, all-gather inside each building.
  int hierarchical(const Hierarchy& h, double bytes, const std::vector<int>& deps)
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

private:
  /// @brief The cap on a transfer's rate from its sender's share of an uplink (Collective::send_rate); 0: none.
  double rate_of(int src, int dst) const
  {
    auto it = send_rate_.find(src);
    return it == send_rate_.end() || src == dst ? 0 : it->second;
  }

  std::vector<double> latencies(const std::vector<std::pair<int, int>>& pairs) const
  {
    std::vector<double> l;
    for (auto [a, b] : pairs)
      l.push_back(topology_.route_latency(topology_.route(a, b)));
    return l;
  }

  /// @brief The slowest path from the root of a heap-shaped tree to a leaf, over `pairs` (edge i of `edges` is
  /// pairs[i], whichever its direction): parents come before their children in heap order.
  double deepest(const std::vector<std::pair<int, int>>& edges, const std::vector<std::pair<int, int>>& pairs,
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

  void note(const NcclCall& call, double estimate, double chain, double at_window, double at_bandwidth)
  {
    if (estimate <= estimate_)
      return;
    estimate_ = estimate;
    call_     = call;
    bound_    = chain >= std::max(at_window, at_bandwidth) ? Bound::latency
                : at_window > at_bandwidth                 ? Bound::window
                                                           : Bound::bandwidth;
  }

  FlowGraph& graph_;
  const Topology& topology_;
  int channels_;
  double stretch_ = 1;
  NcclSettings nccl_;
  std::unordered_map<int, double> send_rate_; ///< GPU -> bytes/s of all its sends in this collective
  std::size_t flows_ = 0;
  NcclCall call_;
  Bound bound_     = Bound::bandwidth;
  double estimate_ = -1;
};

void validate(const Topology& t, const Collective& c)
{
  const auto k = c.gpus.size();
  if (k < 2)
    throw UsageError("a collective needs at least 2 GPUs");
  std::set<int> seen;
  for (int g : c.gpus) {
    if (g < 0 || g >= t.gpu_count())
      throw UsageError("GPU " + std::to_string(g) + " is outside the topology (" + std::to_string(t.gpu_count()) +
                       " GPUs)");
    if (!seen.insert(g).second)
      throw UsageError("GPU " + std::to_string(g) + " appears twice in the group");
  }
  if (!(c.bytes >= 0))
    throw UsageError("collective size must be non-negative");
  if (c.channels < 1 || c.channels > 64)
    throw UsageError("channels must be between 1 and 64");
  if (c.root < 0 || c.root >= static_cast<int>(k))
    throw UsageError("root rank " + std::to_string(c.root) + " is outside the group of " + std::to_string(k));
  if (c.op == CollectiveOp::send_recv && k != 2)
    throw UsageError("sendrecv takes exactly 2 GPUs (source, destination)");
  if (!c.matrix.empty()) {
    if (c.op != CollectiveOp::all_to_all)
      throw UsageError("a size matrix is only for alltoall");
    if (c.matrix.size() != k)
      throw UsageError("the all-to-all matrix must be " + std::to_string(k) + " x " + std::to_string(k));
    for (const auto& row : c.matrix) {
      if (row.size() != k)
        throw UsageError("the all-to-all matrix must be " + std::to_string(k) + " x " + std::to_string(k));
      for (double v : row)
        if (!(v >= 0))
          throw UsageError("the all-to-all matrix holds a negative or invalid size");
    }
  }
}

} // namespace

std::vector<Algorithm> algorithms_for(CollectiveOp op)
{
  switch (op) {
  case CollectiveOp::all_reduce:
    return {Algorithm::ring, Algorithm::tree, Algorithm::halving_doubling, Algorithm::direct, Algorithm::hierarchical};
  case CollectiveOp::reduce_scatter:
  case CollectiveOp::all_gather:
    return {Algorithm::ring, Algorithm::halving_doubling, Algorithm::direct};
  case CollectiveOp::all_to_all:
  case CollectiveOp::send_recv:
    return {Algorithm::direct};
  case CollectiveOp::broadcast:
  case CollectiveOp::reduce:
    return {Algorithm::ring, Algorithm::tree, Algorithm::direct};
  }
  return {};
}

bool applicable(const Topology& topology, const Collective& c, Algorithm a)
{
  if (a == Algorithm::automatic)
    return true;
  auto allowed = algorithms_for(c.op);
  if (std::find(allowed.begin(), allowed.end(), a) == allowed.end())
    return false;
  if (a == Algorithm::halving_doubling)
    return is_power_of_two(c.gpus.size());
  if (a == Algorithm::hierarchical) {
    Hierarchy h;
    return regular_hierarchy(topology, c.gpus, h) && h.nodes > 1 && (h.per_node > 1 || h.buildings > 1);
  }
  return true;
}

Algorithm default_algorithm(const Topology& topology, const Collective& c)
{
  return choose_algorithm(topology, {c});
}

Algorithm choose_algorithm(const Topology& topology, const std::vector<Collective>& concurrent)
{
  if (concurrent.empty())
    throw UsageError("choose_algorithm: no collective given");
  const Collective& c = concurrent.front();
  for (const auto& x : concurrent)
    validate(topology, x);
  auto candidates = algorithms_for(c.op);
  if (candidates.size() == 1)
    return candidates[0];
  Algorithm best   = Algorithm::ring;
  double best_time = std::numeric_limits<double>::infinity();
  for (auto a : candidates) {
    if (a == Algorithm::direct)
      continue; // all-pairs flows: only when asked for (O(K^2) flows)
    if (!std::all_of(concurrent.begin(), concurrent.end(),
                     [&](const Collective& x) { return applicable(topology, x, a); }))
      continue;
    FlowGraph trial(topology.spec().multipath.qps);
    std::vector<int> ends;
    for (auto x : concurrent) {
      x.algorithm = a;
      ends.push_back(add_collective(trial, topology, x, {}).end_op);
    }
    auto run    = run_analytical(topology, trial);
    double time = 0;
    for (int e : ends)
      time = std::max(time, run.ops[e].end);
    if (time < best_time) {
      best_time = time;
      best      = a;
    }
  }
  return best;
}

namespace {

// FNV-1a over bytes, from a given offset basis (two bases give two independent hashes).
struct Hash {
  std::uint64_t h;
  void add(const void* data, std::size_t n)
  {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 1099511628211ULL;
    }
  }
  template <typename T>
  void add(const T& v)
  {
    add(&v, sizeof v);
  }
};

template <typename T>
void put(std::string& key, const T& v)
{
  key.append(reinterpret_cast<const char*>(&v), sizeof v);
}

} // namespace

std::string site_fingerprint(const Topology& topology)
{
  // The same bytes under two offset bases: two independent 64-bit hashes.
  std::string key;
  for (std::uint64_t basis : {14695981039346656037ULL, 0x9E3779B97F4A7C15ULL}) {
    Hash h{basis};
    for (const auto& l : topology.links()) {
      h.add(l.a);
      h.add(l.b);
      h.add(l.bandwidth);
      h.add(l.latency);
      h.add(static_cast<int>(l.tier));
    }
    const auto& mp = topology.spec().multipath;
    h.add(mp.ecmp);
    h.add(mp.seed);
    h.add(mp.long_links);
    h.add(mp.explicit_spines);
    h.add(mp.qps);
    h.add(topology.spec().window);
    h.add(topology.gpu_count());
    put(key, h.h);
  }
  return key;
}

Algorithm AlgorithmCache::choose(const Topology& topology, const std::string& site,
                                 const std::vector<Collective>& concurrent)
{
  // The key holds everything choose_algorithm reads of the collectives, in full.
  std::string key = site;
  put(key, concurrent.size());
  for (const auto& c : concurrent) {
    put(key, static_cast<int>(c.op));
    put(key, c.bytes);
    put(key, c.root);
    put(key, c.channels);
    put(key, c.stretch);
    put(key, c.send_rate.size());
    for (double r : c.send_rate)
      put(key, r);
    const auto& n = c.nccl;
    for (double v : {static_cast<double>(n.protocol), static_cast<double>(n.channels), n.fixed_channels ? 1.0 : 0.0,
                     n.buffsize, n.ll_buffsize, n.ll128_buffsize, n.p2p_chunk,
                     static_cast<double>(n.p2p_channels_per_peer), static_cast<double>(n.slots), n.windows ? 1.0 : 0.0})
      put(key, v);
    put(key, c.gpus.size());
    key.append(reinterpret_cast<const char*>(c.gpus.data()), c.gpus.size() * sizeof(int));
    put(key, c.matrix.size());
    for (const auto& row : c.matrix) {
      put(key, row.size());
      key.append(reinterpret_cast<const char*>(row.data()), row.size() * sizeof(double));
    }
  }
  if (auto it = choices_.find(key); it != choices_.end()) {
    ++hits_;
    return it->second;
  }
  ++misses_;
  const Algorithm a = choose_algorithm(topology, concurrent);
  choices_.emplace(std::move(key), a);
  return a;
}

Lowered add_collective(FlowGraph& graph, const Topology& topology, const Collective& c, const std::vector<int>& deps)
{
  validate(topology, c);
  Algorithm a  = c.algorithm == Algorithm::automatic ? default_algorithm(topology, c) : c.algorithm;
  auto allowed = algorithms_for(c.op);
  if (std::find(allowed.begin(), allowed.end(), a) == allowed.end()) {
    std::string list;
    for (auto x : allowed)
      list += (list.empty() ? "" : ", ") + std::string(name_of(x));
    throw UsageError("algorithm " + std::string(name_of(a)) + " does not apply to " + std::string(name_of(c.op)) +
                     " (allowed: " + list + ", auto)");
  }
  Lowering low(graph, topology, c);
  int end = 0;
  switch (a) {
  case Algorithm::ring:
    end = (c.op == CollectiveOp::broadcast || c.op == CollectiveOp::reduce)
              ? low.chain(c.op, c.gpus, c.root, c.bytes, deps)
              : low.ring(c.op, c.gpus, c.bytes, deps);
    break;
  case Algorithm::tree:
    end = low.tree(c.op, c.gpus, c.root, c.bytes, deps);
    break;
  case Algorithm::halving_doubling:
    if (!is_power_of_two(c.gpus.size()))
      throw UsageError("halving-doubling needs a power-of-two group; this one has " + std::to_string(c.gpus.size()) +
                       " GPUs");
    end = low.halving_doubling(c.op, c.gpus, c.bytes, deps);
    break;
  case Algorithm::direct:
    end = low.direct(c.op, c, deps);
    break;
  case Algorithm::hierarchical: {
    Hierarchy h;
    if (!regular_hierarchy(topology, c.gpus, h))
      throw UsageError("hierarchical all-reduce needs a regular group: the same local GPUs on every node and "
                       "the same number of nodes in every building");
    end = low.hierarchical(h, c.bytes, deps);
    break;
  }
  case Algorithm::automatic:
    break;
  }
  return {end, a, low.flows(), low.call(), low.bound(), std::max(0.0, low.estimate())};
}

} // namespace spansim::netsim
