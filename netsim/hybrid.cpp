// Hybrid fidelity: packet-level corrections for flow-level steps. A pattern is keyed by what decides its packet
// behaviour and nothing else (not which GPUs or links, only their kinds, speeds and delays), so the thousands of
// DP or TP groups of a large step that look alike share one packet run.
#include "netsim/hybrid.hpp"

#include "common/collective.hpp"
#include "common/error.hpp"
#include "common/process.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <new>
#include <optional>
#include <unordered_map>

namespace spansim::netsim::detail {

namespace {

/// FNV-1a over the values that make two lowered collectives behave alike.
class PatternHash {
public:
  template <class T>
  void add(const T& value)
  {
    unsigned char bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    for (unsigned char b : bytes) {
      hash_ ^= b;
      hash_ *= 1099511628211ull;
    }
  }
  std::uint64_t value() const { return hash_; }

private:
  std::uint64_t hash_ = 14695981039346656037ull;
};

/// A pattern and the factor its size is measured at.
struct Pattern {
  std::uint64_t key = 0;
  double scale      = 1;
  bool whole        = false; ///< scaled where it is measured, from the whole collective's transfers
};

bool is_flow(const Op& op)
{
  return op.kind == Op::Kind::transfer && op.src != op.dst && op.bytes > 0;
}

/// @brief The size a collective whose transfers [begin, end) of `graph` carry is measured at, as a fraction.
double scale_of(const FlowGraph& graph, int begin, int end, const HybridSettings& settings)
{
  const auto& ops = graph.ops();
  double total = 0, flows = 0;
  for (int k = begin; k < end; ++k)
    if (is_flow(ops[k])) {
      total += ops[k].bytes;
      ++flows;
    }
  if (total <= settings.max_pattern_bytes)
    return 1;
  return std::min(1.0, std::max(settings.max_pattern_bytes / total, settings.min_transfer_bytes * flows / total));
}

double total_bytes(const FlowGraph& graph)
{
  double total = 0;
  for (const auto& op : graph.ops())
    if (is_flow(op))
      total += op.bytes;
  return total;
}

// A collective above the byte budget is measured scaled down, but its transfers never below the floor, where
// latency rather than bandwidth would set the ratio. Collectives that differ only in a size above the budget
// then measure alike and share a pattern. A span of a folded step holds one rail's transfers between nodes: its
// scale is found where it is measured, on the whole collective, and its pattern keeps its own size.
Pattern pattern_of(const topology::Topology& topology, const FlowGraph& graph, const CollectiveSpan& span,
                   const HybridSettings& settings)
{
  const auto& ops = graph.ops();
  Pattern p;
  p.whole = span.collective.rails > 0;
  if (!p.whole)
    p.scale = scale_of(graph, span.begin, span.end, settings);
  PatternHash h;
  h.add(p.whole);
  h.add(static_cast<int>(span.collective.op));
  h.add(static_cast<int>(span.collective.algorithm));
  h.add(std::llround(span.collective.bytes * p.scale));
  h.add(span.collective.flows_per_pair);
  h.add(span.collective.gpus.size());
  h.add(span.end - span.begin);
  // Links by their first appearance in the span: groups alike up to which links they use share a pattern, but
  // not a group whose flows share a link (an ECMP collision) with one whose flows do not.
  std::unordered_map<int, int> renumbered;
  for (int k = span.begin; k < span.end; ++k) {
    const Op& op = ops[k];
    if (!is_flow(op))
      continue;
    h.add(std::llround(op.bytes * p.scale));
    for (const auto& hop : topology.route(op.src, op.dst, op.qp)) {
      const auto& link = topology.links()[hop.link];
      h.add(renumbered.try_emplace(hop.link, static_cast<int>(renumbered.size())).first->second);
      h.add(hop.forward);
      h.add(static_cast<int>(link.tier));
      h.add(link.bandwidth);
      h.add(link.latency);
    }
    h.add(-1); // end of a route
  }
  p.key = h.value();
  return p;
}

/// @brief What a pattern is measured on: the graph both levels run, the topology they run it on, and how it stands
/// for the collective.
struct Measured {
  FlowGraph graph;
  const topology::Topology* on = nullptr;
  double bytes                 = 0;
  int nodes                    = 0; ///< nodes of the group measured
  int of_nodes                 = 0; ///< nodes the group spans
  int rails                    = 0; ///< 0: every rail; else one rail standing for this many
};

/// @brief `c` on the GPUs of `m` of its nodes spread evenly over the group (in rank order: the first, then every
/// (nodes / m)-th), so that a group over buildings or regions keeps hops across them; what rides on its ranks (an
/// all-to-all's matrix, send rates, the root) is kept for those ranks.
Collective on_spread_nodes(const topology::Topology& topology, const Collective& c, int m)
{
  std::vector<int> nodes; // in order of first appearance
  for (int g : c.gpus)
    if (const int node = topology.locate(g).node; std::find(nodes.begin(), nodes.end(), node) == nodes.end())
      nodes.push_back(node);
  std::vector<int> chosen;
  for (int i = 0; i < m; ++i)
    chosen.push_back(nodes[static_cast<std::size_t>(i) * nodes.size() / m]);
  std::vector<int> keep;
  for (std::size_t r = 0; r < c.gpus.size(); ++r)
    if (std::find(chosen.begin(), chosen.end(), topology.locate(c.gpus[r]).node) != chosen.end())
      keep.push_back(static_cast<int>(r));
  Collective sub = c;
  sub.gpus.clear();
  sub.send_rate.clear();
  sub.matrix.clear();
  sub.root = 0;
  for (int r : keep) {
    sub.gpus.push_back(c.gpus[r]);
    if (!c.send_rate.empty())
      sub.send_rate.push_back(c.send_rate[r]);
    if (r == c.root)
      sub.root = static_cast<int>(sub.gpus.size()) - 1;
  }
  if (!c.matrix.empty())
    for (int i : keep) {
      sub.matrix.emplace_back();
      for (int j : keep)
        sub.matrix.back().push_back(c.matrix[i][j]);
    }
  return sub;
}

int nodes_of(const topology::Topology& topology, const std::vector<int>& gpus)
{
  std::vector<int> nodes;
  for (int g : gpus)
    nodes.push_back(topology.locate(g).node);
  std::sort(nodes.begin(), nodes.end());
  return static_cast<int>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
}

/// @brief The largest form of a span's collective that packet level takes, in this order: the whole collective,
/// every rail and channel, on the full topology; under rail symmetry, the rail the step simulated (its shared
/// links divided among the rails, as the flow-level step sees them); then that on half, a quarter, ... of the
/// group's nodes, spread over it, down to two. Each form is scaled down to the byte budget as a whole collective is. A
/// group cut to fewer nodes keeps its size per call, so each ring or tree hop still carries what it carries in the
/// whole group (bench/README.md measures what the cut changes).
std::optional<Measured> measurable(const topology::Topology& topology, const topology::Topology& simulated,
                                   const CollectiveSpan& span, double scale, const EngineOptions& engine)
{
  const auto& settings = engine.hybrid;
  auto lower           = [&](Collective c, const topology::Topology& on, bool scaled) {
    Measured m;
    m.on    = &on;
    m.graph = FlowGraph(on.spec().multipath.qps);
    add_collective(m.graph, on, c, {});
    if (const double down = scaled ? scale_of(m.graph, 0, static_cast<int>(m.graph.ops().size()), settings) : 1;
        down < 1) {
      c.bytes *= down;
      m.graph = FlowGraph(on.spec().multipath.qps);
      add_collective(m.graph, on, c, {});
    }
    m.bytes = c.bytes;
    return m;
  };
  const int of_nodes = nodes_of(topology, span.collective.gpus);
  Collective whole   = span.collective;
  whole.rail         = -1;
  whole.rails        = 0;
  whole.bytes *= scale;
  if (static_cast<int>(whole.gpus.size()) <= engine.packet.max_gpus) {
    auto m = lower(whole, topology, span.collective.rails > 0);
    if (packet_refusal(topology, m.graph, engine.packet).empty()) {
      m.nodes = m.of_nodes = of_nodes;
      return m;
    }
  }
  const bool folded    = span.collective.rails > 0;
  const Collective& at = folded ? span.collective : whole;
  const auto& on       = folded ? simulated : topology;
  for (int n = folded ? of_nodes : of_nodes / 2; n >= 2; n = n == of_nodes ? of_nodes / 2 : n / 2) {
    const auto c = n == of_nodes ? at : on_spread_nodes(topology, at, n);
    if (static_cast<int>(c.gpus.size()) > engine.packet.max_gpus)
      continue;
    auto m = lower(c, on, true);
    // A form whose transfers, floored at min_transfer_bytes, still move more than the budget is cut further: the
    // budget, not the packet limits, bounds each measurement's wall time (1-4 s per GB over RoCE).
    if (n > 2 && total_bytes(m.graph) > settings.max_pattern_bytes * (1 + 1e-9))
      continue;
    if (packet_refusal(on, m.graph, engine.packet).empty()) {
      m.nodes    = n;
      m.of_nodes = of_nodes;
      m.rails    = folded ? span.collective.rails : 0;
      return m;
    }
  }
  return std::nullopt;
}

} // namespace

Corrections measure_corrections(const topology::Topology& topology, const topology::Topology& simulated,
                                const LoweredStep& lowered, const EngineOptions& engine)
{
  const auto begin = std::chrono::steady_clock::now();
  std::vector<std::size_t> pattern_of_span(lowered.spans.size());
  std::vector<std::size_t> representative; // span index per pattern
  std::vector<double> scale;               // per pattern: the size it is measured at, relative to the span's
  std::vector<int> occurrences;
  std::unordered_map<std::uint64_t, std::size_t> index;
  for (std::size_t s = 0; s < lowered.spans.size(); ++s) {
    const auto pattern  = pattern_of(simulated, lowered.graph, lowered.spans[s], engine.hybrid);
    auto [it, inserted] = index.try_emplace(pattern.key, representative.size());
    if (inserted) {
      representative.push_back(s);
      scale.push_back(pattern.scale);
      occurrences.push_back(0);
    }
    ++occurrences[it->second];
    pattern_of_span[s] = it->second;
  }

  // Each worker runs its patterns at flow level (SimGrid) and at packet level (ns-3), each in a child of its own: a
  // pattern whose worker dies (the kernel's out-of-memory killer) is left uncorrected rather than ending the step.
  // No RLIMIT_DATA here: one was removed when SimGrid's 8 MiB actor stacks, counted whole, failed a 262K-GPU
  // pattern's flow run under 12 GB at 0.4 GB resident. Stacks are 256 KiB now (SimgridSettings::actor_stack_kib);
  // a limit has not been measured again at that scale.
  process::MapOptions guard;
  guard.on_lost = [](std::size_t, const std::string& why) {
    // Nothing was measured: a folded span's size would have been scaled down in the worker that died.
    return nlohmann::json{
        {"measured_bytes", nullptr}, {"flow_s", nullptr}, {"wall_s", 0.0}, {"skipped", "its worker died (" + why + ")"}}
        .dump();
  };
  const auto results = process::parallel_map(
      representative.size(), engine.hybrid.workers,
      [&](std::size_t p) {
        const auto& span   = lowered.spans[representative[p]];
        nlohmann::json out = {{"measured_bytes", nullptr}, {"flow_s", nullptr}};
        const auto start   = std::chrono::steady_clock::now();
        try {
          if (auto m = measurable(topology, simulated, span, scale[p], engine)) {
            out["measured_bytes"] = m->bytes;
            out["measured_on"]    = {{"nodes", m->nodes}, {"of_nodes", m->of_nodes}, {"rails", m->rails}};
            out["flow_s"]         = run_flow(*m->on, m->graph, engine.simgrid).makespan;
            out["packet_s"]       = run_packet(*m->on, m->graph, engine.packet).makespan;
          } else {
            out["skipped"] = "too large for packet level, whole and on as few as two of its nodes";
          }
        } catch (const UsageError& e) {
          out["skipped"] = e.what(); // too large for packet level: left uncorrected
        } catch (const std::bad_alloc&) {
          out["skipped"] = "its runs need more memory than the machine has";
        }
        out["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return out.dump();
      },
      {}, guard);

  Corrections out;
  std::vector<double> factor(representative.size(), 1.0);
  nlohmann::json rows = nlohmann::json::array();
  double packet_wall  = 0;
  int runs = 0, skipped = 0;
  for (std::size_t p = 0; p < representative.size(); ++p) {
    const auto r       = nlohmann::json::parse(results[p]);
    const auto& c      = lowered.spans[representative[p]].collective;
    nlohmann::json row = {{"collective", std::string(name_of(c.op))},
                          {"algorithm", std::string(name_of(c.algorithm))},
                          {"group", c.gpus.size()},
                          {"bytes", c.bytes},
                          {"measured_bytes", r["measured_bytes"]},
                          {"occurrences", occurrences[p]},
                          {"flow_s", r["flow_s"]}};
    if (r.contains("measured_on"))
      row["measured_on"] = r["measured_on"];
    packet_wall += r["wall_s"].get<double>();
    if (r.contains("skipped")) {
      ++skipped;
      row["skipped"] = r["skipped"];
    } else {
      ++runs;
      const double flow = r["flow_s"].get<double>();
      const double f    = flow > 0 ? r["packet_s"].get<double>() / flow : 1.0;
      factor[p]         = std::isfinite(f) && f > 0 ? f : 1.0;
      row["packet_s"]   = r["packet_s"];
    }
    row["factor"] = factor[p];
    rows.push_back(std::move(row));
  }
  out.span_factor.resize(lowered.spans.size());
  for (std::size_t s = 0; s < lowered.spans.size(); ++s)
    out.span_factor[s] = factor[pattern_of_span[s]];
  out.report = {{"collectives", lowered.spans.size()},
                {"patterns", representative.size()},
                {"packet_runs", runs},
                {"skipped", skipped},
                {"run_wall_seconds", packet_wall},
                {"wall_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count()},
                {"max_pattern_bytes", engine.hybrid.max_pattern_bytes},
                {"min_transfer_bytes", engine.hybrid.min_transfer_bytes},
                {"corrected", "every collective's transfers scaled by its pattern's packet/flow time; pipeline "
                              "transfers and all-to-alls timed in isolation are not corrected"},
                {"packet", engine.packet.to_json()},
                {"corrections", std::move(rows)}};
  return out;
}

std::vector<std::pair<int, double>> apply_corrections(FlowGraph& graph, const LoweredStep& lowered,
                                                      const std::vector<double>& factor)
{
  std::vector<std::pair<int, double>> saved;
  for (std::size_t s = 0; s < lowered.spans.size(); ++s) {
    if (factor[s] == 1)
      continue;
    for (int k = lowered.spans[s].begin; k < lowered.spans[s].end; ++k)
      if (graph.ops()[k].kind == Op::Kind::transfer) {
        saved.emplace_back(k, graph.ops()[k].bytes);
        graph.set_bytes(k, graph.ops()[k].bytes * factor[s]);
      }
  }
  return saved;
}

void restore_bytes(FlowGraph& graph, const std::vector<std::pair<int, double>>& saved)
{
  for (auto [op, bytes] : saved)
    graph.set_bytes(op, bytes);
}

} // namespace spansim::netsim::detail
