// Import: Chakra ETs read back as a step graph, one stage program per pipeline stage.
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/names.hpp"
#include "common/paths.hpp"
#include "common/units.hpp"
#include "traces/chakra_io.hpp"
#include "traces/traces.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <queue>
#include <set>

namespace spansim::traces {

using nlohmann::json;
using workload::Dim;
using workload::OpKind;

namespace {

namespace fs = std::filesystem;

std::string et_path(const std::string& prefix, int rank)
{
  return prefix + "." + std::to_string(rank) + ".et";
}

// The ranks whose file PREFIX.<rank>.et exists (rank written in decimal, as et_path writes it), in order.
std::vector<int> rank_files(const std::string& prefix)
{
  const fs::path p(prefix);
  const std::string stem = p.filename().string() + ".";
  const fs::path dir     = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::vector<int> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= stem.size() + 3 || !name.starts_with(stem) || !name.ends_with(".et"))
      continue;
    const std::string digits = name.substr(stem.size(), name.size() - stem.size() - 3);
    if (digits.size() > 9 || (digits.size() > 1 && digits.front() == '0') ||
        !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); }))
      continue;
    out.push_back(std::stoi(digits));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// "t.0.et to t.7.et", "t.0.et and t.2.et": the rank files an error names, runs of consecutive ranks as ranges (the
// first few runs, then how many files more).
std::string file_list(const std::string& prefix, const std::vector<int>& ranks)
{
  constexpr std::size_t kRuns = 4;
  const std::string stem      = fs::path(prefix).filename().string();
  auto name                   = [&](int r) { return stem + "." + std::to_string(r) + ".et"; };
  std::vector<std::string> runs;
  std::size_t shown = 0;
  for (std::size_t i = 0; i < ranks.size() && runs.size() < kRuns;) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    runs.push_back(j == i ? name(ranks[i]) : name(ranks[i]) + " to " + name(ranks[j]));
    shown += j - i + 1;
    i = j + 1;
  }
  if (shown < ranks.size())
    runs.push_back(std::to_string(ranks.size() - shown) + " more");
  std::string out;
  for (std::size_t i = 0; i < runs.size(); ++i)
    out += (i == 0 ? "" : i + 1 == runs.size() ? " and " : ", ") + runs[i];
  return out;
}

// The JSON file PREFIX + SUFFIX that spansim's exporter writes beside the traces, when there is one (its path set).
std::optional<json> side_file(const std::string& prefix, const char* suffix, std::string& path)
{
  path = prefix + suffix;
  if (!path_exists(path))
    return std::nullopt;
  return spec::load_json_file(path);
}

// The representative rank of each stage named by PREFIX.rank_map.json, when there is one.
std::map<int, int> rank_map(const std::string& prefix)
{
  std::map<int, int> out;
  std::string path;
  const auto found = side_file(prefix, ".rank_map.json", path);
  if (!found)
    return out;
  const auto& doc = *found;
  if (!doc.is_array())
    throw TraceError(path, "", "expected a list of {\"stage\", \"rank\", \"ranks\"}");
  for (const auto& e : doc) {
    if (!e.is_object() || !e.contains("stage") || !e.contains("rank") || !e["stage"].is_number_integer() ||
        !e["rank"].is_number_integer())
      throw TraceError(path, "", "expected a list of {\"stage\", \"rank\", \"ranks\"}");
    out[e["stage"].get<int>()] = e["rank"].get<int>();
  }
  return out;
}

// A node's duration_micros in seconds, at most the cap on times (1e10 s): 2^64 - 1 us would swamp the step.
double node_seconds(const chakra::Node& n, const std::string& path)
{
  const double seconds = static_cast<double>(n.duration_micros()) * 1e-6;
  if (seconds > units::kMaxTime)
    throw TraceError(path, "node " + std::to_string(n.id()),
                     "duration_micros " + std::to_string(n.duration_micros()) +
                         " is past the cap on times, 1e16 us (1e10 s)");
  return seconds;
}

// The integer ASTRA-sim's std::stoi reads at the start of `text` (blanks, a sign, digits: "4", "0.0", " 8x"), or
// nothing when it reads none.
std::optional<long long> stoi_like(const std::string& text)
{
  std::size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])))
    ++i;
  const std::size_t sign = i;
  if (i < text.size() && (text[i] == '+' || text[i] == '-'))
    ++i;
  const std::size_t digits = i;
  while (i < text.size() && i - digits < 18 && std::isdigit(static_cast<unsigned char>(text[i])))
    ++i;
  if (i == digits)
    return std::nullopt;
  return std::stoll(text.substr(sign, i - sign));
}

// The ranks of each communicator group of the trace's group file: `path` when the job names one (it must exist),
// else PREFIX.comm_groups.json when there is one (empty when there is none).
std::map<std::string, std::vector<int>> comm_groups(const std::string& prefix, const std::string& named)
{
  std::map<std::string, std::vector<int>> out;
  std::string path = named;
  std::optional<json> found;
  if (!named.empty())
    found = spec::load_json_file(named);
  else
    found = side_file(prefix, ".comm_groups.json", path);
  if (!found)
    return out;
  const auto& doc = *found;
  if (!doc.is_object())
    throw TraceError(path, "", "expected {\"<id>\": [ranks]}");
  for (const auto& [id, ranks] : doc.items()) {
    if (!ranks.is_array())
      throw TraceError(path, "", "group \"" + id + "\": expected a list of ranks");
    for (const auto& r : ranks)
      if (!r.is_number_integer() || r.get<std::int64_t>() < 0 || r.get<std::int64_t>() > (std::int64_t{1} << 30))
        throw TraceError(path, "", "group \"" + id + "\": expected a list of ranks (integers from 0)");
    auto list = ranks.get<std::vector<int>>();
    // A rank twice would talk to itself: name it rather than fail later on the group's size.
    std::set<int> seen;
    for (int r : list)
      if (!seen.insert(r).second)
        throw TraceError(path, "",
                         "group \"" + id + "\": rank " + std::to_string(r) +
                             " is listed twice (a group lists distinct ranks)");
    out[id] = std::move(list);
  }
  return out;
}

std::vector<Dim> parse_order(const std::string& text, const std::string& where)
{
  std::vector<Dim> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto end  = text.find(',', start);
    const auto name = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    auto d          = parse_name<Dim>(name);
    if (!d)
      throw TraceError(where, "", "spansim_order \"" + text + "\" names \"" + name + "\", not a dimension");
    out.push_back(*d);
    if (end == std::string::npos)
      break;
    start = end + 1;
  }
  return out;
}

template <class E>
E enum_attr(const chakra::Node& n, const char* name, E fallback, const std::string& where)
{
  auto text = detail::as_string(detail::find_attr(n, name));
  if (!text)
    return fallback;
  auto v = parse_name<E>(*text);
  if (!v)
    throw TraceError(where, "node " + std::to_string(n.id()),
                     std::string("attribute ") + name + " \"" + *text + "\" is not one of " + allowed_names<E>(true));
  return *v;
}

CollectiveOp collective_of(std::int64_t type, const std::string& where, std::uint64_t id)
{
  if (type == chakra::REDUCE_SCATTER_BLOCK) // Chakra's other reduce-scatter type, lowered as the first
    return CollectiveOp::reduce_scatter;
  for (const auto& [ours, theirs] : detail::kCommTypes)
    if (theirs == type)
      return ours;
  throw TraceError(where, "node " + std::to_string(id),
                   "collective type " + std::to_string(type) +
                       " is not supported (spansim lowers ALL_REDUCE, REDUCE, ALL_GATHER, BROADCAST, ALL_TO_ALL, "
                       "REDUCE_SCATTER)");
}

// The communicator group a collective node names; none when it names every rank. ASTRA-sim reads pg_name with
// std::stoi: "0.0" is group 0, "4.0" group 4; a missing or empty name, or group 0, is every rank of the job.
std::optional<std::string> named_group(const chakra::Node& n, const std::map<std::string, std::vector<int>>& groups)
{
  auto pg = detail::as_string(detail::find_attr(n, "pg_name"));
  if (pg && !groups.contains(*pg))
    if (const auto id = stoi_like(*pg)) {
      if (*id == 0)
        pg = std::string();
      else
        for (const auto& [name, ranks] : groups)
          if (stoi_like(name) == id)
            pg = name;
    }
  if (pg && pg->empty())
    pg.reset();
  return pg;
}

// A group of a foreign trace from its ranks: the dimensions along which its members' coordinates differ.
workload::Group group_of(const std::vector<int>& ranks, const placement::RankLayout& layout, const std::string& file,
                         const std::string& where)
{
  for (int r : ranks)
    if (r < 0 || r >= layout.ranks())
      throw TraceError(file, where,
                       "its communicator group names rank " + std::to_string(r) + ", outside the job's " +
                           std::to_string(layout.ranks()) + " ranks");
  workload::Group g;
  g.size = static_cast<int>(ranks.size());
  if (ranks.empty())
    return g;
  const auto first = layout.coordinates(ranks.front());
  for (int r : ranks) {
    const auto c = layout.coordinates(r);
    for (Dim d : workload::kRankDims)
      if (c[d] != first[d])
        g.axes = g.axes | workload::AxisSet(static_cast<workload::Axis>(d));
  }
  return g;
}

class StageReader {
public:
  StageReader(const workload::JobSpec& job, const placement::RankLayout& layout,
              const std::map<std::string, std::vector<int>>& groups, const std::string& groups_file)
      : job_(job), layout_(layout), groups_(groups), groups_file_(groups_file)
  {
  }

  workload::StageProgram read(int stage, const std::string& path, int rank)
  {
    auto et = detail::read_et(path);
    workload::StageProgram p;
    p.stage       = stage;
    const auto& m = et.metadata;
    if (auto v = detail::as_double(detail::find_attr(m, "spansim_params")))
      p.params = *v;
    if (const auto* a = detail::find_attr(m, "spansim_chunk_layers"); a && a->has_int64_list())
      for (auto l : a->int64_list().values())
        p.chunk_layers.push_back(static_cast<int>(l));
    for (auto [key, field] : {std::pair{"spansim_memory_weights", &p.memory.weights},
                              std::pair{"spansim_memory_gradients", &p.memory.gradients},
                              std::pair{"spansim_memory_optimizer", &p.memory.optimizer},
                              std::pair{"spansim_memory_activations", &p.memory.activations}})
      if (auto v = detail::as_double(detail::find_attr(m, key)))
        *field = *v;

    // Nodes by id; skipped kinds pass their dependencies on to their dependents.
    std::map<std::uint64_t, const chakra::Node*> by_id;
    for (const auto& n : et.nodes)
      if (!by_id.emplace(n.id(), &n).second)
        throw TraceError(path, "node " + std::to_string(n.id()), "its id appears twice");
    // Data dependencies are hard: one on a node the trace lacks is an error. Control dependencies follow Chakra's
    // feeder, which drains them: one on a missing node or on the node itself is dropped (PyTorch traces converted
    // by Chakra carry both), and so is one that closes a cycle with the data dependencies (a CPU op's control
    // dependency on its own kernel); each dropped one is counted in the graph's notes.
    std::map<std::uint64_t, std::vector<std::uint64_t>> deps, data;
    for (const auto& n : et.nodes) {
      auto& d = deps[n.id()];
      for (auto x : n.data_deps()) {
        if (!by_id.contains(x))
          throw TraceError(path, "node " + std::to_string(n.id()),
                           "depends on node " + std::to_string(x) + ", which the trace does not have");
        d.push_back(x);
        data[n.id()].push_back(x);
      }
      for (auto x : n.ctrl_deps()) {
        if (!by_id.contains(x))
          ++notes_["control dependencies on nodes the trace does not have, dropped"];
        else if (x == n.id())
          ++notes_["control dependencies of a node on itself, dropped"];
        else
          d.push_back(x);
      }
      switch (n.type()) {
      case chakra::COMP_NODE:
      case chakra::COMM_SEND_NODE:
      case chakra::COMM_RECV_NODE:
      case chakra::COMM_COLL_NODE:
      case chakra::INVALID_NODE:
      case chakra::METADATA_NODE:
      case chakra::MEM_LOAD_NODE:
      case chakra::MEM_STORE_NODE:
        break;
      default:
        throw TraceError(path, "node " + std::to_string(n.id()),
                         "is of type " + detail::node_type_name(n.type()) +
                             ", which spansim does not simulate (it reads COMP, COMM_SEND, COMM_RECV and COMM_COLL "
                             "nodes and skips INVALID, METADATA, MEM_LOAD and MEM_STORE ones)");
      }
    }
    // Kahn's order, smallest id first: a spansim export comes back in program order.
    std::map<std::uint64_t, int> waiting;
    std::set<std::pair<std::uint64_t, std::uint64_t>> dropped; // (node, control dependency) cut to break a cycle
    std::map<std::uint64_t, std::vector<std::uint64_t>> dependents;
    std::priority_queue<std::uint64_t, std::vector<std::uint64_t>, std::greater<>> ready;
    for (const auto& n : et.nodes) {
      std::set<std::uint64_t> distinct(deps[n.id()].begin(), deps[n.id()].end());
      waiting[n.id()] = static_cast<int>(distinct.size());
      for (auto x : distinct)
        dependents[x].push_back(n.id());
      if (distinct.empty())
        ready.push(n.id());
    }
    std::map<std::uint64_t, std::vector<int>> resolved; // node -> ops of the program it stands for (skipped: its deps')
    data_deps_.clear();
    std::size_t done = 0;
    while (done < et.nodes.size()) {
      if (ready.empty()) {
        // A cycle: walk unmet dependencies from the smallest waiting node until a node repeats, and drop one control
        // dependency on that loop (data dependencies are hard: a loop of them alone is an error).
        std::uint64_t at = 0;
        for (const auto& [node, w] : waiting)
          if (w > 0) {
            at = node;
            break;
          }
        std::vector<std::uint64_t> walk;
        std::map<std::uint64_t, std::size_t> on_path;
        while (!on_path.contains(at)) {
          on_path[at] = walk.size();
          walk.push_back(at);
          for (auto x : deps[at])
            if (!resolved.contains(x) && !dropped.contains({at, x})) {
              at = x;
              break;
            }
        }
        walk.push_back(at); // walk[k] depends on walk[k + 1]; the loop runs from on_path[at] to the end
        std::optional<std::pair<std::uint64_t, std::uint64_t>> cut;
        for (std::size_t k = on_path.at(at); k + 1 < walk.size() && !cut; ++k) {
          const auto& d = data[walk[k]];
          if (std::find(d.begin(), d.end(), walk[k + 1]) == d.end())
            cut = std::pair{walk[k], walk[k + 1]};
        }
        if (!cut)
          throw TraceError(path, "",
                           "the data dependencies form a cycle (node " + std::to_string(at) + " is on it; " +
                               std::to_string(et.nodes.size() - done) + " nodes never become ready)");
        dropped.insert(*cut);
        ++notes_["control dependencies that closed a cycle with data dependencies, dropped"];
        if (--waiting[cut->first] == 0)
          ready.push(cut->first);
        continue;
      }
      const auto id = ready.top();
      ready.pop();
      ++done;
      const auto& n = *by_id.at(id);
      std::set<int> op_deps, data_op_deps;
      for (auto x : deps[id])
        if (auto it = resolved.find(x); it != resolved.end()) // a dropped control dependency is not resolved
          for (int o : it->second)
            op_deps.insert(o);
      for (auto x : n.data_deps())
        for (int o : resolved.at(x))
          data_op_deps.insert(o);
      if (skipped(n.type())) {
        resolved[id] = {op_deps.begin(), op_deps.end()};
      } else {
        auto op = make_op(n, path, rank, stage);
        op.deps.assign(op_deps.begin(), op_deps.end());
        for (int d : data_op_deps)
          data_deps_.insert({static_cast<int>(p.ops.size()), d});
        resolved[id] = {static_cast<int>(p.ops.size())};
        p.ops.push_back(std::move(op));
        p.trace_nodes.push_back(id);
      }
      for (auto x : dependents[id])
        if (!dropped.contains({x, id}) && --waiting[x] == 0)
          ready.push(x);
    }
    p.trace_rank = rank;
    // The stream order is implied by program order: a control dependency on the op's stream predecessor is kept
    // out of `deps` so that an exported graph comes back as it was.
    const auto prev = workload::stream_predecessors(p);
    for (std::size_t i = 0; i < p.ops.size(); ++i)
      std::erase_if(p.ops[i].deps, [&](int d) {
        return d == prev[i] && !data_deps_.contains({static_cast<int>(i), d});
      });
    return p;
  }

private:
  static bool skipped(chakra::NodeType t)
  {
    return t == chakra::INVALID_NODE || t == chakra::METADATA_NODE || t == chakra::MEM_LOAD_NODE ||
           t == chakra::MEM_STORE_NODE;
  }

  workload::Op make_op(const chakra::Node& n, const std::string& path, int rank, int stage)
  {
    using detail::as_double;
    using detail::as_int;
    using detail::find_attr;
    workload::Op op;
    op.chunk             = static_cast<int>(as_int(find_attr(n, "spansim_chunk")).value_or(-1));
    op.micro_batch       = static_cast<int>(as_int(find_attr(n, "spansim_micro_batch")).value_or(-1));
    const std::string at = "node " + std::to_string(n.id());
    const bool cpu       = as_int(find_attr(n, "is_cpu_op")).value_or(0) != 0;
    if (n.type() == chakra::COMM_COLL_NODE && cpu) {
      // The CPU side of a collective (c10d's call, as Chakra's converter of 2023 wrote it): host time, no bytes;
      // the GPU's NCCL kernel is its own node.
      workload::Op op;
      op.kind    = OpKind::forward;
      op.host    = true;
      op.seconds = node_seconds(n, path);
      ++notes_["CPU-side collective calls (is_cpu_op) read as host time"];
      return op;
    }
    if (n.type() == chakra::COMP_NODE) {
      op.kind = enum_attr(n, "spansim_op", OpKind::forward, path);
      op.host = cpu;
      if (!workload::is_compute(op.kind))
        throw TraceError(path, at, "a COMP node's spansim_op must be forward, backward, recompute or optimizer");
      const auto flops  = as_double(find_attr(n, "num_ops")).value_or(0);
      const auto bytes  = as_double(find_attr(n, "tensor_size")).value_or(0);
      op.hardware_flops = as_double(find_attr(n, "spansim_hardware_flops")).value_or(flops);
      op.model_flops    = as_double(find_attr(n, "spansim_model_flops")).value_or(flops);
      op.hbm_bytes      = as_double(find_attr(n, "spansim_hbm_bytes")).value_or(bytes);
      if (auto s = as_double(find_attr(n, "spansim_seconds")))
        op.seconds = *s;
      else if (n.duration_micros() > 0)
        op.seconds = node_seconds(n, path);
      else {
        // No recorded time: the roofline of the job's GPU at its precision.
        const auto& gpu   = job_.gpu;
        const double peak = gpu.peak(job_.precision);
        op.seconds = std::max(peak > 0 ? flops / peak : 0.0, gpu.hbm_bandwidth > 0 ? bytes / gpu.hbm_bandwidth : 0.0);
      }
      auto& fx = op.effects;
      for (auto [key, field] : {std::pair{"spansim_fx_sustained_clock", &fx.sustained_clock},
                                std::pair{"spansim_fx_kernel_gaps", &fx.kernel_gaps},
                                std::pair{"spansim_fx_attention_by_length", &fx.attention_by_length},
                                std::pair{"spansim_fx_grad_clipping", &fx.grad_clipping},
                                std::pair{"spansim_fx_sm_contention", &fx.sm_contention}})
        *field = as_double(find_attr(n, key)).value_or(0);
      return op;
    }
    const auto size = as_double(find_attr(n, "comm_size"));
    if (!size && !find_attr(n, "spansim_bytes"))
      throw TraceError(path, at, "a communication node needs comm_size");
    op.count = static_cast<int>(as_int(find_attr(n, "spansim_count")).value_or(1));
    op.bytes = as_double(find_attr(n, "spansim_bytes")).value_or(size.value_or(0) / std::max(1, op.count));
    // A negative or non-finite size would vanish from the step: refuse it, naming the node.
    if (!(op.bytes >= 0) || !std::isfinite(op.bytes) || op.bytes * op.count > units::kMaxSize || op.count < 1) {
      char found[96];
      std::snprintf(found, sizeof found, "%s %.17g per call, count %d",
                    find_attr(n, "spansim_bytes") ? "spansim_bytes" : "comm_size", op.bytes, op.count);
      throw TraceError(path, at,
                       std::string("a communication node's size must be a number of bytes, at least 0 and at most "
                                   "1 EiB over its count, and its count at least 1 (found ") +
                           found + ")");
    }
    op.overlappable = as_int(find_attr(n, "spansim_overlappable")).value_or(0) != 0;
    if (n.type() == chakra::COMM_COLL_NODE) {
      op.kind = OpKind::collective;
      if (auto c = detail::as_string(find_attr(n, "spansim_collective")))
        op.collective = enum_attr(n, "spansim_collective", CollectiveOp::all_reduce, path);
      else
        op.collective = collective_of(as_int(find_attr(n, "comm_type")).value_or(-1), path, n.id());
      auto pg = named_group(n, groups_);
      // spansim's own traces carry their group's axes: the group file is for other readers then.
      if (pg && !groups_.contains(*pg) && (!groups_.empty() || !as_int(find_attr(n, "spansim_axes"))))
        throw TraceError(path, at,
                         "communicator group \"" + *pg + "\" is not in " + groups_file_ +
                             (groups_.empty()
                                  ? " (there is no such file: a trace whose collectives name groups needs it, "
                                    "{\"<id>\": [ranks]})"
                                  : ""));
      if (auto axes = as_int(find_attr(n, "spansim_axes"))) {
        op.group.axes = workload::AxisSet();
        for (int a = 0; a < static_cast<int>(enum_names(workload::Axis{}).size()); ++a)
          if ((*axes >> a) & 1)
            op.group.axes = op.group.axes | workload::AxisSet(static_cast<workload::Axis>(a));
        op.group.size = static_cast<int>(as_int(find_attr(n, "spansim_group_size")).value_or(1));
      } else if (pg) {
        const auto& ranks = groups_.at(*pg);
        if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end())
          throw TraceError(path, at,
                           "rank " + std::to_string(rank) + " is not in its communicator group \"" + *pg + "\"");
        op.group = group_of(ranks, layout_, path, at);
      } else {
        // Every rank, over the network dimensions involved_dim names: spansim has no ASTRA-sim network dimensions,
        // so a collective that leaves some out must name its group.
        if (const auto* dims = find_attr(n, "involved_dim"); dims && dims->has_bool_list())
          for (bool involved : dims->bool_list().values())
            if (!involved)
              throw TraceError(path, at,
                               "involved_dim leaves out network dimensions of ASTRA-sim's topology, which "
                               "spansim does not have: name the collective's ranks with pg_name and " +
                                   groups_file_);
        std::vector<int> all(static_cast<std::size_t>(layout_.ranks()));
        for (int r = 0; r < layout_.ranks(); ++r)
          all[static_cast<std::size_t>(r)] = r;
        op.group = group_of(all, layout_, path, at);
        ++notes_["collectives without pg_name, over every rank (as ASTRA-sim reads them)"];
      }
      // ASTRA-sim reads an all-gather's comm_size as each rank's input (its output is N times that); spansim's
      // buffer is the gathered tensor. Reduce-scatter (each rank's full input), all-reduce and all-to-all (each
      // rank's buffer) read the same in both.
      if (!find_attr(n, "spansim_bytes") && op.collective == CollectiveOp::all_gather && job_.trace_sizes_per_rank &&
          op.group.size > 1) {
        op.bytes *= op.group.size;
        ++notes_["all-gather comm_size read as each rank's input, times the group (ASTRA-sim's convention)"];
      }
      op.dim     = enum_attr(n, "spansim_dim", default_dim(op), path);
      op.purpose = enum_attr(n, "spansim_purpose", default_purpose(op), path);
      return op;
    }
    const bool send = n.type() == chakra::COMM_SEND_NODE;
    op.kind         = send ? OpKind::send : OpKind::recv;
    op.dim          = Dim::pp;
    op.purpose      = enum_attr(n, "spansim_purpose", workload::Purpose::pp_activations, path);
    // A foreign send completes when its bytes arrive, as ASTRA-sim's do; spansim's own keep NCCL's rendezvous.
    op.eager = send && !find_attr(n, "spansim_tag");
    if (auto t = as_int(find_attr(n, "spansim_tag")))
      op.tag = *t;
    else if (auto t2 = as_int(find_attr(n, "comm_tag")))
      op.tag = *t2;
    else
      throw TraceError(path, at, "a send or receive needs comm_tag");
    if (auto ps = as_int(find_attr(n, "spansim_peer_stage")))
      op.peer_stage = static_cast<int>(*ps);
    else {
      const auto peer = as_int(find_attr(n, send ? "comm_dst" : "comm_src"));
      if (!peer || *peer < 0 || *peer >= layout_.ranks())
        throw TraceError(path, at,
                         "a " + std::string(send ? "send needs comm_dst" : "receive needs comm_src") +
                             ", a rank of the job");
      op.peer_stage = layout_.coordinates(static_cast<int>(*peer)).pp;
    }
    if (op.peer_stage == stage || op.peer_stage < 0 || op.peer_stage >= job_.parallelism.pp)
      throw TraceError(path, at,
                       "its peer is on stage " + std::to_string(op.peer_stage) + " (this is stage " +
                           std::to_string(stage) + ")");
    return op;
  }

  static Dim default_dim(const workload::Op& op)
  {
    if (op.collective == CollectiveOp::all_to_all)
      return Dim::ep;
    for (Dim d : {Dim::dp, Dim::cp, Dim::tp, Dim::pp})
      if (op.group.axes.contains(static_cast<workload::Axis>(d)))
        return d;
    return Dim::dp;
  }

  static workload::Purpose default_purpose(const workload::Op& op)
  {
    using workload::Purpose;
    switch (*op.dim) {
    case Dim::tp:
      return Purpose::tp_activations;
    case Dim::cp:
      return Purpose::cp_kv;
    case Dim::pp:
      return Purpose::pp_activations;
    case Dim::ep:
      return Purpose::ep_dispatch;
    case Dim::dp:
      return op.collective == CollectiveOp::all_gather ? Purpose::param_gather : Purpose::grad_reduce;
    }
    return Purpose::grad_reduce;
  }

  const workload::JobSpec& job_;
  const placement::RankLayout& layout_;
  const std::map<std::string, std::vector<int>>& groups_;
  std::string groups_file_;
  std::set<std::pair<int, int>> data_deps_; ///< (op, dependency) pairs the trace gave as data dependencies

public:
  std::map<std::string, std::size_t> notes_; ///< what the reading tolerated, by kind, over every stage read
};

// What a node does, for comparing ranks: its type, and a collective's type and size (durations differ between the
// ranks of a real run).
std::string signature(const chakra::Node& n)
{
  using detail::as_double;
  using detail::as_int;
  using detail::find_attr;
  std::string out = detail::node_type_name(n.type());
  if (n.type() == chakra::COMM_COLL_NODE) {
    char size[64];
    std::snprintf(size, sizeof size, "%.17g", as_double(find_attr(n, "comm_size")).value_or(0));
    out +=
        " (comm_type " + std::to_string(as_int(find_attr(n, "comm_type")).value_or(-1)) + ", comm_size " + size + ")";
  }
  return out;
}

// Per collective node of the reference rank's file (by id), the communicator group each rank's file names there
// ("" for every rank), for the ranks that have a file.
using NamedGroups = std::map<std::uint64_t, std::map<int, std::string>>;

// A trace read without a model runs rank 0's program on every rank, as data-parallel replicas: every other rank's
// file must hold the same nodes (types, collectives and their sizes; durations may differ, as between the ranks of a
// real run: rank 0's stand for all), or its ranks need a parallelism. Where the trace has a group file, the groups
// each rank's collectives name are collected on the way.
NamedGroups check_alike(const std::string& prefix, int ranks, const workload::StageProgram& first,
                        const std::map<std::string, std::vector<int>>& groups)
{
  const auto reference = detail::read_et(et_path(prefix, first.trace_rank));
  NamedGroups named;
  auto note = [&](int rank, const chakra::Node& mine, const chakra::Node& reference_node) {
    if (!groups.empty() && mine.type() == chakra::COMM_COLL_NODE)
      named[reference_node.id()][rank] = named_group(mine, groups).value_or("");
  };
  for (const auto& n : reference.nodes)
    note(first.trace_rank, n, n);
  for (int r = 0; r < ranks; ++r) {
    if (r == first.trace_rank || !path_exists(et_path(prefix, r)))
      continue;
    const auto other = detail::read_et(et_path(prefix, r));
    const auto n     = std::min(reference.nodes.size(), other.nodes.size());
    for (std::size_t i = 0; i <= n; ++i) {
      const bool end_a = i == reference.nodes.size(), end_b = i == other.nodes.size();
      if (end_a && end_b)
        break;
      const std::string a = end_a ? "no node" : signature(reference.nodes[i]);
      const std::string b = end_b ? "no node" : signature(other.nodes[i]);
      if (a != b)
        throw TraceError(et_path(prefix, r), "record " + std::to_string(i + 1),
                         "this node is " + b + " where rank " + std::to_string(first.trace_rank) + "'s is " + a +
                             ": ranks that run different programs need the job's model, parallelism (whose order "
                             "numbers the ranks, one program per pipeline stage) and batch");
      if (i < n)
        note(r, other.nodes[i], reference.nodes[i]);
    }
  }
  return named;
}

// The ranks of a group, sorted, as a list in messages: "\"4\" (ranks 0, 2)", or "every rank".
std::string group_text(const std::string& name, const std::vector<int>& ranks)
{
  if (name.empty())
    return "every rank (no pg_name)";
  std::vector<std::string> list;
  for (int r : ranks)
    list.push_back(std::to_string(r));
  return "\"" + name + "\" (ranks " + listing(list, 16) + ")";
}

// Each collective of a trace read without a model runs over the groups its ranks' files name: every rank is in its
// group, and ranks name one group together or disjoint ones. Where those groups are not the groups along the axes
// the reference rank's group spans (ASTRA-sim's [0,2] and [1,3] of eight ranks, which span dp), the op carries them.
// Only where the files' groups hold every rank of the stage: ranks without a file run rank 0's program, and their
// groups are then the axes' (returns how many collectives kept their axes for that reason).
std::size_t apply_sub_groups(workload::StageProgram& st, const NamedGroups& named,
                             const std::map<std::string, std::vector<int>>& groups, const std::string& prefix,
                             const placement::RankLayout& layout)
{
  std::map<std::string, std::vector<int>> sorted;
  for (const auto& [name, ranks] : groups) {
    auto& s = sorted[name] = ranks;
    std::sort(s.begin(), s.end());
  }
  auto& every = sorted[""];
  for (int r = 0; r < layout.ranks(); ++r)
    every.push_back(r);
  std::map<std::vector<std::vector<int>>, std::uint32_t> ids;
  std::size_t partial = 0;
  for (std::size_t i = 0; i < st.ops.size() && i < st.trace_nodes.size(); ++i) {
    auto& op      = st.ops[i];
    const auto it = named.find(st.trace_nodes[i]);
    if (op.kind != OpKind::collective || it == named.end())
      continue;
    const std::string where = "node " + std::to_string(st.trace_nodes[i]);
    std::set<std::vector<int>> parts;
    for (const auto& [rank, name] : it->second) {
      const auto found = sorted.find(name);
      if (found == sorted.end())
        throw TraceError(et_path(prefix, rank), where, "communicator group \"" + name + "\" is not in the group file");
      const auto& mine = found->second;
      if (!std::binary_search(mine.begin(), mine.end(), rank))
        throw TraceError(et_path(prefix, rank), where,
                         "rank " + std::to_string(rank) + " is not in its communicator group " +
                             group_text(name, mine));
      for (int m : mine) {
        const auto other = it->second.find(m);
        if (other != it->second.end() && sorted.at(other->second) != mine)
          throw TraceError(et_path(prefix, m), where,
                           "names communicator group " + group_text(other->second, sorted.at(other->second)) +
                               " where rank " + std::to_string(rank) + "'s file names " + group_text(name, mine) +
                               ", which holds rank " + std::to_string(m) +
                               ": the ranks of one collective name one group, or groups apart");
      }
      parts.insert(mine);
    }
    std::vector<std::vector<int>> partition(parts.begin(), parts.end());
    auto along              = layout.groups(st.stage, op.group);
    std::size_t stage_ranks = 0, listed = 0;
    for (auto& g : along) {
      std::sort(g.begin(), g.end());
      stage_ranks += g.size();
    }
    std::set<int> covered;
    for (const auto& g : partition) {
      covered.insert(g.begin(), g.end());
      listed += g.size();
    }
    if (listed != covered.size())
      throw TraceError(prefix, where,
                       "the communicator groups its ranks' files name overlap on a rank without a file: a collective "
                       "runs over groups apart");
    std::sort(along.begin(), along.end());
    if (partition == along)
      continue;
    if (covered.size() < stage_ranks) {
      ++partial;
      continue;
    }
    const auto [pos, fresh] = ids.emplace(partition, static_cast<std::uint32_t>(ids.size()) + 1);
    op.group.members        = std::make_shared<const std::vector<std::vector<int>>>(partition);
    op.group.partition      = pos->second;
  }
  return partial;
}

} // namespace

workload::JobSpec load_chakra_job(const json& document, const std::string& file, const std::string& json_path)
{
  spec::ObjectReader r(document, spec::Location{file, json_path});
  const std::string name = r.name("name");
  r.choice("kind", {"chakra"});
  const std::string trace = spec::referenced_path(r.string("trace"), r.where().member("trace"));
  r.optional_string("description");
  // ASTRA-sim takes the group file from any path (--comm-group-configuration); published artifacts keep theirs apart.
  std::string groups_file;
  if (r.has("comm_groups")) {
    groups_file = spec::referenced_path(r.string("comm_groups"), r.where().member("comm_groups"));
    spec::check_referenced_file(groups_file, r.where().member("comm_groups"));
  }
  // The first trace file: the rank map's first representative, else rank 0's.
  auto reps              = rank_map(trace);
  const std::string path = et_path(trace, reps.empty() ? 0 : reps.begin()->second);
  if (!path_exists(path))
    r.fail("trace", "no trace file \"" + path + "\" (a trace is DIR/PREFIX, with files PREFIX.<rank>.et)");
  // Only the metadata is needed here.
  const auto et      = detail::read_et(path);
  const auto carried = detail::as_string(detail::find_attr(et.metadata, "spansim_job"));
  workload::JobSpec job;
  if (carried) {
    r.finish();
    json j;
    try {
      j = json::parse(*carried);
    } catch (const std::exception& e) {
      throw TraceError(path, "", std::string("the spansim_job metadata is not JSON: ") + e.what());
    }
    job = workload::parse_job(j, path, "$(spansim_job)");
  } else {
    // A foreign trace: the job's own keys say what the trace does not. Only the GPU is needed (and the ranks, which
    // default to the trace's files); with a model, the job file's parallelism numbers the ranks and its batch
    // gives tokens and FLOP counts.
    const auto sizes = document.contains("sizes") ? r.choice("sizes", {"astra-sim", "nccl-tests"}) : "astra-sim";
    json rest        = document;
    rest.erase("kind");
    rest.erase("trace");
    rest.erase("sizes");
    rest.erase("comm_groups");
    if (rest.contains("model")) {
      job = workload::parse_job(rest, file, json_path);
    } else {
      for (const auto& [key, value] : rest.items())
        if (key != "name" && key != "description" && key != "gpu" && key != "gpus")
          r.fail(key, "a trace read without a model takes only name, description, gpu, gpus, sizes and comm_groups; "
                      "give "
                      "\"model\" (and the job's parallelism and batch) to use \"" +
                          key + "\"");
      if (!rest.contains("gpu"))
        r.fail("gpu", "a foreign trace needs the GPU its ranks run on (a GPU of the zoo, e.g. \"h100\")");
      // The ranks are the files, numbered from 0: a gap would silently make a smaller job of the files before it.
      const auto found = rank_files(trace);
      for (std::size_t i = 0; i < found.size(); ++i)
        if (found[i] != static_cast<int>(i))
          throw TraceError(et_path(trace, static_cast<int>(i)), "",
                           "no such file, yet the trace has " + file_list(trace, found) +
                               ": a trace's rank files are numbered 0 to N-1 without gaps (rank " + std::to_string(i) +
                               "'s file is missing)");
      const auto files = static_cast<std::int64_t>(found.size());
      if (rest.contains("gpus") && !rest["gpus"].is_number_integer())
        r.fail("gpus", "expected a whole number of ranks (the trace has " + std::to_string(files) + " files)");
      const std::int64_t ranks = rest.contains("gpus") ? rest["gpus"].get<std::int64_t>() : files;
      if (ranks < 1 || ranks > (1 << 20))
        r.fail("gpus", "expected a number of ranks from 1 (the trace has " + std::to_string(files) + " files)");
      // Fewer ranks than files would drop the other ranks' programs without a word; more run rank 0's program.
      if (ranks < files)
        r.fail("gpus",
               "gpus " + std::to_string(ranks) + " is fewer ranks than files: the trace has " + std::to_string(files) +
                   " rank files (" + file_list(trace, found) +
                   "), and gpus must be at least their number (ranks without a file run rank 0's program); leave it "
                   "out to take one rank per file");
      // Ranks that exchange sends and receives are pipeline stages of their own (each reads its own file); ranks
      // that only run collectives together run one program (rank 0's), as data-parallel replicas.
      bool p2p = false, collectives = false;
      for (const auto& n : et.nodes) {
        p2p         = p2p || n.type() == chakra::COMM_SEND_NODE || n.type() == chakra::COMM_RECV_NODE;
        collectives = collectives || n.type() == chakra::COMM_COLL_NODE;
      }
      if (p2p && collectives)
        r.fail("model", "the trace mixes sends and receives with collectives: give the job's model, parallelism "
                        "(whose order numbers the trace's ranks) and batch, so that its stages and groups are known");
      const int stages = p2p ? static_cast<int>(ranks) : 1;
      json synthetic   = {{"name", name},
                          {"model",
                           {{"name", "trace-only"},
                            {"layers", stages},
                            {"hidden", 64},
                            {"ffn", 64},
                            {"heads", 1},
                            {"kv_heads", 1},
                            {"head_dim", 64},
                            {"vocab", 64},
                            {"mlp", "swiglu"}}},
                          {"gpu", rest["gpu"]},
                          {"gpus", ranks},
                          {"parallelism", {{"tp", 1}, {"pp", stages}, {"dp", ranks / stages}, {"data_parallel", "ddp"}}},
                          {"batch", {{"global_sequences", ranks / stages}, {"sequence_length", 64}, {"micro_batch", 1}}},
                          {"schedule", {{"kind", "gpipe"}}},
                          {"recompute", "none"},
                          {"calibration", "none"}};
      job              = workload::parse_job(synthetic, file, json_path);
      job.trace_only   = true;
    }
    job.trace_sizes_per_rank = sizes == "astra-sim";
  }
  job.name              = name;
  job.trace             = trace;
  job.trace_comm_groups = groups_file;
  return job;
}

workload::StepGraph import_chakra(const workload::JobSpec& job)
{
  const std::string& prefix = job.trace;
  auto reps                 = rank_map(prefix);
  // The rank numbering the trace was written with.
  std::vector<Dim> order = job.parallelism.order;
  {
    const std::string first = et_path(prefix, reps.empty() ? 0 : reps.begin()->second);
    if (!path_exists(first))
      throw TraceError(first, "", "no such trace file");
    const auto et = detail::read_et(first);
    if (auto o = detail::as_string(detail::find_attr(et.metadata, "spansim_order")))
      order = parse_order(*o, first);
  }
  std::optional<placement::RankLayout> layout;
  try {
    layout.emplace(job.parallelism, order);
  } catch (const std::invalid_argument& e) {
    throw TraceError(prefix, "", e.what());
  }
  // A rank file beyond the job's ranks would be left out without a word (a job smaller than its trace).
  if (const auto found = rank_files(prefix); !found.empty() && found.back() >= layout->ranks())
    throw TraceError(et_path(prefix, found.back()), "",
                     "rank " + std::to_string(found.back()) + "'s file, but the job has " +
                         std::to_string(layout->ranks()) + " rank" + (layout->ranks() == 1 ? "" : "s") + " (0 to " +
                         std::to_string(layout->ranks() - 1) +
                         "): a trace's rank files must be ranks of the job (its gpus, or its parallelism)");
  const auto groups = comm_groups(prefix, job.trace_comm_groups);
  StageReader reader(job, *layout, groups,
                     job.trace_comm_groups.empty() ? prefix + ".comm_groups.json" : job.trace_comm_groups);
  workload::StepGraph graph;
  graph.job           = job;
  graph.micro_batches = job.micro_batches();
  {
    const auto et = detail::read_et(et_path(prefix, reps.empty() ? 0 : reps.begin()->second));
    if (auto mb = detail::as_int(detail::find_attr(et.metadata, "spansim_micro_batches")))
      graph.micro_batches = static_cast<int>(*mb);
  }
  for (int s = 0; s < job.parallelism.pp; ++s) {
    int rank = -1;
    if (auto it = reps.find(s); it != reps.end())
      rank = it->second;
    else
      for (int r = 0; r < layout->ranks() && rank < 0; ++r)
        if (layout->coordinates(r).pp == s && path_exists(et_path(prefix, r)))
          rank = r;
    if (rank < 0)
      throw TraceError(prefix, "",
                       "no trace file for pipeline stage " + std::to_string(s) +
                           " (PREFIX.<rank>.et of a rank of it, or a rank map)");
    if (layout->coordinates(rank).pp != s)
      throw TraceError(prefix + ".rank_map.json", "",
                       "rank " + std::to_string(rank) + " is on stage " + std::to_string(layout->coordinates(rank).pp) +
                           ", not " + std::to_string(s));
    graph.stages.push_back(reader.read(s, et_path(prefix, rank), rank));
  }
  // A trace read without a model runs rank 0's program on every rank: the others must be alike.
  if (job.trace_only && job.parallelism.pp == 1) {
    const auto named = check_alike(prefix, layout->ranks(), graph.stages.front(), groups);
    if (const auto kept = apply_sub_groups(graph.stages.front(), named, groups, prefix, *layout))
      graph.notes.push_back(std::to_string(kept) +
                            " collectives over named groups along their axes: ranks without a file run rank 0's "
                            "program, so their groups are not known");
  }
  for (const auto& [what, count] : reader.notes_)
    graph.notes.push_back(std::to_string(count) + " " + what);
  // A step in which nothing takes time or moves a byte means nothing (a trace of metadata only), and neither does
  // one whose only bytes are collectives over groups of one rank, which move nothing (a trace's files missing, or
  // a gpus that leaves one rank).
  bool work = false, lone = false;
  for (const auto& st : graph.stages)
    for (const auto& op : st.ops) {
      if (workload::is_compute(op.kind))
        work = work || op.seconds > 0;
      else if (op.kind == OpKind::collective && op.group.size < 2)
        lone = lone || op.bytes > 0;
      else
        work = work || op.bytes > 0;
    }
  if (!work && lone) {
    const auto found = rank_files(prefix);
    throw TraceError(prefix, "",
                     "its collectives run over groups of one rank, which move nothing, and no node takes time: its "
                     "step would be 0 s (the job has " +
                         std::to_string(layout->ranks()) + " rank" + (layout->ranks() == 1 ? "" : "s") +
                         "; the trace has " + std::to_string(found.size()) + " rank file" +
                         (found.size() == 1 ? "" : "s") + (found.empty() ? "" : ": " + file_list(prefix, found)) +
                         "): a foreign trace's ranks are its files PREFIX.0.et to PREFIX.<N-1>.et, or the job's "
                         "gpus, and its groups those of PREFIX.comm_groups.json");
  }
  if (!work)
    throw TraceError(prefix, "",
                     "no node of the trace takes time or moves bytes (metadata or empty nodes only): "
                     "its step would be 0 s");
  // A tag may repeat between two ranks (Chakra's MSCCL rings use tag 0 throughout): the k-th send of (from, to,
  // tag) meets the k-th receive of it, in program order, as ASTRA-sim matches them. Each such pair gets a tag of
  // its own for the simulators; messages name the trace's.
  std::map<std::tuple<int, int, std::int64_t, int>, std::int64_t> unique;
  std::map<std::int64_t, std::int64_t> original;
  // Only a trace whose tags repeat is renumbered: spansim's own (unique tags) keeps them, so a round trip is exact.
  bool repeats = false;
  for (const auto& st : graph.stages) {
    std::set<std::tuple<int, int, std::int64_t>> seen;
    for (const auto& op : st.ops)
      if (op.kind == OpKind::send || op.kind == OpKind::recv) {
        const int from = op.kind == OpKind::send ? st.stage : op.peer_stage;
        const int to   = op.kind == OpKind::send ? op.peer_stage : st.stage;
        repeats        = repeats || !seen.insert({from, to, op.tag}).second;
      }
  }
  for (auto& st : graph.stages) {
    std::map<std::tuple<int, int, std::int64_t>, int> seen;
    for (auto& op : st.ops)
      if (op.kind == OpKind::send || op.kind == OpKind::recv) {
        const int from       = op.kind == OpKind::send ? st.stage : op.peer_stage;
        const int to         = op.kind == OpKind::send ? op.peer_stage : st.stage;
        const int k          = seen[{from, to, op.tag}]++;
        const auto tag       = repeats ? static_cast<std::int64_t>(unique.size()) : op.tag;
        auto it              = unique.emplace(std::tuple{from, to, op.tag, k}, tag).first;
        original[it->second] = op.tag;
        op.tag               = it->second;
      }
  }
  // Every send meets its receive: (from, to, tag) on both sides, with the same size.
  struct End {
    int stage, op;
    double bytes;
  };
  std::map<std::tuple<int, int, std::int64_t>, End> sends, recvs;
  for (const auto& st : graph.stages)
    for (std::size_t i = 0; i < st.ops.size(); ++i) {
      const auto& op = st.ops[i];
      if (op.kind == OpKind::send)
        sends[{st.stage, op.peer_stage, op.tag}] = {st.stage, static_cast<int>(i), op.bytes};
      else if (op.kind == OpKind::recv)
        recvs[{op.peer_stage, st.stage, op.tag}] = {st.stage, static_cast<int>(i), op.bytes};
    }
  // "rank 3's node 12 (a send of tag 0 to stage 4, its 2nd of that tag)": where the trace has it.
  auto describe = [&](const End& e) {
    const auto& st = graph.stages[static_cast<std::size_t>(e.stage)];
    const auto& op = st.ops[static_cast<std::size_t>(e.op)];
    int k          = 0;
    for (const auto& [key, tag] : unique)
      if (tag == op.tag)
        k = std::get<3>(key);
    return "rank " + std::to_string(st.trace_rank) + "'s node " +
           std::to_string(st.trace_nodes[static_cast<std::size_t>(e.op)]) + " (stage " + std::to_string(e.stage) +
           ": a " + (op.kind == OpKind::send ? "send" : "receive") + " of tag " + std::to_string(original.at(op.tag)) +
           (op.kind == OpKind::send ? " to" : " from") + " stage " + std::to_string(op.peer_stage) + ", number " +
           std::to_string(k + 1) + " of that tag between them)";
  };
  for (const auto& [key, send] : sends) {
    const auto it = recvs.find(key);
    if (it == recvs.end())
      throw TraceError(prefix, "", describe(send) + " is never received");
    if (std::fabs(it->second.bytes - send.bytes) > 1e-9 * std::max(it->second.bytes, send.bytes)) {
      char sizes[96];
      std::snprintf(sizes, sizeof sizes, "%.17g bytes sent, %.17g received", send.bytes, it->second.bytes);
      throw TraceError(prefix, "",
                       describe(send) + " is received with another size by " + describe(it->second) + ": " + sizes);
    }
  }
  for (const auto& [key, recv] : recvs)
    if (!sends.contains(key))
      throw TraceError(prefix, "", describe(recv) + " is never sent");
  return graph;
}

} // namespace spansim::traces
