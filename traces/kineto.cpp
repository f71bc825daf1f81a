// Kineto traces: kernels attached to the CPU ops that launched them, reduced to measured-kernel tables.
#include "traces/kineto.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/paths.hpp"
#include "common/units.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <tuple>

#include <zlib.h>

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

// Where an event is, for errors: its place in the trace's event list.
std::string event_at(std::size_t index)
{
  return "$.traceEvents[" + std::to_string(index) + "]";
}

// An event's duration in seconds: "dur" must be a finite number of microseconds, not negative; the event is named
// by its name and start ("ts") when it is not.
double duration(const json& e, const std::string& path, const char* what)
{
  const auto it = e.find("dur");
  // At most the cap on times, 1e10 s: a larger one would make every figure derived from the trace meaningless.
  const bool ok = it != e.end() && it->is_number() && std::isfinite(it->get<double>()) && it->get<double>() >= 0 &&
                  it->get<double>() * 1e-6 <= units::kMaxTime;
  if (!ok) {
    const auto ts = e.find("ts");
    throw TraceError(path, "",
                     std::string(what) + " \"" + text(e, "name") + "\"" +
                         (ts != e.end() && ts->is_number() ? " at ts " + ts->dump() : "") +
                         ": \"dur\" must be a number of microseconds, at least 0 and at most 1e16 (1e10 s) (" +
                         (it == e.end() ? std::string("missing") : "found " + it->dump()) + ")");
  }
  return it->get<double>() * 1e-6;
}

// An event's start in microseconds: "ts" must be a finite number (a string or a missing one would silently move
// the event to time 0, out of the op that launched its kernel); the event is named by its name and place.
double start_of(const json& e, const std::string& path, std::size_t index, const char* what)
{
  const auto it = e.find("ts");
  if (it == e.end() || !it->is_number() || !std::isfinite(it->get<double>()))
    throw TraceError(path, event_at(index),
                     std::string(what) + " \"" + text(e, "name") + "\": \"ts\" must be a number of microseconds (" +
                         (it == e.end() ? std::string("missing") : "found " + it->dump()) + ")");
  return it->get<double>();
}

// Whether every size an op's shape gives is a whole number of at least one element.
bool whole_sizes(std::initializer_list<double> sizes)
{
  for (double v : sizes)
    if (!(v >= 1 && v <= 1e12 && std::floor(v) == v))
      return false;
  return true;
}

// The trace's text: a file as written, or gzip data (torch.profiler's and HTA's .json.gz) inflated, each at most
// kMaxKinetoTextBytes.
std::string trace_text(const std::string& path)
{
  std::string raw = spec::load_text_file(path, kMaxKinetoTextBytes);
  if (raw.size() < 2 || static_cast<unsigned char>(raw[0]) != 0x1f || static_cast<unsigned char>(raw[1]) != 0x8b)
    return raw;
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
    throw TraceError(path, "", "cannot start zlib to read its gzip data");
  std::string out;
  std::size_t in_at = 0;
  int rc            = Z_OK;
  char buffer[1 << 16];
  while (true) {
    z.next_in   = reinterpret_cast<Bytef*>(raw.data() + in_at);
    z.avail_in  = static_cast<uInt>(std::min<std::size_t>(raw.size() - in_at, 1U << 30));
    z.next_out  = reinterpret_cast<Bytef*>(buffer);
    z.avail_out = sizeof buffer;
    rc          = inflate(&z, Z_NO_FLUSH);
    in_at       = static_cast<std::size_t>(reinterpret_cast<char*>(z.next_in) - raw.data());
    out.append(buffer, sizeof buffer - z.avail_out);
    if (out.size() > kMaxKinetoTextBytes) {
      inflateEnd(&z);
      throw TraceError(path, "",
                       "its gzip data inflates to more than " + std::to_string(kMaxKinetoTextBytes >> 20) +
                           " MiB (trim the trace to a few iterations)");
    }
    if (rc == Z_STREAM_END) {
      // gzip allows several members one after another (a concatenated file): read on while another member
      // follows; anything else after the end (zero padding, which gzip accepts with a warning) is ignored.
      if (in_at + 1 >= raw.size() || static_cast<unsigned char>(raw[in_at]) != 0x1f ||
          static_cast<unsigned char>(raw[in_at + 1]) != 0x8b)
        break;
      inflateReset(&z);
      continue;
    }
    if (rc != Z_OK || (z.avail_in == 0 && z.avail_out != 0 && in_at >= raw.size()))
      break;
  }
  const std::string message = z.msg ? z.msg : "";
  inflateEnd(&z);
  if (rc != Z_STREAM_END)
    throw TraceError(path, "",
                     "its gzip data is " + (rc == Z_OK || rc == Z_BUF_ERROR
                                                ? std::string("truncated (it ends before its stream does)")
                                                : "damaged (zlib: " + message + ")"));
  return out;
}

struct GemmKey {
  std::string dtype;
  bool batched;
  double batch, m, n, k;
  auto operator<=>(const GemmKey&) const = default;
};
struct AttentionKey {
  bool backward;
  double sequence, heads, head_dim;
  auto operator<=>(const AttentionKey&) const = default;
};

// A CPU op or a kernel launch: where it ran and when.
struct Span {
  std::string thread; // pid and tid as the trace writes them
  double start = 0, end = 0;
  const json* event = nullptr;
};

std::string thread_of(const json& e)
{
  const auto pid = e.find("pid");
  const auto tid = e.find("tid");
  return (pid != e.end() ? pid->dump() : "") + "/" + (tid != e.end() ? tid->dump() : "");
}

// For each launch, the innermost CPU op of its thread whose interval encloses the launch's start (null: none):
// a sweep per thread with the stack of open ops, ops sorted by start and, at one start, the longer (outer) first.
std::vector<const json*> enclosing_ops(std::vector<Span> ops, const std::vector<Span>& launches)
{
  // Stable: an op and its child of the same start and end (aten::matmul and its aten::mm) keep the trace's order,
  // parent first, so the child is the innermost.
  std::stable_sort(ops.begin(), ops.end(), [](const Span& a, const Span& b) {
    return std::tie(a.thread, a.start, b.end) < std::tie(b.thread, b.start, a.end);
  });
  std::vector<std::size_t> order(launches.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(launches[a].thread, launches[a].start) < std::tie(launches[b].thread, launches[b].start);
  });
  std::vector<const json*> out(launches.size(), nullptr);
  std::size_t next = 0;
  std::vector<const Span*> open;
  std::string thread;
  for (std::size_t i : order) {
    const auto& l = launches[i];
    if (l.thread != thread) {
      thread = l.thread;
      open.clear();
      while (next < ops.size() && ops[next].thread < thread)
        ++next;
    }
    while (next < ops.size() && ops[next].thread == thread && ops[next].start <= l.start) {
      while (!open.empty() && open.back()->end < ops[next].start)
        open.pop_back();
      open.push_back(&ops[next++]);
    }
    while (!open.empty() && open.back()->end < l.start)
      open.pop_back();
    if (!open.empty())
      out[i] = open.back()->event;
  }
  return out;
}

// A GEMM op's input type: FP32 inputs run as TF32 where the kernel's name says so (cuBLAS names its TF32 kernels).
std::optional<std::string> gemm_dtype(const json& op, const std::string& kernel)
{
  const json* types = arg(op, "Input type");
  if (!types || !types->is_array())
    return std::nullopt;
  for (const auto& t : *types) {
    if (!t.is_string())
      continue;
    const auto s = lower(t.get<std::string>());
    if (s.find("bfloat16") != std::string::npos)
      return "bf16";
    if (s.find("float8") != std::string::npos)
      return "fp8";
    if (s.find("half") != std::string::npos)
      return "fp16";
    if (s == "float")
      return lower(kernel).find("tf32") != std::string::npos ? "tf32" : "fp32";
  }
  return std::nullopt;
}

bool is_gemm_op(const std::string& name)
{
  return name == "aten::mm" || name == "aten::addmm" || name == "aten::linear" || name == "aten::bmm" ||
         name == "aten::baddbmm";
}

} // namespace

KinetoKernels read_kineto(const std::string& path)
{
  json doc;
  try {
    doc = spec::parse_json_text(trace_text(path), path, kMaxKinetoTextBytes);
  } catch (const TraceError&) {
    throw; // unreadable gzip data, said as the trace's already
  } catch (const SpecError& e) {
    // Not JSON: the reader's file, place and cause as the trace's.
    throw TraceError(e.file(), e.json_path().empty() ? "" : "at " + e.json_path(), e.detail());
  }
  const json* events = doc.is_object() && doc.contains("traceEvents") ? &doc["traceEvents"] : nullptr;
  if (!events || !events->is_array())
    throw TraceError(path, events ? "at $.traceEvents" : "at $",
                     "not a Chrome trace (expected an object with a \"traceEvents\" list, as torch.profiler "
                     "writes)");
  KinetoKernels out;
  std::vector<std::pair<double, double>> steps; // ProfilerStep#N: start (trace us) and seconds
  std::size_t runtime_calls = 0, launch_calls = 0, ranges = 0;
  std::vector<Span> ops, launches;
  std::map<std::int64_t, std::size_t> launch_of; // correlation -> its launch
  std::vector<const json*> kernels;
  for (std::size_t index = 0; index < events->size(); ++index) {
    const json& e = (*events)[index];
    if (!e.is_object() || text(e, "ph") != "X")
      continue;
    const auto cat  = lower(text(e, "cat"));
    const auto name = text(e, "name");
    // Kineto of 2021 wrote "Operator", "Runtime" and "Kernel" where later ones write cpu_op, cuda_runtime and
    // kernel; ProfilerStep#N is an annotation (or an Operator), never a kernel's launching op.
    if (name.rfind("ProfilerStep#", 0) == 0) {
      if (cat == "user_annotation" || cat == "cpu_op" || cat == "operator")
        steps.emplace_back(start_of(e, path, index, "iteration"), duration(e, path, "iteration"));
    } else if (cat == "cpu_op" || cat == "operator") {
      // In the trace's microseconds: a launch at an op's last microsecond is still inside it.
      const double start = start_of(e, path, index, "CPU op");
      duration(e, path, "CPU op");
      ops.push_back({thread_of(e), start, start + e["dur"].get<double>(), &e});
    } else if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "runtime") {
      ++runtime_calls;
      launch_calls += name.find("Launch") != std::string::npos ? 1 : 0;
      if (auto corr = int_arg(e, "correlation")) {
        launch_of[*corr] = launches.size();
        launches.push_back({thread_of(e), start_of(e, path, index, "runtime call"), 0, &e});
      }
    } else if (cat == "kernel") {
      kernels.push_back(&e);
    } else if (cat == "cuda_profiler_range") {
      ++ranges;
    }
  }
  // Iterations in trace order. torch.profiler's stop can cut the last ProfilerStep short (a step() just before it
  // opened one): a last step under half the median of the others is that fragment, not an iteration.
  std::sort(steps.begin(), steps.end());
  for (const auto& [start, seconds] : steps)
    out.iterations.push_back(seconds);
  if (out.iterations.size() >= 2) {
    const double last = out.iterations.back();
    if (last < 0.5 * median(std::vector<double>(out.iterations.begin(), out.iterations.end() - 1))) {
      out.truncated_iteration = last;
      out.iterations.pop_back();
    }
  }
  // Without kernels there is nothing to measure: a CPU-only profile, one recorded without the GPU's activity, or
  // CUPTI's range profiler's counters.
  if (kernels.empty() && ranges > 0)
    throw TraceError(path, "",
                     "no GPU kernel events: it was recorded with CUPTI's range profiler (" + std::to_string(ranges) +
                         " cuda_profiler_range events: hardware counters over replayed ranges, not kernel times; " +
                         std::to_string(launch_calls) +
                         " kernel launches): record it with torch.profiler's activities=[ProfilerActivity.CUDA] and "
                         "no profiler_metrics in its experimental_config");
  if (kernels.empty())
    throw TraceError(path, "",
                     "no GPU kernel events (\"cat\": \"kernel\"; the trace has " + std::to_string(ops.size()) +
                         " CPU ops and " + std::to_string(runtime_calls) + " runtime calls, " +
                         std::to_string(launch_calls) +
                         " of them kernel launches): record it with ProfilerActivity.CUDA among torch.profiler's "
                         "activities");
  const auto owner = enclosing_ops(ops, launches);
  // Kernel seconds per launching op (an op may launch several kernels: their times add up).
  std::map<const json*, double> op_seconds;
  std::map<const json*, std::size_t> op_kernels;
  std::map<const json*, std::string> op_kernel_name;
  for (const json* k : kernels) {
    const double seconds = duration(*k, path, "kernel");
    ++out.gpu_kernels;
    out.gpu_seconds += seconds;
    const auto corr = int_arg(*k, "correlation");
    const auto it   = corr ? launch_of.find(*corr) : launch_of.end();
    if (it == launch_of.end()) {
      out.unmatched["no launch event with the kernel's correlation id"]++;
      continue;
    }
    const json* op = owner[it->second];
    if (!op) {
      out.unmatched["launched outside any CPU op"]++;
      continue;
    }
    ++out.attached_kernels;
    op_seconds[op] += seconds;
    op_kernels[op]++;
    op_kernel_name.emplace(op, text(*k, "name"));
  }
  std::map<GemmKey, std::vector<double>> gemms;
  std::map<AttentionKey, std::vector<double>> attention;
  for (const auto& entry : op_seconds) {
    // Named copies, not structured bindings: lambdas capture them (clang 14 cannot capture bindings).
    const json* op_event = entry.first;
    const auto seconds   = entry.second;
    const json& op       = *op_event;
    const auto name      = text(op, "name");
    const auto dims      = dims_of(op);
    const auto kernels_n = op_kernels[op_event];
    auto unmatched       = [&](const std::string& why) { out.unmatched[name + ": " + why] += kernels_n; };
    auto matched         = [&]() {
      out.matched_kernels += kernels_n;
      out.matched_seconds += seconds;
    };
    auto product = [](const std::vector<double>& v, std::size_t upto) {
      double p = 1;
      for (std::size_t i = 0; i < upto && i < v.size(); ++i)
        p *= v[i];
      return p;
    };
    if (is_gemm_op(name)) {
      out.gemm_kernels += kernels_n;
      const auto dtype = gemm_dtype(op, op_kernel_name[op_event]);
      std::optional<GemmKey> g;
      if (dims.empty()) {
        unmatched("no \"Input Dims\" (profile with record_shapes=True)");
        continue;
      }
      if (!dtype) {
        unmatched("no \"Input type\" of a floating type");
        continue;
      }
      // The inner (and batch) dimensions of the two operands agree in any product PyTorch ran; where they do not,
      // the trace is damaged and its shape is no GEMM's.
      bool agree = true;
      if (name == "aten::mm" && dims.size() >= 2 && dims[0].size() == 2 && dims[1].size() == 2) {
        g     = GemmKey{*dtype, false, 1, dims[0][0], dims[1][1], dims[0][1]};
        agree = dims[0][1] == dims[1][0];
      } else if (name == "aten::addmm" && dims.size() >= 3 && dims[1].size() == 2 && dims[2].size() == 2) {
        g     = GemmKey{*dtype, false, 1, dims[1][0], dims[2][1], dims[1][1]};
        agree = dims[1][1] == dims[2][0];
      } else if (name == "aten::linear" && dims.size() >= 2 && dims[0].size() >= 2 && dims[1].size() == 2) {
        g     = GemmKey{*dtype, false, 1, product(dims[0], dims[0].size() - 1), dims[1][0], dims[0].back()};
        agree = dims[0].back() == dims[1][1];
      } else if (name == "aten::bmm" && dims.size() >= 2 && dims[0].size() == 3 && dims[1].size() == 3) {
        g     = GemmKey{*dtype, true, dims[0][0], dims[0][1], dims[1][2], dims[0][2]};
        agree = dims[0][0] == dims[1][0] && dims[0][2] == dims[1][1];
      } else if (name == "aten::baddbmm" && dims.size() >= 3 && dims[1].size() == 3 && dims[2].size() == 3) {
        g     = GemmKey{*dtype, true, dims[1][0], dims[1][1], dims[2][2], dims[1][2]};
        agree = dims[1][0] == dims[2][0] && dims[1][2] == dims[2][1];
      }
      // A shape of no whole, positive sizes, or no time at all, gives no table row the reader would take.
      if (!g) {
        unmatched("inputs of another shape than the op's");
        continue;
      }
      if (!agree) {
        unmatched("operands whose inner or batch dimensions differ (a damaged trace)");
        continue;
      }
      if (!whole_sizes({g->batch, g->m, g->n, g->k}) || !(seconds > 0)) {
        unmatched("sizes not whole and positive, or no time");
        continue;
      }
      gemms[*g].push_back(seconds);
      matched();
      continue;
    }
    const bool flash = name == "aten::_flash_attention_forward" || name == "aten::_flash_attention_backward";
    const bool sdpa  = name == "aten::_scaled_dot_product_flash_attention" ||
                      name == "aten::_scaled_dot_product_flash_attention_backward";
    if (flash || sdpa) {
      const bool backward = name.ends_with("_backward");
      if (!dims.empty() && dims[0].size() == 4 && whole_sizes({dims[0][0], dims[0][1], dims[0][2], dims[0][3]}) &&
          seconds > 0) {
        const auto& q      = dims[0]; // backward: grad_out, the same shape
        const double batch = q[0], sequence = flash ? q[1] : q[2], heads = flash ? q[2] : q[1];
        attention[{backward, sequence, heads, q[3]}].push_back(seconds / batch);
        matched();
      } else {
        unmatched("no 4-d query in \"Input Dims\" (profile with record_shapes=True)");
      }
      continue;
    }
    unmatched("not a GEMM or attention op");
  }
  for (const auto& [key, times] : gemms) {
    const bool table = !key.batched && (key.dtype == "bf16" || key.dtype == "fp8");
    if (table)
      out.kernels.gemm.push_back({key.dtype == "fp8" ? workload::Precision::fp8 : workload::Precision::bf16, key.m,
                                  key.n, key.k, median(times)});
    else
      out.other_gemms.push_back({key.batched ? "bmm" : "mm", key.dtype, key.batch, key.m, key.n, key.k, median(times)});
  }
  for (const auto& [key, times] : attention)
    out.kernels.attention.push_back({key.backward, key.sequence, key.heads, key.head_dim, median(times)});
  out.kernels.gemm_file      = out.kernels.gemm.empty() ? "" : path;
  out.kernels.attention_file = out.kernels.attention.empty() ? "" : path;
  return out;
}

ReplayCoverage replay_coverage(const KinetoKernels& k, const std::string& trace, const std::string& scenario,
                               const workload::StepGraph& modelled, const workload::StepGraph& replayed)
{
  ReplayCoverage out;
  for (std::size_t s = 0; s < replayed.stages.size(); ++s) {
    const auto& ops = replayed.stages[s].ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (!workload::is_compute(ops[i].kind) || ops[i].host)
        continue;
      ++out.compute_ops;
      // The graphs are the same but for the covered kernels' times; an op with no counterpart (layers balanced
      // again by the measured speeds) moved because of them.
      const workload::Op* before =
          s < modelled.stages.size() && i < modelled.stages[s].ops.size() ? &modelled.stages[s].ops[i] : nullptr;
      if (!before || std::fabs(before->seconds - ops[i].seconds) > 1e-12 * std::max(before->seconds, ops[i].seconds))
        ++out.timed_ops;
    }
  }
  if (out.compute_ops == 0)
    throw TraceError(trace, "",
                     "the step of " + scenario +
                         " has no GPU compute op for the measured kernels to time (a trace of communication only), "
                         "so the replay would repeat the model");
  if (out.timed_ops == 0)
    throw TraceError(trace, "",
                     "none of the " + std::to_string(out.compute_ops) + " GPU compute ops of " + scenario +
                         " took a measured time: their GEMM and attention shapes lie outside the trace's " +
                         std::to_string(k.kernels.gemm.size()) + " BF16/FP8 GEMM and " +
                         std::to_string(k.kernels.attention.size()) +
                         " attention shapes (measured times replace the model's only between measured ones), or "
                         "their times are an execution trace's own, so the replay would repeat the model: profile "
                         "the scenario's own model and parallelism");
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
  if (!k.other_gemms.empty()) {
    std::string text = "# from a Kineto trace by spansim workload import-kineto: GEMMs measured_kernels does not take "
                       "(FP32, TF32, FP16 inputs; batched products), median seconds per call\n"
                       "op,batch,m,n,k,dtype,seconds\n";
    for (const auto& g : k.other_gemms)
      text += g.op + "," + number(g.batch) + "," + number(g.m) + "," + number(g.n) + "," + number(g.k) + "," + g.dtype +
              "," + number(g.seconds) + "\n";
    written.push_back(path_in(dir, "gemm_other.csv"));
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
