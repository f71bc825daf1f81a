// The worker protocol of the search (optimizer/protocol.hpp) and points as lines of text (optimizer/optimizer.hpp).
#include "optimizer/protocol.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <cstring>

namespace spansim::optimizer {

double Reader::number()
{
  double v = 0;
  if (pos_ + sizeof v > data_.size())
    throw SimulationError("a search worker's record is truncated");
  std::memcpy(&v, data_.data() + pos_, sizeof v);
  pos_ += sizeof v;
  return v;
}

std::string Reader::text()
{
  const auto n = static_cast<std::size_t>(number());
  if (pos_ + n > data_.size())
    throw SimulationError("a search worker's record is truncated");
  std::string s = data_.substr(pos_, n);
  pos_ += n;
  return s;
}

std::string encode(const Outcome& o)
{
  Bytes b;
  b.put(o.reason);
  b.put(o.failure);
  b.put(o.lower_bound);
  b.put(o.score);
  const auto& m = o.metrics;
  for (double v : {m.step_time, m.mfu, m.tflops_per_gpu, m.bubble})
    b.put(v);
  for (double v : m.exposed)
    b.put(v);
  b.put(m.bytes_across_buildings ? 1.0 : 0.0);
  b.put(m.bytes_across_buildings.value_or(0));
  b.put(m.bytes_across_regions.value_or(0));
  b.put(m.inner_step ? 1.0 : 0.0);
  b.put(m.inner_step.value_or(0));
  b.put(m.outer_sync.value_or(0));
  b.put(static_cast<double>(m.collectives_chosen.size()));
  for (const auto& [dim, algo] : m.collectives_chosen) {
    b.put(dim);
    b.put(algo);
  }
  return b.take();
}

Outcome decode(const std::string& data)
{
  Reader r(data);
  Outcome o;
  o.reason      = r.text();
  o.failure     = r.text();
  o.lower_bound = r.number();
  o.score       = r.number();
  auto& m       = o.metrics;
  for (double* v : {&m.step_time, &m.mfu, &m.tflops_per_gpu, &m.bubble})
    *v = r.number();
  for (double& v : m.exposed)
    v = r.number();
  const bool links = r.number() > 0;
  const double b = r.number(), g = r.number();
  if (links) {
    m.bytes_across_buildings = b;
    m.bytes_across_regions   = g;
  }
  const bool outer   = r.number() > 0;
  const double inner = r.number(), sync_s = r.number();
  if (outer) {
    m.inner_step = inner;
    m.outer_sync = sync_s;
  }
  const auto chosen = static_cast<std::size_t>(r.number());
  for (std::size_t i = 0; i < chosen; ++i) {
    auto dim                  = r.text();
    m.collectives_chosen[dim] = r.text();
  }
  return o;
}

namespace {

// The position of `value` in the space's list: compression and DiLoCo travel as indices (every point takes them
// from the space, the production default included).
template <class T>
double position(const std::vector<T>& values, const T& value, const char* knob)
{
  const auto it = std::find(values.begin(), values.end(), value);
  if (it == values.end())
    throw SimulationError(std::string("a point's ") + knob + " is not among the search space's values");
  return static_cast<double>(it - values.begin());
}

// A whole number in [0, n), or the line is not a point of this search.
std::size_t bounded(double v, std::size_t n, const char* knob)
{
  if (!(v >= 0) || v >= static_cast<double>(n) || v != static_cast<double>(static_cast<std::size_t>(v)))
    throw UsageError(std::string("a work list's point has an invalid ") + knob + " (" + std::to_string(v) +
                     "; allowed 0.." + std::to_string(n - 1) + "): was it written for another search spec?");
  return static_cast<std::size_t>(v);
}

constexpr char kHex[] = "0123456789abcdef";

Point read_point(const OptimizeSpec& spec, const std::string& bytes)
{
  Reader r(bytes);
  constexpr std::size_t kCount = 1 << 30; // degrees and counts: any whole number
  Point p;
  for (int* v : {&p.tp, &p.cp, &p.pp, &p.dp, &p.ep})
    *v = static_cast<int>(bounded(r.number(), kCount, "degree"));
  p.data_parallel =
      static_cast<workload::DataParallelMode>(bounded(r.number(), enum_names(p.data_parallel).size(), "data_parallel"));
  p.reshard_after_forward = bounded(r.number(), 2, "reshard_after_forward") == 1;
  p.micro_batch           = static_cast<int>(bounded(r.number(), kCount, "micro_batch"));
  p.schedule = static_cast<workload::ScheduleKind>(bounded(r.number(), enum_names(p.schedule).size(), "schedule"));
  p.virtual_stages = static_cast<int>(bounded(r.number(), kCount, "virtual_stages"));
  p.order.resize(bounded(r.number(), workload::kDims.size() + 1, "order length"));
  for (auto& d : p.order)
    d = static_cast<workload::Dim>(bounded(r.number(), enum_names(workload::Dim{}).size(), "order"));
  p.recompute  = static_cast<workload::Recompute>(bounded(r.number(), enum_names(p.recompute).size(), "recompute"));
  p.tp_overlap = bounded(r.number(), 2, "tp_overlap") == 1;
  p.cp_comm    = static_cast<workload::CpComm>(bounded(r.number(), enum_names(p.cp_comm).size(), "cp_comm"));
  p.cp_a2a     = static_cast<int>(bounded(r.number(), kCount, "cp_a2a"));
  p.dp_algorithm =
      static_cast<netsim::Algorithm>(bounded(r.number(), enum_names(p.dp_algorithm).size(), "dp_algorithm"));
  p.etp        = static_cast<int>(bounded(r.number(), kCount, "etp"));
  p.dispatcher = static_cast<workload::Dispatcher>(bounded(r.number(), enum_names(p.dispatcher).size(), "dispatcher"));
  p.node_limit = static_cast<int>(bounded(r.number(), kCount, "node_limit"));
  p.ep_overlap = bounded(r.number(), 2, "ep_overlap") == 1;
  p.flows_per_pair = static_cast<int>(bounded(r.number(), kCount, "flows_per_pair"));
  p.window         = r.number();
  p.qps            = static_cast<int>(bounded(r.number(), kCount, "qps"));
  p.compression    = spec.space.compression[bounded(r.number(), spec.space.compression.size(), "compression")];
  p.diloco         = spec.space.diloco[bounded(r.number(), spec.space.diloco.size(), "diloco")];
  p.inter_building = r.number();
  p.inter_region   = r.number();
  if (!r.done())
    throw UsageError("a work list's point has bytes after its last knob: was it written for another search spec?");
  return p;
}

} // namespace

std::string encode_point(const OptimizeSpec& spec, const Point& p)
{
  // In read_point's order: the knobs before the rank order, the order (length, then dimensions), the rest.
  const auto flag = [](bool v) { return v ? 1.0 : 0.0; };
  Bytes b;
  for (double v : {double(p.tp), double(p.cp), double(p.pp), double(p.dp), double(p.ep), double(p.data_parallel),
                   flag(p.reshard_after_forward), double(p.micro_batch), double(p.schedule), double(p.virtual_stages),
                   double(p.order.size())})
    b.put(v);
  for (auto d : p.order)
    b.put(static_cast<double>(d));
  for (double v :
       {double(p.recompute), flag(p.tp_overlap), double(p.cp_comm), double(p.cp_a2a), double(p.dp_algorithm),
        double(p.etp), double(p.dispatcher), double(p.node_limit), flag(p.ep_overlap), double(p.flows_per_pair),
        p.window, double(p.qps), position(spec.space.compression, p.compression, "compression"),
        position(spec.space.diloco, p.diloco, "DiLoCo block"), p.inter_building, p.inter_region})
    b.put(v);
  const std::string bytes = b.take();
  std::string line;
  for (unsigned char c : bytes) {
    line += kHex[c >> 4];
    line += kHex[c & 15];
  }
  return line;
}

Point decode_point(const OptimizeSpec& spec, const std::string& line)
{
  if (line.size() % 2 != 0 || line.find_first_not_of(kHex) != std::string::npos)
    throw UsageError("a work list's line is not a point (hex digits expected): \"" + line.substr(0, 40) + "\"");
  std::string bytes;
  for (std::size_t i = 0; i < line.size(); i += 2)
    bytes += static_cast<char>(std::string_view(kHex).find(line[i]) * 16 + std::string_view(kHex).find(line[i + 1]));
  try {
    return read_point(spec, bytes);
  } catch (const SimulationError&) {
    throw UsageError("a work list's point is truncated: was it written for another search spec?");
  }
}

} // namespace spansim::optimizer
