// Reading and validating job, model and GPU specs. Every inconsistency is a SpecError at the JSON path that
// carries the offending value, with the numbers that do not add up.
#include "workload/detail.hpp"
#include "workload/workload.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/paths.hpp"
#include "common/units.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#ifndef SPANSIM_DATA_DIR
#error "SPANSIM_DATA_DIR must name the source root (set by workload/CMakeLists.txt)"
#endif

namespace spansim::workload {

namespace {

// Zoo names are plain identifiers; anything else is a path, so a typo cannot escape the zoo directory.
bool is_zoo_name(const std::string& s)
{
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  }) && !s.ends_with(".json");
}

std::string resolve(const std::string& ref, const std::string& zoo_subdir, const std::string& relative_to)
{
  if (is_zoo_name(ref))
    return data_dir() + "/" + zoo_subdir + "/" + ref + ".json";
  std::filesystem::path p(ref);
  if (p.is_relative() && !relative_to.empty())
    p = std::filesystem::path(relative_to).parent_path() / p;
  return p.string();
}

std::vector<std::string> zoo_names(const std::string& zoo_subdir)
{
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(data_dir() + "/" + zoo_subdir, ec))
    if (e.path().extension() == ".json")
      names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

using detail::dim;
using detail::kMaxDim;
using detail::listed_kernels;
using detail::optional_dim;

ModelSpec read_model(spec::ObjectReader r)
{
  ModelSpec m;
  m.name            = r.string("name");
  m.source          = r.optional_string("source").value_or("");
  m.layers          = dim(r, "layers", 1, 100000);
  m.hidden          = dim(r, "hidden");
  m.ffn             = dim(r, "ffn");
  m.heads           = dim(r, "heads");
  m.kv_heads        = optional_dim(r, "kv_heads", m.heads);
  m.vocab           = dim(r, "vocab");
  m.mlp             = r.optional_enumeration<MlpKind>("mlp").value_or(MlpKind::gated);
  m.tied_embeddings = r.optional_boolean("tied_embeddings").value_or(false);
  m.qk_norm         = r.optional_boolean("qk_norm").value_or(false);
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0)
    r.fail("kv_heads", "kv_heads " + std::to_string(m.kv_heads) + " must divide heads " + std::to_string(m.heads));
  if (!r.has("head_dim") && m.hidden % m.heads != 0)
    r.fail("heads", "hidden " + std::to_string(m.hidden) + " is not a multiple of heads " + std::to_string(m.heads) +
                        "; give head_dim explicitly");
  m.head_dim = optional_dim(r, "head_dim", m.hidden / m.heads);

  if (auto a = r.optional_object("attention")) {
    if (a->enumeration<AttentionKind>("kind") == AttentionKind::mla) {
      m.attention            = AttentionKind::mla;
      m.mla.q_lora_rank      = static_cast<int>(a->optional_integer("q_lora_rank", 0, kMaxDim).value_or(0));
      m.mla.kv_lora_rank     = dim(*a, "kv_lora_rank");
      m.mla.qk_nope_head_dim = dim(*a, "qk_nope_head_dim");
      m.mla.qk_rope_head_dim = dim(*a, "qk_rope_head_dim");
      m.mla.v_head_dim       = dim(*a, "v_head_dim");
      m.kv_heads             = m.heads; // MLA expands the latent into one K/V per head.
    }
    a->finish();
  }
  if (auto e = r.optional_object("moe")) {
    m.moe.experts            = dim(*e, "experts");
    m.moe.experts_per_token  = dim(*e, "experts_per_token");
    m.moe.shared_experts     = static_cast<int>(e->optional_integer("shared_experts", 0, 1024).value_or(0));
    m.moe.expert_ffn         = dim(*e, "expert_ffn");
    m.moe.every              = optional_dim(*e, "every", 1);
    m.moe.first_dense_layers = static_cast<int>(e->optional_integer("first_dense_layers", 0, m.layers).value_or(0));
    if (m.moe.experts_per_token > m.moe.experts)
      e->fail("experts_per_token", "experts_per_token " + std::to_string(m.moe.experts_per_token) +
                                       " exceeds experts " + std::to_string(m.moe.experts));
    e->finish();
  }
  r.finish();
  return m;
}

double read_rate(spec::ObjectReader& r, std::string_view key)
{
  const auto& v = r.raw(key);
  if (!v.is_string())
    r.fail(key, "expected a FLOP rate as a string (e.g. \"989TFLOPs\")");
  double d = 0;
  try {
    d = parse_flop_rate(v.get<std::string>());
  } catch (const UsageError& e) {
    r.fail(key, e.what());
  }
  return d;
}

std::string tflops(double flops)
{
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f TFLOP/s", flops / 1e12);
  return buf;
}

// A measured rate that cannot exceed the peak it is a fraction of.
double read_measured_rate(spec::ObjectReader& r, std::string_view key, double peak, const char* peak_key)
{
  const double rate = read_rate(r, key);
  if (!(rate > 0))
    r.fail(key, "must be greater than zero");
  if (rate > peak)
    r.fail(key, "exceeds " + std::string(peak_key) + " (" + tflops(peak) + ")");
  return rate;
}

// A library's published grouped-GEMM rates: {"block_m": 128, "wgrad_fraction": 0.72, "grouped": [{"groups": 8,
// "rows": 4096, "n": 4096, "k": 7168, "rate": "1346TFLOPs"}, ...]} (groups: how many the measurement ran, 1 if unsaid).
GroupedGemmRates read_grouped_rates(spec::ObjectReader r, const GpuSpec& g)
{
  GroupedGemmRates out;
  out.block_m        = static_cast<int>(r.optional_integer("block_m", 1, 4096).value_or(128));
  out.wgrad_fraction = r.number("wgrad_fraction", 0.05, 1);
  const auto& rows   = r.raw("grouped");
  const auto at      = r.where().member("grouped");
  if (!rows.is_array() || rows.empty())
    at.fail("expected a non-empty array of {\"rows\", \"n\", \"k\", \"rate\"} objects");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    spec::ObjectReader p(rows[i], at.element(i));
    GroupedGemmRates::Point point;
    point.rows   = static_cast<double>(p.integer("rows", 1, 1 << 24));
    point.n      = static_cast<double>(p.integer("n", 1, 1 << 24));
    point.k      = static_cast<double>(p.integer("k", 1, 1 << 24));
    point.groups = static_cast<int>(p.optional_integer("groups", 1, 1 << 16).value_or(1));
    point.rate   = read_measured_rate(p, "rate", g.peak_fp8_flops, "peak_fp8");
    p.finish();
    out.points.push_back(point);
  }
  r.finish();
  return out;
}

GemmSpec read_gemm(spec::ObjectReader r, const GpuSpec& g)
{
  GemmSpec m;
  m.ceiling_bf16 = read_measured_rate(r, "ceiling_bf16", g.peak_bf16_flops, "peak_bf16");
  if (g.peak_fp8_flops > 0)
    m.ceiling_fp8 = read_measured_rate(r, "ceiling_fp8", g.peak_fp8_flops, "peak_fp8");
  else if (r.has("ceiling_fp8"))
    r.fail("ceiling_fp8", "the GPU has no peak_fp8 rate");
  if (g.peak_fp8_flops > 0 && r.has("ceiling_fp8_blockwise"))
    m.ceiling_fp8_blockwise = read_measured_rate(r, "ceiling_fp8_blockwise", g.peak_fp8_flops, "peak_fp8");
  else if (r.has("ceiling_fp8_blockwise"))
    r.fail("ceiling_fp8_blockwise", "the GPU has no peak_fp8 rate");
  // MXFP8 runs on the FP8 tensor-core path with block scales applied in the MMA: without a measurement of its
  // own, the FP8 ceiling's fraction of peak.
  if (g.peak_mxfp8_flops > 0)
    m.ceiling_mxfp8 = r.has("ceiling_mxfp8") ? read_measured_rate(r, "ceiling_mxfp8", g.peak_mxfp8_flops, "peak_mxfp8")
                                             : m.ceiling_fp8 / g.peak_fp8_flops * g.peak_mxfp8_flops;
  else if (r.has("ceiling_mxfp8"))
    r.fail("ceiling_mxfp8", "the GPU has no peak_mxfp8 rate");
  if (g.peak_nvfp4_flops > 0)
    m.ceiling_nvfp4 = read_measured_rate(r, "ceiling_nvfp4", g.peak_nvfp4_flops, "peak_nvfp4");
  else if (r.has("ceiling_nvfp4"))
    r.fail("ceiling_nvfp4", "the GPU has no peak_nvfp4 rate");
  m.sms             = static_cast<int>(r.integer("sms", 1, 100000));
  m.tile_k          = static_cast<int>(r.optional_integer("tile_k", 1, 4096).value_or(64));
  const auto& tiles = r.raw("tiles");
  const auto at     = r.where().member("tiles");
  if (!tiles.is_array() || tiles.empty())
    at.fail("expected a non-empty array of [M, N] output tile shapes, e.g. [[128, 256]]");
  for (std::size_t i = 0; i < tiles.size(); ++i) {
    const auto& t = tiles[i];
    if (!t.is_array() || t.size() != 2 || !t[0].is_number_integer() || !t[1].is_number_integer() ||
        t[0].get<std::int64_t>() < 1 || t[1].get<std::int64_t>() < 1 || t[0].get<std::int64_t>() > 4096 ||
        t[1].get<std::int64_t>() > 4096)
      at.element(i).fail("expected [M, N] with two integers from 1 to 4096");
    m.tiles.push_back({t[0].get<int>(), t[1].get<int>()});
  }
  if (auto d = r.optional_object("deepgemm")) {
    if (!(g.peak_fp8_flops > 0))
      r.fail("deepgemm", "DeepGEMM runs FP8: the GPU has no peak_fp8 rate");
    m.deepgemm = read_grouped_rates(*d, g);
  }
  r.finish();
  return m;
}

// A measured curve of a library's rates over sequence lengths: "by_length": {"sequence": [512, ...],
// "forward": ["191TFLOPs", ...], "backward": [...]}, which must pass through the reference rates.
void read_by_length(spec::ObjectReader r, AttentionRates& a, const GpuSpec& g)
{
  const auto& seq = r.raw("sequence");
  if (!seq.is_array() || seq.size() < 2)
    r.fail("sequence", "expected at least two increasing sequence lengths");
  for (std::size_t i = 0; i < seq.size(); ++i) {
    if (!seq[i].is_number_integer() || seq[i].get<std::int64_t>() < 1 || seq[i].get<std::int64_t>() > (1 << 24) ||
        (i > 0 && seq[i].get<double>() <= a.sequences.back()))
      r.where().member("sequence").element(i).fail("expected increasing lengths from 1 to 16777216");
    a.sequences.push_back(seq[i].get<double>());
  }
  for (const char* pass : {"forward", "backward"}) {
    const auto& v = r.raw(pass);
    if (!v.is_array() || v.size() != seq.size())
      r.fail(pass, "expected one rate per sequence length (" + std::to_string(seq.size()) + ")");
    auto& out = std::string(pass) == "forward" ? a.forward_by_length : a.backward_by_length;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const auto at = r.where().member(pass).element(i);
      if (!v[i].is_string())
        at.fail("expected a FLOP rate as a string (e.g. \"333TFLOPs\")");
      double rate = 0;
      try {
        rate = parse_flop_rate(v[i].get<std::string>());
      } catch (const UsageError& e) {
        at.fail(e.what());
      }
      if (!(rate > 0) || rate > g.peak_bf16_flops)
        at.fail("must be greater than zero and at most peak_bf16 (" + tflops(g.peak_bf16_flops) + ")");
      out.push_back(rate);
    }
  }
  // The curve and the reference rates are one measurement: they must agree at the reference length.
  for (bool backward : {false, true}) {
    const double reference = backward ? a.backward : a.forward;
    AttentionRates curve   = a;
    const double at_ref    = curve.rate(g.attention_reference_sequence, backward);
    if (std::abs(at_ref / reference - 1) > 0.01)
      r.fail(backward ? "backward" : "forward", "the curve gives " + tflops(at_ref) + " at the reference length " +
                                                    std::to_string(static_cast<long>(g.attention_reference_sequence)) +
                                                    ", the reference rate is " + tflops(reference));
  }
  r.finish();
}

void read_attention(spec::ObjectReader r, GpuSpec& g)
{
  g.attention_reference_sequence =
      static_cast<double>(r.optional_integer("reference_sequence", 1, 1 << 24).value_or(8192));
  for (AttentionKernel k : kAttentionKernels) {
    auto lib = r.optional_object(name_of(k));
    if (!lib)
      continue;
    AttentionRates& a = g.attention[static_cast<std::size_t>(k)];
    a.forward         = read_measured_rate(*lib, "forward", g.peak_bf16_flops, "peak_bf16");
    a.backward        = read_measured_rate(*lib, "backward", g.peak_bf16_flops, "peak_bf16");
    if (auto curve = lib->optional_object("by_length"))
      read_by_length(*curve, a, g);
    lib->finish();
  }
  if (listed_kernels(g).empty())
    r.where().fail("give the rates of at least one attention kernel library: \"flash2\", \"flash3\", \"cudnn\", "
                   "\"flash4\" or \"triton\"");
  g.attention_default = r.enumeration<AttentionKernel>("default");
  if (g.attention_default == AttentionKernel::unfused)
    r.fail("default", "the default must be a fused library the file gives rates for (listed: " + listed_kernels(g) +
                          "); jobs may choose \"unfused\"");
  if (!(g.attention[static_cast<std::size_t>(g.attention_default)].forward > 0))
    r.fail("default", "\"" + std::string(name_of(g.attention_default)) +
                          "\" has no rates here (listed: " + listed_kernels(g) + ")");
  r.finish();
}

GpuSpec read_gpu(spec::ObjectReader r)
{
  GpuSpec g;
  g.name            = r.string("name");
  g.source          = r.optional_string("source").value_or("");
  g.peak_bf16_flops = read_rate(r, "peak_bf16");
  if (!(g.peak_bf16_flops > 0))
    r.fail("peak_bf16", "must be greater than zero");
  g.peak_fp8_flops   = r.has("peak_fp8") ? read_rate(r, "peak_fp8") : 0;
  g.peak_mxfp8_flops = r.has("peak_mxfp8") ? read_rate(r, "peak_mxfp8") : 0;
  g.peak_nvfp4_flops = r.has("peak_nvfp4") ? read_rate(r, "peak_nvfp4") : 0;
  if (g.peak_mxfp8_flops > 0 && !(g.peak_fp8_flops > 0))
    r.fail("peak_mxfp8", "MXFP8 runs on the FP8 path: give peak_fp8 too");
  g.hbm_bandwidth = r.bandwidth("hbm_bandwidth");
  g.hbm_capacity  = r.size("hbm_capacity");
  if (!(g.hbm_capacity > 0))
    r.fail("hbm_capacity", "must be greater than zero");
  g.gemm = read_gemm(r.object("gemm"), g);
  read_attention(r.object("attention"), g);
  auto eff = r.object("efficiency");
  // The flat factors of the first compute model: name their replacements rather than only refusing the key.
  for (const char* old : {"matmul", "attention"})
    if (eff.has(old))
      eff.fail(old, "replaced by the \"gemm\" object (measured ceiling, SMs, tiles) and per-library \"attention\" "
                    "rates; see workload/README.md");
  g.elementwise_efficiency = eff.number("elementwise", 0.01, 1);
  if (auto q = eff.optional_object("quantize")) {
    for (QuantizeFormat f : enum_values<QuantizeFormat>()) {
      const std::string_view key = name_of(f);
      if (q->has(key)) {
        if (!(g.peak(precision_of(f)) > 0))
          q->fail(key, "the GPU has no peak for this format");
        g.quantize_efficiency[static_cast<std::size_t>(f)] = q->number(key, 0.01, 1);
      }
    }
    q->finish();
  }
  eff.finish();
  g.comm_sms = static_cast<int>(r.optional_integer("comm_sms", 0, g.gemm.sms - 1).value_or(0));
  g.gemm.deepgemm.derive_full_wave(g); // needs the tiles, SMs and memory rate read above
  if (auto m = r.optional_object("measured_kernels"))
    g.measured = read_measured_kernels(*m);
  r.finish();
  return g;
}

} // namespace

namespace detail {

int dim(spec::ObjectReader& r, std::string_view key, int min, int max)
{
  return static_cast<int>(r.integer(key, min, max));
}

int optional_dim(spec::ObjectReader& r, std::string_view key, int fallback, int min, int max)
{
  return static_cast<int>(r.optional_integer(key, min, max).value_or(fallback));
}

// The libraries a GPU file gives rates for, quoted, for error messages.
std::string listed_kernels(const GpuSpec& g)
{
  std::string list;
  for (AttentionKernel k : kAttentionKernels)
    if (g.attention[static_cast<std::size_t>(k)].forward > 0)
      list += (list.empty() ? "\"" : ", \"") + std::string(name_of(k)) + "\"";
  return list;
}

} // namespace detail

std::vector<Dim> parse_rank_order(const nlohmann::json& value, const spec::Location& at)
{
  std::vector<Dim> order;
  if (value.is_array() && value.size() == kRankDims.size())
    for (const auto& n : value) {
      auto d = n.is_string() ? parse_name<Dim>(n.get<std::string>()) : std::nullopt;
      if (!d || *d == Dim::ep || std::find(order.begin(), order.end(), *d) != order.end())
        break;
      order.push_back(*d);
    }
  if (order.size() != kRankDims.size())
    at.fail("must list each of \"tp\", \"cp\", \"pp\", \"dp\" once (innermost first)");
  return order;
}

std::vector<Dim> read_rank_order(spec::ObjectReader& r, std::string_view key)
{
  return parse_rank_order(r.raw(key), r.where().member(key));
}

namespace {

// A zoo name must name a shipped file: list the zoo rather than report a file that cannot be opened.
template <class Read>
auto load_zoo(const std::string& ref, const char* subdir, const char* what, const std::string& relative_to,
              const spec::Location& referrer, Read read)
{
  std::string path = resolve(ref, subdir, relative_to);
  if (is_zoo_name(ref) && !std::filesystem::exists(path)) {
    std::string list;
    for (const auto& n : zoo_names(subdir))
      list += (list.empty() ? "" : ", ") + n;
    throw UsageError("unknown " + std::string(what) + " \"" + ref + "\" (zoo: " + list + ")");
  }
  return read(spec::ObjectReader(spec::load_referenced_json(path, referrer), spec::Location{path}));
}

// The "model" or "gpu" of a job: an inline object, a zoo name or a path relative to the job file.
template <class Read>
auto zoo_or_inline(spec::ObjectReader& job, const char* key, const char* subdir, const char* what, const char* example,
                   const std::string& file, Read read)
{
  const auto& v = job.raw(key);
  if (v.is_object())
    return read(spec::ObjectReader(v, job.where().member(key)));
  if (!v.is_string())
    job.fail(key,
             std::string("expected a zoo name (e.g. \"") + example + "\"), a path to a " + what + " file or an object");
  try {
    return load_zoo(v.get<std::string>(), subdir, what, file, job.where().member(key), read);
  } catch (const UsageError& e) {
    job.fail(key, e.what());
  }
}

} // namespace

ModelSpec read_model_ref(spec::ObjectReader& r, std::string_view key)
{
  return zoo_or_inline(r, std::string(key).c_str(), "models", "model", "llama3-405b", r.where().file, read_model);
}

DlrmModel detail::read_dlrm_model_ref(spec::ObjectReader& r, std::string_view key)
{
  return zoo_or_inline(r, std::string(key).c_str(), "dlrm", "DLRM model", "dlrm-dcnv2", r.where().file,
                       detail::read_dlrm_model);
}

GpuSpec read_gpu_ref(spec::ObjectReader& r, std::string_view key)
{
  return zoo_or_inline(r, std::string(key).c_str(), "gpus", "GPU", "h100", r.where().file, read_gpu);
}

double parse_flop_rate(std::string_view text)
{
  return units::parse_flop_rate(text);
}

std::string data_dir()
{
  return std::string(SPANSIM_DATA_DIR) + "/workload";
}

bool ModelSpec::is_moe_layer(int layer) const
{
  // Megatron builds a multi-token prediction module's layer with the decoder's last layer's spec.
  layer = std::min(layer, layers - 1);
  if (moe.experts == 0 || layer < moe.first_dense_layers)
    return false;
  return (layer - moe.first_dense_layers + 1) % moe.every == 0;
}

ModelSpec load_model(const std::string& name_or_path)
{
  return load_zoo(name_or_path, "models", "model", "", spec::Location{}, read_model);
}

GpuSpec load_gpu(const std::string& name_or_path)
{
  return load_zoo(name_or_path, "gpus", "GPU", "", spec::Location{}, read_gpu);
}

} // namespace spansim::workload
