// Where each stage's step time went: every gap of its compute stream, split along time by what it waited for.
#include "netsim/step_lowering.hpp"

#include <algorithm>
#include <optional>

namespace spansim::netsim::detail {

using workload::is_compute;
using workload::OpKind;
using workload::WaitCause;

namespace {

bool is_p2p(OpKind k)
{
  return k == OpKind::send || k == OpKind::recv;
}

} // namespace

void account_stages(const workload::StepGraph& graph, const LoweredStep& lowered, StepResult& r)
{
  // Stage timelines. A gap of the compute stream is split along time by what was running for the op that
  // waited: its communication dependencies (and theirs, back to the previous compute op). Blocking
  // collectives (TP, CP, EP) count first, then pipeline transfers while bytes move, then overlappable
  // collectives (DP); time nothing accounts for is bubble when the op waited for a pipeline peer, else idle.
  // A trace read without a model makes stages of ranks that send to each other (an MSCCL ring): waiting for such a
  // peer is the trace's communication, not a pipeline bubble, and a transfer is busy from its sender's start.
  const bool ranks_as_stages = graph.job.trace_only;
  const auto peer_wait       = ranks_as_stages ? workload::exposed(workload::Dim::pp) : WaitCause::bubble;
  for (std::size_t s = 0; s < graph.stages.size(); ++s) {
    const auto& ops = graph.stages[s].ops;
    StageBreakdown b;
    b.stage       = static_cast<int>(s);
    b.compression = s < lowered.compression.size() ? lowered.compression[s] : 0;
    double now    = 0;
    auto charge   = [&](int op, WaitCause cause, double seconds) {
      if (seconds <= 0)
        return;
      if (auto d = workload::dim_of(cause))
        b.exposed[*d] += seconds;
      else if (cause == WaitCause::bubble)
        b.bubble += seconds;
      else
        b.idle += seconds;
      r.waits.push_back({static_cast<int>(s), op, cause, seconds});
    };
    struct Busy {
      double from, to;
      int priority; // 0 blocking collective, 1 pipeline transfer, 2 overlappable collective
      WaitCause cause;
    };
    // Splits the interval [a, gap_end) by what was running among `busy`, charging it to op `i` (-1: the tail).
    auto split = [&](int i, double a, double gap_end, const std::vector<Busy>& busy, bool waited_for_peer) {
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
        charge(i, best ? best->cause : (waited_for_peer ? peer_wait : WaitCause::idle), hi - lo);
      }
    };
    auto busy_of = [&](int d) -> std::optional<Busy> {
      const auto& dep = ops[d];
      if (is_p2p(dep.kind)) {
        double from = r.ops[s][d].active;
        if (ranks_as_stages && s < lowered.peer.size() && static_cast<std::size_t>(d) < lowered.peer[s].size()) {
          const auto [ps, pi] = lowered.peer[s][d];
          from                = std::min(r.ops[s][d].start, r.ops[ps][pi].start);
        }
        return Busy{from, r.ops[s][d].end, 1, workload::exposed(*dep.dim)};
      }
      if (dep.dim)
        return Busy{r.ops[s][d].start, r.ops[s][d].end, dep.overlappable ? 2 : 0, workload::exposed(*dep.dim)};
      return std::nullopt;
    };
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (!is_compute(ops[i].kind) || ops[i].host) // a trace's CPU ops are not the GPU's time
        continue;
      const auto& t  = r.ops[s][i];
      const double a = now, gap_end = t.start;
      std::vector<Busy> busy;
      bool waited_for_peer = false;
      if (gap_end > a) {
        std::vector<int> frontier = ops[i].deps;
        if (lowered.stream_prev[s][i] >= 0)
          frontier.push_back(lowered.stream_prev[s][i]);
        std::vector<bool> seen(ops.size(), false);
        while (!frontier.empty()) {
          int d = frontier.back();
          frontier.pop_back();
          if (seen[d] || is_compute(ops[d].kind) || r.ops[s][d].end <= a)
            continue;
          seen[d] = true;
          if (auto x = busy_of(d)) {
            busy.push_back(*x);
            waited_for_peer = waited_for_peer || (is_p2p(ops[d].kind) && r.ops[s][d].end >= gap_end);
          }
          for (int dd : ops[d].deps)
            frontier.push_back(dd);
          if (lowered.stream_prev[s][d] >= 0)
            frontier.push_back(lowered.stream_prev[s][d]);
        }
        split(static_cast<int>(i), a, gap_end, busy, waited_for_peer);
      }
      b.compute += t.end - t.start;
      now = std::max(now, t.end);
    }
    // After the last compute op the step still waits for the stage's communication (a gradient all-reduce, a trace
    // of collectives only): that time is exposed communication, not idle; what no transfer covers is idle.
    std::vector<Busy> tail;
    bool peers_left = false;
    for (std::size_t d = 0; d < ops.size(); ++d)
      if (!is_compute(ops[d].kind) && r.ops[s][d].end > now)
        if (auto x = busy_of(static_cast<int>(d))) {
          tail.push_back(*x);
          peers_left = peers_left || is_p2p(ops[d].kind);
        }
    split(-1, now, r.step_time, tail, ranks_as_stages && peers_left);
    r.stages.push_back(b);
  }
}

} // namespace spansim::netsim::detail
