// Export: a step graph as one Chakra ET per rank, with the communicator groups ASTRA-sim reads.
#include "common/error.hpp"
#include "common/names.hpp"
#include "common/paths.hpp"
#include "traces/chakra_io.hpp"
#include "traces/traces.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

namespace spansim::traces {

using nlohmann::json;
using workload::OpKind;

nlohmann::json ExportReport::to_json() const
{
  return {{"files", files.size()},
          {"first_file", files.empty() ? "" : files.front()},
          {"comm_groups", comm_groups},
          {"rank_map", rank_map.empty() ? json(nullptr) : json(rank_map)},
          {"nodes", nodes},
          {"world", world},
          {"seconds", seconds},
          {"schema_version", kChakraSchemaVersion}};
}

namespace {

chakra::CollectiveCommType comm_type(CollectiveOp op)
{
  for (const auto& [ours, theirs] : detail::kCommTypes)
    if (ours == op)
      return theirs;
  throw UsageError("a send/recv collective has no Chakra collective type");
}

// Communicator groups: every group of every collective, numbered from 1 (ASTRA-sim reads "" and "0" as all ranks).
class CommGroups {
public:
  explicit CommGroups(const placement::RankLayout& layout) : layout_(layout) {}
  /// @brief The id of the group of kind `g` on stage `stage` that holds `rank`.
  int id(int stage, const workload::Group& g, int rank)
  {
    auto key = std::pair{g.axes.contains(workload::Axis::pp) ? -1 : stage, g.key()};
    auto it  = of_rank_.find(key);
    if (it == of_rank_.end()) {
      std::vector<int> ids(static_cast<std::size_t>(layout_.ranks()), 0);
      for (const auto& members : layout_.groups(stage, g)) {
        auto [pos, fresh] = ids_.emplace(members, static_cast<int>(ids_.size()) + 1);
        if (fresh)
          order_.push_back(&pos->first);
        for (int r : members)
          ids[static_cast<std::size_t>(r)] = pos->second;
      }
      it = of_rank_.emplace(key, std::move(ids)).first;
    }
    return it->second[static_cast<std::size_t>(rank)];
  }
  json to_json() const
  {
    json out = json::object();
    for (const auto* members : order_)
      out[std::to_string(ids_.at(*members))] = *members;
    return out;
  }

private:
  const placement::RankLayout& layout_;
  std::map<std::vector<int>, int> ids_;
  std::vector<const std::vector<int>*> order_;
  std::map<std::pair<int, std::uint32_t>, std::vector<int>> of_rank_;
};

std::string order_text(const std::vector<workload::Dim>& order)
{
  std::string s;
  for (auto d : order)
    s += (s.empty() ? "" : ",") + std::string(name_of(d));
  return s;
}

} // namespace

ExportReport export_chakra(const workload::StepGraph& graph, const placement::RankLayout& layout, const json& job,
                           const std::string& dir, const ExportOptions& options)
{
  const auto started = std::chrono::steady_clock::now();
  namespace fs       = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw UsageError("cannot create \"" + dir + "\": " + ec.message());
  ExportReport report;
  report.world           = layout.ranks();
  std::vector<int> ranks = options.ranks;
  std::map<int, std::vector<int>> stands_for; // representative -> ranks of its stage
  if (options.representatives) {
    for (int r = 0; r < layout.ranks(); ++r) {
      const int stage = layout.coordinates(r).pp;
      auto it         = std::find_if(stands_for.begin(), stands_for.end(),
                                     [&](const auto& e) { return layout.coordinates(e.first).pp == stage; });
      if (it == stands_for.end())
        stands_for[r] = {r};
      else
        it->second.push_back(r);
    }
    if (ranks.empty())
      for (const auto& [r, all] : stands_for)
        ranks.push_back(r);
  } else if (ranks.empty()) {
    for (int r = 0; r < layout.ranks(); ++r)
      ranks.push_back(r);
  }
  for (int r : ranks)
    if (r < 0 || r >= layout.ranks())
      throw UsageError("rank " + std::to_string(r) + " is outside the job's " + std::to_string(layout.ranks()) +
                       " ranks");

  CommGroups groups(layout);
  // The previous op of each op's stream, which ASTRA-sim reads as a control dependency.
  const auto stream_prev     = workload::stream_predecessors(graph);
  const std::string job_text = job.dump();
  for (int rank : ranks) {
    const auto c      = layout.coordinates(rank);
    const auto& stage = graph.stages.at(static_cast<std::size_t>(c.pp));
    chakra::GlobalMetadata meta;
    meta.set_version(kChakraSchemaVersion);
    detail::add_attr(meta, "spansim_schema").set_int64_val(1);
    detail::add_attr(meta, "spansim_job").set_string_val(job_text);
    detail::add_attr(meta, "spansim_rank").set_int64_val(rank);
    detail::add_attr(meta, "spansim_world").set_int64_val(layout.ranks());
    detail::add_attr(meta, "spansim_stage").set_int64_val(c.pp);
    detail::add_attr(meta, "spansim_order").set_string_val(order_text(layout.order()));
    detail::add_attr(meta, "spansim_micro_batches").set_int64_val(graph.micro_batches);
    detail::add_attr(meta, "spansim_params").set_double_val(stage.params);
    auto* layers = detail::add_attr(meta, "spansim_chunk_layers").mutable_int64_list();
    for (int l : stage.chunk_layers)
      layers->add_values(l);
    detail::add_attr(meta, "spansim_memory_weights").set_double_val(stage.memory.weights);
    detail::add_attr(meta, "spansim_memory_gradients").set_double_val(stage.memory.gradients);
    detail::add_attr(meta, "spansim_memory_optimizer").set_double_val(stage.memory.optimizer);
    detail::add_attr(meta, "spansim_memory_activations").set_double_val(stage.memory.activations);

    std::vector<chakra::Node> nodes;
    nodes.reserve(stage.ops.size());
    for (std::size_t i = 0; i < stage.ops.size(); ++i) {
      const auto& op = stage.ops[i];
      chakra::Node n;
      n.set_id(i);
      n.set_name(std::string(workload::op_name(op)) +
                 (op.micro_batch >= 0 ? " mb" + std::to_string(op.micro_batch) : "") +
                 (op.chunk >= 0 ? " c" + std::to_string(op.chunk) : ""));
      for (int d : op.deps)
        n.add_data_deps(static_cast<std::uint64_t>(d));
      if (stream_prev[c.pp][i] >= 0 && std::find(op.deps.begin(), op.deps.end(), stream_prev[c.pp][i]) == op.deps.end())
        n.add_ctrl_deps(static_cast<std::uint64_t>(stream_prev[c.pp][i]));
      detail::add_attr(n, "is_cpu_op").set_bool_val(op.host);
      detail::add_attr(n, "spansim_op").set_string_val(std::string(name_of(op.kind)));
      detail::add_attr(n, "spansim_chunk").set_int64_val(op.chunk);
      detail::add_attr(n, "spansim_micro_batch").set_int64_val(op.micro_batch);
      if (workload::is_compute(op.kind)) {
        n.set_type(chakra::COMP_NODE);
        n.set_duration_micros(static_cast<std::uint64_t>(std::llround(op.seconds * 1e6)));
        detail::add_attr(n, "num_ops").set_int64_val(std::llround(op.hardware_flops));
        detail::add_attr(n, "tensor_size").set_uint64_val(static_cast<std::uint64_t>(std::llround(op.hbm_bytes)));
        detail::add_attr(n, "spansim_seconds").set_double_val(op.seconds);
        detail::add_attr(n, "spansim_model_flops").set_double_val(op.model_flops);
        detail::add_attr(n, "spansim_hardware_flops").set_double_val(op.hardware_flops);
        detail::add_attr(n, "spansim_hbm_bytes").set_double_val(op.hbm_bytes);
        const auto& fx = op.effects;
        for (auto [key, v] : {std::pair{"spansim_fx_sustained_clock", fx.sustained_clock},
                              std::pair{"spansim_fx_kernel_gaps", fx.kernel_gaps},
                              std::pair{"spansim_fx_attention_by_length", fx.attention_by_length},
                              std::pair{"spansim_fx_grad_clipping", fx.grad_clipping},
                              std::pair{"spansim_fx_sm_contention", fx.sm_contention}})
          detail::add_attr(n, key).set_double_val(v);
      } else {
        // comm_size as ASTRA-sim reads it: an all-gather's is each rank's input (the gathered buffer over the
        // group), every other collective's the buffer spansim keeps (spansim_bytes keeps the exact figure).
        double size = op.bytes * std::max(1, op.count);
        if (op.kind == OpKind::collective && op.collective == CollectiveOp::all_gather && op.group.size > 1)
          size /= op.group.size;
        detail::add_attr(n, "comm_size").set_int64_val(std::llround(size));
        detail::add_attr(n, "spansim_dim").set_string_val(std::string(name_of(*op.dim)));
        detail::add_attr(n, "spansim_purpose").set_string_val(std::string(name_of(op.purpose)));
        detail::add_attr(n, "spansim_bytes").set_double_val(op.bytes);
        detail::add_attr(n, "spansim_count").set_int64_val(op.count);
        detail::add_attr(n, "spansim_overlappable").set_bool_val(op.overlappable);
        if (op.kind == OpKind::collective) {
          n.set_type(chakra::COMM_COLL_NODE);
          detail::add_attr(n, "comm_type").set_int64_val(comm_type(op.collective));
          detail::add_attr(n, "pg_name").set_string_val(std::to_string(groups.id(c.pp, op.group, rank)));
          detail::add_attr(n, "spansim_collective").set_string_val(std::string(name_of(op.collective)));
          // A trace's own sub-groups are their members, which pg_name and the group file carry; axes would widen them.
          if (!op.group.members) {
            detail::add_attr(n, "spansim_axes").set_int64_val(op.group.axes.bits());
            detail::add_attr(n, "spansim_group_size").set_int64_val(op.group.size);
          }
        } else {
          auto peer_c     = c;
          peer_c.pp       = op.peer_stage;
          const int peer  = layout.rank_of(peer_c);
          const bool send = op.kind == OpKind::send;
          n.set_type(send ? chakra::COMM_SEND_NODE : chakra::COMM_RECV_NODE);
          detail::add_attr(n, "comm_src").set_int32_val(send ? rank : peer);
          detail::add_attr(n, "comm_dst").set_int32_val(send ? peer : rank);
          detail::add_attr(n, "comm_tag").set_int32_val(static_cast<std::int32_t>(op.tag & 0x7fffffff));
          detail::add_attr(n, "spansim_tag").set_int64_val(op.tag);
          detail::add_attr(n, "spansim_peer_stage").set_int64_val(op.peer_stage);
        }
      }
      nodes.push_back(std::move(n));
    }
    const std::string path = (fs::path(dir) / (options.prefix + "." + std::to_string(rank) + ".et")).string();
    detail::write_et(path, meta, nodes);
    report.files.push_back(path);
    report.nodes += nodes.size();
  }
  // Every group of every stage, so that any rank's trace finds its groups.
  for (std::size_t s = 0; s < graph.stages.size(); ++s) {
    placement::Coordinates first;
    first.pp = static_cast<int>(s);
    for (const auto& op : graph.stages[s].ops)
      if (op.kind == OpKind::collective)
        groups.id(static_cast<int>(s), op.group, layout.rank_of(first));
  }
  auto write_json = [&](const std::string& name, const json& j) {
    const std::string path = (fs::path(dir) / (options.prefix + "." + name + ".json")).string();
    write_file_replacing(path, j.dump() + "\n");
    return path;
  };
  report.comm_groups = write_json("comm_groups", groups.to_json());
  if (options.representatives) {
    json map = json::array();
    for (const auto& [r, all] : stands_for)
      map.push_back({{"stage", layout.coordinates(r).pp}, {"rank", r}, {"ranks", all}});
    report.rank_map = write_json("rank_map", map);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return report;
}

} // namespace spansim::traces
