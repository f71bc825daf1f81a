// Lowering a placed training-step graph to one flow graph, running it, and reading the stage timelines back.
#include "netsim/step.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace spansim::netsim {

using workload::OpKind;
using workload::Traffic;

int traffic_index(Traffic traffic)
{
  for (std::size_t i = 0; i < kTrafficDims.size(); ++i)
    if (kTrafficDims[i] == traffic)
      return static_cast<int>(i);
  return -1;
}

namespace {

bool is_compute(OpKind k)
{
  return k == OpKind::forward || k == OpKind::backward || k == OpKind::recompute || k == OpKind::optimizer;
}

bool is_p2p(OpKind k)
{
  return k == OpKind::send || k == OpKind::recv;
}

CollectiveOp collective_of(OpKind k)
{
  switch (k) {
  case OpKind::all_reduce:
    return CollectiveOp::all_reduce;
  case OpKind::all_gather:
    return CollectiveOp::all_gather;
  case OpKind::reduce_scatter:
    return CollectiveOp::reduce_scatter;
  case OpKind::all_to_all:
    return CollectiveOp::all_to_all;
  default:
    throw SimulationError("not a collective op");
  }
}

/// @brief The flow-graph nodes standing for one op of a stage program.
struct Node {
  int start = -1; ///< ends when the op may begin (its dependencies are done)
  int end   = -1; ///< ends when the op is done
};

class StepLowering {
public:
  StepLowering(const topology::Topology& topology, const workload::StepGraph& graph,
               const placement::Placement& placement, const StepOptions& options, bool rail_only)
      : topology_(topology), step_(graph), placement_(placement), options_(options), rail_only_(rail_only)
  {
    const auto& stages = graph.stages;
    nodes_.resize(stages.size());
    stream_prev_.resize(stages.size());
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const auto& ops = stages[s].ops;
      nodes_[s].resize(ops.size());
      stream_prev_[s].assign(ops.size(), -1);
      // One stream for compute, one per communicator; pipeline transfers are not serialized.
      std::map<int, int> last_in_stream;
      for (std::size_t i = 0; i < ops.size(); ++i) {
        int stream = is_compute(ops[i].kind) ? -1 : is_p2p(ops[i].kind) ? -2 : traffic_index(ops[i].traffic);
        if (stream == -2)
          continue;
        auto it = last_in_stream.find(stream);
        if (it != last_in_stream.end())
          stream_prev_[s][i] = it->second;
        last_in_stream[stream] = static_cast<int>(i);
      }
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const auto& op = ops[i];
        if (op.kind == OpKind::send)
          sends_[{static_cast<int>(s), op.peer_stage, op.tag}] = static_cast<int>(i);
        else if (op.kind == OpKind::recv)
          recvs_[{op.peer_stage, static_cast<int>(s), op.tag}] = static_cast<int>(i);
      }
    }
  }

  void build()
  {
    const auto& stages = step_.stages;
    std::vector<std::size_t> first_pending(stages.size(), 0);
    std::vector<std::vector<bool>> counted(stages.size());
    std::size_t remaining = 0;
    for (std::size_t s = 0; s < stages.size(); ++s) {
      remaining += stages[s].ops.size();
      counted[s].assign(stages[s].ops.size(), false);
    }
    // An op is done when its end node exists; pairing a send ends its receive too, so count each op once.
    auto count = [&](std::size_t s, std::size_t i) {
      if (nodes_[s][i].end >= 0 && !counted[s][i]) {
        counted[s][i] = true;
        --remaining;
      }
    };
    while (remaining > 0) {
      std::size_t before = remaining;
      for (std::size_t s = 0; s < stages.size(); ++s) {
        const auto& ops = stages[s].ops;
        for (std::size_t i = first_pending[s]; i < ops.size(); ++i) {
          Node& n = nodes_[s][i];
          if (n.end >= 0) {
            count(s, i);
            continue;
          }
          if (n.start < 0) {
            std::vector<int> deps;
            if (!ready(static_cast<int>(s), static_cast<int>(i), deps))
              continue;
            emit(static_cast<int>(s), static_cast<int>(i), deps);
          }
          if (n.end < 0 && is_p2p(ops[i].kind)) {
            pair(static_cast<int>(s), static_cast<int>(i));
            if (n.end >= 0) {
              auto [ps, pi] = peer_of(static_cast<int>(s), static_cast<int>(i));
              count(static_cast<std::size_t>(ps), static_cast<std::size_t>(pi));
            }
          }
          count(s, i);
        }
        while (first_pending[s] < ops.size() && nodes_[s][first_pending[s]].end >= 0)
          ++first_pending[s];
      }
      if (remaining == before)
        throw SimulationError("the stage programs deadlock: a send or receive never finds its peer (" +
                              std::to_string(remaining) + " ops left)");
    }
  }

  FlowGraph& graph() { return graph_; }
  /// @brief (GPU of a lowered representative group, GPU of a group it stands for), member by member.
  const std::set<std::pair<int, int>>& mirrors() const { return mirrors_; }
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
    auto key = std::pair{s, g.dims};
    auto it  = groups_.find(key);
    if (it == groups_.end()) {
      auto all = placement_.groups(s, g);
      // With rail symmetry, groups that leave the node are simulated on rail 0 only (their members share a rail).
      if (rail_only_ && !node_local(all))
        std::erase_if(all, [&](const std::vector<int>& members) { return !on_rail_zero(members.front()); });
      it = groups_.emplace(key, std::move(all)).first;
    }
    return it->second;
  }

  bool on_rail_zero(int gpu) const { return topology_.locate(gpu).local == 0; }

  /// @brief The GPUs of a stage whose pipeline transfers are simulated (a pass over every rank: kept per stage).
  const std::vector<int>& senders(int stage)
  {
    auto it = senders_.find(stage);
    if (it == senders_.end()) {
      auto gpus = placement_.stage_gpus(stage);
      if (rail_only_)
        std::erase_if(gpus, [&](int gpu) { return !on_rail_zero(gpu); });
      it = senders_.emplace(stage, std::move(gpus)).first;
    }
    return it->second;
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
    const auto& all = groups(s, op.group);
    if (options_.collapse_communication) {
      auto key = std::tuple{s, op.group.dims, static_cast<int>(op.kind), op.bytes * op.count};
      auto it  = isolated_.find(key);
      if (it == isolated_.end()) {
        FlowGraph alone;
        std::vector<int> ends;
        if (op.group.size > 1 && op.bytes > 0 && op.count > 0)
          for (const auto& c : collectives_for(s, op, all, node_local(all) ? 1 : all.size()))
            ends.push_back(add_collective(alone, topology_, c, {}).end_op);
        it = isolated_.emplace(key, ends.empty() ? 0.0 : run_analytical(topology_, alone).makespan).first;
      }
      n.end = graph_.add_delay(it->second, {n.start});
      return;
    }
    std::vector<int> ends;
    if (op.group.size > 1 && op.bytes > 0 && op.count > 0) {
      // Groups confined to single nodes only use their own NVLink: one stands for all.
      const bool local          = node_local(all);
      const std::size_t lowered = local ? 1 : all.size();
      if (local)
        for (std::size_t g = 1; g < all.size(); ++g)
          for (std::size_t k = 0; k < all[g].size() && k < all[0].size(); ++k)
            mirrors_.insert({all[0][k], all[g][k]});
      for (std::size_t g = 0; g < lowered; ++g) {
        ends.push_back(add_collective(graph_, topology_, collective_for(op, all[g]), {n.start}).end_op);
      }
    }
    n.end = ends.empty() ? n.start : graph_.add_delay(0, ends);
  }

  Collective collective_for(const workload::Op& op, const std::vector<int>& gpus) const
  {
    Collective c;
    c.op        = collective_of(op.kind);
    c.algorithm = options_.algorithms[traffic_index(op.traffic)];
    c.gpus      = gpus;
    c.bytes     = op.bytes * op.count;
    c.channels  = options_.channels;
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
      auto key = std::tuple{s, op.group.dims, static_cast<int>(op.kind), op.bytes * op.count};
      auto it  = chosen_.find(key);
      if (it == chosen_.end())
        it = chosen_.emplace(key, choose_algorithm(topology_, out)).first;
      for (auto& c : out)
        c.algorithm = it->second;
    }
    return out;
  }

  // A send and its receive share one transfer: every rank of the sending stage to its counterpart.
  void pair(int s, int i)
  {
    auto [ps, pi] = peer_of(s, i);
    Node& mine    = nodes_[s][i];
    Node& theirs  = nodes_[ps][pi];
    if (mine.start < 0 || theirs.start < 0)
      return;
    const auto& op   = step_.stages[s].ops[i];
    const int from   = op.kind == OpKind::send ? s : ps;
    const int to     = op.kind == OpKind::send ? ps : s;
    const auto& send = op.kind == OpKind::send ? op : step_.stages[ps].ops[pi];
    std::vector<int> flows;
    const double bytes = send.bytes * std::max(1, send.count);
    if (options_.collapse_communication) {
      auto key = std::tuple{from, to, bytes};
      auto it  = isolated_p2p_.find(key);
      if (it == isolated_p2p_.end()) {
        FlowGraph alone;
        if (bytes > 0)
          for (int gpu : senders(from))
            alone.add_transfer(gpu, placement_.peer_gpu(gpu, to), bytes);
        it = isolated_p2p_.emplace(key, bytes > 0 ? run_analytical(topology_, alone).makespan : 0.0).first;
      }
      int end    = graph_.add_delay(it->second, {mine.start, theirs.start});
      mine.end   = end;
      theirs.end = end;
      return;
    }
    if (bytes > 0)
      for (int gpu : senders(from))
        for (int c = 0; c < options_.channels; ++c)
          flows.push_back(graph_.add_transfer(gpu, placement_.peer_gpu(gpu, to), bytes / options_.channels,
                                              {mine.start, theirs.start}));
    int end    = flows.empty() ? graph_.add_delay(0, {mine.start, theirs.start}) : graph_.add_delay(0, flows);
    mine.end   = end;
    theirs.end = end;
  }

  const topology::Topology& topology_;
  const workload::StepGraph& step_;
  const placement::Placement& placement_;
  const StepOptions& options_;
  bool rail_only_;
  FlowGraph graph_;
  std::vector<std::vector<Node>> nodes_;
  std::vector<std::vector<int>> stream_prev_;
  std::map<int, std::vector<int>> senders_;
  std::map<std::tuple<int, int, std::int64_t>, int> sends_; // (from, to, tag) -> op in from's program
  std::map<std::tuple<int, int, std::int64_t>, int> recvs_; // (from, to, tag) -> op in to's program
  std::map<std::pair<int, unsigned>, std::vector<std::vector<int>>> groups_;
  std::set<std::pair<int, int>> mirrors_;
  std::map<std::tuple<int, unsigned, int, double>, double> isolated_;  ///< collapsed collectives' durations
  std::map<std::tuple<int, int, double>, double> isolated_p2p_;        ///< collapsed pipeline transfers
  std::map<std::tuple<int, unsigned, int, double>, Algorithm> chosen_; ///< `auto` resolved per op pattern
};

} // namespace

namespace {

// Every rail carries the same traffic when the pods are rail-optimized, TP fills each node and TP rank r sits
// on rail r: then the groups and pipeline pairs of rail r are those of rail 0 moved over by r GPUs.
bool rails_symmetric(const topology::Topology& topology, const workload::StepGraph& graph,
                     const placement::Placement& placement)
{
  const int gpn = topology.spec().node.gpus;
  if (!topology.spec().pod.rail_optimized || gpn < 2 || graph.job.parallelism.tp != gpn)
    return false;
  for (int r = 0; r < placement.ranks(); ++r)
    if (topology.locate(placement.gpu(r)).local != placement.coordinates(r).tp)
      return false;
  return true;
}

// Dimensions whose collectives (all-reduce, all-gather, reduce-scatter) have a group spanning several nodes:
// there the algorithm decides what crosses the scale-out fabric and its boundaries.
std::array<bool, 5> dimensions_across_nodes(const topology::Topology& topology, const workload::StepGraph& graph,
                                            const placement::Placement& placement)
{
  std::array<bool, 5> across{};
  std::set<std::pair<std::size_t, unsigned>> seen;
  for (std::size_t s = 0; s < graph.stages.size(); ++s)
    for (const auto& op : graph.stages[s].ops) {
      const int d = traffic_index(op.traffic);
      if (d < 0 || across[d] ||
          (op.kind != OpKind::all_reduce && op.kind != OpKind::all_gather && op.kind != OpKind::reduce_scatter) ||
          !seen.insert({s, op.group.dims}).second)
        continue;
      for (const auto& g : placement.groups(static_cast<int>(s), op.group))
        for (int gpu : g)
          if (topology.locate(gpu).node != topology.locate(g.front()).node)
            across[d] = true;
    }
  return across;
}

StepResult simulate_step_as_given(const topology::Topology& topology, const workload::StepGraph& graph,
                                  const placement::Placement& placement, const StepOptions& options)
{
  if (options.channels < 1 || options.channels > 64)
    throw UsageError("channels must be between 1 and 64");
  const bool rail_only = options.rail_symmetry && rails_symmetric(topology, graph, placement);
  const int rails      = rail_only ? topology.spec().node.gpus : 1;
  std::optional<topology::Topology> one_rail;
  if (rail_only)
    one_rail.emplace(topology.with_shared_links_divided(rails));
  const topology::Topology& simulated = rail_only ? *one_rail : topology;
  StepLowering lowering(simulated, graph, placement, options, rail_only);
  lowering.build();
  auto& flow_graph = lowering.graph();
  auto run_result  = options.collapse_communication ? run_analytical(simulated, flow_graph)
                                                    : run(simulated, flow_graph, options.fidelity, options.engine);
  if (options.collapse_communication)
    run_result.settings = {{"engine", "analytical"}, {"mode", "collapsed communication (optimizer scoring)"}};
  run_result.settings["rail_symmetry"] =
      rail_only ? nlohmann::json(std::to_string(rails) + " identical rails, rail 0 simulated") : nlohmann::json(false);

  StepResult r;
  r.rails      = rails;
  r.flow_ops   = flow_graph.ops().size();
  r.engine     = run_result.settings;
  r.link_bytes = std::move(run_result.link_bytes);
  // The groups a representative stood for moved the same bytes over their own NVLinks.
  for (auto [from, to] : lowering.mirrors())
    for (int dir = 0; dir < 2; ++dir)
      r.link_bytes[2 * topology.nvlink_link(to) + dir] += r.link_bytes[2 * topology.nvlink_link(from) + dir];
  if (rail_only) {
    // Rails 1.. moved what rail 0 moved over their own NICs and leaves; the shared links carried every rail.
    std::set<std::pair<int, int>> leaves;
    for (int rank = 0; rank < placement.ranks(); ++rank) {
      const int gpu = placement.gpu(rank);
      if (topology.locate(gpu).local != 0)
        continue;
      for (int k = 1; k < rails; ++k) {
        for (int dir = 0; dir < 2; ++dir)
          r.link_bytes[2 * topology.nic_link(gpu + k) + dir] += r.link_bytes[2 * topology.nic_link(gpu) + dir];
        leaves.insert({topology.locate(gpu).leaf, topology.locate(gpu + k).leaf});
      }
    }
    for (auto [from, to] : leaves)
      for (int dir = 0; dir < 2; ++dir)
        r.link_bytes[2 * topology.leaf_uplink(to) + dir] += r.link_bytes[2 * topology.leaf_uplink(from) + dir];
    for (std::size_t l = 0; l < topology.links().size(); ++l) {
      auto tier = topology.links()[l].tier;
      if (tier == topology::Tier::pod_aggregation || tier == topology::Tier::inter_building ||
          tier == topology::Tier::building_uplink || tier == topology::Tier::inter_region)
        for (int dir = 0; dir < 2; ++dir)
          r.link_bytes[2 * l + dir] *= rails;
    }
  }
  r.step_time        = run_result.makespan;
  const auto& timing = run_result.ops;
  for (std::size_t k = 0; k < flow_graph.ops().size(); ++k) {
    const auto& op = flow_graph.ops()[k];
    if (op.kind == Op::Kind::transfer && op.bytes > 0 && op.src != op.dst)
      r.transfers.push_back({op.src, op.dst, op.bytes, timing[k].start, timing[k].end});
  }

  const auto& nodes = lowering.nodes();
  r.ops.resize(graph.stages.size());
  for (std::size_t s = 0; s < graph.stages.size(); ++s) {
    const auto& ops = graph.stages[s].ops;
    r.ops[s].resize(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& n = nodes[s][i];
      // A compute op is a delay node: it starts when it starts. Other ops start when their start barrier ends.
      double start = is_compute(ops[i].kind) ? timing[n.start].start : timing[n.start].end;
      r.ops[s][i]  = {start, timing[n.end].end, start};
    }
  }
  for (std::size_t s = 0; s < graph.stages.size(); ++s)
    for (std::size_t i = 0; i < graph.stages[s].ops.size(); ++i)
      if (is_p2p(graph.stages[s].ops[i].kind)) {
        auto [ps, pi]      = lowering.peer_of(static_cast<int>(s), static_cast<int>(i));
        r.ops[s][i].active = std::max(r.ops[s][i].start, r.ops[ps][pi].start);
      }

  // Stage timelines. A gap of the compute stream is split along time by what was running for the op that
  // waited: its communication dependencies (and theirs, back to the previous compute op). Blocking
  // collectives (TP, CP, EP) count first, then pipeline transfers while bytes move, then overlappable
  // collectives (DP); time nothing accounts for is bubble when the op waited for a pipeline peer, else idle.
  for (std::size_t s = 0; s < graph.stages.size(); ++s) {
    const auto& ops = graph.stages[s].ops;
    StageBreakdown b;
    b.stage     = static_cast<int>(s);
    double now  = 0;
    auto charge = [&](int op, int cause, double seconds) {
      if (seconds <= 0)
        return;
      if (cause < kWaitBubble)
        b.exposed[cause] += seconds;
      else if (cause == kWaitBubble)
        b.bubble += seconds;
      else
        b.idle += seconds;
      r.waits.push_back({static_cast<int>(s), op, cause, seconds});
    };
    struct Busy {
      double from, to;
      int priority; // 0 blocking collective, 1 pipeline transfer, 2 overlappable collective
      int cause;
    };
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (!is_compute(ops[i].kind))
        continue;
      const auto& t  = r.ops[s][i];
      const double a = now, gap_end = t.start;
      std::vector<Busy> busy;
      bool waited_for_peer = false;
      if (gap_end > a) {
        std::vector<int> frontier = ops[i].deps;
        if (lowering.stream_prev()[s][i] >= 0)
          frontier.push_back(lowering.stream_prev()[s][i]);
        std::vector<bool> seen(ops.size(), false);
        while (!frontier.empty()) {
          int d = frontier.back();
          frontier.pop_back();
          if (seen[d] || is_compute(ops[d].kind) || r.ops[s][d].end <= a)
            continue;
          seen[d]         = true;
          const auto& dep = ops[d];
          const int cause = traffic_index(dep.traffic);
          if (is_p2p(dep.kind)) {
            busy.push_back({r.ops[s][d].active, r.ops[s][d].end, 1, cause});
            waited_for_peer = waited_for_peer || r.ops[s][d].end >= gap_end;
          } else if (cause >= 0) {
            busy.push_back({r.ops[s][d].start, r.ops[s][d].end, dep.overlappable ? 2 : 0, cause});
          }
          for (int dd : dep.deps)
            frontier.push_back(dd);
          if (lowering.stream_prev()[s][d] >= 0)
            frontier.push_back(lowering.stream_prev()[s][d]);
        }
        std::vector<double> cuts{a, gap_end};
        for (const auto& x : busy)
          for (double c : {x.from, x.to})
            if (c > a && c < gap_end)
              cuts.push_back(c);
        std::sort(cuts.begin(), cuts.end());
        for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
          double lo = cuts[k], hi = cuts[k + 1];
          if (hi <= lo)
            continue;
          const Busy* best = nullptr;
          for (const auto& x : busy)
            if (x.from <= lo && x.to >= hi && (best == nullptr || x.priority < best->priority))
              best = &x;
          charge(static_cast<int>(i), best ? best->cause : (waited_for_peer ? kWaitBubble : kWaitIdle), hi - lo);
        }
      }
      b.compute += t.end - t.start;
      now = std::max(now, t.end);
    }
    charge(-1, kWaitIdle, r.step_time - now);
    r.stages.push_back(b);
  }

  const auto& job     = graph.job;
  auto summary        = workload::summarize(graph);
  r.model_flops       = summary.model_flops;
  r.tokens_per_second = r.step_time > 0 ? job.tokens_per_step() / r.step_time : 0;
  r.tflops_per_gpu    = r.step_time > 0 ? r.model_flops / r.step_time / static_cast<double>(job.gpus) / 1e12 : 0;
  const double peak   = job.precision == workload::Precision::fp8 ? job.gpu.peak_fp8_flops : job.gpu.peak_bf16_flops;
  r.mfu               = peak > 0 ? r.tflops_per_gpu * 1e12 / peak : 0;
  return r;
}

} // namespace

StepResult simulate_step(const topology::Topology& topology, const workload::StepGraph& graph,
                         const placement::Placement& placement, const StepOptions& options)
{
  if (options.collapse_communication || !options.choose_per_step) {
    auto r = simulate_step_as_given(topology, graph, placement, options);
    if (!options.collapse_communication)
      r.engine["collective_choice"] = "per call";
    return r;
  }
  // `auto` per call picks each collective's algorithm with the op's own groups running together, but not the
  // other stages' collectives on the same links: its pick can be the slowest for the step. Where a dimension's
  // groups span nodes, the whole step is run analytically (the flow engine's model) under the per-call policy
  // and under each algorithm for all of the dimension's calls (one that does not apply to every call, e.g. tree
  // for FSDP's all-gathers, is skipped), and the fastest wins; dimensions are settled in turn.
  StepOptions chosen     = options;
  chosen.choose_per_step = false;
  const auto across      = dimensions_across_nodes(topology, graph, placement);
  nlohmann::json picks   = nlohmann::json::object();
  std::optional<StepResult> best_trial; // the final run when it is analytical
  for (std::size_t d = 0; d < kTrafficDims.size(); ++d) {
    if (options.algorithms[d] != Algorithm::automatic || !across[d])
      continue;
    StepOptions trial = chosen;
    trial.fidelity    = Fidelity::analytical;
    Algorithm best    = Algorithm::automatic;
    best_trial.reset();
    for (auto a : {Algorithm::automatic, Algorithm::ring, Algorithm::hierarchical, Algorithm::halving_doubling,
                   Algorithm::tree}) {
      trial.algorithms[d] = a;
      std::optional<StepResult> r;
      try {
        r = simulate_step_as_given(topology, graph, placement, trial);
      } catch (const UsageError&) {
        continue; // the algorithm does not apply to every call of the dimension
      }
      if (!best_trial || r->step_time < best_trial->step_time * (1 - 1e-9)) {
        best       = a;
        best_trial = std::move(r);
      }
    }
    chosen.algorithms[d] = best;
    picks[std::string(workload::traffic_name(kTrafficDims[d]))] =
        best == Algorithm::automatic ? "auto (per call)" : to_string(best);
  }
  const bool reuse = best_trial && options.fidelity == Fidelity::analytical;
  auto r           = reuse ? std::move(*best_trial) : simulate_step_as_given(topology, graph, placement, chosen);
  r.engine["collective_choice"] = "per step";
  if (!picks.empty())
    r.engine["collectives_chosen_per_step"] = picks;
  return r;
}

} // namespace spansim::netsim
