// NCCL's algorithms as NCCL lays them out on the site (src/graph/connect.cc, trees.cc, search.cc, paths.cc;
// netsim/README.md, "Collectives as NCCL lays them out"):
//   rings    one per NIC a node's group GPUs leave by, each carrying its share; on even nodes a ring sweeps its GPUs
//            one way, on odd ones the other (Postset's channel swap), so every hop between nodes joins one rail
//   trees    a double binary tree over the nodes per NIC, between that NIC's head GPUs, chains inside each node
//   NVLS     the NVSwitch reduces and multicasts: each GPU moves S (k+1)/k over its NVLink each way at NCCL's NVLS
//            efficiency; between nodes NVLSTree's trees or, with SHARP, one in-network reduction per NIC
//   CollNet  the node reduces to one head per NIC, the switches reduce across nodes, the heads spread the result
//   PXN      a send to another node leaves by the NIC on the destination's rail, reached over NVLink
// An in-switch reduction moves, on every link, the bytes a ring over the same GPUs moving the reduction's per-link
// volume moves: it is lowered as such flows, which every engine carries (packet level too; the reduction's own
// arithmetic in the switch is not simulated, and results say so).
#include "netsim/lowering.hpp"

#include <algorithm>

namespace spansim::netsim::detail {

namespace {

// The node's group GPUs from `start` (inclusive) round the node in local order, one way or the other.
std::vector<int> sweep(const std::vector<int>& members, int start, bool ascending)
{
  const int k = static_cast<int>(members.size());
  const int s = static_cast<int>(std::find(members.begin(), members.end(), start) - members.begin());
  std::vector<int> out;
  for (int i = 0; i < k; ++i)
    out.push_back(members[((ascending ? s + i : s - i) % k + k) % k]);
  return out;
}

std::vector<int> sorted_members(const std::vector<std::vector<int>>& by_nic)
{
  std::vector<int> all;
  for (const auto& nic : by_nic)
    all.insert(all.end(), nic.begin(), nic.end());
  return all;
}

// A node's order for the ring that enters and leaves by shared NIC `r`: its first GPU, the GPUs of the other NICs,
// its other GPUs last (crossNic 0: in and out by the same NIC).
std::vector<int> shared_nic_order(const std::vector<std::vector<int>>& by_nic, int r)
{
  std::vector<int> order{by_nic[r].front()};
  const int nics = static_cast<int>(by_nic.size());
  for (int k = 1; k < nics; ++k)
    for (int g : by_nic[(r + k) % nics])
      order.push_back(g);
  for (std::size_t i = 1; i < by_nic[r].size(); ++i)
    order.push_back(by_nic[r][i]);
  return order;
}

// Warps of one NCCL channel's thread block (NCCL_MAX_NTHREADS 640 / 32, src/include/device.h).
constexpr int kNcclWarps = 20;

// The pairs of a ring over each node's group GPUs (inside nodes), and the most GPUs a node holds.
std::pair<std::vector<std::pair<int, int>>, int> node_rings(const NcclLayout& L)
{
  std::vector<std::pair<int, int>> inside;
  int k = 1;
  for (const auto& node : L.by_node) {
    k = std::max(k, static_cast<int>(node.size()));
    if (node.size() > 1)
      for (auto p : ring_pairs(node))
        inside.push_back(p);
  }
  return {inside, k};
}

// The NICs a call's rings or trees leave each node by: one each, as far as its channels go (NCCL_MAX_NCHANNELS below
// the NICs leaves some unused); one for an irregular group.
int rails_used(const NcclLayout& L, int channels)
{
  return L.regular ? std::min(static_cast<int>(L.nic_members.front().size()), std::max(1, channels)) : 1;
}

// The head GPU of NIC `r` on every node: the first of the group's GPUs behind it.
std::vector<int> heads_of(const NcclLayout& L, int r)
{
  std::vector<int> heads;
  for (std::size_t n = 0; n < L.by_node.size(); ++n)
    heads.push_back(L.regular ? L.nic_members[n][r].front() : L.by_node[n].front());
  return heads;
}

} // namespace

int Lowering::nccl_ring(CollectiveOp op, const NcclLayout& L, double bytes, const NcclCall& call,
                        const std::vector<int>& deps)
{
  const int k = L.comm.ranks;
  if (k < 2)
    return barrier(deps);
  const double steps = op == CollectiveOp::all_reduce ? 2.0 * (k - 1) : k - 1.0;
  const int rails    = rails_used(L, call.channels);
  std::vector<std::vector<int>> rings;
  if (L.comm.nodes == 1 || rails <= 1 || !L.regular) {
    std::vector<int> order;
    for (const auto& node : L.by_node)
      order.insert(order.end(), node.begin(), node.end());
    rings.push_back(std::move(order));
  } else {
    for (int r = 0; r < rails; ++r) {
      std::vector<int> order;
      int enter_local = -1; // the local index of the previous node's exit GPU: this node enters on its rail
      for (std::size_t n = 0; n < L.by_node.size(); ++n) {
        const auto& by_nic = L.nic_members[n];
        std::vector<int> part;
        if (L.nics_shared) {
          part = shared_nic_order(by_nic, r);
        } else {
          const auto members = sorted_members(by_nic);
          int start          = by_nic[r].front();
          if (enter_local >= 0)
            for (int g : members)
              if (topology_.locate(g).local == enter_local)
                start = g;
          part = sweep(members, start, n % 2 == 0);
        }
        enter_local = topology_.locate(part.back()).local;
        order.insert(order.end(), part.begin(), part.end());
      }
      rings.push_back(std::move(order));
    }
  }
  std::vector<std::pair<int, int>> pairs;
  for (const auto& ring : rings)
    for (auto p : ring_pairs(ring))
      pairs.push_back(p);
  const double volume = wire_bytes_per_rank(op, k, bytes) / static_cast<double>(rings.size());
  const int per_ring  = std::max(1, call.channels / static_cast<int>(rings.size()));
  return pipelined(pairs, volume, chain_latency(latencies(ring_pairs(rings.front())), steps, true), call, deps,
                   per_ring, bytes);
}

int Lowering::nccl_tree(const NcclLayout& L, double bytes, const NcclCall& call, const std::vector<int>& deps)
{
  // A tree and its mirror per NIC, two channels each.
  const int rails = rails_used(L, call.channels / 2);
  // Per NIC: its head on every node and the chain from the head through the node's other group GPUs.
  std::vector<std::pair<int, int>> across, inside;
  double deepest_across = 0, longest_chain = 0;
  for (int r = 0; r < rails; ++r) {
    const auto heads = heads_of(L, r);
    for (std::size_t n = 0; n < L.by_node.size(); ++n) {
      const int head   = heads[n];
      const auto chain = sweep(L.nics_shared ? shared_nic_order(L.nic_members[n], r) : L.by_node[n], head, true);
      std::vector<std::pair<int, int>> up;
      for (std::size_t i = 1; i < chain.size(); ++i) {
        up.emplace_back(chain[i], chain[i - 1]);
        inside.emplace_back(chain[i], chain[i - 1]);
        inside.emplace_back(chain[i - 1], chain[i]);
      }
      double l = 0;
      for (double x : latencies(up))
        l += x;
      longest_chain = std::max(longest_chain, l);
    }
    deepest_across = std::max(deepest_across, double_tree(heads, across));
  }
  const double chain = deepest_across + 2 * longest_chain;
  // Each NIC's trees carry its share, half each; its chains carry both halves.
  const int per_tree = std::max(1, call.channels / (2 * rails));
  const int a        = pipelined(across, bytes / (2.0 * rails), chain, call, deps, per_tree, bytes);
  if (inside.empty())
    return a;
  const int b = pipelined(inside, bytes / rails, 0, call, deps, 2 * per_tree, bytes);
  return barrier({a, b});
}

int Lowering::nvls(CollectiveOp op, const NcclLayout& L, double bytes, const NcclCall& call, bool across_by_tree,
                   const std::vector<int>& deps)
{
  // Inside each node: the multimem reduction and multicast move S (k+1)/k over each GPU's NVLink each way for an
  // all-reduce; an all-gather or reduce-scatter moves what a ring moves. At NCCL's NVLS efficiency of the NVLink.
  const auto [inside, k] = node_rings(L);
  const double volume    = op == CollectiveOp::all_reduce ? bytes * (k + 1) / k : bytes * (k - 1) / k;
  const double saved     = stretch_;
  stretch_               = saved / nvls_share(op, L, call, across_by_tree);
  const int a            = pipelined(inside, volume, 0, call, deps, call.channels, bytes);
  stretch_               = saved;
  if (L.comm.nodes == 1)
    return pipeline_fill(op, L, bytes, call, across_by_tree, a);
  // Between nodes, per NIC between its heads: NVLSTree's double binary trees, or the switches' reduction (SHARP),
  // which moves on every link what a ring moving each head's share once moves.
  const int rails = rails_used(L, call.channels);
  std::vector<std::pair<int, int>> across;
  double chain = 0;
  for (int r = 0; r < rails; ++r) {
    const auto heads = heads_of(L, r);
    if (across_by_tree) {
      chain = std::max(chain, double_tree(heads, across));
    } else {
      for (auto p : ring_pairs(heads))
        across.push_back(p);
    }
  }
  const double share = across_by_tree ? bytes / (2.0 * rails) : bytes / rails;
  const int b        = pipelined(across, share, chain, call, deps, std::max(1, call.channels / rails), bytes);
  return pipeline_fill(op, L, bytes, call, across_by_tree, barrier({a, b}));
}

double Lowering::nvls_share(CollectiveOp op, const NcclLayout& L, const NcclCall& call, bool across_by_tree) const
{
  const auto [inside, k] = node_rings(L);
  if (op != CollectiveOp::all_reduce || L.nvls_warp_rate <= 0 || inside.empty() || call.channels <= 0)
    return L.nvls_efficiency;
  // NCCL's NVLS all-reduce kernels (src/device/all_reduce.h, the same from 2.19 to 2.29) split each channel's 20 warps
  // (NCCL_MAX_NTHREADS 640, unregistered buffers as nccl-tests runs) among scatter, gather, the heads' reduction and
  // the sends between nodes: on one node 5 reduce warps (7 on 6 GPUs or fewer) leave 8 and 7 (7 and 6) to scatter
  // and gather; across nodes by SHARP 3 reduce and 2 broadcast warps leave 8 and 7; NVLSTree's 5 reduce and 4 tree
  // warps leave 6 and 5. Every byte of a GPU passes its channel's scatter and gather warps once, so the fewer of the
  // two bound the channel; against the link, which moves (k+1)/k of the bytes, that is a share of its rate.
  const bool across   = L.comm.nodes > 1;
  const int bcast     = across ? (across_by_tree ? 4 : 2) : 0;
  const int reduce    = across ? (across_by_tree ? 5 : 3) : (k <= 6 ? 7 : 5);
  const int warps     = (kNcclWarps - reduce - bcast) / 2; // gather; scatter takes the odd one
  const auto [ga, gb] = inside.front();
  const double link   = topology_.route_bandwidth(topology_.route(ga, gb));
  const double copies = call.channels * warps * L.nvls_warp_rate * (k + 1.0) / k;
  return std::min(L.nvls_efficiency, copies / link);
}

int Lowering::pipeline_fill(CollectiveOp op, const NcclLayout& L, double bytes, const NcclCall& call,
                            bool across_by_tree, int end)
{
  // NCCL's NVLS and NVLSTree all-reduce kernels (src/device/all_reduce.h) pass each loop of a channel (one chunk per
  // head) through warp groups in turn, store and forward: scatter into the NVLS buffers, the heads' multimem
  // reduction, up the network tree (each level's head combining), the root's multicast, down the tree, the
  // heads' multicast, gather. The flows above carry the busiest stage's bytes; a loop also waits for the other
  // stages once, as a pipeline fills and drains: the sum of a loop's stage times less the longest.
  const auto [inside, k] = node_rings(L);
  if (op != CollectiveOp::all_reduce || inside.empty() || call.step_bytes <= 0 || bytes <= 0)
    return end;
  const double channels = std::max(1, call.channels);
  const double loop     = std::min(k * call.step_bytes, bytes / channels); // a channel's bytes per loop
  // Each stage alone at its channel's share of the link it crosses: a GPU's NVLink (at NCCL's NVLS efficiency),
  // a head's NIC shared by the channels.
  const auto [ga, gb] = inside.front();
  const double t_inside =
      loop * channels / (topology_.route_bandwidth(topology_.route(ga, gb)) * nvls_share(op, L, call, across_by_tree));
  const double kk = k;
  std::vector<double> stages{t_inside * (kk - 1) / kk, t_inside / kk,
                             t_inside * (kk - 1) / kk}; // scatter, reduce, gather
  if (L.comm.nodes > 1) {
    // Every channel has a chunk on every head: a head's NIC carries all the channels.
    const auto heads   = heads_of(L, 0);
    const double t_net = loop / kk * channels / topology_.route_bandwidth(topology_.route(heads[0], heads[1]));
    // Up and down: NVLSTree's levels (a heap over the nodes, each level a transit and its head's combination), or
    // the switches' one reduction (CollNet); then the heads' multicast.
    const int levels = across_by_tree ? tree_levels(L.comm.nodes) : 1;
    for (int level = 0; level < levels; ++level)
      stages.insert(stages.end(), {t_net, t_inside / kk, t_net});
    stages.push_back(t_inside / kk);
  }
  double sum = 0, longest = 0;
  for (double t : stages) {
    sum += t;
    longest = std::max(longest, t);
  }
  const double fill = sum - longest;
  if (estimate_ >= 0)
    estimate_ += fill;
  return graph_.add_delay(fill, {end});
}

int Lowering::collnet(const NcclLayout& L, double bytes, const NcclCall& call, const std::vector<int>& deps)
{
  // Inside each node the GPUs reduce to the heads and take the result back: a ring's NVLink volume.
  const auto [inside, k] = node_rings(L);
  std::vector<int> ends;
  if (!inside.empty())
    ends.push_back(pipelined(inside, 2.0 * bytes * (k - 1) / k, 0, call, deps, call.channels, bytes));
  const int rails = rails_used(L, call.channels);
  std::vector<std::pair<int, int>> across;
  for (int r = 0; r < rails; ++r)
    for (auto p : ring_pairs(heads_of(L, r)))
      across.push_back(p);
  ends.push_back(pipelined(across, bytes / rails, 0, call, deps, std::max(1, call.channels / rails), bytes));
  return barrier(ends);
}

double Lowering::double_tree(const std::vector<int>& heads, std::vector<std::pair<int, int>>& pairs) const
{
  const int n  = static_cast<int>(heads.size());
  double chain = 0;
  for (bool mirrored : {false, true}) {
    const auto edges = tree_edges(n, mirrored);
    std::vector<std::pair<int, int>> up, down;
    for (auto [child, parent] : edges) {
      up.emplace_back(heads[child], heads[parent]);
      down.emplace_back(heads[parent], heads[child]);
      pairs.push_back(up.back());
      pairs.push_back(down.back());
    }
    chain = std::max(chain, deepest(edges, up, n) + deepest(edges, down, n));
  }
  return chain;
}

void Lowering::p2p(int src, int dst, double bytes, const std::vector<int>& deps, std::vector<int>& out, double window,
                   double rate)
{
  const auto s = topology_.locate(src), d = topology_.locate(dst);
  if (!nccl_.pxn || s.node == d.node) {
    transfer(src, dst, bytes, deps, out, window, rate);
    return;
  }
  // The NIC on the destination's rail, and the GPU behind it on the sender's node.
  const auto& node = *topology_.spec().site_of(topology_.building_name(s.building)).node;
  const int rail   = node.nic_of(d.local);
  int proxy        = src;
  if (node.nic_of(s.local) != rail && d.local < topology_.node_gpus_of(src)) {
    const int local = node.shared_nics() ? node.nic_gpus[rail].front() : d.local;
    if (members_.count(src - s.local + local) > 0)
      proxy = src - s.local + local;
  }
  if (proxy == src) {
    transfer(src, dst, bytes, deps, out, window, rate);
    return;
  }
  transfer(src, proxy, bytes, deps, out, window, rate);
  transfer(proxy, dst, bytes, deps, out, window, rate);
}

} // namespace spansim::netsim::detail
