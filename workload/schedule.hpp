#pragma once
/// @file
/// @brief Internal to workload: pipeline schedules. Where the model chunks sit on the pipeline stages, and the
/// order in which each stage runs its forward and backward passes (workload/README.md has the schedules' sources).

#include "workload/workload.hpp"

#include <optional>
#include <vector>

namespace spansim::workload::detail {

/// @brief What a schedule unit computes: a forward pass, a whole backward pass, or a backward split in two (the
/// input gradients first, the weight gradients later: zero-bubble schedules).
enum class Pass : std::uint8_t { forward, backward, backward_input, weight };

/// @brief One pass of one model chunk held by the stage (`chunk`: its local index) over one micro-batch.
struct Unit {
  Pass pass;
  int chunk;
  int micro_batch;
  /// @brief Runs overlapped with the next unit (a forward and a backward of different micro-batches: their
  /// communication under each other's compute).
  bool paired = false;
};

/// @brief Where a stage's local chunk sits in the model, and its neighbours.
struct ChunkPlace {
  int stage = 0;
  int local = 0; ///< the chunk's index on its stage
};

/// @brief Where each model chunk sits. Interleaved 1F1B: chunk g on stage g mod pp; DualPipeV: stage s holds chunks s
/// and 2 pp - 1 - s; DualPipe: every stage s holds stage s of the forward direction (local 0) and stage pp - 1 - s
/// of the reverse direction (local 1), so each model chunk twice.
class Pipeline {
public:
  explicit Pipeline(const JobSpec& job);
  /// @brief Model chunks (cost entries): pp x virtual stages, or pp for DualPipe.
  int chunks() const { return chunks_; }
  /// @brief Chunks each stage holds.
  int local_chunks() const { return local_; }
  /// @brief The model chunk a stage's local chunk computes.
  int model_chunk(int stage, int local) const;
  /// @brief The direction of a local chunk's micro-batches (DualPipe: its local index; 0 elsewhere).
  int direction(int local) const { return kind_ == ScheduleKind::dualpipe ? local : 0; }
  /// @brief The chunk after (forward) or before (backward) a stage's local chunk in its direction; none at the end.
  std::optional<ChunkPlace> next(int stage, int local) const;
  std::optional<ChunkPlace> previous(int stage, int local) const;
  /// @brief DualPipe: the stage holding the other copy of a stage's local chunk (its gradients are summed with it).
  int twin_stage(int stage) const { return pp_ - 1 - stage; }
  /// @brief Megatron's embedding group: the stages holding the input embedding (the first model chunk's) and the
  /// copy of it that the last chunk holds (tied output layer, multi-token prediction), when those differ: {first,
  /// last}, else empty. DualPipe sums its twin copies' gradients anyway, and DualPipeV holds both on stage 0.
  std::vector<int> embedding_group(const ModelSpec& model) const;

private:
  /// @brief The stage and local index of model chunk g in `direction`.
  ChunkPlace place(int g, int direction) const;
  ScheduleKind kind_;
  int pp_     = 1;
  int local_  = 1;
  int chunks_ = 1;
};

/// @brief The order in which stage `stage` runs its passes in one step.
std::vector<Unit> schedule_units(const JobSpec& job, int stage);

} // namespace spansim::workload::detail
