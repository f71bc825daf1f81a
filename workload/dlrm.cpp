// Recommendation models (DLRM): the model and job specs, the sharding plan of the embedding tables and the step
// graph. A DLRM step is data parallel over every GPU for its dense part (MLPs, interaction), and model parallel
// for its embedding tables, whose pooled outputs are exchanged in every forward and backward pass.
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "workload/detail.hpp"
#include "workload/workload.hpp"

#include <algorithm>
#include <cmath>

namespace spansim::workload {

int DlrmModel::table_count() const
{
  int n = 0;
  for (const auto& t : tables)
    n += t.count;
  return n;
}

int DlrmModel::dim() const
{
  return tables.empty() ? 0 : tables.front().dim;
}

namespace detail {

namespace {

std::vector<int> widths(spec::ObjectReader& r, std::string_view key, bool required)
{
  std::vector<int> out;
  if (!r.has(key)) {
    if (required)
      r.raw(key); // names the missing key
    return out;
  }
  const auto& v = r.raw(key);
  if (!v.is_array() || (required && v.empty()))
    r.fail(key, "expected a list of layer widths such as [512, 256, 128]");
  for (const auto& w : v) {
    if (!w.is_number_integer() || w.get<std::int64_t>() < 1 || w.get<std::int64_t>() > kMaxDim)
      r.fail(key, "layer widths are integers from 1 to " + std::to_string(kMaxDim));
    out.push_back(w.get<int>());
  }
  return out;
}

} // namespace

DlrmModel read_dlrm_model(spec::ObjectReader r)
{
  DlrmModel m;
  m.name           = r.string("name");
  m.source         = r.optional_string("source").value_or("");
  m.dense_features = static_cast<int>(r.integer("dense_features", 0, kMaxDim));
  auto tables      = r.objects("tables", true);
  if (tables.empty())
    r.fail("tables", "expected at least one embedding table");
  std::int64_t count = 0;
  for (auto& t : tables) {
    EmbeddingTable e;
    e.count = optional_dim(t, "count", 1, 1, 1 << 20);
    count += e.count;
    if (count > (1 << 20))
      t.fail("count", "at most 1,048,576 tables in all");
    e.rows    = t.number("rows", 1, 1e13);
    e.dim     = dim(t, "dim");
    e.pooling = t.number("pooling", 1e-6, 1e6);
    if (!m.tables.empty() && e.dim != m.tables.front().dim)
      t.fail("dim", "every table has the embedding dimension of the first (" + std::to_string(m.tables.front().dim) +
                        "): the interaction takes vectors of one width");
    t.finish();
    m.tables.push_back(e);
  }
  m.bottom_mlp = widths(r, "bottom_mlp", false);
  if (m.bottom_mlp.empty() && m.dense_features > 0)
    r.fail("bottom_mlp", "expected the bottom MLP's widths, the last the embedding dimension (" +
                             std::to_string(m.dim()) + "): the " + std::to_string(m.dense_features) +
                             " dense features reach the interaction through it");
  if (m.bottom_mlp.empty() && r.has("bottom_mlp"))
    r.fail("bottom_mlp", "an empty bottom MLP: leave the key out when there are no dense features");
  if (!m.bottom_mlp.empty() && m.bottom_mlp.back() != m.dim())
    r.fail("bottom_mlp", "the last width is the embedding dimension (" + std::to_string(m.dim()) +
                             "): the dense features join the embeddings in the interaction");
  m.top_mlp     = widths(r, "top_mlp", true);
  auto i        = r.object("interaction");
  m.interaction = i.enumeration<Interaction>("kind");
  if (m.interaction == Interaction::dcnv2) {
    m.cross_layers = optional_dim(i, "layers", 3, 1, 64);
    m.cross_rank   = optional_dim(i, "rank", 512);
  } else if (i.has("layers") || i.has("rank")) {
    i.fail(i.has("layers") ? "layers" : "rank", "only DCNv2's cross layers have layers and a rank");
  }
  i.finish({"layers", "rank"});
  r.optional_string("description");
  r.finish({"source", "description", "bottom_mlp"});
  return m;
}

JobSpec parse_dlrm_job(spec::ObjectReader& r, JobSpec job)
{
  DlrmSpec d;
  d.model            = read_dlrm_model_ref(r, "model");
  job.model.name     = d.model.name;
  job.model.source   = d.model.source;
  job.gpu            = read_gpu_ref(r, "gpu");
  job.gpus           = r.integer("gpus", 1, std::int64_t{1} << 30);
  auto b             = r.object("batch");
  const auto samples = b.integer("global_samples", 1, std::int64_t{1} << 40);
  if (samples % job.gpus != 0)
    b.fail("global_samples", std::to_string(samples) + " samples do not split evenly over " + std::to_string(job.gpus) +
                                 " GPUs (each GPU trains on its own share)");
  if (samples / job.gpus > detail::kMaxDim)
    b.fail("global_samples", "at most " + std::to_string(detail::kMaxDim) + " samples per GPU");
  b.finish();
  // A sample is one "token": throughput in tokens/s is samples/s.
  job.batch.global_sequences = samples;
  job.batch.sequence_length  = 1;
  job.batch.micro_batch      = static_cast<int>(samples / job.gpus);
  auto& par                  = job.parallelism;
  par.tp = par.cp = par.pp  = 1;
  par.sequence_parallel     = false;
  par.dp                    = static_cast<int>(job.gpus);
  par.dp_mode               = DataParallelMode::ddp;
  par.reshard_after_forward = false;
  d.sharding                = r.optional_enumeration<Sharding>("sharding").value_or(Sharding::automatic);
  if (r.has("embedding_precision"))
    d.embedding_bytes = r.choice("embedding_precision", {"fp32", "fp16", "bf16"}) == "fp32" ? 4 : 2;
  if (auto t = r.optional_object("towers")) {
    d.towers            = dim(*t, "count");
    d.tower_level       = t->optional_enumeration<TowerLevel>("level").value_or(TowerLevel::node);
    d.tower_compression = t->optional_number("compression", 1, 1e6).value_or(4);
    if (job.gpus % d.towers != 0)
      t->fail("count",
              std::to_string(job.gpus) + " GPUs do not split evenly into " + std::to_string(d.towers) + " towers");
    if (d.model.table_count() % d.towers != 0)
      t->fail("count", "the " + std::to_string(d.model.table_count()) + " tables do not split evenly over " +
                           std::to_string(d.towers) + " towers (each tower holds its own feature group)");
    t->finish({"level", "compression"});
    par.ep = static_cast<int>(job.gpus / d.towers); // a tower's GPUs: the ep groups of the placement
  }
  job.precision             = Precision::bf16;
  job.gradient_reduce_bytes = 4;
  read_calibration_and_effects(r, job);
  r.optional_string("description");
  r.finish({"description", "sharding", "embedding_precision", "towers"});
  job.dlrm = std::move(d);
  dlrm_plan(job); // a plan asked for that does not apply is refused here
  return job;
}

} // namespace detail

namespace {

struct Feasible {
  bool ok = false;
  std::string why;
};

// Whether plan `s` applies to `tables` tables of dimension `dim` over `group` GPUs, each GPU then holding an
// equal share (the collective model gives every rank the same bytes).
Feasible applies(Sharding s, int tables, int dim, int group)
{
  const auto n = [](int x) { return std::to_string(x); };
  switch (s) {
  case Sharding::table_wise:
    if (tables % group == 0)
      return {true, ""};
    return {false, "table-wise needs the " + n(tables) + " tables to split evenly over the " + n(group) +
                       " GPUs they are sharded over (row-wise always applies)"};
  case Sharding::column_wise:
    if (group % tables == 0 && dim % (group / tables) == 0)
      return {true, ""};
    return {false, "column-wise splits each table's " + n(dim) + " columns evenly over " + n(group) + " / " +
                       n(tables) +
                       " GPUs, which needs the GPUs to be a multiple of the tables and the columns to "
                       "split evenly"};
  default:
    return {true, ""};
  }
}

} // namespace

DlrmPlan dlrm_plan(const JobSpec& job)
{
  const auto& d      = *job.dlrm;
  const int n        = static_cast<int>(job.gpus);
  const int towers   = std::max(1, d.towers);
  const double b     = job.batch.micro_batch;
  const double width = d.model.dim() * d.embedding_bytes;
  DlrmPlan plan;
  plan.group  = n / towers;
  plan.tables = d.model.table_count() / towers;
  // With towers a GPU ends the exchange holding the tower's features of towers x b samples (its tower handles
  // every sample of the job, over fewer GPUs).
  const double samples = b * towers;
  auto bytes           = [&](Sharding s, double& buffer) {
    // Table- and column-wise: an all-to-all of pooled vectors, each GPU receiving its samples' vectors of every
    // table. Row-wise: every GPU holds partial sums of every table for every sample of the group, reduce-scattered.
    buffer = s == Sharding::row_wise ? samples * plan.group * plan.tables * width : samples * plan.tables * width;
    return buffer * (plan.group - 1) / plan.group;
  };
  auto choose = [&](Sharding s) {
    plan.sharding           = s;
    plan.wire_bytes_per_gpu = bytes(s, plan.buffer_bytes);
  };
  if (d.sharding != Sharding::automatic) {
    const auto f = applies(d.sharding, plan.tables, d.model.dim(), plan.group);
    if (!f.ok)
      throw InfeasibleError("sharding", job.file, job.json_path + ".sharding", f.why);
    choose(d.sharding);
    return plan;
  }
  // The planner: the plan that applies and sends the fewest bytes (table-wise first on a tie).
  double best = std::numeric_limits<double>::infinity();
  for (auto s : {Sharding::table_wise, Sharding::column_wise, Sharding::row_wise}) {
    double buffer  = 0;
    const double w = bytes(s, buffer);
    if (applies(s, plan.tables, d.model.dim(), plan.group).ok && w < best) {
      best = w;
      choose(s);
    }
  }
  return plan;
}

namespace {

// Compute of a chain of GEMMs over `rows` samples: forward, and backward (data and weight gradients).
struct DenseCost {
  double fwd_seconds = 0, bwd_seconds = 0, fwd_flops = 0, bwd_flops = 0, fwd_bytes = 0, bwd_bytes = 0;
  double params = 0;
  int kernels   = 0;
  void add(const GpuSpec& gpu, double clock, const GemmShape& s, double weights)
  {
    const auto f  = gemm_cost(gpu, Precision::bf16, s, clock);
    const auto dg = gemm_cost(gpu, Precision::bf16, GemmShape{.m = s.m, .n = s.k, .k = s.n, .groups = s.groups}, clock);
    const auto wg = gemm_cost(gpu, Precision::bf16, GemmShape{.m = s.k, .n = s.n, .k = s.m, .groups = s.groups}, clock);
    fwd_seconds += f.seconds;
    fwd_flops += f.flops;
    fwd_bytes += f.bytes;
    // Interaction products have no weights: their backward is two data gradients, costed alike.
    bwd_seconds += dg.seconds + wg.seconds;
    bwd_flops += dg.flops + wg.flops;
    bwd_bytes += dg.bytes + wg.bytes;
    params += weights;
    kernels += 1;
  }
  void mlp(const GpuSpec& gpu, double clock, double rows, int in, const std::vector<int>& out)
  {
    for (int w : out) {
      add(gpu, clock, GemmShape{.m = rows, .n = double(w), .k = double(in)}, double(in) * w);
      in = w;
    }
  }
};

} // namespace

StepGraph build_dlrm_graph(const JobSpec& job, const BuildOptions& options)
{
  const auto& d          = *job.dlrm;
  const auto& m          = d.model;
  const auto plan        = dlrm_plan(job);
  const int n            = static_cast<int>(job.gpus);
  const int towers       = std::max(1, d.towers);
  const double b         = job.batch.micro_batch;
  const int dim_         = m.dim();
  const double tower_in  = double(plan.tables) * dim_;
  const double tower_out = std::max(1.0, std::round(tower_in / d.tower_compression));
  // The interaction's inputs: the tables' pooled vectors and the bottom MLP's output; with towers, the towers'
  // outputs (towers x tower_out values, as vectors of the embedding dimension) and the bottom MLP's.
  const double features = d.towers > 0 ? 1 + std::ceil(towers * tower_out / dim_) : m.table_count() + 1.0;
  const double clock    = job.effects.sustained_clock ? job.calibration.clock_fraction : 1.0;
  const double gap      = job.effects.kernel_gaps ? job.calibration.kernel_gap : 0.0;
  const auto& gpu       = job.gpu;
  const double hbm      = gpu.hbm_bandwidth * (gpu.elementwise_efficiency > 0 ? gpu.elementwise_efficiency : 1);

  // Dense compute: bottom MLP; interaction; top MLP; tower modules.
  DenseCost bottom, top, tower;
  bottom.mlp(gpu, clock, b, m.dense_features, m.bottom_mlp);
  double top_in = 0;
  if (m.interaction == Interaction::dcnv2) {
    const double x = features * dim_; // the concatenated features, crossed with themselves
    for (int l = 0; l < m.cross_layers; ++l) {
      top.add(gpu, clock, GemmShape{.m = b, .n = double(m.cross_rank), .k = x}, x * m.cross_rank);
      top.add(gpu, clock, GemmShape{.m = b, .n = x, .k = double(m.cross_rank)}, x * m.cross_rank);
    }
    top_in = x;
  } else {
    top.add(gpu, clock, GemmShape{.m = features, .n = features, .k = double(dim_), .groups = int(b)}, 0);
    top_in = dim_ + features * (features - 1) / 2;
  }
  if (top_in > detail::kMaxDim)
    throw InfeasibleError("tables", job.file, job.json_path + ".model",
                          "the interaction's output (" + std::to_string(top_in) + " values) is wider than " +
                              std::to_string(detail::kMaxDim));
  top.mlp(gpu, clock, b, static_cast<int>(top_in), m.top_mlp);
  if (d.towers > 0)
    tower.add(gpu, clock, GemmShape{.m = b * towers, .n = tower_out, .k = tower_in}, tower_in * tower_out);
  const double dense_params = bottom.params + top.params + tower.params;

  // Embeddings: each GPU looks up its share of every sample's rows (balanced), reads the gathered rows, and in
  // the backward pass reads the gradients and reads and writes the rows it updates and their Adagrad state (one
  // accumulator per element: MLPerf's reference runs exact Adagrad).
  // Before the lookups the sparse IDs (8 bytes each) go to the GPUs holding their rows, as TorchRec's input
  // distribution does.
  double pooled = 0, table_bytes = 0, table_rows = 0;
  for (const auto& t : m.tables) {
    pooled += t.count * t.pooling;
    table_bytes += t.count * t.rows * dim_ * d.embedding_bytes;
    table_rows += t.count * t.rows;
  }
  const double lookup_bytes = b * pooled * dim_ * d.embedding_bytes;
  const double lookup_s     = lookup_bytes / hbm + gap;
  const double update_s     = 5 * lookup_bytes / hbm + gap;
  // Column-wise, every ID goes to each of its table's column shards.
  const double id_bytes =
      b * pooled * 8 * (plan.sharding == Sharding::column_wise ? double(plan.group) / plan.tables : 1.0);

  MemoryEstimate mem;
  mem.weights       = table_bytes / n + dense_params * 4;
  mem.optimizer     = table_rows * dim_ * 4 / n + dense_params * 4; // Adagrad: one fp32 accumulator per element
  mem.gradients     = dense_params * 4 + lookup_bytes;
  const int crossed = m.interaction == Interaction::dcnv2 ? m.cross_layers : 0;
  mem.activations   = b * (features * dim_ + top_in * (crossed + 2)) * 2 + plan.buffer_bytes * 2;
  if (options.check_memory && mem.total() > gpu.hbm_capacity)
    throw InfeasibleError("memory", job.file, job.json_path,
                          "the DLRM needs " + std::to_string(mem.total() / (1 << 30)) + " GiB per GPU (tables " +
                              std::to_string(table_bytes / n / (1 << 30)) + " GiB) and " + gpu.name + " has " +
                              std::to_string(gpu.hbm_capacity / (1 << 30)) + " GiB: use more GPUs");

  StageProgram st;
  st.stage  = 0;
  st.params = dense_params + table_bytes / d.embedding_bytes / n;
  st.memory = mem;
  auto& ops = st.ops;
  auto push = [&](Op op) {
    op.chunk       = 0;
    op.micro_batch = 0;
    ops.push_back(std::move(op));
    return static_cast<int>(ops.size()) - 1;
  };
  auto compute = [&](OpKind kind, double seconds, double flops, double bytes, std::vector<int> deps) {
    Op op;
    op.kind           = kind;
    op.seconds        = seconds;
    op.model_flops    = flops;
    op.hardware_flops = flops;
    op.hbm_bytes      = bytes;
    op.deps           = std::move(deps);
    return push(std::move(op));
  };
  auto collective = [&](CollectiveOp c, Dim dim, Purpose purpose, Group group, double bytes, bool overlappable,
                        std::vector<int> deps) {
    Op op;
    op.kind         = OpKind::collective;
    op.collective   = c;
    op.dim          = dim;
    op.purpose      = purpose;
    op.group        = group;
    op.bytes        = bytes;
    op.count        = 1;
    op.overlappable = overlappable;
    op.deps         = std::move(deps);
    return push(std::move(op));
  };
  const bool rows      = plan.sharding == Sharding::row_wise;
  const Group exchange = d.towers > 0 ? Group{Axis::ep, plan.group} : Group{Axis::dp, n};
  const Group across   = Group{Axis::edp, towers};
  const double cross   = b * towers * tower_out * d.embedding_bytes; // a GPU's tower outputs, back to their owners

  // The IDs: with towers first to the tower holding their features, then inside it to the rows' GPUs.
  int ids = -1;
  if (d.towers > 0)
    ids = collective(CollectiveOp::all_to_all, Dim::ep, Purpose::ep_dispatch, across, id_bytes, false, {});
  ids              = collective(CollectiveOp::all_to_all, Dim::ep, Purpose::ep_dispatch, exchange, id_bytes, false,
                   ids < 0 ? std::vector<int>{} : std::vector<int>{ids});
  const int lookup = compute(OpKind::forward, lookup_s, 0, lookup_bytes, {ids});
  int ready = collective(rows ? CollectiveOp::reduce_scatter : CollectiveOp::all_to_all, Dim::ep, Purpose::ep_dispatch,
                         exchange, plan.buffer_bytes, false, {lookup});
  const int bot_fwd =
      compute(OpKind::forward, bottom.fwd_seconds + gap * bottom.kernels, bottom.fwd_flops, bottom.fwd_bytes, {});
  if (d.towers > 0) {
    const int module = compute(OpKind::forward, tower.fwd_seconds + gap, tower.fwd_flops, tower.fwd_bytes, {ready});
    ready = collective(CollectiveOp::all_to_all, Dim::ep, Purpose::ep_dispatch, across, cross, false, {module});
  }
  compute(OpKind::forward, top.fwd_seconds + gap * top.kernels, top.fwd_flops, top.fwd_bytes, {ready, bot_fwd});
  const int top_bwd =
      compute(OpKind::backward, top.bwd_seconds + 2 * gap * top.kernels, top.bwd_flops, top.bwd_bytes, {});
  int grads = top_bwd;
  if (d.towers > 0)
    grads = collective(CollectiveOp::all_to_all, Dim::ep, Purpose::ep_combine, across, cross, false, {top_bwd});
  const int bot_bwd =
      compute(OpKind::backward, bottom.bwd_seconds + 2 * gap * bottom.kernels, bottom.bwd_flops, bottom.bwd_bytes, {});
  std::vector<int> dense_done{bot_bwd, top_bwd};
  int module_reduce = -1;
  if (d.towers > 0) {
    grads = compute(OpKind::backward, tower.bwd_seconds + 2 * gap, tower.bwd_flops, tower.bwd_bytes, {grads});
    // A tower's module is data parallel inside its tower (TorchRec's tower sharding): reduced there.
    module_reduce = collective(CollectiveOp::all_reduce, Dim::dp, Purpose::grad_reduce, exchange,
                               tower.params * job.gradient_reduce_bytes, true, {grads});
  }
  const int back = collective(rows ? CollectiveOp::all_gather : CollectiveOp::all_to_all, Dim::ep, Purpose::ep_combine,
                              exchange, plan.buffer_bytes, false, {grads});
  const int reduce = collective(CollectiveOp::all_reduce, Dim::dp, Purpose::grad_reduce, Group{Axis::dp, n},
                                (bottom.params + top.params) * job.gradient_reduce_bytes, true, dense_done);
  compute(OpKind::optimizer, update_s, 0, 5 * lookup_bytes, {back});
  std::vector<int> reduced{reduce};
  if (module_reduce >= 0)
    reduced.push_back(module_reduce);
  compute(OpKind::optimizer, dense_params * 20 / hbm + gap, 0, dense_params * 20, reduced);

  StepGraph graph;
  graph.job           = job;
  graph.micro_batches = 1;
  graph.stages.push_back(std::move(st));
  return graph;
}

} // namespace spansim::workload
