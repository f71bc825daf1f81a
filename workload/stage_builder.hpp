#pragma once
/// @file
/// @brief Internal to workload: the builder of one stage's op program (workload/stage_program.cpp: the schedule's
/// compute and pipeline transfers; workload/stage_comm.cpp: per-layer collectives, data-parallel gathers and
/// reductions).

#include "workload/cost_model.hpp"
#include "workload/schedule.hpp"

#include <limits>
#include <map>
#include <optional>
#include <tuple>

namespace spansim::workload::detail {

// `deps` followed by `more`: an op's dependencies gathered from several sources.
inline std::vector<int> with(std::vector<int> deps, const std::vector<int>& more)
{
  deps.insert(deps.end(), more.begin(), more.end());
  return deps;
}

/// @brief The tags of the embedding-gradient exchange (kEmbeddingGradTag - sending stage), clear of the pipeline's
/// and DualPipe's.
inline constexpr std::int64_t kEmbeddingGradTag = std::numeric_limits<std::int32_t>::min();

/// @brief One side (a send or a receive) of a gradient exchange between two stages of a pipeline group, paired by
/// `tag`; callers set what else differs (its dimension, chunk, overlap).
inline Op gradient_exchange(OpKind kind, int peer, std::int64_t tag, double bytes, std::vector<int> deps)
{
  return Op{.kind       = kind,
            .purpose    = Purpose::grad_reduce,
            .group      = Group{Axis::pp, 2},
            .bytes      = bytes,
            .count      = 1,
            .peer_stage = peer,
            .tag        = tag,
            .deps       = std::move(deps)};
}

class StageBuilder {
public:
  StageBuilder(const Context& c, const std::vector<ChunkCost>& costs, int stage)
      : c_(c), costs_(costs), stage_(stage), pipe_(c.job)
  {
  }

  StageProgram build();

private:
  int push(Op op)
  {
    prog_.ops.push_back(std::move(op));
    return static_cast<int>(prog_.ops.size()) - 1;
  }
  const ChunkCost& cost(int v) const { return costs_[pipe_.model_chunk(stage_, v)]; }
  /// A pipeline message's tag: a send and its receive share it (pass, direction, model chunk, micro-batch).
  std::int64_t tag(bool forward, int direction, int g, int mb) const
  {
    return ((std::int64_t(forward ? 0 : 1) * 2 + direction) * c_.chunks + g) * c_.mbs + mb;
  }
  /// A run of consecutive layers of the model, and how many of them are MoE layers.
  struct Layers {
    int first_layer = 0;
    int layers      = 0;
    int moe_layers  = 0;
  };
  Layers span(int first, int count) const
  {
    Layers out{first, count, 0};
    for (int l = first; l < first + count; ++l)
      out.moe_layers += c_.m.is_moe_layer(l) ? 1 : 0;
    return out;
  }
  /// Tensor-parallel (and expert-TP) and context-parallel collectives of one pass over chunk v (or the layers of
  /// `range` only), chained after `after`; returns the chain's end.
  std::vector<int> tensor_collectives(int v, int mb, std::vector<int> after, bool backward,
                                      const std::optional<std::vector<int>>& compute_start   = std::nullopt,
                                      const std::optional<std::vector<int>>& attention_start = std::nullopt);
  /// `compute_start`: the deps of the compute op these collectives follow; with TP overlap (and a start given) the
  /// TP all-gathers and reduce-scatters start with that compute instead of after it. `attention_start`: the deps
  /// of the attention kernels' op, under which a ring CP's K/V exchange runs (else under the whole compute).
  std::vector<int> tensor_collectives(int v, int mb, std::vector<int> after, bool backward, Layers range,
                                      const std::optional<std::vector<int>>& compute_start   = std::nullopt,
                                      const std::optional<std::vector<int>>& attention_start = std::nullopt);
  /// The context-parallel collectives of one pass over `layers` layers, by the job's CP variant, after `after` (or,
  /// a ring's, beside the compute that starts after `overlap_start`); returns their end.
  std::vector<int> context_collectives(int v, int mb, std::vector<int> after, bool backward, int layers,
                                       const std::optional<std::vector<int>>& overlap_start);
  /// The expert dispatch and combine of one pass over chunk v after `after`; `overlapped`: they run under the
  /// compute of an overlapped pair. Returns their end (`after` when the chunk has none).
  std::vector<int> expert_collectives(int v, int mb, std::vector<int> after, bool overlapped, bool backward);
  /// One dispatch or combine (`p`) over the MoE layers of `range`; in a backward pass (its gradients go the same ways
  /// in BF16).
  std::vector<int> expert_collective(int v, int mb, std::vector<int> after, bool overlapped, Purpose p, Layers range,
                                     bool backward);
  /// An overlapped pair as Megatron-LM's combined 1F1B runs it (ep_overlap): the forward's layer i with the
  /// backward's layer L - 1 - i, each layer pair in four slots (pre-dispatch compute, the routed experts' input and
  /// weight gradients, their forward, the pre-dispatch backward) with the four all-to-alls between them. Returns the
  /// chain's end.
  std::vector<int> megatron_pair(const Unit& f, const Unit& b, const std::vector<int>& chain);
  /// A forward and a backward pass as one of DualPipe's overlapped cells (dualpipe.py's _forward_backward_chunk): it
  /// starts once both passes' inputs are in, the two compute in turn while the expert all-to-alls of both run under
  /// them (DeepSeek-V3 arranges a pair's components so that they are hidden, arXiv 2412.19437 section 3.2.1), and
  /// both outputs leave when the cell ends. Returns the cell's end.
  std::vector<int> dualpipe_pair(const Unit& f, const Unit& b, const std::vector<int>& chain);
  /// The parameter all-gathers (FSDP/HSDP) of chunk v: the ones its compute waits for, and the ones that overlap
  /// it and must end before it is done.
  struct Gathers {
    std::vector<int> before;
    std::vector<int> during;
  };
  Gathers gather_params(int v, int mb);
  /// Gradient reduction for chunk v: the units reduced while the backward runs start with it (`start`: its
  /// dependencies), the rest after `after`.
  void reduce_grads(int v, int mb, const std::vector<int>& start, const std::vector<int>& after);
  /// The share of chunk v's parameters in its first unit (its first layer and embedding or output layer), which
  /// waits on compute when data parallelism overlaps unit by unit; 1 when it does not.
  double lead_share(int v) const;
  /// What a forward (from the previous chunk) or backward (from the next one) waits for: a pipeline receive, or
  /// the producing unit's end when that chunk is on this stage (DualPipeV's turn); nothing at the pipeline's end.
  std::vector<int> input(const Unit& u);
  /// Hands a forward's activations or a backward's gradients to the next (previous) chunk after `after`: a
  /// pipeline send, or kept for a unit of this stage.
  void output(const Unit& u, const std::vector<int>& after);
  /// A send or receive of unit u's activations or gradients with `peer_stage`, paired by `tag`.
  int transfer(const Unit& u, OpKind kind, int peer_stage, std::int64_t tag, std::vector<int> deps);
  /// On the stages of the embedding group (Pipeline::embedding_group), the exchange of the embedding's gradients
  /// after `after`; returns its receive (-1 elsewhere).
  int sync_embedding_grads(const std::vector<int>& after);

  /// Runs one unit after `chain`: its compute, then its collectives; returns the end of both.
  std::vector<int> run(const Unit& u, const std::vector<int>& chain);
  /// Recomputes backward unit u's activations after `deps`, with the forward collectives the recompute repeats;
  /// returns its end. In a pair (`paired`) a full recompute's expert all-to-alls are left to the caller, which runs
  /// them beside the pair's compute as it runs the pair's own.
  std::vector<int> recompute(const Unit& u, const std::vector<int>& deps, bool paired = false);
  /// DualPipe's full-recompute expert all-to-alls of backward unit u, beside the pair from `start` as the pair's own
  /// run (its backward waits for neither: optimistic); the end to join the pair's (empty when there are none).
  std::vector<int> recompute_experts(const Unit& u, const std::vector<int>& start);
  /// Whether context parallelism passes K/V around a ring under the attention kernels (ring, a2a+p2p).
  bool ring_cp() const
  {
    const auto k = c_.job.parallelism.cp_comm;
    return c_.cp > 1 && (k == CpComm::ring || k == CpComm::a2a_p2p);
  }
  /// A compute op of unit u.
  int compute(OpKind kind, const Unit& u, double model_flops, double hardware_flops, double seconds, double hbm,
              const OpEffects& effects, std::vector<int> deps)
  {
    return push(Op{.kind           = kind,
                   .chunk          = u.chunk,
                   .micro_batch    = u.micro_batch,
                   .model_flops    = model_flops,
                   .hardware_flops = hardware_flops,
                   .seconds        = seconds,
                   .hbm_bytes      = hbm,
                   .effects        = effects,
                   .group          = {},
                   .deps           = std::move(deps)});
  }

  /// @brief One collective of a stage program: what it is, on which group, how large, how often.
  struct Call {
    CollectiveOp op;
    Dim dim;
    Purpose purpose;
    Group group;
    double bytes;
    int count;
    bool overlappable = false;
    double imbalance  = 1;
    int sms           = 0;
  };
  /// Adds a collective of chunk v and micro-batch mb (-1: not tied to one) after `deps`; returns its op.
  int collective(const Call& call, int v, int mb, std::vector<int> deps)
  {
    return push(Op{.kind         = OpKind::collective,
                   .collective   = call.op,
                   .dim          = call.dim,
                   .purpose      = call.purpose,
                   .chunk        = v,
                   .micro_batch  = mb,
                   .group        = call.group,
                   .bytes        = call.bytes,
                   .count        = call.count,
                   .overlappable = call.overlappable,
                   .imbalance    = call.imbalance,
                   .sms          = call.sms,
                   .deps         = std::move(deps)});
  }

  const Context& c_;
  const std::vector<ChunkCost>& costs_;
  int stage_;
  Pipeline pipe_;
  StageProgram prog_;
  std::vector<int> gathered_;      // non-resharding FSDP: all-gather op of each chunk, -1 before its first use
  std::vector<int> backward_done_; // backward passes done per chunk
  std::vector<int> reductions_;
  /// Ends of units handed to a chunk of this stage (DualPipeV's turn): (forward, model chunk, micro-batch).
  std::map<std::tuple<bool, int, int>, std::vector<int>> handed_;
};

} // namespace spansim::workload::detail
