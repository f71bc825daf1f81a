// Jobs: reading a job spec, and checking a job (read or built by a search) against its model and GPU.
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/paths.hpp"
#include "workload/detail.hpp"
#include "workload/workload.hpp"

#include <filesystem>

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
  par.cp                = optional_dim(p, "cp", 1);
  par.pp                = optional_dim(p, "pp", 1);
  par.dp                = optional_dim(p, "dp", 1);
  par.ep                = optional_dim(p, "ep", 1);
  par.dp_mode           = p.optional_enumeration<DataParallelMode>("data_parallel").value_or(DataParallelMode::fsdp);
  par.reshard_after_forward =
      par.dp_mode != DataParallelMode::ddp && p.optional_boolean("reshard_after_forward").value_or(true);
  if (par.dp_mode == DataParallelMode::hsdp)
    par.hsdp_shard = dim(p, "hsdp_shard_size");
  if (p.has("order"))
    par.order = read_rank_order(p, "order");
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
  if (sched.kind != ScheduleKind::interleaved_1f1b && s.has("microbatch_group"))
    s.fail("microbatch_group", "only meaningful with kind \"interleaved-1f1b\"");
  s.finish();

  job.attention = job.gpu.attention_default;
  if (auto k = r.optional_object("kernels")) {
    if (k->has("attention"))
      job.attention = k->enumeration<AttentionKernel>("attention");
    k->finish({"attention"});
  }
  job.recompute = r.optional_enumeration<Recompute>("recompute").value_or(Recompute::none);
  read_calibration_and_effects(r, job);
  // A job's own measured kernel times replace the GPU file's.
  if (auto mk = r.optional_object("measured_kernels"))
    job.gpu.measured = read_measured_kernels(*mk);
  if (auto pr = r.optional_object("precision")) {
    job.precision = pr->optional_enumeration<Precision>("compute").value_or(Precision::bf16);
    job.gradient_reduce_bytes =
        (pr->has("gradient_reduce") ? pr->choice("gradient_reduce", {"fp32", "bf16"}) : "fp32") == "fp32" ? 4 : 2;
    pr->finish();
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
  if (m.moe.experts > 0 && m.moe.expert_ffn % par.tp != 0)
    at.fail(JobIssue::tp, {"parallelism", "tp"},
            "expert_ffn " + n(m.moe.expert_ffn) + " is not divisible by tp " + n(par.tp));
  if (par.ep > 1 && m.moe.experts == 0)
    at.fail(JobIssue::ep, {"parallelism", "ep"},
            "ep " + n(par.ep) + " needs a mixture-of-experts model; " + m.name + " is dense");
  if (m.moe.experts > 0 && m.moe.experts % par.ep != 0)
    at.fail(JobIssue::ep, {"parallelism", "ep"},
            "experts " + n(m.moe.experts) + " are not divisible by ep " + n(par.ep));
  if ((std::int64_t{par.cp} * par.dp) % par.ep != 0)
    at.fail(JobIssue::ep, {"parallelism", "ep"},
            "ep " + n(par.ep) + " must divide cp x dp = " + n(std::int64_t{par.cp} * par.dp) +
                " (expert parallelism is carved out of the data and context dimensions)");

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
  } else if (sched.virtual_stages != 1) {
    at.fail(JobIssue::schedule, {"schedule", "virtual_stages"},
            kind + " runs one model chunk per stage; virtual_stages must be 1, found " + n(sched.virtual_stages));
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
  const std::int64_t chunks = std::int64_t{par.pp} * sched.virtual_stages;
  if (m.layers < chunks)
    at.fail(JobIssue::layers, {"schedule", "virtual_stages"},
            "the model's " + n(m.layers) + " layers cannot fill pp x virtual_stages = " + n(chunks) + " model chunks");

  if (job.attention != AttentionKernel::unfused &&
      !(job.gpu.attention[static_cast<std::size_t>(job.attention)].forward > 0))
    at.fail(JobIssue::attention, {"kernels", "attention"},
            "GPU " + job.gpu.name + " gives no rates for \"" + std::string(name_of(job.attention)) +
                "\" (listed: " + detail::listed_kernels(job.gpu) + ")");
  if (job.precision == Precision::fp8 && !(job.gpu.peak_fp8_flops > 0))
    at.fail(JobIssue::fp8, {"precision", "compute"}, "GPU " + job.gpu.name + " has no peak_fp8 rate");
}

} // namespace spansim::workload
