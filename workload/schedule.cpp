// Pipeline schedules: the compute order of each stage. GPipe, 1F1B and interleaved 1F1B follow Megatron-LM; with
// ep_overlap, Megatron's combined 1F1B (one more warm-up forward, the steady state's forward and backward as an
// overlapped pair); ZB-H1 follows the hand-written schedule of sail-sg/zero-bubble-pipeline-parallelism
// (get_hand_schedule with warmup_c = 1); DualPipe and DualPipeV follow deepseek-ai/DualPipe's eight steps.
#include "workload/schedule.hpp"

#include <algorithm>
#include <deque>

namespace spansim::workload::detail {

Pipeline::Pipeline(const JobSpec& job)
    : kind_(job.schedule.kind), pp_(job.parallelism.pp), local_(job.schedule.virtual_stages),
      chunks_(kind_ == ScheduleKind::dualpipe ? pp_ : pp_ * local_)
{
}

int Pipeline::model_chunk(int stage, int local) const
{
  switch (kind_) {
  case ScheduleKind::dualpipe:
    return local == 0 ? stage : pp_ - 1 - stage;
  case ScheduleKind::dualpipev:
    return local == 0 ? stage : 2 * pp_ - 1 - stage;
  default:
    return local * pp_ + stage;
  }
}

ChunkPlace Pipeline::place(int g, int direction) const
{
  switch (kind_) {
  case ScheduleKind::dualpipe:
    return direction == 0 ? ChunkPlace{g, 0} : ChunkPlace{pp_ - 1 - g, 1};
  case ScheduleKind::dualpipev:
    return g < pp_ ? ChunkPlace{g, 0} : ChunkPlace{2 * pp_ - 1 - g, 1};
  default:
    return ChunkPlace{g % pp_, g / pp_};
  }
}

std::vector<int> Pipeline::embedding_group(const ModelSpec& model) const
{
  if (!model.tied_embeddings && model.mtp_layers == 0)
    return {};
  if (kind_ == ScheduleKind::dualpipe)
    return {};
  const int first = place(0, 0).stage, last = place(chunks_ - 1, 0).stage;
  if (first == last)
    return {};
  return {first, last};
}

std::optional<ChunkPlace> Pipeline::next(int stage, int local) const
{
  const int g = model_chunk(stage, local);
  if (g + 1 >= chunks_)
    return std::nullopt;
  return place(g + 1, direction(local));
}

std::optional<ChunkPlace> Pipeline::previous(int stage, int local) const
{
  const int g = model_chunk(stage, local);
  if (g == 0)
    return std::nullopt;
  return place(g - 1, direction(local));
}

namespace {

// 1F1B: pp - stage - 1 warm-up forwards, then one forward and one backward in turn, then the remaining backwards.
// With the expert all-to-all overlap one more forward warms up and each steady forward pairs with its backward.
std::vector<Unit> one_f_one_b(int pp, int stage, int m, bool overlap)
{
  std::vector<Unit> u;
  const int warmup = std::min(pp - stage - 1 + (overlap ? 1 : 0), m);
  for (int i = 0; i < warmup; ++i)
    u.push_back({Pass::forward, 0, i});
  for (int i = 0; i < m - warmup; ++i) {
    u.push_back({Pass::forward, 0, warmup + i, overlap});
    u.push_back({Pass::backward, 0, i});
  }
  for (int i = m - warmup; i < m; ++i)
    u.push_back({Pass::backward, 0, i});
  return u;
}

// Interleaved 1F1B (Megatron-LM) with Llama 3's tunable number of consecutive micro-batches per chunk (`n`,
// Megatron's microbatch_group_size_per_vp_stage).
std::vector<Unit> interleaved(int pp, int stage, int m, int v, int n, bool overlap)
{
  std::vector<Unit> u;
  const int total  = m * v;
  auto fwd         = [&](int k) { return Unit{Pass::forward, (k / n) % v, (k / (n * v)) * n + k % n}; };
  auto bwd         = [&](int k) { return Unit{Pass::backward, v - 1 - (k / n) % v, (k / (n * v)) * n + k % n}; };
  const int warmup = std::min((pp - stage - 1) * 2 + (v - 1) * n + (overlap ? 1 : 0), total);
  for (int k = 0; k < warmup; ++k)
    u.push_back(fwd(k));
  for (int k = 0; k < total - warmup; ++k) {
    Unit f   = fwd(warmup + k);
    f.paired = overlap;
    u.push_back(f);
    u.push_back(bwd(k));
  }
  for (int k = total - warmup; k < total; ++k)
    u.push_back(bwd(k));
  return u;
}

// ZB-H1: 1F1B's warm-up, each backward split into B (input gradients) and W (weight gradients); stage i defers
// i weight passes to the end, which fills the cool-down bubble with them at 1F1B's memory.
std::vector<Unit> zb_h1(int pp, int stage, int m)
{
  std::vector<Unit> u;
  const int warmup = pp - stage - 1;
  int f = 0, b = 0, w = 0;
  for (int i = 0; i < warmup && f < m; ++i)
    u.push_back({Pass::forward, 0, f++});
  for (int i = 0; i < m; ++i) {
    if (warmup + i < m)
      u.push_back({Pass::forward, 0, f++});
    u.push_back({Pass::backward_input, 0, b++});
    if (warmup + i >= pp - 1)
      u.push_back({Pass::weight, 0, w++});
  }
  while (w < m)
    u.push_back({Pass::weight, 0, w++});
  return u;
}

// DualPipe's eight steps (dualpipe.py), shared with DualPipeV ("cut in half": twice the ranks' stages in a V, the
// rank in place of the half-rank, all micro-batches entering at the first stage). Phase 0 is the chunk this stage
// holds early in its direction, phase 1 the late one.
std::vector<Unit> dualpipe(const JobSpec& job, int stage)
{
  const int pp = job.parallelism.pp, m = job.micro_batches();
  const bool v = job.schedule.kind == ScheduleKind::dualpipev;
  // N: half the pipeline's length in stages; h: how far this stage is from the nearer end; M: micro-batches per
  // direction.
  const int N = v ? pp : pp / 2, h = v ? stage : std::min(stage, pp - 1 - stage), M = v ? m : m / 2;
  const bool second_half = !v && stage >= pp / 2;
  auto local             = [&](int phase) { return second_half ? phase ^ 1 : phase; };
  int issued_f[2] = {0, 0}, issued_b[2] = {0, 0};
  std::deque<Unit> weights; // deferred weight passes, first in first out (WeightGradStore)
  std::vector<Unit> u;
  auto mb = [&](int l, int count) { return v ? count : l * M + count; };
  auto F  = [&](int phase, bool paired = false) {
    const int l = local(phase);
    u.push_back({Pass::forward, l, mb(l, issued_f[l]++), paired});
  };
  auto B = [&](int phase, bool zero_bubble = false) {
    const int l = local(phase), i = mb(l, issued_b[l]++);
    if (zero_bubble) {
      u.push_back({Pass::backward_input, l, i});
      weights.push_back({Pass::weight, l, i});
    } else {
      u.push_back({Pass::backward, l, i});
    }
  };
  auto W = [&] {
    u.push_back(weights.front());
    weights.pop_front();
  };
  const bool middle = h == N - 1;
  for (int i = 0; i < 2 * (N - h - 1); ++i) // step 1: nF0
    F(0);
  for (int i = 0; i < h + 1; ++i) { // step 2: nF0F1
    F(0);
    F(1);
  }
  for (int i = 0; i < N - h - 1; ++i) { // step 3: nB1W1F1, zero bubble
    B(1, true);
    W();
    F(1);
  }
  for (int i = 0; i < M - 2 * N + h + 1; ++i) { // step 4, the main step: nF0B1F1B0
    // The middle stages do not overlap their first pair, to shorten the bubble.
    F(0, !(i == 0 && middle));
    B(1);
    F(1, true);
    B(0);
  }
  for (int i = 0; i < N - h - 1; ++i) { // step 5: nB1F1B0
    B(1);
    F(1, true);
    B(0);
  }
  bool zero_bubble = false; // step 6: nB1B0, the second half with zero bubble
  for (int i = 0; i < h + 1; ++i) {
    if (i == (h + 1) / 2 && h % 2 == 1)
      zero_bubble = true;
    B(1, zero_bubble);
    if (i == (h + 1) / 2 && h % 2 == 0)
      zero_bubble = true;
    B(0, zero_bubble);
  }
  for (int i = 0; i < N - h - 1; ++i) { // step 7: nWB0, zero bubble
    W();
    B(0, true);
  }
  while (!weights.empty()) // step 8: nW
    W();
  return u;
}

} // namespace

std::vector<Unit> schedule_units(const JobSpec& job, int stage)
{
  const int pp = job.parallelism.pp, m = job.micro_batches();
  const bool overlap = job.schedule.ep_overlap;
  switch (job.schedule.kind) {
  case ScheduleKind::gpipe: {
    std::vector<Unit> u;
    for (int i = 0; i < m; ++i)
      u.push_back({Pass::forward, 0, i});
    for (int i = 0; i < m; ++i)
      u.push_back({Pass::backward, 0, i});
    return u;
  }
  case ScheduleKind::one_f_one_b:
    return one_f_one_b(pp, stage, m, overlap);
  case ScheduleKind::interleaved_1f1b:
    return interleaved(pp, stage, m, job.schedule.virtual_stages, job.schedule.microbatch_group, overlap);
  case ScheduleKind::zb_h1:
    return zb_h1(pp, stage, m);
  case ScheduleKind::dualpipe:
  case ScheduleKind::dualpipev:
    return dualpipe(job, stage);
  }
  return {};
}

} // namespace spansim::workload::detail
