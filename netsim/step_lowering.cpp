// Lowering a placed training-step graph to one flow graph: compute ops as delays, collectives on the placement's
// groups, pipeline transfers between counterpart ranks, with the streams' order as dependencies.
#include "netsim/step_lowering.hpp"

#include "netsim/dispatch.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <tuple>

namespace spansim::netsim::detail {

using workload::is_compute;
using workload::OpKind;

namespace {

bool is_p2p(OpKind k)
{
  return k == OpKind::send || k == OpKind::recv;
}

class StepLowering {
public:
  StepLowering(const topology::Topology& topology, const workload::StepGraph& graph,
               const placement::Placement& placement, const StepOptions& options, int rail, int rails)
      : topology_(topology), step_(graph), placement_(placement), options_(options), rail_(rail), rails_(rails),
        graph_(topology.spec().multipath.qps), hot_member_(workload::expert_load(graph.job).hot_member)
  {
    const auto& stages = graph.stages;
    // All-to-alls lower to K(K-1) transfers per group and call: past the budget, time them in isolation.
    if (options.all_to_all == AllToAllTiming::isolated) {
      isolate_all_to_all_ = true;
    } else if (options.all_to_all == AllToAllTiming::automatic) {
      double transfers = 0;
      for (const auto& st : stages)
        for (const auto& op : st.ops)
          if (op.kind == OpKind::collective && op.collective == CollectiveOp::all_to_all && op.group.size > 1) {
            const double k = op.group.size, ranks = double(placement.ranks()) / double(stages.size());
            transfers += ranks / k * k * (k - 1) * options.flows_per_pair;
          }
      isolate_all_to_all_ = transfers > kAllToAllFlowBudget;
    }
    find_nvlink_owner();
    nodes_.resize(stages.size());
    compression_.assign(stages.size(), 0);
    stream_prev_ = workload::stream_predecessors(graph);
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const auto& ops = stages[s].ops;
      nodes_[s].resize(ops.size());
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const auto& op = ops[i];
        if (op.kind == OpKind::send)
          sends_[{static_cast<int>(s), op.peer_stage, op.tag}] = static_cast<int>(i);
        else if (op.kind == OpKind::recv)
          recvs_[{op.peer_stage, static_cast<int>(s), op.tag}] = static_cast<int>(i);
      }
    }
  }

  // Kahn's order over the ops of every stage: an op is emitted once its dependencies and its stream predecessor
  // have ended; a send or receive ends when both it and its peer have started.
  void build()
  {
    const auto& stages = step_.stages;
    std::vector<std::vector<int>> waiting(stages.size());
    std::vector<std::vector<std::vector<int>>> dependents(stages.size());
    std::deque<std::pair<int, int>> ready_ops;
    std::size_t total = 0;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const auto& ops = stages[s].ops;
      total += ops.size();
      waiting[s].assign(ops.size(), 0);
      dependents[s].resize(ops.size());
      for (std::size_t i = 0; i < ops.size(); ++i) {
        auto wait_for = [&](int d) {
          dependents[s][static_cast<std::size_t>(d)].push_back(static_cast<int>(i));
          ++waiting[s][i];
        };
        for (int d : ops[i].deps)
          wait_for(d);
        if (stream_prev_[s][i] >= 0)
          wait_for(stream_prev_[s][i]);
        if (waiting[s][i] == 0)
          ready_ops.emplace_back(static_cast<int>(s), static_cast<int>(i));
      }
    }
    std::size_t ended = 0;
    auto on_end       = [&](int s, int i) {
      ++ended;
      for (int j : dependents[s][i])
        if (--waiting[s][j] == 0)
          ready_ops.emplace_back(s, j);
    };
    while (!ready_ops.empty()) {
      auto [s, i] = ready_ops.front();
      ready_ops.pop_front();
      std::vector<int> deps;
      ready(s, i, deps);
      emit(s, i, deps);
      if (!is_p2p(stages[s].ops[i].kind)) {
        on_end(s, i);
        continue;
      }
      pair(s, i);
      // Both sides end together, or (an eager send) the send first and its receive once it has started too.
      auto [ps, pi] = peer_of(s, i);
      for (auto [x, y] : {std::pair{s, i}, std::pair{ps, pi}})
        if (nodes_[x][y].end >= 0 && !p2p_ended_.contains({x, y})) {
          p2p_ended_.insert({x, y});
          on_end(x, y);
        }
    }
    if (ended < total) {
      // Name the first send or receive left waiting: its stage (and the rank and node of an imported trace).
      std::string first;
      for (std::size_t s = 0; s < stages.size() && first.empty(); ++s)
        for (std::size_t i = 0; i < stages[s].ops.size() && first.empty(); ++i) {
          const auto& op = stages[s].ops[i];
          if (is_p2p(op.kind) && nodes_[s][i].end < 0) {
            first = "stage " + std::to_string(s) + "'s " + (op.kind == OpKind::send ? "send to" : "receive from") +
                    " stage " + std::to_string(op.peer_stage);
            if (stages[s].trace_rank >= 0 && i < stages[s].trace_nodes.size())
              first += " (rank " + std::to_string(stages[s].trace_rank) + "'s node " +
                       std::to_string(stages[s].trace_nodes[i]) + ")";
            else
              first += " (tag " + std::to_string(op.tag) + ")";
          }
        }
      throw SimulationError("the stage programs deadlock: " + (first.empty() ? std::string("an op") : first) +
                            " waits for its peer, which waits in turn (" + std::to_string(total - ended) +
                            " ops left)");
    }
  }

  FlowGraph& graph() { return graph_; }
  /// @brief Bytes per link and direction no flow of the graph carries: isolated collectives' and mirrored groups'.
  std::vector<double> unsimulated_bytes() const
  {
    auto out = isolated_bytes_;
    for (const auto& [key, m] : mirrored_) {
      out.resize(2 * topology_.links().size(), 0);
      for (auto [k, b] : m.bytes)
        out[k] += m.count * b;
    }
    return out;
  }
  bool isolate_all_to_all() const { return isolate_all_to_all_; }
  std::vector<CollectiveSpan>& spans() { return spans_; }
  const std::vector<double>& compression() const { return compression_; }
  const workload::DimArray<unsigned>& auto_picks() const { return auto_picks_; }
  bool rails_differ() const { return rails_differ_; }
  const std::vector<std::vector<Node>>& nodes() const { return nodes_; }
  const std::vector<std::vector<int>>& stream_prev() const { return stream_prev_; }
  /// @brief For a send or receive: the node of its peer op (both share the transfer).
  std::pair<int, int> peer_of(int s, int i) const
  {
    const auto& op = step_.stages[s].ops[i];
    if (op.kind == OpKind::send)
      return {op.peer_stage, recvs_.at({s, op.peer_stage, op.tag})};
    return {op.peer_stage, sends_.at({op.peer_stage, s, op.tag})};
  }

private:
  bool ready(int s, int i, std::vector<int>& deps) const
  {
    const auto& op = step_.stages[s].ops[i];
    for (int d : op.deps) {
      if (nodes_[s][d].end < 0)
        return false;
      deps.push_back(nodes_[s][d].end);
    }
    int prev = stream_prev_[s][i];
    if (prev >= 0) {
      if (nodes_[s][prev].end < 0)
        return false;
      deps.push_back(nodes_[s][prev].end);
    }
    return true;
  }

  const std::vector<std::vector<int>>& groups(int s, const workload::Group& g)
  {
    auto key = std::pair{s, g.key()};
    auto it  = groups_.find(key);
    if (it == groups_.end()) {
      auto all = placement_.groups(s, g);
      if ((options_.dp_within_regions || !options_.dp_workers.empty()) && is_data_parallel(g.axes))
        all = split_by_worker(all);
      // One rail simulated (rail symmetry, or rails apart): groups that leave the node on one rail are kept on that
      // rail only; under rail symmetry a group over several GPUs of its nodes (all of them, or one offset of each
      // block) stays, its hops inside a node all kept and its transfers between nodes kept on the simulated rails
      // when lowered.
      if (rail_ >= 0 && !node_local(all))
        std::erase_if(all, [&](const std::vector<int>& members) {
          return rails_ > 0 && !one_rail(members) ? false : !on_rail(members.front());
        });
      // Node-local groups are lowered once and mirrored: a trace's own sub-groups only when they are all alike.
      bool alike = true;
      for (const auto& members : all)
        alike = alike && members.size() == all.front().size();
      local_[key] = node_local(all) && alike;
      it          = groups_.emplace(key, std::move(all)).first;
    }
    return it->second;
  }
  /// @brief Whether every group of `g` in stage s stays in one node.
  bool local_groups(int s, const workload::Group& g)
  {
    groups(s, g);
    return local_.at(std::pair{s, g.key()});
  }

  static bool is_data_parallel(workload::AxisSet axes)
  {
    using workload::Axis;
    return axes.contains(Axis::dp) || axes.contains(Axis::edp) || axes.contains(Axis::dp_shard) ||
           axes.contains(Axis::dp_replicate);
  }

  // Each group's members in each worker (DiLoCo's; by default each region) apart, in rank order; members alone in
  // their worker have no one to talk to.
  std::vector<std::vector<int>> split_by_worker(const std::vector<std::vector<int>>& all) const
  {
    const auto& workers = options_.dp_workers;
    std::vector<std::vector<int>> out;
    for (const auto& members : all) {
      std::map<int, std::vector<int>> by_region;
      for (int gpu : members)
        by_region[workers.empty() ? topology_.locate(gpu).region : workers[static_cast<std::size_t>(gpu)]].push_back(
            gpu);
      for (auto& [region, part] : by_region)
        if (part.size() > 1)
          out.push_back(std::move(part));
    }
    return out;
  }

  // The compression rule of an op on one of its groups (none for node-local groups, which cross nothing).
  const CompressionRule* rule_for(const workload::Op& op, const std::vector<int>& gpus) const
  {
    if (options_.compression.empty() || !op.dim)
      return nullptr;
    return options_.compression.rule_for(*op.dim, op.purpose, crossed(topology_, gpus));
  }

  // GPU seconds of (de)compressing the op's buffer when any of its lowered groups compresses: the stage's ranks run
  // in step, so the ranks that compress pace it.
  std::pair<double, double> compression_cost(int s, const workload::Op& op, const std::vector<std::vector<int>>& all,
                                             std::size_t lowered)
  {
    double before = 0, after = 0;
    const double buffer = op.bytes * op.count;
    for (std::size_t g = 0; g < lowered; ++g)
      if (const auto* rule = rule_for(op, all[g])) {
        before = std::max(before, rule->compress_rate > 0 ? buffer / rule->compress_rate : 0.0);
        after  = std::max(after, rule->decompress_rate > 0 ? buffer / rule->decompress_rate : 0.0);
      }
    compression_[s] += before + after;
    return {before, after};
  }

  /// @brief A GPU's rail as the simulated ones see it: under rail symmetry, its offset in its block of rails_.
  int rail_of(int gpu) const
  {
    const int l = topology_.locate(gpu).local;
    return rails_ > 0 ? l % rails_ : l;
  }

  bool on_rail(int gpu) const { return rail_of(gpu) == rail_; }

  bool one_rail(const std::vector<int>& gpus) const
  {
    for (int gpu : gpus)
      if (topology_.locate(gpu).local != topology_.locate(gpus.front()).local)
        return false;
    return true;
  }

  /// @brief The GPUs of a stage whose pipeline transfers are simulated (a pass over every rank: kept per stage).
  const std::vector<int>& senders(int stage)
  {
    auto it = senders_.find(stage);
    if (it == senders_.end()) {
      auto gpus = placement_.stage_gpus(stage);
      if (rail_ >= 0)
        std::erase_if(gpus, [&](int gpu) { return !on_rail(gpu); });
      it = senders_.emplace(stage, std::move(gpus)).first;
    }
    return it->second;
  }

  bool spans_nodes(const std::vector<int>& gpus) const
  {
    for (int gpu : gpus)
      if (topology_.locate(gpu).node != topology_.locate(gpus.front()).node)
        return true;
    return false;
  }

  bool node_local(const std::vector<std::vector<int>>& groups) const
  {
    for (const auto& g : groups)
      for (int gpu : g)
        if (topology_.locate(gpu).node != topology_.locate(g.front()).node)
          return false;
    return true;
  }

  void emit(int s, int i, const std::vector<int>& deps)
  {
    const auto& op = step_.stages[s].ops[i];
    Node& n        = nodes_[s][i];
    if (is_compute(op.kind)) {
      n.start = n.end = graph_.add_delay(op.seconds, deps);
      return;
    }
    n.start = graph_.add_delay(0, deps);
    if (is_p2p(op.kind))
      return; // the transfer waits for the peer (pair())
    const auto& all    = groups(s, op.group);
    const bool local   = local_groups(s, op.group);
    const bool isolate = options_.collapse_communication ||
                         (isolate_all_to_all_ && op.collective == CollectiveOp::all_to_all) ||
                         (local && nvlink_owner_ && *op.dim == *nvlink_owner_);
    const std::size_t lowered         = std::min(local ? std::size_t{1} : all.size(), all.size());
    const bool active                 = op.group.size > 1 && op.bytes > 0 && op.count > 0 && lowered > 0;
    const auto [compress, decompress] = active ? compression_cost(s, op, all, lowered) : std::pair{0.0, 0.0};
    const int begin_op                = compress > 0 ? graph_.add_delay(compress, {n.start}) : n.start;
    if (isolate) {
      const PatternKey key = pattern_key(s, op);
      auto it              = isolated_.find(key);
      if (it == isolated_.end()) {
        FlowGraph alone(topology_.spec().multipath.qps);
        std::vector<int> ends;
        if (active)
          for (const auto& c : collectives_for(s, op, all, lowered)) {
            const auto added = add_collective(alone, topology_, c, {});
            rails_differ_    = rails_differ_ || added.rails_differ;
            ends.push_back(added.end_op);
          }
        Isolated timed;
        if (!ends.empty()) {
          auto run      = run_analytical(topology_, alone);
          timed.seconds = run.makespan;
          if (local)
            mirror_bytes(alone, 0, static_cast<int>(alone.ops().size()), all, run.link_bytes);
          for (std::size_t k = 0; k < run.link_bytes.size(); ++k)
            if (run.link_bytes[k] != 0)
              timed.bytes.emplace_back(k, run.link_bytes[k]);
        }
        it = isolated_.emplace(key, std::move(timed)).first;
      }
      if (!options_.collapse_communication && !it->second.bytes.empty()) {
        // The op's bytes still cross the links.
        isolated_bytes_.resize(2 * topology_.links().size(), 0);
        for (auto [k, b] : it->second.bytes)
          isolated_bytes_[k] += b;
      }
      n.end = graph_.add_delay(it->second.seconds + decompress, {begin_op});
      return;
    }
    std::vector<int> ends;
    const int first = static_cast<int>(graph_.ops().size());
    if (active) {
      // Groups confined to single nodes only use their own NVLink: one stands for all.
      for (std::size_t g = 0; g < lowered; ++g) {
        const int begin = static_cast<int>(graph_.ops().size());
        Collective c    = collective_for(op, all[g]);
        if (c.algorithm == Algorithm::automatic) {
          // The per-call choice depends only on the collective (kind, group, size): each group's choice is made
          // once and reused by its later micro-batches and chunks (each choice times the candidates on its own).
          auto key = std::tuple{s,
                                op.group.key(),
                                static_cast<int>(op.collective),
                                c.bytes,
                                static_cast<int>(op.purpose),
                                static_cast<int>(g)};
          auto it  = per_call_.find(key);
          if (it == per_call_.end())
            it = per_call_.emplace(key, choose({c})).first;
          c.algorithm = it->second;
          auto_picks_[*op.dim] |= 1u << static_cast<unsigned>(c.algorithm);
        }
        const auto added = add_collective(graph_, topology_, c, {begin_op});
        rails_differ_    = rails_differ_ || added.rails_differ;
        ends.push_back(added.end_op);
        if (options_.fidelity == Fidelity::hybrid) {
          c.algorithm = added.algorithm;
          spans_.push_back({std::move(c), begin, static_cast<int>(graph_.ops().size())});
        }
      }
      // Every occurrence of a pattern lowers the same transfers: its mirror is computed once and counted.
      if (local && all.size() > 1) {
        auto& m = mirrored_[pattern_key(s, op)];
        if (m.count++ == 0) {
          std::vector<double> dense;
          mirror_bytes(graph_, first, static_cast<int>(graph_.ops().size()), all, dense);
          for (std::size_t k = 0; k < dense.size(); ++k)
            if (dense[k] != 0)
              m.bytes.emplace_back(k, dense[k]);
        }
      }
    }
    n.end = ends.empty() ? begin_op : graph_.add_delay(decompress, ends);
  }

  // Node-local groups are lowered once: the first stands for the others, whose members move the same bytes
  // between them. Each transfer of the representative's (ops [from, to) of `g`) is carried, member for member, over
  // the routes of every other group, into `out` (per link and direction). Transfer by transfer, so that groups of
  // another kind over the same GPUs (TP [0,1] beside CP [0,2], a trace's sub-groups) are not counted twice.
  void mirror_bytes(const FlowGraph& g, int from, int to, const std::vector<std::vector<int>>& all,
                    std::vector<double>& out) const
  {
    if (all.size() < 2)
      return;
    out.resize(2 * topology_.links().size(), 0);
    std::map<int, std::size_t> index; // representative GPU -> member position
    for (std::size_t k = 0; k < all[0].size(); ++k)
      index.emplace(all[0][k], k);
    for (int i = from; i < to; ++i) {
      const auto& op = g.ops()[static_cast<std::size_t>(i)];
      const auto a = index.find(op.src), b = index.find(op.dst);
      if (op.kind != Op::Kind::transfer || a == index.end() || b == index.end())
        continue;
      for (std::size_t m = 1; m < all.size(); ++m)
        for (const auto& hop : topology_.route(all[m][a->second], all[m][b->second]))
          out[2 * static_cast<std::size_t>(hop.link) + (hop.forward ? 0 : 1)] += op.bytes;
    }
  }

  // At analytical fidelity, when a single dimension's collectives are the only traffic on the NVLinks (inter-node
  // routes do not use them, no other dimension's group and no pipeline transfer stays in a node), its node-local
  // collectives cannot contend with anything: its stream runs them one at a time and each GPU has its own NVLink.
  // Timing each alone once and placing it as a delay is then exact, and saves most flows of a TP-heavy step.
  void find_nvlink_owner()
  {
    if (options_.fidelity != Fidelity::analytical)
      return;
    const auto& stages = step_.stages;
    std::set<workload::Dim> local_dims;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      for (const auto& op : stages[s].ops) {
        if (op.kind == OpKind::collective && op.group.size > 1 && op.bytes > 0 && op.count > 0 &&
            local_groups(static_cast<int>(s), op.group))
          local_dims.insert(*op.dim);
      }
      if (stages.size() > 1) {
        const int next = static_cast<int>((s + 1) % stages.size());
        for (int gpu : placement_.stage_gpus(static_cast<int>(s)))
          if (topology_.locate(gpu).node == topology_.locate(placement_.peer_gpu(gpu, next)).node)
            return;
      }
    }
    if (local_dims.size() == 1)
      nvlink_owner_ = *local_dims.begin();
  }

  Collective collective_for(const workload::Op& op, const std::vector<int>& gpus) const
  {
    Collective c;
    c.op        = op.collective;
    c.algorithm = options_.algorithms[*op.dim];
    c.gpus      = gpus;
    c.bytes     = op.bytes * op.count;
    // A MoE dispatch or combine: deduplicated per node and GPU (DeepEP), or with a busiest member.
    const bool expert = op.collective == CollectiveOp::all_to_all &&
                        (op.purpose == workload::Purpose::ep_dispatch || op.purpose == workload::Purpose::ep_combine);
    if (expert && (op.imbalance != 1 || step_.job.dispatch.dispatcher == workload::Dispatcher::deepep))
      c.matrix = dispatch_matrix(topology_, gpus, step_.job, op, hot_member_);
    c.nccl = options_.nccl;
    // DeepEP is not NCCL: its matrix already forwards over the network, then NVLink (no PXN).
    if (expert && step_.job.dispatch.dispatcher == workload::Dispatcher::deepep)
      c.nccl.pxn = false;
    // NCCL's all-to-all over the scale-out network gets less than its rings (the calibration profile's share).
    const double a2a = step_.job.calibration.alltoall_efficiency;
    if (expert && step_.job.dispatch.dispatcher == workload::Dispatcher::alltoall && a2a < 1 && spans_nodes(gpus))
      c.stretch = 1 / a2a;
    if (const auto* rule = rule_for(op, gpus)) {
      c.bytes /= rule->ratio;
      for (auto& row : c.matrix)
        for (double& b : row)
          b /= rule->ratio;
    }
    c.flows_per_pair = options_.flows_per_pair;
    if (rails_ > 0 && !one_rail(gpus)) {
      c.rail  = rail_;
      c.rails = rails_;
    }
    return c;
  }

  /// @brief The op's collective on each group it lowers; `auto` resolved once for all of them, with the groups
  /// run together (so that the links they share count), and cached per stage, group, kind and size.
  std::vector<Collective> collectives_for(int s, const workload::Op& op, const std::vector<std::vector<int>>& all,
                                          std::size_t lowered)
  {
    std::vector<Collective> out;
    for (std::size_t g = 0; g < lowered; ++g)
      out.push_back(collective_for(op, all[g]));
    if (!out.empty() && out.front().algorithm == Algorithm::automatic) {
      const PatternKey key = pattern_key(s, op);
      auto it              = chosen_.find(key);
      if (it == chosen_.end())
        it = chosen_.emplace(key, choose(out)).first;
      for (auto& c : out)
        c.algorithm = it->second;
      auto_picks_[*op.dim] |= 1u << static_cast<unsigned>(it->second);
    }
    return out;
  }

  // A send and its receive share one transfer: every rank of the sending stage to its counterpart.
  void pair(int s, int i)
  {
    auto [ps, pi]    = peer_of(s, i);
    Node& mine       = nodes_[s][i];
    Node& theirs     = nodes_[ps][pi];
    const auto& op   = step_.stages[s].ops[i];
    const bool eager = (op.kind == OpKind::send ? op : step_.stages[ps].ops[pi]).eager;
    if (eager) {
      // The send's bytes leave when it starts; its receive ends when it has started and the bytes have arrived.
      Node& send = op.kind == OpKind::send ? mine : theirs;
      Node& recv = op.kind == OpKind::send ? theirs : mine;
      if (send.start < 0)
        return;
      if (send.end < 0)
        transfer(op.kind == OpKind::send ? s : ps, op.kind == OpKind::send ? i : pi, {send.start}, send);
      if (recv.start >= 0 && recv.end < 0)
        recv.end = graph_.add_delay(0, {recv.start, send.end});
      return;
    }
    if (mine.start < 0 || theirs.start < 0)
      return;
    std::vector<int> both{mine.start, theirs.start};
    transfer(s, i, both, mine);
    theirs.end = mine.end;
  }

  // The bytes of the send or receive `i` of stage `s` (and its peer), moved once `starts` have happened: `into.end`
  // is when they have arrived (and are decompressed).
  void transfer(int s, int i, const std::vector<int>& starts, Node& into)
  {
    auto [ps, pi]    = peer_of(s, i);
    const auto& op   = step_.stages[s].ops[i];
    const int from   = op.kind == OpKind::send ? s : ps;
    const int to     = op.kind == OpKind::send ? ps : s;
    const auto& send = op.kind == OpKind::send ? op : step_.stages[ps].ops[pi];
    std::vector<int> flows;
    const double bytes = send.bytes * std::max(1, send.count);
    // Compressed where a rule covers the pair's boundary: the sender compresses, the receiver decompresses.
    double compress = 0, decompress = 0;
    std::vector<double> sizes;
    for (int gpu : bytes > 0 ? senders(from) : std::vector<int>{}) {
      const auto* rule = rule_for(send, {gpu, placement_.peer_gpu(gpu, to)});
      sizes.push_back(rule ? bytes / rule->ratio : bytes);
      if (rule) {
        compress   = std::max(compress, rule->compress_rate > 0 ? bytes / rule->compress_rate : 0.0);
        decompress = std::max(decompress, rule->decompress_rate > 0 ? bytes / rule->decompress_rate : 0.0);
      }
    }
    compression_[from] += compress;
    compression_[to] += decompress;
    if (options_.collapse_communication) {
      auto key = std::tuple{from, to, bytes, static_cast<int>(send.purpose)};
      auto it  = isolated_p2p_.find(key);
      if (it == isolated_p2p_.end()) {
        FlowGraph alone(topology_.spec().multipath.qps);
        std::size_t k = 0;
        for (int gpu : bytes > 0 ? senders(from) : std::vector<int>{}) {
          alone.add_transfer(gpu, placement_.peer_gpu(gpu, to), sizes[k], {}, {1, p2p_window(sizes[k])});
          ++k;
        }
        it = isolated_p2p_.emplace(key, bytes > 0 ? run_analytical(topology_, alone).makespan : 0.0).first;
      }
      into.end = graph_.add_delay(compress + it->second + decompress, starts);
      return;
    }
    const std::vector<int> ready = compress > 0 ? std::vector<int>{graph_.add_delay(compress, starts)} : starts;
    std::size_t k                = 0;
    for (int gpu : bytes > 0 ? senders(from) : std::vector<int>{}) {
      const double window = p2p_window(sizes[k]) / options_.flows_per_pair;
      for (int c = 0; c < options_.flows_per_pair; ++c)
        flows.push_back(graph_.add_transfer(gpu, placement_.peer_gpu(gpu, to), sizes[k] / options_.flows_per_pair,
                                            ready, {1, window}));
      ++k;
    }
    into.end = flows.empty() ? graph_.add_delay(0, starts) : graph_.add_delay(decompress, flows);
  }

  /// @brief The slot window of a pipeline send/recv (one peer) of `bytes`.
  double p2p_window(double bytes) const { return netsim::p2p_window(bytes, 1, 2, options_.nccl); }

  const topology::Topology& topology_;
  const workload::StepGraph& step_;
  const placement::Placement& placement_;
  const StepOptions& options_;
  int rail_;                  ///< the rail simulated (kAllRails: every rail)
  int rails_ = 0;             ///< under rail symmetry: the rails each simulated one (rail_ + j rails_) stands for
                              ///< (0: rails apart or every rail)
  bool rails_differ_ = false; ///< a call over several rails moved different bytes between nodes rail by rail
  FlowGraph graph_;
  std::vector<std::vector<Node>> nodes_;
  std::vector<std::vector<int>> stream_prev_;
  std::map<int, std::vector<int>> senders_;
  std::set<std::pair<int, int>> p2p_ended_;                 ///< sends and receives whose end has been passed on
  std::map<std::tuple<int, int, std::int64_t>, int> sends_; // (from, to, tag) -> op in from's program
  std::map<std::tuple<int, int, std::int64_t>, int> recvs_; // (from, to, tag) -> op in to's program
  std::map<std::pair<int, std::uint32_t>, std::vector<std::vector<int>>> groups_;
  std::map<std::pair<int, std::uint32_t>, bool> local_; ///< whether each of groups_ stays in its nodes
  struct Isolated {
    double seconds = 0;
    std::vector<std::pair<std::size_t, double>> bytes; ///< (link and direction, bytes) where bytes moved
  };
  /// @brief Stage, axes, kind, bytes, purpose, imbalance.
  using PatternKey = std::tuple<int, std::uint32_t, int, double, int, double>;
  /// @brief The pattern of stage `s`'s op: collectives of one pattern are timed and tuned once.
  static PatternKey pattern_key(int s, const workload::Op& op)
  {
    return {
        s,           op.group.key(), static_cast<int>(op.collective), op.bytes * op.count, static_cast<int>(op.purpose),
        op.imbalance};
  }
  std::map<PatternKey, Isolated> isolated_; ///< collectives timed alone
  struct Mirrored {
    std::vector<std::pair<std::size_t, double>> bytes; ///< one occurrence's, over the groups it stands for
    double count = 0;                                  ///< occurrences lowered
  };
  std::map<PatternKey, Mirrored> mirrored_; ///< node-local patterns lowered once per occurrence for all groups
  std::vector<double> isolated_bytes_;      ///< every isolated occurrence's bytes, per link and direction
  bool isolate_all_to_all_ = false;
  std::optional<workload::Dim> nvlink_owner_; ///< the one dimension using NVLink, when there is one
  std::map<std::tuple<int, int, double, int>, double> isolated_p2p_; ///< collapsed pipeline transfers
  std::map<PatternKey, Algorithm> chosen_;                           ///< `auto` resolved per op pattern
  /// @brief `auto` resolved per call: stage, axes, kind, bytes, purpose and group index.
  std::map<std::tuple<int, std::uint32_t, int, double, int, int>, Algorithm> per_call_;
  workload::DimArray<unsigned> auto_picks_{};
  int hot_member_ = 0; ///< the busiest member of each EP group under the job's routing

  /// @brief `auto`'s choice for collectives run together: NCCL's tuner.
  Algorithm choose(const std::vector<Collective>& concurrent) { return choose_algorithm(topology_, concurrent); }
  std::vector<double> compression_;   ///< [stage]: GPU seconds of (de)compression
  std::vector<CollectiveSpan> spans_; ///< hybrid fidelity: every collective lowered into graph_
};

} // namespace

} // namespace spansim::netsim::detail

namespace spansim::netsim::detail {

LoweredStep lower_step(const topology::Topology& topology, const workload::StepGraph& graph,
                       const placement::Placement& placement, const StepOptions& options, int rail, int rails)
{
  StepLowering lowering(topology, graph, placement, options, rail, rails);
  lowering.build();
  LoweredStep out;
  out.nodes               = lowering.nodes();
  out.stream_prev         = lowering.stream_prev();
  out.isolated_link_bytes = lowering.unsimulated_bytes();
  out.all_to_all_isolated = lowering.isolate_all_to_all();
  out.spans               = std::move(lowering.spans());
  out.compression         = lowering.compression();
  out.auto_picks          = lowering.auto_picks();
  out.rails_differ        = lowering.rails_differ();
  out.peer.resize(graph.stages.size());
  for (std::size_t s = 0; s < graph.stages.size(); ++s) {
    out.peer[s].assign(graph.stages[s].ops.size(), {-1, -1});
    for (std::size_t i = 0; i < graph.stages[s].ops.size(); ++i)
      if (is_p2p(graph.stages[s].ops[i].kind))
        out.peer[s][i] = lowering.peer_of(static_cast<int>(s), static_cast<int>(i));
  }
  out.graph = std::move(lowering.graph());
  return out;
}

} // namespace spansim::netsim::detail
