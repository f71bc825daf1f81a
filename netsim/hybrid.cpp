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

} // namespace

Corrections measure_corrections(const topology::Topology& topology, const topology::Topology& simulated,
                                const LoweredStep& lowered, const EngineOptions& engine)
{
  const auto begin = std::chrono::steady_clock::now();
  std::vector<std::size_t> pattern_of_span(lowered.spans.size());
  std::vector<std::size_t> representative; // span index per pattern
  std::vector<double> scale;               // per pattern: the size it is measured at, relative to the span's
  std::vector<char> whole;                 // per pattern: scaled where it is measured (Pattern::whole)
  std::vector<int> occurrences;
  std::unordered_map<std::uint64_t, std::size_t> index;
  for (std::size_t s = 0; s < lowered.spans.size(); ++s) {
    const auto pattern  = pattern_of(simulated, lowered.graph, lowered.spans[s], engine.hybrid);
    auto [it, inserted] = index.try_emplace(pattern.key, representative.size());
    if (inserted) {
      representative.push_back(s);
      scale.push_back(pattern.scale);
      whole.push_back(pattern.whole);
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
        // Every rail and channel of the collective (a folded step's spans keep one rail's transfers between nodes).
        Collective c = lowered.spans[representative[p]].collective;
        c.rail       = -1;
        c.rails      = 0;
        c.bytes *= scale[p];
        FlowGraph graph(topology.spec().multipath.qps);
        nlohmann::json out = {{"measured_bytes", c.bytes}, {"flow_s", nullptr}};
        const auto start   = std::chrono::steady_clock::now();
        try {
          add_collective(graph, topology, c, {});
          if (const double down =
                  whole[p] ? scale_of(graph, 0, static_cast<int>(graph.ops().size()), engine.hybrid) : 1;
              down < 1) {
            c.bytes *= down;
            out["measured_bytes"] = c.bytes;
            graph                 = FlowGraph(topology.spec().multipath.qps);
            add_collective(graph, topology, c, {});
          }
          out["flow_s"]   = run_flow(topology, graph, engine.simgrid).makespan;
          out["packet_s"] = run_packet(topology, graph, engine.packet).makespan;
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
