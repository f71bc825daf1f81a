// Kineto traces: kernels attached to the CPU ops that launched them, reduced to measured-kernel tables.
#include "traces/kineto.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/paths.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <tuple>

namespace spansim::traces {

using nlohmann::json;

double KinetoKernels::iteration_seconds() const
{
  if (iterations.empty())
    return 0;
  auto v = iterations;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

namespace {

double median(std::vector<double> v)
{
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string lower(std::string s)
{
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// A string member, "" when absent or not a string (a hostile or damaged trace must not stop the import).
std::string text(const json& e, const char* key)
{
  const auto it = e.find(key);
  return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// An argument by name, case-insensitively (older loggers wrote "external id").
const json* arg(const json& event, const std::string& name)
{
  if (!event.contains("args") || !event["args"].is_object())
    return nullptr;
  for (const auto& [key, value] : event["args"].items())
    if (lower(key) == lower(name))
      return &value;
  return nullptr;
}

std::optional<std::int64_t> int_arg(const json& event, const std::string& name)
{
  const json* v = arg(event, name);
  if (v && v->is_number_integer())
    return v->get<std::int64_t>();
  return std::nullopt;
}

std::optional<workload::Precision> dtype_of(const json& op)
{
  const json* types = arg(op, "Input type");
  if (!types || !types->is_array())
    return std::nullopt;
  for (const auto& t : *types) {
    if (!t.is_string())
      continue;
    const auto s = lower(t.get<std::string>());
    if (s.find("bfloat16") != std::string::npos)
      return workload::Precision::bf16;
    if (s.find("float8") != std::string::npos)
      return workload::Precision::fp8;
  }
  return std::nullopt;
}

std::vector<std::vector<double>> dims_of(const json& op)
{
  std::vector<std::vector<double>> out;
  const json* dims = arg(op, "Input Dims");
  if (!dims || !dims->is_array())
    return out;
  for (const auto& d : *dims) {
    std::vector<double> shape;
    if (d.is_array())
      for (const auto& x : d)
        if (x.is_number())
          shape.push_back(x.get<double>());
    out.push_back(shape);
  }
  return out;
}

// An event's duration in seconds: "dur" must be a finite number of microseconds, not negative; the event is named
// by its name and start ("ts") when it is not.
double duration(const json& e, const std::string& path, const char* what)
{
  const auto it = e.find("dur");
  const bool ok = it != e.end() && it->is_number() && std::isfinite(it->get<double>()) && it->get<double>() >= 0;
  if (!ok) {
    const auto ts = e.find("ts");
    throw TraceError(path + ": " + what + " \"" + text(e, "name") + "\"" +
                     (ts != e.end() && ts->is_number() ? " at ts " + ts->dump() : "") +
                     ": \"dur\" must be a number of microseconds, at least 0 (" +
                     (it == e.end() ? std::string("missing") : "found " + it->dump()) + ")");
  }
  return it->get<double>() * 1e-6;
}

// Whether every size an op's shape gives is a whole number of at least one element.
bool whole_sizes(std::initializer_list<double> sizes)
{
  for (double v : sizes)
    if (!(v >= 1 && v <= 1e12 && std::floor(v) == v))
      return false;
  return true;
}

struct GemmKey {
  workload::Precision dtype;
  double m, n, k;
  auto operator<=>(const GemmKey&) const = default;
};
struct AttentionKey {
  bool backward;
  double sequence, heads, head_dim;
  auto operator<=>(const AttentionKey&) const = default;
};

} // namespace

KinetoKernels read_kineto(const std::string& path)
{
  const json doc     = spec::load_json_file(path);
  const json* events = doc.is_object() && doc.contains("traceEvents") ? &doc["traceEvents"] : nullptr;
  if (!events || !events->is_array())
    throw TraceError(path + (events ? ": at $.traceEvents" : ": at $") +
                     ": not a Chrome trace (expected an object with a \"traceEvents\" list, as torch.profiler "
                     "writes)");
  KinetoKernels out;
  std::map<std::int64_t, const json*> ops;           // External id -> CPU op
  std::map<std::int64_t, std::int64_t> launch_owner; // correlation -> External id of the launch
  std::vector<const json*> kernels;
  for (const auto& e : *events) {
    if (!e.is_object() || text(e, "ph") != "X")
      continue;
    const auto cat  = lower(text(e, "cat"));
    const auto name = text(e, "name");
    if (cat == "user_annotation" && name.rfind("ProfilerStep#", 0) == 0)
      out.iterations.push_back(duration(e, path, "iteration"));
    else if (cat == "cpu_op") {
      if (auto id = int_arg(e, "External id"))
        ops[*id] = &e;
    } else if (cat == "cuda_runtime" || cat == "cuda_driver") {
      auto corr = int_arg(e, "correlation");
      auto id   = int_arg(e, "External id");
      if (corr && id)
        launch_owner[*corr] = *id;
    } else if (cat == "kernel") {
      kernels.push_back(&e);
    }
  }
  // Kernel seconds per launching op (an op may launch several kernels: their times add up).
  std::map<std::int64_t, double> op_seconds;
  std::map<std::int64_t, std::size_t> op_kernels;
  for (const json* k : kernels) {
    const double seconds = duration(*k, path, "kernel");
    ++out.gpu_kernels;
    out.gpu_seconds += seconds;
    auto id = int_arg(*k, "External id");
    if (!id)
      if (auto corr = int_arg(*k, "correlation"); corr && launch_owner.contains(*corr))
        id = launch_owner.at(*corr);
    if (!id || !ops.contains(*id)) {
      out.unmatched["no op"]++;
      continue;
    }
    op_seconds[*id] += seconds;
    op_kernels[*id]++;
  }
  std::map<GemmKey, std::vector<double>> gemms;
  std::map<AttentionKey, std::vector<double>> attention;
  for (const auto& entry : op_seconds) {
    // Named copies, not structured bindings: lambdas capture them (clang 14 cannot capture bindings).
    const auto id      = entry.first;
    const auto seconds = entry.second;
    const json& op     = *ops.at(id);
    const auto name    = text(op, "name");
    const auto dims    = dims_of(op);
    const auto dtype   = dtype_of(op);
    auto count         = [&](bool matched) {
      if (matched) {
        out.matched_kernels += op_kernels[id];
        out.matched_seconds += seconds;
      } else {
        out.unmatched[name] += op_kernels[id];
      }
    };
    auto product = [](const std::vector<double>& v, std::size_t upto) {
      double p = 1;
      for (std::size_t i = 0; i < upto && i < v.size(); ++i)
        p *= v[i];
      return p;
    };
    std::optional<GemmKey> g;
    if (dtype && name == "aten::mm" && dims.size() >= 2 && dims[0].size() == 2 && dims[1].size() == 2)
      g = GemmKey{*dtype, dims[0][0], dims[1][1], dims[0][1]};
    else if (dtype && name == "aten::addmm" && dims.size() >= 3 && dims[1].size() == 2 && dims[2].size() == 2)
      g = GemmKey{*dtype, dims[1][0], dims[2][1], dims[1][1]};
    else if (dtype && name == "aten::linear" && dims.size() >= 2 && dims[0].size() >= 2 && dims[1].size() == 2)
      g = GemmKey{*dtype, product(dims[0], dims[0].size() - 1), dims[1][0], dims[0].back()};
    // A shape of no whole, positive sizes, or no time at all, gives no table row the reader would take.
    if (g && (!whole_sizes({g->m, g->n, g->k}) || !(seconds > 0))) {
      out.unmatched[name + " (sizes not whole and positive, or no time)"] += op_kernels[id];
      continue;
    }
    if (g) {
      gemms[*g].push_back(seconds);
      count(true);
      continue;
    }
    const bool flash = name == "aten::_flash_attention_forward" || name == "aten::_flash_attention_backward";
    const bool sdpa  = name == "aten::_scaled_dot_product_flash_attention" ||
                      name == "aten::_scaled_dot_product_flash_attention_backward";
    if ((flash || sdpa) && !dims.empty()) {
      const bool backward = name.ends_with("_backward");
      const auto& q       = dims[0]; // backward: grad_out, the same shape
      if (q.size() == 4 && whole_sizes({q[0], q[1], q[2], q[3]}) && seconds > 0) {
        const double batch = q[0], sequence = flash ? q[1] : q[2], heads = flash ? q[2] : q[1];
        attention[{backward, sequence, heads, q[3]}].push_back(seconds / batch);
        count(true);
        continue;
      }
    }
    count(false);
  }
  for (const auto& [key, times] : gemms)
    out.kernels.gemm.push_back({key.dtype, key.m, key.n, key.k, median(times)});
  for (const auto& [key, times] : attention)
    out.kernels.attention.push_back({key.backward, key.sequence, key.heads, key.head_dim, median(times)});
  out.kernels.gemm_file      = out.kernels.gemm.empty() ? "" : path;
  out.kernels.attention_file = out.kernels.attention.empty() ? "" : path;
  return out;
}

std::vector<std::string> write_measured_tables(const KinetoKernels& k, const std::string& dir)
{
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw UsageError("cannot create \"" + dir + "\": " + ec.message());
  std::vector<std::string> written;
  auto number = [](double v) {
    std::ostringstream s;
    s.precision(15);
    s << v;
    return s.str();
  };
  if (!k.kernels.gemm.empty()) {
    std::string text = "# from a Kineto trace by spansim workload import-kineto: median seconds per call\n"
                       "op,m,n,k,dtype,seconds\n";
    for (const auto& g : k.kernels.gemm)
      text += "gemm," + number(g.m) + "," + number(g.n) + "," + number(g.k) + "," + std::string(name_of(g.dtype)) +
              "," + number(g.seconds) + "\n";
    written.push_back(path_in(dir, "gemm.csv"));
    write_file_replacing(written.back(), text);
  }
  if (!k.kernels.attention.empty()) {
    std::string text = "# from a Kineto trace by spansim workload import-kineto: median seconds per sequence\n"
                       "pass,sequence,heads,head_dim,seconds\n";
    for (const auto& a : k.kernels.attention)
      text += std::string(a.backward ? "backward" : "forward") + "," + number(a.sequence) + "," + number(a.heads) +
              "," + number(a.head_dim) + "," + number(a.seconds) + "\n";
    written.push_back(path_in(dir, "attention.csv"));
    write_file_replacing(written.back(), text);
  }
  return written;
}

} // namespace spansim::traces
