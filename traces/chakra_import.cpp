// Import: Chakra ETs read back as a step graph, one stage program per pipeline stage.
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/names.hpp"
#include "traces/chakra_io.hpp"
#include "traces/traces.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
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

// The representative rank of each stage named by PREFIX.rank_map.json, when there is one.
std::map<int, int> rank_map(const std::string& prefix)
{
  std::map<int, int> out;
  const std::string path = prefix + ".rank_map.json";
  if (!fs::exists(path))
    return out;
  const auto doc = spec::load_json_file(path);
  if (!doc.is_array())
    throw TraceError(path + ": expected a list of {\"stage\", \"rank\", \"ranks\"}");
  for (const auto& e : doc) {
    if (!e.is_object() || !e.contains("stage") || !e.contains("rank") || !e["stage"].is_number_integer() ||
        !e["rank"].is_number_integer())
      throw TraceError(path + ": expected a list of {\"stage\", \"rank\", \"ranks\"}");
    out[e["stage"].get<int>()] = e["rank"].get<int>();
  }
  return out;
}

// The ranks of each communicator group of PREFIX.comm_groups.json (empty when there is none).
std::map<std::string, std::vector<int>> comm_groups(const std::string& prefix)
{
  std::map<std::string, std::vector<int>> out;
  const std::string path = prefix + ".comm_groups.json";
  if (!fs::exists(path))
    return out;
  const auto doc = spec::load_json_file(path);
  if (!doc.is_object())
    throw TraceError(path + ": expected {\"<id>\": [ranks]}");
  for (const auto& [id, ranks] : doc.items()) {
    if (!ranks.is_array())
      throw TraceError(path + ": group \"" + id + "\": expected a list of ranks");
    for (const auto& r : ranks)
      if (!r.is_number_integer() || r.get<std::int64_t>() < 0 || r.get<std::int64_t>() > (std::int64_t{1} << 30))
        throw TraceError(path + ": group \"" + id + "\": expected a list of ranks (integers from 0)");
    auto list = ranks.get<std::vector<int>>();
    // A rank twice would talk to itself: name it rather than fail later on the group's size.
    std::set<int> seen;
    for (int r : list)
      if (!seen.insert(r).second)
        throw TraceError(path + ": group \"" + id + "\": rank " + std::to_string(r) +
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
      throw TraceError(where + ": spansim_order \"" + text + "\" names \"" + name + "\", not a dimension");
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
    throw TraceError(where + ": node " + std::to_string(n.id()) + ": attribute " + name + " \"" + *text +
                     "\" is not one of " + allowed_names<E>(true));
  return *v;
}

CollectiveOp collective_of(std::int64_t type, const std::string& where, std::uint64_t id)
{
  switch (type) {
  case chakra::ALL_REDUCE:
    return CollectiveOp::all_reduce;
  case chakra::REDUCE:
    return CollectiveOp::reduce;
  case chakra::ALL_GATHER:
    return CollectiveOp::all_gather;
  case chakra::BROADCAST:
    return CollectiveOp::broadcast;
  case chakra::ALL_TO_ALL:
    return CollectiveOp::all_to_all;
  case chakra::REDUCE_SCATTER:
  case chakra::REDUCE_SCATTER_BLOCK:
    return CollectiveOp::reduce_scatter;
  default:
    break;
  }
  throw TraceError(where + ": node " + std::to_string(id) + ": collective type " + std::to_string(type) +
                   " is not supported (spansim lowers ALL_REDUCE, REDUCE, ALL_GATHER, BROADCAST, ALL_TO_ALL, "
                   "REDUCE_SCATTER)");
}

// A group of a foreign trace from its ranks: the dimensions along which its members' coordinates differ.
workload::Group group_of(const std::vector<int>& ranks, const placement::RankLayout& layout, const std::string& where)
{
  for (int r : ranks)
    if (r < 0 || r >= layout.ranks())
      throw TraceError(where + ": its communicator group names rank " + std::to_string(r) + ", outside the job's " +
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
        throw TraceError(path + ": node id " + std::to_string(n.id()) + " appears twice");
    std::map<std::uint64_t, std::vector<std::uint64_t>> deps;
    for (const auto& n : et.nodes) {
      auto& d = deps[n.id()];
      for (auto x : n.data_deps())
        d.push_back(x);
      for (auto x : n.ctrl_deps())
        d.push_back(x);
      for (auto x : d)
        if (!by_id.contains(x))
          throw TraceError(path + ": node " + std::to_string(n.id()) + " depends on node " + std::to_string(x) +
                           ", which the trace does not have");
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
        throw TraceError(path + ": node " + std::to_string(n.id()) + " is of type " + chakra::NodeType_Name(n.type()) +
                         ", which spansim does not simulate (it reads COMP, COMM_SEND, COMM_RECV and COMM_COLL "
                         "nodes and skips INVALID, METADATA, MEM_LOAD and MEM_STORE ones)");
      }
    }
    // Kahn's order, smallest id first: a spansim export comes back in program order.
    std::map<std::uint64_t, int> waiting;
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
    while (!ready.empty()) {
      const auto id = ready.top();
      ready.pop();
      ++done;
      const auto& n = *by_id.at(id);
      std::set<int> op_deps, data_op_deps;
      for (auto x : deps[id])
        for (int o : resolved.at(x))
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
      }
      for (auto x : dependents[id])
        if (--waiting[x] == 0)
          ready.push(x);
    }
    if (done < et.nodes.size()) {
      for (const auto& [id, w] : waiting)
        if (w > 0)
          throw TraceError(path + ": the dependencies form a cycle (node " + std::to_string(id) +
                           " is on or after it; " + std::to_string(et.nodes.size() - done) +
                           " nodes never become ready)");
    }
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
    const std::string at = path + ": node " + std::to_string(n.id());
    if (n.type() == chakra::COMP_NODE) {
      op.kind = enum_attr(n, "spansim_op", OpKind::forward, path);
      if (!workload::is_compute(op.kind))
        throw TraceError(at + ": a COMP node's spansim_op must be forward, backward, recompute or optimizer");
      const auto flops  = as_double(find_attr(n, "num_ops")).value_or(0);
      const auto bytes  = as_double(find_attr(n, "tensor_size")).value_or(0);
      op.hardware_flops = as_double(find_attr(n, "spansim_hardware_flops")).value_or(flops);
      op.model_flops    = as_double(find_attr(n, "spansim_model_flops")).value_or(flops);
      op.hbm_bytes      = as_double(find_attr(n, "spansim_hbm_bytes")).value_or(bytes);
      if (auto s = as_double(find_attr(n, "spansim_seconds")))
        op.seconds = *s;
      else if (n.duration_micros() > 0)
        op.seconds = static_cast<double>(n.duration_micros()) * 1e-6;
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
      throw TraceError(at + ": a communication node needs comm_size");
    op.count = static_cast<int>(as_int(find_attr(n, "spansim_count")).value_or(1));
    op.bytes = as_double(find_attr(n, "spansim_bytes")).value_or(size.value_or(0) / std::max(1, op.count));
    // A negative or non-finite size would vanish from the step: refuse it, naming the node.
    if (!(op.bytes >= 0) || !std::isfinite(op.bytes) || op.count < 1) {
      char found[96];
      std::snprintf(found, sizeof found, "%s %.17g per call, count %d",
                    find_attr(n, "spansim_bytes") ? "spansim_bytes" : "comm_size", op.bytes, op.count);
      throw TraceError(at +
                       ": a communication node's size must be a number of bytes, at least 0, and its count at "
                       "least 1 (found " +
                       found + ")");
    }
    op.overlappable = as_int(find_attr(n, "spansim_overlappable")).value_or(0) != 0;
    if (n.type() == chakra::COMM_COLL_NODE) {
      op.kind = OpKind::collective;
      if (auto c = detail::as_string(find_attr(n, "spansim_collective")))
        op.collective = enum_attr(n, "spansim_collective", CollectiveOp::all_reduce, path);
      else
        op.collective = collective_of(as_int(find_attr(n, "comm_type")).value_or(-1), path, n.id());
      const auto pg = detail::as_string(find_attr(n, "pg_name"));
      if (pg && !groups_.empty() && !groups_.contains(*pg))
        throw TraceError(at + ": communicator group \"" + *pg + "\" is not in " + groups_file_);
      if (auto axes = as_int(find_attr(n, "spansim_axes"))) {
        op.group.axes = workload::AxisSet();
        for (int a = 0; a < static_cast<int>(enum_names(workload::Axis{}).size()); ++a)
          if ((*axes >> a) & 1)
            op.group.axes = op.group.axes | workload::AxisSet(static_cast<workload::Axis>(a));
        op.group.size = static_cast<int>(as_int(find_attr(n, "spansim_group_size")).value_or(1));
      } else {
        if (!pg || groups_.empty())
          throw TraceError(at + ": a collective needs pg_name and the communicator-group file " + groups_file_);
        const auto& ranks = groups_.at(*pg);
        if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end())
          throw TraceError(at + ": rank " + std::to_string(rank) + " is not in its communicator group \"" + *pg + "\"");
        op.group = group_of(ranks, layout_, at);
      }
      op.dim     = enum_attr(n, "spansim_dim", default_dim(op), path);
      op.purpose = enum_attr(n, "spansim_purpose", default_purpose(op), path);
      return op;
    }
    const bool send = n.type() == chakra::COMM_SEND_NODE;
    op.kind         = send ? OpKind::send : OpKind::recv;
    op.dim          = Dim::pp;
    op.purpose      = enum_attr(n, "spansim_purpose", workload::Purpose::pp_activations, path);
    if (auto t = as_int(find_attr(n, "spansim_tag")))
      op.tag = *t;
    else if (auto t2 = as_int(find_attr(n, "comm_tag")))
      op.tag = *t2;
    else
      throw TraceError(at + ": a send or receive needs comm_tag");
    if (auto ps = as_int(find_attr(n, "spansim_peer_stage")))
      op.peer_stage = static_cast<int>(*ps);
    else {
      const auto peer = as_int(find_attr(n, send ? "comm_dst" : "comm_src"));
      if (!peer || *peer < 0 || *peer >= layout_.ranks())
        throw TraceError(at + ": a " + std::string(send ? "send needs comm_dst" : "receive needs comm_src") +
                         ", a rank of the job");
      op.peer_stage = layout_.coordinates(static_cast<int>(*peer)).pp;
    }
    if (op.peer_stage == stage || op.peer_stage < 0 || op.peer_stage >= job_.parallelism.pp)
      throw TraceError(at + ": its peer is on stage " + std::to_string(op.peer_stage) + " (this is stage " +
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
};

} // namespace

workload::JobSpec load_chakra_job(const json& document, const std::string& file, const std::string& json_path)
{
  spec::ObjectReader r(document, spec::Location{file, json_path});
  const std::string name = r.name("name");
  r.choice("kind", {"chakra"});
  const std::string trace = spec::referenced_path(r.string("trace"), r.where().member("trace"));
  r.optional_string("description");
  // The first trace file: the rank map's first representative, else rank 0's.
  auto reps              = rank_map(trace);
  const std::string path = et_path(trace, reps.empty() ? 0 : reps.begin()->second);
  if (!fs::exists(path))
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
      throw TraceError(path + ": the spansim_job metadata is not JSON: " + e.what());
    }
    job = workload::parse_job(j, path, "$(spansim_job)");
  } else {
    // A foreign trace: the job's own keys say what the trace does not (model, GPU, GPUs, parallelism, batch).
    json rest = document;
    rest.erase("kind");
    rest.erase("trace");
    job = workload::parse_job(rest, file, json_path);
  }
  job.name  = name;
  job.trace = trace;
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
    if (!fs::exists(first))
      throw TraceError(first + ": no such trace file");
    const auto et = detail::read_et(first);
    if (auto o = detail::as_string(detail::find_attr(et.metadata, "spansim_order")))
      order = parse_order(*o, first);
  }
  std::optional<placement::RankLayout> layout;
  try {
    layout.emplace(job.parallelism, order);
  } catch (const std::invalid_argument& e) {
    throw TraceError(prefix + ": " + e.what());
  }
  const auto groups = comm_groups(prefix);
  StageReader reader(job, *layout, groups, prefix + ".comm_groups.json");
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
        if (layout->coordinates(r).pp == s && fs::exists(et_path(prefix, r)))
          rank = r;
    if (rank < 0)
      throw TraceError(prefix + ": no trace file for pipeline stage " + std::to_string(s) +
                       " (PREFIX.<rank>.et of a rank of it, or a rank map)");
    if (layout->coordinates(rank).pp != s)
      throw TraceError(prefix + ".rank_map.json: rank " + std::to_string(rank) + " is on stage " +
                       std::to_string(layout->coordinates(rank).pp) + ", not " + std::to_string(s));
    graph.stages.push_back(reader.read(s, et_path(prefix, rank), rank));
  }
  // A step in which nothing takes time or moves a byte means nothing (a trace of metadata only).
  bool work = false;
  for (const auto& st : graph.stages)
    for (const auto& op : st.ops)
      work = work || (workload::is_compute(op.kind) ? op.seconds > 0 : op.bytes > 0);
  if (!work)
    throw TraceError(prefix + ": no node of the trace takes time or moves bytes (metadata or empty nodes only): "
                              "its step would be 0 s");
  // Every send meets its receive: (from, to, tag) on both sides, with the same size.
  std::map<std::tuple<int, int, std::int64_t>, double> sends, recvs;
  for (const auto& st : graph.stages)
    for (const auto& op : st.ops) {
      if (op.kind == OpKind::send)
        sends[{st.stage, op.peer_stage, op.tag}] = op.bytes;
      else if (op.kind == OpKind::recv)
        recvs[{op.peer_stage, st.stage, op.tag}] = op.bytes;
    }
  for (const auto& entry : sends) {
    const auto it = recvs.find(entry.first);
    if (it != recvs.end() && std::fabs(it->second - entry.second) > 1e-9 * std::max(it->second, entry.second)) {
      char sizes[96];
      std::snprintf(sizes, sizeof sizes, "%.17g bytes sent, %.17g received", entry.second, it->second);
      throw TraceError(prefix + ": stage " + std::to_string(std::get<0>(entry.first)) + " sends tag " +
                       std::to_string(std::get<2>(entry.first)) + " to stage " +
                       std::to_string(std::get<1>(entry.first)) + " with another size than it is received: " + sizes);
    }
  }
  for (const auto& [key, bytes] : sends)
    if (const auto [from, to, tag] = key; !recvs.contains(key))
      throw TraceError(prefix + ": stage " + std::to_string(from) + " sends tag " + std::to_string(tag) + " to stage " +
                       std::to_string(to) + ", which never receives it");
  for (const auto& [key, bytes] : recvs)
    if (const auto [from, to, tag] = key; !sends.contains(key))
      throw TraceError(prefix + ": stage " + std::to_string(to) + " receives tag " + std::to_string(tag) +
                       " from stage " + std::to_string(from) + ", which never sends it");
  return graph;
}

} // namespace spansim::traces
