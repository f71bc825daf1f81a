// Optimize specs: the fixed inputs (topology, model, GPU budget, batch) and the search space, typed.
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/units.hpp"
#include "optimizer/optimizer.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>

namespace spansim::optimizer {

using nlohmann::json;
using workload::Dim;

namespace {

// A list of integers from lo to hi, or a range {"from": A, "to": B} (every integer) or
// {"from": A, "to": B, "powers_of_two": true} (A, 2A, 4A, ... up to B): large spaces without long lists.
void read_ints(spec::ObjectReader& s, const char* key, std::vector<int>& out, int lo, int hi)
{
  if (!s.has(key))
    return;
  const json& v = s.raw(key);
  if (v.is_object()) {
    spec::ObjectReader r(v, s.where().member(key));
    const auto from   = r.integer("from", lo, hi);
    const auto to     = r.integer("to", from, hi);
    const bool powers = r.optional_boolean("powers_of_two").value_or(false);
    r.finish();
    out.clear();
    for (auto x = from; x <= to; x = powers ? 2 * x : x + 1)
      out.push_back(static_cast<int>(x));
    return;
  }
  if (!v.is_array() || v.empty())
    s.fail(key, "expected a non-empty list of integers, or a range {\"from\": 1, \"to\": 16, \"powers_of_two\": true}");
  out.clear();
  for (const auto& x : v) {
    if (!x.is_number_integer() || x.get<std::int64_t>() < lo || x.get<std::int64_t>() > hi)
      s.fail(key, "expected integers from " + std::to_string(lo) + " to " + std::to_string(hi));
    out.push_back(x.get<int>());
  }
}

// A non-empty list of true/false.
void read_booleans(spec::ObjectReader& s, const char* key, std::vector<bool>& out)
{
  if (!s.has(key))
    return;
  const json& v = s.raw(key);
  if (!v.is_array() || v.empty() || !std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_boolean(); }))
    s.fail(key, "expected a non-empty list of true/false");
  out = v.get<std::vector<bool>>();
}

// A list of names of enum E.
template <class E>
void read_names(spec::ObjectReader& s, const char* key, std::vector<E>& out)
{
  if (!s.has(key))
    return;
  const auto names = s.strings(key);
  if (names.empty())
    s.fail(key, "expected a non-empty list");
  out.clear();
  for (const auto& n : names) {
    auto v = parse_name<E>(n);
    if (!v)
      s.fail(key, "unknown value \"" + n + "\" (allowed: " + allowed_names<E>(true) + ")");
    out.push_back(*v);
  }
}

template <class E>
json names_of(const std::vector<E>& values)
{
  json out = json::array();
  for (auto v : values)
    out.push_back(name_of(v));
  return out;
}

json compression_json(const std::vector<netsim::CompressionSpec>& options)
{
  json out = json::array();
  for (const auto& c : options)
    out.push_back(c.empty() ? json("none") : c.to_json());
  return out;
}

json diloco_json(const std::vector<std::optional<sync::DilocoSpec>>& options)
{
  json out = json::array();
  for (const auto& d : options)
    out.push_back(d ? d->to_json() : json("none"));
  return out;
}

// A list whose elements are "none" or what `read` makes of an element.
template <class T, class Read>
void read_alternatives(spec::ObjectReader& s, const char* key, std::vector<T>& out, Read read, const char* example)
{
  if (!s.has(key))
    return;
  const json& v = s.raw(key);
  if (!v.is_array() || v.empty())
    s.fail(key, std::string("expected a non-empty list whose elements are \"none\" or ") + example);
  out.clear();
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i].is_string() && v[i].get<std::string>() == "none")
      out.push_back(T{});
    else
      out.push_back(read(v[i], s.where().member(key).element(i)));
  }
}

// Long-link bandwidths such as "100Tbps".
void read_bandwidths(spec::ObjectReader& s, const char* key, std::vector<double>& out, bool available)
{
  if (!s.has(key))
    return;
  if (!available)
    s.fail(key, "the topology has no such links (or is an imported graph, whose links are its own)");
  const auto values = s.strings(key);
  if (values.empty())
    s.fail(key, "expected a non-empty list of bandwidths such as \"100Tbps\"");
  out.clear();
  for (const auto& v : values) {
    double b = 0;
    try {
      b = units::parse_bandwidth(v);
    } catch (const std::exception& e) {
      s.fail(key, "\"" + v + "\": " + e.what());
    }
    if (b <= 0)
      s.fail(key, "a capacity must be positive");
    out.push_back(b);
  }
}

} // namespace

json ScreenSpec::to_json() const
{
  return {{"above", above}, {"keep", keep}, {"keep_min", keep_min}, {"keep_max", keep_max}};
}

json OptimizeSpec::to_json() const
{
  const auto& s = space;
  json orders   = json::array();
  for (const auto& o : s.order)
    orders.push_back(names_of(o));
  json out = {{"name", name},
              {"file", file},
              {"topology", topology.name},
              {"model", model_ref},
              {"gpu", gpu_ref},
              {"gpus", base.gpus},
              {"batch", batch_ref},
              {"moe", moe_ref},
              {"recompute_modules", names_of(base.recompute_modules)},
              {"buildings", buildings},
              {"gpus_per_node", gpus_per_node},
              {"search",
               {{"tp", s.tp},
                {"cp", s.cp},
                {"pp", s.pp},
                {"ep", s.ep},
                {"data_parallel", names_of(s.data_parallel)},
                {"reshard_after_forward", s.reshard_after_forward},
                {"micro_batch", s.micro_batch},
                {"schedule", names_of(s.schedule)},
                {"virtual_stages", s.virtual_stages},
                {"order", orders},
                {"recompute", names_of(s.recompute)},
                {"tp_overlap", s.tp_overlap},
                {"cp_comm", names_of(s.cp_comm)},
                {"dp_algorithm", names_of(s.dp_algorithm)},
                {"etp", s.etp},
                {"dispatcher", names_of(s.dispatcher)},
                {"node_limit", s.node_limit},
                {"ep_overlap", s.ep_overlap},
                {"flows_per_pair", s.flows_per_pair},
                {"window_bytes", s.window},
                {"qps", s.qps},
                {"compression", compression_json(s.compression)},
                {"diloco", diloco_json(s.diloco)},
                {"inter_building_Bps", s.inter_building},
                {"inter_region_Bps", s.inter_region}}},
              {"capacity_cost", capacity.to_json()},
              {"screen", screen.to_json()},
              {"top_k", top_k},
              {"refine_fidelity", name_of(refine)},
              {"refine_multipath", refine_multipath ? topology::multipath_json(*refine_multipath) : json(nullptr)},
              {"workers", workers},
              {"seed", seed},
              {"objective", time_to_train ? "time_to_train" : "step_time"},
              {"reliability", reliability ? reliability::to_json(*reliability) : json(nullptr)}};
  if (!nccl_ref.is_null())
    out["nccl"] = nccl.to_json(); // only where set: the fingerprints of searches without it stay as they were
  if (worker_memory > 0)
    out["worker_memory_bytes"] = worker_memory; // the same
  if (!precision_ref.is_null())
    out["precision"] = precision_ref; // the same
  if (!kernels_ref.is_null())
    out["kernels"] = kernels_ref; // the same
  return out;
}

OptimizeSpec load_optimize_spec(const std::string& path)
{
  OptimizeSpec spec;
  spec.file     = path;
  auto document = spec::load_json_file(path);
  spec::ObjectReader r(document, spec::Location{path});
  spec.name = r.name("name");
  r.optional_string("description");
  const json& topo = r.raw("topology");
  if (topo.is_string())
    spec.topology = topology::load_topology_spec(topo.get<std::string>(), r.where().member("topology"));
  else
    spec.topology = topology::parse_topology_spec(topo, path, "$.topology");

  // The base job: everything of a point's job that is not searched, read and checked once.
  auto& base     = spec.base;
  base.name      = spec.name + "-point";
  base.file      = path;
  spec.model_ref = r.raw("model");
  spec.gpu_ref   = r.raw("gpu");
  base.model     = workload::read_model_ref(r, "model");
  base.gpu       = workload::read_gpu_ref(r, "gpu");
  base.gpus      = r.integer("gpus", 1, 4'000'000);
  workload::read_calibration_and_effects(r, base);
  if (r.has("precision"))
    spec.precision_ref = r.raw("precision");
  workload::read_precision(r, base);
  if (r.has("kernels"))
    spec.kernels_ref = r.raw("kernels");
  workload::read_kernels(r, base);
  if (auto m = r.optional_object("moe")) {
    if (base.model.moe.experts == 0)
      r.fail("moe", "model " + base.model.name + " is dense: routing is for mixture-of-experts models");
    for (const char* searched : {"dispatcher", "node_limit"})
      if (m->has(searched))
        m->fail(searched, std::string("searched: give the values to try as search.") + searched);
    spec.moe_ref  = r.raw("moe");
    base.dispatch = workload::read_dispatch(*m, base.gpu);
  }
  spec.batch_ref = r.raw("batch");
  base.batch     = workload::read_batch(r.object("batch"), false);

  if (r.has("buildings")) {
    spec.buildings = r.strings("buildings");
    topology::Topology t(spec.topology);
    for (const auto& name : spec.buildings) {
      bool known = false;
      std::string list;
      for (int b = 0; b < t.building_count(); ++b) {
        known = known || t.building_name(b) == name;
        list += (list.empty() ? "" : ", ") + t.building_name(b);
      }
      if (!known)
        r.fail("buildings", "unknown building \"" + name + "\" (buildings: " + list + ")");
    }
  }
  if (auto n = r.optional_integer("gpus_per_node", 1, 1 << 20)) {
    const int node = topology::Topology(spec.topology).node_gpus();
    if (*n > node)
      r.fail("gpus_per_node",
             "gpus_per_node " + std::to_string(*n) + " is above the " + std::to_string(node) + " GPUs of a node");
    spec.gpus_per_node = static_cast<int>(*n);
  }
  if (auto n = r.optional_object("nccl")) {
    spec.nccl_ref = r.raw("nccl");
    spec.nccl     = netsim::read_nccl(*n);
  }
  spec.top_k   = static_cast<int>(r.optional_integer("top_k", 1, 1000).value_or(20));
  spec.workers = static_cast<int>(r.optional_integer("workers", 0, 256).value_or(0));
  if (auto m = r.optional_size("worker_memory")) {
    if (*m < 64.0 * 1024 * 1024)
      r.fail("worker_memory", "a worker needs at least 64MiB (allowed: a size such as \"10GiB\")");
    spec.worker_memory = *m;
  }
  spec.seed =
      static_cast<std::uint64_t>(r.optional_integer("seed", 0, std::numeric_limits<std::int64_t>::max()).value_or(1));
  if (auto f = r.optional_enumeration<netsim::Fidelity>("refine_fidelity"))
    spec.refine = *f;
  if (auto b = r.optional_object("reliability")) {
    spec.reliability_ref = r.raw("reliability");
    spec.reliability     = reliability::read_reliability(*b);
  }
  if (r.has("objective")) {
    spec.time_to_train = r.choice("objective", {"step_time", "time_to_train"}) == "time_to_train";
    if (spec.time_to_train && !spec.reliability)
      r.fail("objective", "\"time_to_train\" needs a \"reliability\" block (failure model, checkpoints, recovery)");
  }
  if (auto m = r.optional_object("multipath"))
    spec.topology.multipath = topology::read_multipath(*m);
  if (auto m = r.optional_object("refine_multipath")) {
    spec.refine_multipath = topology::read_multipath(*m);
    if (!spec.refine_multipath->ecmp)
      r.fail("refine_multipath", "re-simulates the best points under ECMP: it needs \"routing\": \"ecmp\"");
  }
  if (auto c = r.optional_object("capacity_cost")) {
    auto& cost                   = spec.capacity;
    cost.per_tbps_inter_building = c->optional_number("per_tbps_inter_building", 0, 1e12).value_or(0);
    cost.per_tbps_inter_region   = c->optional_number("per_tbps_inter_region", 0, 1e12).value_or(0);
    if (auto u = c->optional_string("unit"))
      cost.unit = *u;
    cost.within = c->optional_number("within", 0, 10).value_or(0.05);
    cost.budget = c->optional_number("budget", 0, 1e18);
    c->finish();
  }
  if (auto s = r.optional_object("screen")) {
    auto& screen = spec.screen;
    screen.above = static_cast<std::uint64_t>(
        s->optional_integer("above", 0, static_cast<std::int64_t>(kMaxEnumerated)).value_or(5000));
    screen.keep     = s->optional_number("keep", 1e-9, 1).value_or(0.01);
    screen.keep_min = static_cast<std::size_t>(s->optional_integer("keep_min", 1, 1'000'000).value_or(64));
    screen.keep_max = static_cast<std::size_t>(s->optional_integer("keep_max", 1, 1'000'000).value_or(400));
    if (screen.keep_max < screen.keep_min)
      s->fail("keep_max", "must be at least keep_min (" + std::to_string(screen.keep_min) + ")");
    s->finish();
  }
  if (auto s = r.optional_object("search")) {
    auto& sp = spec.space;
    read_ints(*s, "tp", sp.tp, 1, 1024);
    read_ints(*s, "cp", sp.cp, 1, 1024);
    read_ints(*s, "pp", sp.pp, 1, 1024);
    read_ints(*s, "ep", sp.ep, 1, 1024);
    read_ints(*s, "micro_batch", sp.micro_batch, 1, 1024);
    read_ints(*s, "virtual_stages", sp.virtual_stages, 2, 64);
    read_ints(*s, "flows_per_pair", sp.flows_per_pair, 1, 64);
    if (s->has("window")) {
      // Sizes such as "16MiB", or "none" for no limit.
      const auto values = s->strings("window");
      if (values.empty())
        s->fail("window", "expected a non-empty list of sizes (\"16MiB\") or \"none\"");
      sp.window.clear();
      for (const auto& v : values) {
        double bytes = 0;
        if (v != "none") {
          try {
            bytes = units::parse_size(v);
          } catch (const std::exception&) {
            s->fail("window", "\"" + v + "\" is neither a size such as \"16MiB\" nor \"none\"");
          }
          if (bytes <= 0)
            s->fail("window", "a window must be positive (\"none\" for no limit)");
        }
        sp.window.push_back(bytes);
      }
    }
    read_ints(*s, "qps", sp.qps, 1, 64);
    if (std::any_of(sp.qps.begin(), sp.qps.end(), [](int q) { return q > 1; }) && !spec.topology.multipath.ecmp)
      s->fail("qps", "queue pairs need \"multipath\": {\"routing\": \"ecmp\"} (\"ideal\" puts them on one path)");
    read_alternatives(
        *s, "compression", sp.compression,
        [&](const json& v, const spec::Location& at) { return netsim::read_compression(v, at.file, at.path); },
        "a list of compression rules");
    read_alternatives(
        *s, "diloco", sp.diloco,
        [&](const json& v, const spec::Location& at) {
          spec::ObjectReader d(v, at);
          auto block = sync::read_diloco(d);
          // The search's inner steps keep data parallelism inside regions: other workers are for `spansim run`.
          if (block.workers != sync::WorkerLevel::region)
            at.member("workers").fail("the optimizer searches DiLoCo with region workers only (leave \"workers\" "
                                      "out); run other workers with spansim run");
          return std::optional<sync::DilocoSpec>(block);
        },
        "a diloco block such as {\"every\": 8}");
    const bool template_links = !spec.topology.graph;
    read_bandwidths(*s, "inter_building", sp.inter_building,
                    template_links && spec.topology.inter_building.bandwidth > 0);
    read_bandwidths(*s, "inter_region", sp.inter_region, template_links && spec.topology.inter_region.bandwidth > 0);
    read_names(*s, "data_parallel", sp.data_parallel);
    read_names(*s, "schedule", sp.schedule);
    read_names(*s, "recompute", sp.recompute);
    read_names(*s, "cp_comm", sp.cp_comm);
    read_names(*s, "dp_algorithm", sp.dp_algorithm);
    if (s->has("etp") && s->raw("etp").is_array()) {
      // Integers, or "tp" for expert TP equal to the point's TP (Megatron's default).
      sp.etp.clear();
      for (const auto& x : s->raw("etp")) {
        if (x.is_string() && x.get<std::string>() == "tp")
          sp.etp.push_back(0);
        else if (x.is_number_integer() && x.get<std::int64_t>() >= 1 && x.get<std::int64_t>() <= 1024)
          sp.etp.push_back(x.get<int>());
        else
          s->fail("etp", "expected integers from 1 to 1024 or \"tp\" (expert TP equal to the point's TP)");
      }
      if (sp.etp.empty())
        s->fail("etp", "expected a non-empty list of integers or \"tp\"");
    } else {
      read_ints(*s, "etp", sp.etp, 1, 1024);
    }
    read_names(*s, "dispatcher", sp.dispatcher);
    read_ints(*s, "node_limit", sp.node_limit, 0, 1024);
    read_booleans(*s, "ep_overlap", sp.ep_overlap);
    const bool moe = spec.base.model.moe.experts > 0;
    for (const char* key : {"etp", "dispatcher", "node_limit", "ep_overlap"})
      if (!moe && s->has(key))
        s->fail(key, "model " + spec.base.model.name + " is dense: " + key + " is a mixture-of-experts knob");
    read_booleans(*s, "reshard_after_forward", sp.reshard_after_forward);
    read_booleans(*s, "tp_overlap", sp.tp_overlap);
    if (s->has("order") && s->raw("order").is_string()) {
      if (s->raw("order").get<std::string>() != "all")
        s->fail("order", "expected \"all\" (every permutation of tp, cp, pp, dp) or a list of rank orders");
      std::vector<Dim> o{Dim::tp, Dim::cp, Dim::pp, Dim::dp};
      std::sort(o.begin(), o.end());
      sp.order.clear();
      do
        sp.order.push_back(o);
      while (std::next_permutation(o.begin(), o.end()));
    } else if (s->has("order")) {
      const json& v = s->raw("order");
      if (!v.is_array() || v.empty())
        s->fail("order", "expected a list of rank orders, each a permutation of tp, cp, pp, dp");
      sp.order.clear();
      for (std::size_t i = 0; i < v.size(); ++i)
        sp.order.push_back(workload::parse_rank_order(v[i], s->where().member("order").element(i)));
    }
    // Model-parallel overlaps with no degree they apply to would only repeat points.
    const auto widest = [](const std::vector<int>& v) { return *std::max_element(v.begin(), v.end()); };
    if (widest(sp.tp) < 2 && std::find(sp.tp_overlap.begin(), sp.tp_overlap.end(), true) != sp.tp_overlap.end())
      s->fail("tp_overlap", "TP overlap applies at tp 2 or more: search.tp has none (allowed: [false], or a tp >= 2)");
    if (widest(sp.cp) < 2 && std::any_of(sp.cp_comm.begin(), sp.cp_comm.end(),
                                         [](workload::CpComm c) { return c != workload::CpComm::allgather; }))
      s->fail("cp_comm", "a CP variant applies at cp 2 or more: search.cp has none (allowed: [\"allgather\"], or a "
                         "cp >= 2)");
    // The product of the lists' lengths, refused past the limit before it can overflow or run for hours.
    const auto& l               = sp;
    const std::size_t lengths[] = {l.tp.size(),
                                   l.cp.size(),
                                   l.pp.size(),
                                   l.ep.size(),
                                   l.data_parallel.size(),
                                   l.reshard_after_forward.size(),
                                   l.micro_batch.size(),
                                   l.schedule.size(),
                                   l.virtual_stages.size(),
                                   l.order.size(),
                                   l.recompute.size(),
                                   l.tp_overlap.size(),
                                   l.cp_comm.size(),
                                   l.dp_algorithm.size(),
                                   l.etp.size(),
                                   l.dispatcher.size(),
                                   l.node_limit.size(),
                                   l.ep_overlap.size(),
                                   l.flows_per_pair.size(),
                                   l.window.size(),
                                   l.qps.size(),
                                   l.compression.size(),
                                   l.diloco.size(),
                                   l.inter_building.size(),
                                   l.inter_region.size()};
    double combinations         = 1;
    for (std::size_t n : lengths)
      combinations *= static_cast<double>(n);
    if (combinations > kMaxCombinations) {
      char count[32];
      std::snprintf(count, sizeof count, "%.3g", combinations);
      s->where().fail(std::string("the space has ") + count +
                      " combinations (the product of the lists' lengths); at most " + std::to_string(kMaxCombinations) +
                      " are allowed (the closed-form screen takes about a second per 3 million on one core): shorten a "
                      "list or a range");
    }
    s->finish();
  }
  // A GPU count that no degree product of the space divides leaves nothing to search: say so where it is set.
  {
    const auto& sp = spec.space;
    std::set<std::int64_t> products;
    for (int tp : sp.tp)
      for (int cp : sp.cp)
        for (int pp : sp.pp)
          products.insert(std::int64_t{tp} * cp * pp);
    if (std::none_of(products.begin(), products.end(), [&](std::int64_t p) { return spec.base.gpus % p == 0; })) {
      std::string tried;
      for (auto p : products)
        tried += (tried.empty() ? "" : ", ") + std::to_string(p);
      r.fail("gpus", std::to_string(spec.base.gpus) + " GPUs: no tp x cp x pp of the search divides it (products " +
                         tried +
                         "); allowed: a multiple of one of them, or search.tp, search.cp, search.pp that "
                         "divide the GPU count");
    }
  }
  // Megatron's recompute modules, for the points that recompute selectively (a search without selective has none).
  if (r.has("recompute_modules")) {
    if (std::find(spec.space.recompute.begin(), spec.space.recompute.end(), workload::Recompute::selective) ==
        spec.space.recompute.end())
      r.fail("recompute_modules", "search.recompute has no \"selective\", the only recompute the modules apply to");
    spec.base.recompute_modules = workload::read_recompute_modules(r, workload::Recompute::selective, spec.base.model);
  }
  r.finish();
  return spec;
}

} // namespace spansim::optimizer
