// Jobs: reading a job spec, and checking a job (read or built by a search) against its model and GPU.
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/paths.hpp"
#include "workload/detail.hpp"
#include "workload/workload.hpp"

#include <filesystem>
#include <limits>

namespace spansim::workload {

using detail::dim;
using detail::optional_dim;

namespace {

// The most micro-batches a step may have: the schedule expands them one by one (and the count is an int).
constexpr std::int64_t kMaxMicroBatches = 1'000'000;

// Where a job's keys sit, for errors found after reading (or in a job no file describes).
struct JobLocation {
  const JobSpec& job;
  spec::Location at(std::initializer_list<std::string_view> keys) const
  {
    spec::Location l{job.file, job.json_path};
    for (auto k : keys)
      l = l.member(k);
    return l;
  }
  [[noreturn]] void fail(JobIssue issue, std::initializer_list<std::string_view> keys, const std::string& what) const
  {
    const auto l = at(keys);
    throw InfeasibleError(std::string(name_of(issue)), l.file, l.path, what);
  }
};

// Megatron's rules for a layout (PipelineParallelLayerLayout.validate_layer_layout) and spansim's own: the MTP modules
// sit in the last chunk, with the loss (Megatron also allows them alone on an earlier stage's last chunk).
void check_pipeline_layout(JobSpec& job, const JobLocation& at)
{
  const ParallelismSpec& par = job.parallelism;
  const ScheduleSpec& sched  = job.schedule;
  auto n                     = [](std::int64_t v) { return std::to_string(v); };
  auto fail = [&](const std::string& what) { at.fail(JobIssue::layers, {"parallelism", "pipeline_layout"}, what); };
  if (sched.kind == ScheduleKind::dualpipe || sched.kind == ScheduleKind::dualpipev)
    fail(std::string(name_of(sched.kind)) + " places two model chunks per stage by construction; give no layout");
  std::vector<detail::LayoutChunk> chunks;
  try {
    chunks = detail::parse_pipeline_layout(par.pipeline_layout);
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
  const int v = sched.kind == ScheduleKind::interleaved_1f1b ? sched.virtual_stages : 1;
  if (static_cast<std::int64_t>(chunks.size()) != std::int64_t{par.pp} * v)
    fail(n(std::int64_t(chunks.size())) + " chunks for pp " + n(par.pp) + " x " + n(v) +
         " virtual stages: one per model chunk, separated by '|'");
  int decoder = 0, mtp = 0, embedding = 0, loss = 0;
  for (std::size_t g = 0; g < chunks.size(); ++g) {
    const auto& c = chunks[g];
    decoder += c.decoder;
    mtp += c.mtp;
    embedding += c.embedding;
    loss += c.loss;
    if (c.decoder + c.mtp + c.embedding + c.loss == 0)
      fail("chunk " + n(std::int64_t(g)) + " is empty: give each chunk an E, t, m or L");
    // Megatron's overlapped pairs interleave two chunks layer by layer; a chunk without layers has none to pair.
    if (c.decoder + c.mtp == 0 && sched.ep_overlap)
      fail("chunk " + n(std::int64_t(g)) + " (\"" + c.items +
           "\") holds no transformer layer, which ep_overlap's layer-by-layer pairs cannot run; give it a t");
    if (c.mtp > 0 && g + 1 != chunks.size())
      fail("chunk " + n(std::int64_t(g)) +
           " holds an MTP module: spansim places them in the last chunk, with the loss");
  }
  if (embedding != 1 || chunks.front().items.empty() || chunks.front().items.front() != 'E')
    fail("the embedding (E) must come once, first in chunk 0");
  if (loss != 1 || chunks.back().items.empty() || chunks.back().items.back() != 'L')
    fail("the loss (L) must come once, last in the last chunk");
  if (decoder != job.model.layers)
    fail("the layout holds " + n(decoder) + " decoder layers (t); the model has " + n(job.model.layers));
  if (mtp != job.model.mtp_layers)
    fail("the layout holds " + n(mtp) + " MTP modules (m); the job's mtp_layers is " + n(job.model.mtp_layers));
  const std::string& last = chunks.back().items;
  if (mtp > 0 && last.find('t', last.find('m')) != std::string::npos)
    fail("decoder layers (t) must come before the MTP modules (m), as Megatron requires");
  job.parallelism.chunk_layers.clear();
  for (const auto& c : chunks)
    job.parallelism.chunk_layers.push_back(c.decoder);
}

} // namespace

BatchSpec read_batch(spec::ObjectReader b, bool micro_batch_allowed)
{
  BatchSpec batch;
  batch.sequence_length = dim(b, "sequence_length");
  if (micro_batch_allowed)
    batch.micro_batch = optional_dim(b, "micro_batch", 1);
  batch.by_tokens    = b.has("global_tokens");
  const bool by_seqs = b.has("global_sequences");
  if (batch.by_tokens == by_seqs)
    b.fail("global_tokens", "give exactly one of \"global_tokens\" and \"global_sequences\"");
  if (batch.by_tokens) {
    std::int64_t tokens = b.integer("global_tokens", 1, std::int64_t{1} << 50);
    if (tokens % batch.sequence_length != 0)
      b.fail("global_tokens", "global_tokens " + std::to_string(tokens) + " is not a multiple of sequence_length " +
                                  std::to_string(batch.sequence_length));
    batch.global_sequences = tokens / batch.sequence_length;
  } else {
    batch.global_sequences = b.integer("global_sequences", 1, std::int64_t{1} << 40);
  }
  if (!micro_batch_allowed && b.has("micro_batch"))
    b.fail("micro_batch", "the micro-batch is searched: leave it out here");
  b.finish();
  return batch;
}

// Megatron's recompute_modules, each once, each one the model has something for.
std::vector<RecomputeModule> read_recompute_modules(spec::ObjectReader& r, Recompute recompute, const ModelSpec& model)
{
  constexpr std::string_view key = "recompute_modules";
  if (recompute != Recompute::selective)
    r.fail(key, "only with \"recompute\": \"selective\" (Megatron's recompute_granularity \"selective\")");
  const auto names = r.strings(key);
  if (names.empty())
    r.fail(key, "an empty list (give one or more of " + allowed_names<RecomputeModule>(true) + ")");
  bool dense_layer = false;
  for (int l = 0; l < model.layers && !dense_layer; ++l)
    dense_layer = !model.is_moe_layer(l);
  std::vector<RecomputeModule> out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string at = "element " + std::to_string(i) + ": ";
    const auto m         = parse_name<RecomputeModule>(names[i]);
    if (!m)
      r.fail(key, at + "unknown module \"" + names[i] + "\" (allowed: " + allowed_names<RecomputeModule>(true) + ")");
    if (std::find(out.begin(), out.end(), *m) != out.end())
      r.fail(key, at + "\"" + names[i] + "\" is listed twice");
    const std::string has_none = at + "model " + model.name + " has no ";
    if (*m == RecomputeModule::mla_up_proj && model.attention != AttentionKind::mla)
      r.fail(key, has_none + "multi-latent attention to up-project");
    if ((*m == RecomputeModule::moe_act || *m == RecomputeModule::moe) && model.moe.experts == 0)
      r.fail(key, has_none + "routed experts (it is dense)");
    if (*m == RecomputeModule::shared_experts && model.moe.shared_experts == 0)
      r.fail(key, has_none + "shared experts");
    if (*m == RecomputeModule::mlp && !dense_layer)
      r.fail(key,
             has_none + "dense MLP layer (\"mlp\" re-runs dense layers' MLPs; \"moe_act\" the experts' activation)");
    out.push_back(*m);
  }
  // The whole MoE layer re-runs its activation and shared experts already.
  const bool moe = std::find(out.begin(), out.end(), RecomputeModule::moe) != out.end();
  for (const RecomputeModule inside : {RecomputeModule::moe_act, RecomputeModule::shared_experts})
    if (moe && std::find(out.begin(), out.end(), inside) != out.end())
      r.fail(key, "\"moe\" re-runs the whole MoE layer, \"" + std::string(name_of(inside)) + "\" with it: list one");
  return out;
}

JobSpec load_job(const std::string& path)
{
  return parse_job(spec::load_json_file(path), path);
}

int JobSpec::micro_batches() const
{
  return static_cast<int>(batch.global_sequences / (static_cast<std::int64_t>(parallelism.dp) * batch.micro_batch));
}

double JobSpec::tokens_per_step() const
{
  return static_cast<double>(batch.global_sequences) * batch.sequence_length;
}

void read_calibration_and_effects(spec::ObjectReader& r, JobSpec& job)
{
  if (r.has("calibration")) {
    job.calibration = load_calibration(r.string("calibration"), r.where().member("calibration"));
    // A profile fitted on one GPU says nothing of another.
    if (job.calibration.name != "none" && !job.calibration.covers(job.gpu.name)) {
      std::string gpus;
      for (const auto& g : job.calibration.gpus)
        gpus += (gpus.empty() ? "\"" : ", \"") + g + "\"";
      r.fail("calibration", "profile \"" + job.calibration.name + "\" holds for GPU " + gpus + ", the job runs on \"" +
                                job.gpu.name + "\"");
    }
  } else {
    job.calibration = default_calibration(job.gpu);
  }
  if (auto e = r.optional_object("effects")) {
    for (const auto& [key, member] : kEffectSwitches)
      job.effects.*member = e->optional_boolean(std::string(key)).value_or(true);
    e->finish();
  }
}

nlohmann::json calibration_and_effects_json(const JobSpec& job)
{
  nlohmann::json out = {{"calibration", job.calibration.name}};
  nlohmann::json off = nlohmann::json::object();
  for (const auto& [key, member] : kEffectSwitches)
    if (!(job.effects.*member))
      off[std::string(key)] = false;
  if (!off.empty())
    out["effects"] = off;
  return out;
}

DispatchSpec read_dispatch(spec::ObjectReader e, const GpuSpec& gpu)
{
  DispatchSpec d;
  d.dispatcher = e.optional_enumeration<Dispatcher>("dispatcher").value_or(Dispatcher::alltoall);
  d.node_limit = static_cast<int>(e.optional_integer("node_limit", 1, 1 << 20).value_or(0));
  d.precision  = e.optional_enumeration<Precision>("dispatch_precision").value_or(Precision::bf16);
  if (d.precision != Precision::bf16 && d.precision != Precision::fp8)
    e.fail("dispatch_precision", "tokens are dispatched in \"bf16\" or \"fp8\"");
  // Any integer is read, so that one out of range is refused naming the GPU whose SMs bound it. The kernels share
  // the GPU with the compute they overlap: they may take all of its SMs but one, as a GPU file's comm_sms may.
  const auto sms = e.optional_integer("dispatch_sms", std::numeric_limits<std::int64_t>::min(),
                                      std::numeric_limits<std::int64_t>::max());
  if (sms)
    if (const auto problem = dispatch_sms_problem(*sms, gpu, gpu.name); !problem.empty())
      e.fail("dispatch_sms", problem);
  d.sms = static_cast<int>(sms.value_or(0));
  if (auto rt = e.optional_object("routing")) {
    RoutingSpec& rs = d.routing;
    rs.balance      = rt->enumeration<RoutingBalance>("balance");
    if (rs.balance != RoutingBalance::balanced)
      rs.skew = rt->optional_number("skew", 0, 10).value_or(rs.skew);
    else if (rt->has("skew"))
      rt->fail("skew", "only meaningful with balance \"dropless\" or \"token-drop\" (balanced routing has none)");
    if (rs.balance == RoutingBalance::token_drop) {
      rs.capacity_factor = rt->optional_number("capacity_factor", 0, 1e6).value_or(1);
      if (!(rs.capacity_factor > 0))
        rt->fail("capacity_factor", "capacity_factor must be above 0 (an expert's capacity over the mean load)");
      rs.pad_to_capacity = rt->optional_boolean("pad_to_capacity").value_or(false);
    } else {
      for (auto key : {"capacity_factor", "pad_to_capacity"})
        if (rt->has(key))
          rt->fail(key, "only meaningful with balance \"token-drop\"");
    }
    rs.seed = static_cast<std::uint64_t>(rt->optional_integer("seed", 0, std::int64_t{1} << 53).value_or(1));
    rt->finish();
  }
  if (d.node_limit > 0 && d.dispatcher != Dispatcher::deepep)
    e.fail("node_limit", "node_limit bounds the nodes a token's copies cross, which only the \"deepep\" dispatcher "
                         "deduplicates; give \"dispatcher\": \"deepep\" with it");
  e.finish();
  return d;
}

namespace {

// Reads precision.activation_cache: each kept format a low-precision one only where the job's FP8 recipe casts (its
// cast rate is FP8's; an NVFP4 job's rate includes its Hadamard transforms), and the MLP's only for a gated MLP (the
// input Megatron's bias-SwiGLU stores in FP8; a plain MLP's GELU keeps its own).
void read_activation_cache(spec::ObjectReader& ac, JobSpec& job)
{
  auto read = [&](const char* key) {
    const auto format = ac.optional_enumeration<KeptFormat>(key).value_or(KeptFormat::bf16);
    if (format != KeptFormat::bf16 && job.precision != Precision::fp8 && job.precision != Precision::mxfp8)
      ac.fail(key, "activations are kept in a low precision by the casts of an FP8 recipe: give compute \"fp8\" or "
                   "\"mxfp8\" (this job computes in " +
                       std::string(name_of(job.precision)) + ")");
    return format;
  };
  job.activation_cache.mlp_activation_input = read("mlp_activation_input");
  if (job.activation_cache.mlp_activation_input == KeptFormat::e5m6)
    ac.fail("mlp_activation_input", "kept in \"bf16\" or \"fp8\" (E5M6 is DeepSeek's format for the attention output)");
  if (job.activation_cache.mlp_activation_input != KeptFormat::bf16 && job.model.mlp != MlpKind::gated)
    ac.fail("mlp_activation_input", "model " + job.model.name +
                                        " has a plain MLP: the activation input kept in FP8 is a gated MLP's gate and "
                                        "up (Megatron's bias-SwiGLU)");
  job.activation_cache.attention_output = read("attention_output");
  ac.finish();
}

} // namespace

void read_precision(spec::ObjectReader& r, JobSpec& job)
{
  if (auto pr = r.optional_object("precision")) {
    job.precision = pr->optional_enumeration<Precision>("compute").value_or(Precision::bf16);
    // Refused while reading: a search would otherwise count every point as infeasible for the same reason.
    if (!(job.gpu.peak(job.precision) > 0))
      pr->fail("compute", "GPU " + job.gpu.name + " has no " + std::string(name_of(job.precision)) +
                              " tensor cores (no peak_" + std::string(name_of(job.precision)) +
                              " in its GPU file; it has: " + job.gpu.precisions() + ")");
    if (pr->has("recipe")) {
      if (job.precision != Precision::fp8)
        pr->fail("recipe", "a scaling recipe is chosen for compute \"fp8\" only (mxfp8 and nvfp4 scale by blocks "
                           "of their own)");
      job.fp8_recipe = pr->enumeration<Fp8Recipe>("recipe");
    }
    job.gradient_reduce_bytes =
        (pr->has("gradient_reduce") ? pr->choice("gradient_reduce", {"fp32", "bf16"}) : "fp32") == "fp32" ? 4 : 2;
    if (pr->has("param_gather") && pr->choice("param_gather", {"bf16", "fp8"}) == "fp8") {
      if (job.precision != Precision::fp8 && job.precision != Precision::mxfp8)
        pr->fail("param_gather", "FP8 primary weights (Megatron's fp8_param_gather) need compute \"fp8\" or "
                                 "\"mxfp8\"; this job computes in " +
                                     std::string(name_of(job.precision)));
      // Megatron gathers FP8 primary weights from the distributed optimizer's or FSDP's shards; DDP gathers nothing.
      if (job.parallelism.dp_mode == DataParallelMode::ddp)
        pr->fail("param_gather", "FP8 parameter all-gathers need sharded data parallelism (data_parallel \"fsdp\" "
                                 "or \"hsdp\"); this job's is \"ddp\", which gathers no parameters");
      job.low_precision_param_gather = true;
    }
    if (auto ac = pr->optional_object("activation_cache"))
      read_activation_cache(*ac, job);
    pr->finish();
  }
}

void read_kernels(spec::ObjectReader& r, JobSpec& job)
{
  job.attention = job.gpu.attention_default;
  if (auto k = r.optional_object("kernels")) {
    if (k->has("attention"))
      job.attention = k->enumeration<AttentionKernel>("attention");
    if (k->has("gemm"))
      job.gemm_library = k->enumeration<GemmLibrary>("gemm");
    if (k->has("expert_quantize"))
      job.expert_quantize = k->enumeration<ExpertQuantize>("expert_quantize");
    k->finish({"attention", "gemm", "expert_quantize"});
  }
}

JobSpec parse_job(const nlohmann::json& json, const std::string& file, const std::string& json_path)
{
  spec::ObjectReader r(json, spec::Location{file, json_path});
  JobSpec job;
  job.file      = file;
  job.json_path = json_path;
  job.name      = r.has("name") ? r.name("name") : sanitized_name(std::filesystem::path(file).stem().string());
  if (r.has("kind")) {
    r.choice("kind", {"dlrm"}); // a Chakra job (kind "chakra") is read by traces/, before this
    return detail::parse_dlrm_job(r, std::move(job));
  }
  job.model = read_model_ref(r, "model");
  job.gpu   = read_gpu_ref(r, "gpu");
  job.gpus  = r.integer("gpus", 1, std::int64_t{1} << 40);

  auto p                = r.object("parallelism");
  ParallelismSpec& par  = job.parallelism;
  par.tp                = optional_dim(p, "tp", 1);
  par.sequence_parallel = p.optional_boolean("sequence_parallel").value_or(par.tp > 1);
  par.tp_overlap        = p.optional_boolean("tp_overlap").value_or(false);
  par.cp                = optional_dim(p, "cp", 1);
  par.cp_comm           = p.optional_enumeration<CpComm>("cp_comm").value_or(CpComm::allgather);
  if (par.cp_comm == CpComm::a2a_p2p)
    par.cp_a2a = static_cast<int>(p.integer("cp_a2a", 2, 1 << 20));
  else if (p.has("cp_a2a"))
    p.fail("cp_a2a", "the all-to-all group's size is given with \"cp_comm\": \"a2a+p2p\" only");
  par.pp      = optional_dim(p, "pp", 1);
  par.dp      = optional_dim(p, "dp", 1);
  par.ep      = optional_dim(p, "ep", 1);
  par.etp     = optional_dim(p, "etp", par.tp);
  par.dp_mode = p.optional_enumeration<DataParallelMode>("data_parallel").value_or(DataParallelMode::fsdp);
  par.reshard_after_forward =
      par.dp_mode != DataParallelMode::ddp && p.optional_boolean("reshard_after_forward").value_or(true);
  if (par.dp_mode == DataParallelMode::hsdp)
    par.hsdp_shard = dim(p, "hsdp_shard_size");
  if (p.has("order"))
    par.order = read_rank_order(p, "order");
  else if (job.model.moe.experts > 0)
    par.order.assign(kMegatronOrder.begin(), kMegatronOrder.end());
  if (p.has("stage_layers")) {
    const auto& v = p.raw("stage_layers");
    if (v.is_string() && v.get<std::string>() == "balanced")
      par.balance_layers = true;
    else if (v.is_array() && !v.empty()) {
      for (const auto& e : v) {
        if (!e.is_number_integer() || e.get<std::int64_t>() < 1 || e.get<std::int64_t>() > 100'000)
          p.fail("stage_layers", "expected layer counts from 1 to 100000, one per pipeline stage");
        par.stage_layers.push_back(e.get<int>());
      }
    } else {
      p.fail("stage_layers", "expected \"balanced\" or a list of layer counts, one per pipeline stage");
    }
  }
  if (p.has("pipeline_layout")) {
    par.pipeline_layout = p.string("pipeline_layout");
    if (!par.stage_layers.empty() || par.balance_layers)
      p.fail("pipeline_layout", "give either stage_layers or pipeline_layout, not both");
    // Parsed and checked with the schedule (validate_job); an empty one would read there as none.
    if (par.pipeline_layout.empty())
      p.fail("pipeline_layout", "an empty layout (give one chunk per pipeline stage and virtual stage)");
  }
  // Keys valid only for some modes: name them so that the error for a misplaced one says where it belongs.
  if (par.dp_mode == DataParallelMode::ddp && p.has("reshard_after_forward"))
    p.fail("reshard_after_forward", "only meaningful with data_parallel \"fsdp\" or \"hsdp\"");
  if (par.dp_mode != DataParallelMode::hsdp && p.has("hsdp_shard_size"))
    p.fail("hsdp_shard_size", "only meaningful with data_parallel \"hsdp\"");
  p.finish();

  job.batch = read_batch(r.object("batch"));

  auto s                 = r.object("schedule");
  ScheduleSpec& sched    = job.schedule;
  sched.kind             = s.enumeration<ScheduleKind>("kind");
  sched.virtual_stages   = optional_dim(s, "virtual_stages", 1);
  sched.microbatch_group = optional_dim(s, "microbatch_group", 0);
  sched.ep_overlap       = s.optional_boolean("ep_overlap").value_or(false);
  if (sched.kind != ScheduleKind::interleaved_1f1b && s.has("microbatch_group"))
    s.fail("microbatch_group", "only meaningful with kind \"interleaved-1f1b\"");
  if ((sched.kind == ScheduleKind::dualpipe || sched.kind == ScheduleKind::dualpipev) && s.has("virtual_stages"))
    s.fail("virtual_stages", std::string(name_of(sched.kind)) + " holds two model chunks per stage by construction");
  s.finish();

  read_kernels(r, job);
  job.recompute = r.optional_enumeration<Recompute>("recompute").value_or(Recompute::none);
  if (r.has("recompute_modules"))
    job.recompute_modules = read_recompute_modules(r, job.recompute, job.model);
  job.model.mtp_layers = static_cast<int>(r.optional_integer("mtp_layers", 0, 16).value_or(0));
  read_calibration_and_effects(r, job);
  // A job's own measured kernel times replace the GPU file's.
  if (auto mk = r.optional_object("measured_kernels"))
    job.gpu.measured = read_measured_kernels(*mk);
  read_precision(r, job);
  if (auto e = r.optional_object("moe")) {
    if (job.model.moe.experts == 0)
      r.fail("moe", "model " + job.model.name + " is dense: dispatch and routing are for mixture-of-experts models");
    job.dispatch = read_dispatch(*e, job.gpu);
  }
  r.finish();
  validate_job(job);
  return job;
}

void validate_job(JobSpec& job)
{
  const JobLocation at{job};
  const ModelSpec& m   = job.model;
  ParallelismSpec& par = job.parallelism;
  auto n               = [](std::int64_t v) { return std::to_string(v); };

  if (par.dp_mode == DataParallelMode::hsdp && par.dp % par.hsdp_shard != 0)
    at.fail(JobIssue::hsdp, {"parallelism", "hsdp_shard_size"},
            "dp " + n(par.dp) + " is not divisible by hsdp_shard_size " + n(par.hsdp_shard));
  const std::int64_t product = std::int64_t{par.tp} * par.cp * par.pp * par.dp;
  if (product != job.gpus)
    at.fail(JobIssue::gpus, {"parallelism"},
            "tp " + n(par.tp) + " x cp " + n(par.cp) + " x pp " + n(par.pp) + " x dp " + n(par.dp) + " = " +
                n(product) + " but gpus is " + n(job.gpus));
  if (m.heads % par.tp != 0)
    at.fail(JobIssue::tp, {"parallelism", "tp"},
            "attention heads " + n(m.heads) + " are not divisible by tp " + n(par.tp));
  if (m.kv_heads % par.tp != 0 && par.tp % m.kv_heads != 0)
    at.fail(JobIssue::tp, {"parallelism", "tp"},
            "kv_heads " + n(m.kv_heads) + " and tp " + n(par.tp) +
                " must divide one another (K/V heads are split or replicated across tp)");
  if (m.ffn % par.tp != 0)
    at.fail(JobIssue::tp, {"parallelism", "tp"}, "ffn " + n(m.ffn) + " is not divisible by tp " + n(par.tp));
  if (m.moe.experts > 0 && m.moe.expert_ffn % par.etp != 0)
    at.fail(JobIssue::tp, {"parallelism", "etp"},
            "expert_ffn " + n(m.moe.expert_ffn) + " is not divisible by etp " + n(par.etp) +
                " (expert tensor parallelism, tp " + n(par.tp) + " unless given)");
  if (par.ep > 1 && m.moe.experts == 0)
    at.fail(JobIssue::ep, {"parallelism", "ep"},
            "ep " + n(par.ep) + " needs a mixture-of-experts model; " + m.name + " is dense");
  if (par.etp != par.tp && m.moe.experts == 0)
    at.fail(JobIssue::ep, {"parallelism", "etp"},
            "etp " + n(par.etp) + " needs a mixture-of-experts model; " + m.name + " is dense");
  if (m.moe.experts > 0 && m.moe.experts % par.ep != 0)
    at.fail(JobIssue::ep, {"parallelism", "ep"},
            "experts " + n(m.moe.experts) + " are not divisible by ep " + n(par.ep));
  const std::int64_t stage_ranks = std::int64_t{par.tp} * par.cp * par.dp;
  if (stage_ranks % (std::int64_t{par.etp} * par.ep) != 0)
    at.fail(JobIssue::ep, {"parallelism", "ep"},
            "etp " + n(par.etp) + " x ep " + n(par.ep) + " = " + n(std::int64_t{par.etp} * par.ep) +
                " must divide tp x cp x dp = " + n(stage_ranks) +
                " (the expert layers fold etp x ep x expert-dp over the GPUs of a pipeline stage)");
  // Ulysses trades sequence for head sharding: every cp rank (of the all-to-all group) takes whole heads.
  const int a2a = par.cp_comm == CpComm::a2a ? par.cp : par.cp_comm == CpComm::a2a_p2p ? par.cp_a2a : 1;
  if (par.cp_comm != CpComm::allgather && par.cp < 2)
    at.fail(JobIssue::cp_comm, {"parallelism", "cp_comm"},
            "\"" + std::string(name_of(par.cp_comm)) + "\" moves K/V between cp ranks: it needs cp >= 2 (cp " +
                n(par.cp) + ")");
  if (par.cp_comm == CpComm::a2a_p2p && (par.cp % par.cp_a2a != 0 || par.cp_a2a >= par.cp))
    at.fail(JobIssue::cp_comm, {"parallelism", "cp_a2a"},
            "cp_a2a " + n(par.cp_a2a) + " must divide cp " + n(par.cp) +
                " and be smaller (an all-to-all inside groups of cp_a2a, a ring across cp / cp_a2a of them)");
  if (a2a > 1 && (m.heads / par.tp) % a2a != 0)
    at.fail(JobIssue::cp_comm, {"parallelism", par.cp_comm == CpComm::a2a ? "cp" : "cp_a2a"},
            "\"" + std::string(name_of(par.cp_comm)) + "\" gives each rank whole heads: the " + n(m.heads / par.tp) +
                " heads per tensor-parallel rank are not divisible by " + n(a2a) +
                " (allowed: a degree dividing them, or cp_comm \"allgather\" or \"ring\")");
  if (par.tp_overlap && (par.tp < 2 || !par.sequence_parallel))
    at.fail(JobIssue::tp, {"parallelism", "tp_overlap"},
            "TP communication overlap splits the all-gathers and reduce-scatters of sequence parallelism under their "
            "GEMMs: it needs tp >= 2 and sequence_parallel (tp " +
                n(par.tp) + ", sequence_parallel " + (par.sequence_parallel ? "true" : "false") + ")");
  if (m.moe.experts > 0 && par.tp > 1 && par.etp != par.tp && !par.sequence_parallel)
    at.fail(JobIssue::tp, {"parallelism", "sequence_parallel"},
            "etp " + n(par.etp) + " differs from tp " + n(par.tp) +
                ": the expert layers take the sequence-parallel shard of the tokens (Megatron needs sequence "
                "parallelism for MoE with tp > 1)");

  const BatchSpec& batch = job.batch;
  const auto global_key  = batch.by_tokens ? "global_tokens" : "global_sequences";
  if (batch.sequence_length % (std::int64_t{2} * par.cp) != 0)
    at.fail(JobIssue::sequence, {"batch", "sequence_length"},
            "sequence_length " + n(batch.sequence_length) + " is not divisible by 2 x cp = " +
                n(std::int64_t{2} * par.cp) + " (context parallelism splits a sequence into 2 x cp chunks)");
  const std::int64_t per_step = std::int64_t{par.dp} * batch.micro_batch;
  if (batch.global_sequences % per_step != 0)
    at.fail(JobIssue::batch, {"batch", global_key},
            "the batch of " + n(batch.global_sequences) +
                " sequences is not divisible by dp x micro_batch = " + n(per_step));
  if (batch.global_sequences / per_step > kMaxMicroBatches)
    at.fail(JobIssue::batch, {"batch", global_key},
            n(batch.global_sequences / per_step) + " micro-batches per step; at most " + n(kMaxMicroBatches) +
                " are supported");
  const int mbs = job.micro_batches();

  ScheduleSpec& sched = job.schedule;
  const std::string kind(name_of(sched.kind));
  const bool dual = sched.kind == ScheduleKind::dualpipe || sched.kind == ScheduleKind::dualpipev;
  if (sched.kind == ScheduleKind::interleaved_1f1b) {
    if (par.pp < 2)
      at.fail(JobIssue::schedule, {"schedule", "kind"}, "interleaved-1f1b needs pp >= 2, found pp " + n(par.pp));
    if (sched.virtual_stages < 2)
      at.fail(JobIssue::schedule, {"schedule", "virtual_stages"},
              "interleaved-1f1b needs virtual_stages >= 2, found " + n(sched.virtual_stages));
    if (sched.microbatch_group == 0)
      sched.microbatch_group = par.pp;
    if (sched.microbatch_group < par.pp || sched.microbatch_group > mbs || mbs % sched.microbatch_group != 0)
      at.fail(JobIssue::microbatch_group, {"schedule", "microbatch_group"},
              "microbatch_group " + n(sched.microbatch_group) + " must be between pp " + n(par.pp) + " and the " +
                  n(mbs) + " micro-batches per step, and divide them");
  } else if (dual) {
    // DualPipe: micro-batches in two directions, each stage held twice; DualPipeV: 2 x pp stages in a V.
    sched.virtual_stages = 2;
    if (par.pp < 2 || (sched.kind == ScheduleKind::dualpipe && par.pp % 2 != 0))
      at.fail(JobIssue::schedule, {"parallelism", "pp"},
              kind + (sched.kind == ScheduleKind::dualpipe ? " needs an even pp >= 2" : " needs pp >= 2") +
                  ", found pp " + n(par.pp));
    if (mbs < 2 * par.pp || (sched.kind == ScheduleKind::dualpipe && mbs % 2 != 0))
      at.fail(JobIssue::pipeline_depth, {"batch"},
              kind + " needs at least 2 x pp = " + n(2 * par.pp) +
                  (sched.kind == ScheduleKind::dualpipe ? " micro-batches, an even number" : " micro-batches") +
                  "; the step has " + n(mbs));
    if (par.dp_mode != DataParallelMode::ddp && par.reshard_after_forward)
      at.fail(JobIssue::schedule, {"parallelism", "reshard_after_forward"},
              kind + " runs forward and backward passes of two chunks in turn; keep the parameters gathered "
                     "(reshard_after_forward false) or use ddp");
    if (!par.stage_layers.empty())
      at.fail(JobIssue::layers, {"parallelism", "stage_layers"},
              kind + " places two model chunks per stage; give no stage_layers");
  } else if (sched.virtual_stages != 1) {
    at.fail(JobIssue::schedule, {"schedule", "virtual_stages"},
            kind + " runs one model chunk per stage; virtual_stages must be 1, found " + n(sched.virtual_stages));
  }
  // The paired schedules (ep_overlap, DualPipe) interleave two units' pieces; their TP and CP collectives are not
  // split under the pieces' compute.
  const bool paired = sched.ep_overlap || sched.kind == ScheduleKind::dualpipe || sched.kind == ScheduleKind::dualpipev;
  if (paired && par.tp_overlap)
    at.fail(JobIssue::schedule, {"parallelism", "tp_overlap"},
            "TP overlap is modelled for 1f1b, interleaved-1f1b, gpipe and zb-h1 without ep_overlap; not with " +
                std::string(sched.ep_overlap ? "ep_overlap" : name_of(sched.kind)));
  if (paired && (par.cp_comm == CpComm::ring || par.cp_comm == CpComm::a2a_p2p))
    at.fail(JobIssue::schedule, {"parallelism", "cp_comm"},
            "a ring's overlap with the attention is modelled for 1f1b, interleaved-1f1b, gpipe and zb-h1 without "
            "ep_overlap; with " +
                std::string(sched.ep_overlap ? "ep_overlap" : name_of(sched.kind)) + " use \"allgather\" or \"a2a\"");
  if (sched.ep_overlap) {
    if (sched.kind != ScheduleKind::one_f_one_b && sched.kind != ScheduleKind::interleaved_1f1b)
      at.fail(JobIssue::schedule, {"schedule", "ep_overlap"},
              "ep_overlap pairs the steady state of 1f1b or interleaved-1f1b; " + kind +
                  (dual ? " overlaps its pairs already" : " has no such pairs"));
    if (par.ep < 2)
      at.fail(JobIssue::schedule, {"schedule", "ep_overlap"}, "ep_overlap hides expert all-to-alls: it needs ep >= 2");
    // A pair's outputs leave late; without interleaving the stages would take turns (Megatron-LM asserts
    // virtual_pipeline_model_parallel_size for the overlap when pp > 1).
    if (par.pp > 1 && sched.kind != ScheduleKind::interleaved_1f1b)
      at.fail(JobIssue::schedule, {"schedule", "ep_overlap"},
              "ep_overlap with pp " + n(par.pp) + " needs interleaved-1f1b (virtual stages), as Megatron-LM requires");
    if (job.recompute == Recompute::full)
      at.fail(JobIssue::schedule, {"schedule", "ep_overlap"},
              "ep_overlap does not run with full recompute (Megatron refuses the combination)");
  }
  // A paired schedule runs a unit's all-to-alls beside the other's compute; a recomputed MoE layer's are not
  // modelled there.
  if (job.recomputes(RecomputeModule::moe) && (sched.ep_overlap || dual)) {
    at.fail(JobIssue::schedule, {"recompute_modules"},
            "\"moe\" recompute is modelled for schedules without ep_overlap, DualPipe or DualPipeV; not with " +
                std::string(sched.ep_overlap ? "ep_overlap" : name_of(sched.kind)));
  }
  if (sched.kind != ScheduleKind::gpipe && mbs < par.pp)
    at.fail(JobIssue::pipeline_depth, {"batch"},
            n(mbs) + " micro-batches per step (" + n(batch.global_sequences) + " sequences / dp " + n(par.dp) +
                " / micro_batch " + n(batch.micro_batch) + ") are fewer than the " + n(par.pp) +
                " pipeline stages, which " + kind + " needs");
  if (!par.stage_layers.empty()) {
    std::int64_t sum = 0;
    for (int l : par.stage_layers)
      sum += l;
    if (static_cast<int>(par.stage_layers.size()) != par.pp)
      at.fail(JobIssue::layers, {"parallelism", "stage_layers"},
              n(std::int64_t(par.stage_layers.size())) + " entries for pp " + n(par.pp) + ": one per pipeline stage");
    for (int l : par.stage_layers)
      if (l < sched.virtual_stages)
        at.fail(JobIssue::layers, {"parallelism", "stage_layers"},
                "a stage of " + n(l) + " layers cannot fill its " + n(sched.virtual_stages) + " virtual stages");
    if (sum != m.layers)
      at.fail(JobIssue::layers, {"parallelism", "stage_layers"},
              "the stages hold " + n(sum) + " layers; the model has " + n(m.layers));
  }
  if (!par.pipeline_layout.empty())
    check_pipeline_layout(job, at);
  // DualPipe holds each of its pp stages twice; the others split the model into pp x virtual_stages chunks.
  const std::int64_t chunks = std::int64_t{par.pp} * (sched.kind == ScheduleKind::dualpipe ? 1 : sched.virtual_stages);
  if (m.layers < chunks && par.pipeline_layout.empty())
    at.fail(JobIssue::layers, {"schedule", "virtual_stages"},
            "the model's " + n(m.layers) + " layers cannot fill the " + n(chunks) + " model chunks of pp " + n(par.pp) +
                " with " + kind);

  if (job.attention != AttentionKernel::unfused &&
      !(job.gpu.attention[static_cast<std::size_t>(job.attention)].forward > 0))
    at.fail(JobIssue::attention, {"kernels", "attention"},
            "GPU " + job.gpu.name + " gives no rates for \"" + std::string(name_of(job.attention)) +
                "\" (listed: " + detail::listed_kernels(job.gpu) + ")");
  if (job.gemm_library == GemmLibrary::deepgemm) {
    if (job.gpu.gemm.deepgemm.points.empty())
      at.fail(JobIssue::gemm, {"kernels", "gemm"}, "GPU " + job.gpu.name + " gives no DeepGEMM rates (gemm.deepgemm)");
    if (job.precision != Precision::fp8 || job.fp8_recipe != Fp8Recipe::blockwise)
      at.fail(JobIssue::gemm, {"kernels", "gemm"},
              "DeepGEMM runs FP8 with block-wise scaling only: give precision {\"compute\": \"fp8\", \"recipe\": "
              "\"blockwise\"}");
  }
  // Per-expert casts are Transformer Engine's, of a MoE job's expert GEMMs in a low precision.
  if (job.expert_quantize == ExpertQuantize::per_expert) {
    if (m.moe.experts == 0 || job.precision == Precision::bf16)
      at.fail(
          JobIssue::gemm, {"kernels", "expert_quantize"},
          "\"per_expert\" launches the casts of a mixture-of-experts model's experts in a low precision; this job " +
              std::string(m.moe.experts == 0 ? "has no experts" : "computes in bf16"));
    if (job.gemm_library == GemmLibrary::deepgemm)
      at.fail(JobIssue::gemm, {"kernels", "expert_quantize"},
              "\"per_expert\" is Transformer Engine's split quantize; DeepGEMM's jobs cast with DeepSeek's grouped "
              "kernels (give \"grouped\")");
  }
  if (!(job.gpu.peak(job.precision) > 0))
    at.fail(JobIssue::precision, {"precision", "compute"},
            "GPU " + job.gpu.name + " has no " + std::string(name_of(job.precision)) + " tensor cores (no peak_" +
                std::string(name_of(job.precision)) + " in its GPU file; it has: " + job.gpu.precisions() + ")");
}

int reserved_sms(const JobSpec& job)
{
  const auto& d = job.dispatch;
  if (job.gemm_library != GemmLibrary::deepgemm || job.model.moe.experts == 0 || d.dispatcher != Dispatcher::deepep)
    return 0;
  return d.sms > 0 ? d.sms : kDeepEpSms;
}

} // namespace spansim::workload
