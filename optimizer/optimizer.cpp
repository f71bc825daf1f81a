#include "optimizer/optimizer.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "workload/workload.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <set>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace spansim::optimizer {

using nlohmann::json;

namespace {

const std::vector<std::string> kProductionOrder{"tp", "cp", "pp", "dp"};

// Dimensions of degree 1 do not change where ranks go: orders that differ only there are one placement.
std::vector<std::string> effective_order(const Point& p)
{
  std::vector<std::string> out;
  for (const auto& d : p.order)
    if ((d == "tp" ? p.tp : d == "cp" ? p.cp : d == "pp" ? p.pp : p.dp) > 1)
      out.push_back(d);
  return out;
}

std::string join(const std::vector<std::string>& v)
{
  std::string s;
  for (const auto& x : v)
    s += (s.empty() ? "" : ",") + x;
  return s;
}

// Runs fn(i) for i in [0, n) in up to `workers` child processes; each returns a string. A child takes every
// workers-th index, so results do not depend on timing; the parent reads all pipes to the end.
std::vector<std::string> parallel_map(std::size_t n, int workers, const std::function<std::string(std::size_t)>& fn)
{
  std::vector<std::string> out(n);
  if (n == 0)
    return out;
  workers = std::max(1, std::min<int>(workers, static_cast<int>(n)));
  std::fflush(nullptr);
  std::cout.flush();
  std::cerr.flush();
  struct Child {
    pid_t pid;
    int fd;
  };
  std::vector<Child> children;
  for (int w = 0; w < workers; ++w) {
    int fds[2];
    if (::pipe(fds) != 0)
      throw SimulationError("cannot create a pipe for a search worker");
    pid_t pid = ::fork();
    if (pid < 0)
      throw SimulationError("cannot fork a search worker");
    if (pid == 0) {
      ::close(fds[0]);
      // Records: index, length, bytes. A worker ends with _exit: it must not run the parent's exit handlers.
      for (std::size_t i = static_cast<std::size_t>(w); i < n; i += static_cast<std::size_t>(workers)) {
        std::string r;
        try {
          r = fn(i);
        } catch (const std::exception& e) {
          r = json{{"error", e.what()}}.dump();
        }
        std::uint64_t header[2] = {i, r.size()};
        std::string record(reinterpret_cast<const char*>(header), sizeof header);
        record += r;
        const char* p    = record.data();
        std::size_t left = record.size();
        while (left > 0) {
          ssize_t k = ::write(fds[1], p, left);
          if (k < 0 && errno == EINTR)
            continue;
          if (k <= 0)
            ::_exit(1);
          p += k;
          left -= static_cast<std::size_t>(k);
        }
      }
      ::close(fds[1]);
      ::_exit(0);
    }
    ::close(fds[1]);
    children.push_back({pid, fds[0]});
  }
  for (auto& c : children) {
    std::string data;
    char buffer[1 << 16];
    for (;;) {
      ssize_t k = ::read(c.fd, buffer, sizeof buffer);
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0)
        break;
      data.append(buffer, static_cast<std::size_t>(k));
    }
    ::close(c.fd);
    int status = 0;
    while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::size_t pos = 0;
    while (pos + 16 <= data.size()) {
      std::uint64_t header[2];
      std::memcpy(header, data.data() + pos, sizeof header);
      pos += 16;
      out[header[0]] = data.substr(pos, header[1]);
      pos += header[1];
    }
  }
  for (std::size_t i = 0; i < n; ++i)
    if (out[i].empty())
      throw SimulationError("a search worker died before finishing its points");
  return out;
}

json job_json(const OptimizeSpec& spec, const Point& p, int buildings)
{
  json par = {{"tp", p.tp},      {"cp", p.cp}, {"pp", p.pp},
              {"dp", p.dp},      {"ep", p.ep}, {"data_parallel", p.data_parallel},
              {"order", p.order}};
  if (p.data_parallel != "ddp")
    par["reshard_after_forward"] = p.reshard_after_forward;
  if (p.data_parallel == "hsdp")
    par["hsdp_shard_size"] = std::max(1, p.dp / std::max(1, buildings)); // one replica group per building
  json batch           = spec.batch;
  batch["micro_batch"] = p.micro_batch;
  json schedule        = {{"kind", p.schedule}};
  if (p.schedule == "interleaved-1f1b")
    schedule["virtual_stages"] = p.virtual_stages;
  return {{"name", spec.name + "-point"}, {"model", spec.model}, {"gpu", spec.gpu},      {"gpus", spec.gpus},
          {"parallelism", par},           {"batch", batch},      {"schedule", schedule}, {"recompute", p.recompute}};
}

netsim::StepOptions step_options(const Point& p, netsim::Fidelity fidelity, bool collapse)
{
  netsim::StepOptions o;
  o.fidelity                      = fidelity;
  o.collapse_communication        = collapse;
  o.channels                      = p.channels;
  o.algorithms[workload::Dim::dp] = parse_enum<netsim::Algorithm>(p.dp_algorithm, "algorithm");
  return o;
}

int buildings_used(const OptimizeSpec& spec, const topology::Topology& topo)
{
  if (!spec.buildings.empty())
    return static_cast<int>(spec.buildings.size());
  const auto per = topo.counts().gpus / topo.counts().buildings;
  return static_cast<int>((spec.gpus + per - 1) / per);
}

std::string reason_of(const SpecError& e)
{
  std::string what = e.what();
  if (what.find("does not fit in GPU memory") != std::string::npos)
    return "memory";
  std::string path = e.json_path();
  return path.rfind("$.", 0) == 0 ? path.substr(2) : path;
}

json metrics_of(const netsim::StepResult& r, const topology::Topology& topo, bool with_links)
{
  json exposed;
  double bubble = 0;
  for (workload::Dim d : workload::kDims) {
    double mean = 0;
    for (const auto& s : r.stages)
      mean += s.exposed[d] / static_cast<double>(r.stages.size());
    exposed[std::string(name_of(d))] = mean;
  }
  for (const auto& s : r.stages)
    bubble += s.bubble / static_cast<double>(r.stages.size());
  json m = {{"step_time_s", r.step_time},
            {"mfu", r.mfu},
            {"tflops_per_gpu", r.tflops_per_gpu},
            {"exposed_s", exposed},
            {"bubble_s", bubble}};
  if (r.engine.contains("collectives_chosen_per_step"))
    m["collectives_chosen"] = r.engine["collectives_chosen_per_step"];
  if (with_links) {
    double across_buildings = 0, across_regions = 0;
    for (std::size_t l = 0; l < topo.links().size(); ++l) {
      auto tier    = topo.links()[l].tier;
      double bytes = r.link_bytes[2 * l] + r.link_bytes[2 * l + 1];
      if (tier == topology::Tier::inter_building || tier == topology::Tier::building_uplink)
        across_buildings += bytes;
      if (tier == topology::Tier::inter_region)
        across_regions += bytes;
    }
    m["bytes_across_buildings"] = across_buildings;
    m["bytes_across_regions"]   = across_regions;
  }
  return m;
}

/// @brief Builds and checks one point: its graph and placement, or the reason it is infeasible.
struct Built {
  workload::StepGraph graph;
  std::optional<placement::Placement> place;
};

Built build(const OptimizeSpec& spec, const topology::Topology& topo, const Point& p)
{
  auto job = workload::parse_job(job_json(spec, p, buildings_used(spec, topo)), spec.file);
  Built b{workload::build_step_graph(job), std::nullopt};
  std::vector<workload::Dim> order;
  for (const auto& d : p.order)
    order.push_back(*parse_name<workload::Dim>(d));
  b.place.emplace(topo, b.graph.job, placement::PlacementSpec{order, spec.buildings},
                  spec::Location{spec.file, "$.search.order"});
  return b;
}

// Scores a point with the collapsed analytical step; returns JSON (score, bound, metrics) or a reason.
json score_point(const OptimizeSpec& spec, const topology::Topology& topo, const Point& p)
{
  try {
    auto b    = build(spec, topo, p);
    double lb = workload::compute_makespan(b.graph);
    auto r    = netsim::simulate_step(topo, b.graph, *b.place, step_options(p, netsim::Fidelity::analytical, true));
    return {{"score", r.step_time}, {"lower_bound", lb}, {"metrics", metrics_of(r, topo, false)}};
  } catch (const SpecError& e) {
    return {{"reason", reason_of(e)}};
  } catch (const UsageError& e) {
    return {{"reason", std::string("collectives: ") + e.what()}};
  }
}

json refine_point(const OptimizeSpec& spec, const topology::Topology& topo, const Point& p)
{
  auto b = build(spec, topo, p);
  auto r = netsim::simulate_step(topo, b.graph, *b.place, step_options(p, spec.refine, false));
  return {{"refined", r.step_time}, {"metrics", metrics_of(r, topo, true)}};
}

std::vector<Point> enumerate(const OptimizeSpec& spec, std::map<std::string, std::size_t>& pruned)
{
  const auto& s = spec.space;
  std::vector<Point> points;
  std::set<std::string> seen;
  for (int tp : s.tp)
    for (int cp : s.cp)
      for (int pp : s.pp)
        for (int ep : s.ep)
          for (const auto& dpm : s.data_parallel)
            for (bool reshard : s.reshard_after_forward)
              for (int mb : s.micro_batch)
                for (const auto& sched : s.schedule)
                  for (int v : s.virtual_stages)
                    for (const auto& order : s.order)
                      for (const auto& rc : s.recompute)
                        for (const auto& algo : s.dp_algorithm)
                          for (int ch : s.channels) {
                            Point p{tp,
                                    cp,
                                    pp,
                                    1,
                                    ep,
                                    dpm,
                                    dpm == "ddp" ? false : reshard,
                                    mb,
                                    sched,
                                    sched == "interleaved-1f1b" ? v : 1,
                                    order,
                                    rc,
                                    algo,
                                    ch};
                            const std::int64_t model_ranks = std::int64_t(tp) * cp * pp;
                            if (spec.gpus % model_ranks != 0) {
                              pruned["gpus not divisible by tp x cp x pp"]++;
                              continue;
                            }
                            p.dp = static_cast<int>(spec.gpus / model_ranks);
                            // Knobs that do not apply collapse onto one point.
                            Point key = p;
                            key.order = effective_order(p);
                            if (!seen.insert(key.label()).second)
                              continue;
                            points.push_back(p);
                          }
  return points;
}

Point with(const Point& base, const std::string& knob, const json& value)
{
  Point p = base;
  if (knob == "tp" || knob == "cp" || knob == "pp") {
    const std::int64_t total                           = std::int64_t(base.tp) * base.cp * base.pp * base.dp;
    (knob == "tp" ? p.tp : knob == "cp" ? p.cp : p.pp) = value.get<int>();
    const std::int64_t model                           = std::int64_t(p.tp) * p.cp * p.pp;
    p.dp                                               = total % model == 0 ? static_cast<int>(total / model) : 0;
  } else if (knob == "ep")
    p.ep = value;
  else if (knob == "data_parallel")
    p.data_parallel = value;
  else if (knob == "micro_batch")
    p.micro_batch = value;
  else if (knob == "schedule") {
    p.schedule       = value[0];
    p.virtual_stages = value[1];
  } else if (knob == "order")
    p.order = value.get<std::vector<std::string>>();
  else if (knob == "recompute")
    p.recompute = value;
  else if (knob == "dp_algorithm")
    p.dp_algorithm = value;
  else if (knob == "channels")
    p.channels = value;
  return p;
}

} // namespace

std::string Point::label() const
{
  std::string s = "tp" + std::to_string(tp) + " cp" + std::to_string(cp) + " pp" + std::to_string(pp) + " dp" +
                  std::to_string(dp) + (ep > 1 ? " ep" + std::to_string(ep) : "") + " " + data_parallel +
                  (data_parallel != "ddp" && reshard_after_forward ? "(reshard)" : "") + " mb" +
                  std::to_string(micro_batch) + " " +
                  (schedule == "interleaved-1f1b" ? "i1f1b(v" + std::to_string(virtual_stages) + ")" : schedule) +
                  " [" + join(order) + "] " + recompute + " dp:" + dp_algorithm;
  if (channels > 1)
    s += " ch" + std::to_string(channels);
  return s;
}

json Point::to_json() const
{
  return {{"tp", tp},
          {"cp", cp},
          {"pp", pp},
          {"dp", dp},
          {"ep", ep},
          {"data_parallel", data_parallel},
          {"reshard_after_forward", reshard_after_forward},
          {"micro_batch", micro_batch},
          {"schedule", schedule},
          {"virtual_stages", virtual_stages},
          {"order", order},
          {"recompute", recompute},
          {"dp_algorithm", dp_algorithm},
          {"channels", channels}};
}

json OptimizeSpec::to_json() const
{
  const auto& s = space;
  return {{"name", name},
          {"file", file},
          {"topology", topology.name},
          {"model", model},
          {"gpu", gpu},
          {"gpus", gpus},
          {"batch", batch},
          {"buildings", buildings},
          {"search",
           {{"tp", s.tp},
            {"cp", s.cp},
            {"pp", s.pp},
            {"ep", s.ep},
            {"data_parallel", s.data_parallel},
            {"reshard_after_forward", s.reshard_after_forward},
            {"micro_batch", s.micro_batch},
            {"schedule", s.schedule},
            {"virtual_stages", s.virtual_stages},
            {"order", s.order},
            {"recompute", s.recompute},
            {"dp_algorithm", s.dp_algorithm},
            {"channels", s.channels}}},
          {"top_k", top_k},
          {"refine_fidelity", name_of(refine)},
          {"workers", workers},
          {"seed", seed}};
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
  spec.model = r.raw("model");
  spec.gpu   = r.raw("gpu");
  // Checked once here: a bad model or GPU would otherwise prune every point with the same reason.
  auto check_zoo = [&](const char* key, const json& ref, auto load) {
    if (!ref.is_string() && !ref.is_object())
      r.fail(key, "expected a zoo name or an inline object");
    if (ref.is_string()) {
      try {
        load(ref.get<std::string>());
      } catch (const Error& e) {
        r.fail(key, e.what());
      }
    }
  };
  check_zoo("model", spec.model, [](const std::string& n) { workload::load_model(n); });
  check_zoo("gpu", spec.gpu, [](const std::string& n) { workload::load_gpu(n); });
  spec.gpus  = r.integer("gpus", 1, 4'000'000);
  spec.batch = r.raw("batch");
  if (!spec.batch.is_object() || spec.batch.contains("micro_batch"))
    r.fail("batch", "expected a batch object (sequence_length and global_tokens or global_sequences) without "
                    "micro_batch, which is searched");
  if (r.has("buildings")) {
    spec.buildings = r.strings("buildings");
    topology::Topology topo(spec.topology);
    for (const auto& name : spec.buildings) {
      bool known = false;
      std::string list;
      for (int b = 0; b < topo.building_count(); ++b) {
        known = known || topo.building_name(b) == name;
        list += (list.empty() ? "" : ", ") + topo.building_name(b);
      }
      if (!known)
        r.fail("buildings", "unknown building \"" + name + "\" (buildings: " + list + ")");
    }
  }
  spec.top_k   = static_cast<int>(r.optional_integer("top_k", 1, 1000).value_or(20));
  spec.workers = static_cast<int>(r.optional_integer("workers", 0, 256).value_or(0));
  spec.seed =
      static_cast<std::uint64_t>(r.optional_integer("seed", 0, std::numeric_limits<std::int64_t>::max()).value_or(1));
  if (r.has("refine_fidelity")) {
    spec.refine = r.enumeration<netsim::Fidelity>("refine_fidelity");
  }
  if (auto s = r.optional_object("search")) {
    auto ints = [&](const char* key, std::vector<int>& out, int lo, int hi) {
      if (!s->has(key))
        return;
      const json& v = s->raw(key);
      if (!v.is_array() || v.empty())
        s->fail(key, "expected a non-empty list of integers");
      out.clear();
      for (const auto& x : v) {
        if (!x.is_number_integer() || x.get<int>() < lo || x.get<int>() > hi)
          s->fail(key, "expected integers from " + std::to_string(lo) + " to " + std::to_string(hi));
        out.push_back(x.get<int>());
      }
    };
    auto strings = [&](const char* key, std::vector<std::string>& out,
                       std::initializer_list<std::string_view> allowed) {
      if (!s->has(key))
        return;
      auto v = s->strings(key);
      if (v.empty())
        s->fail(key, "expected a non-empty list");
      for (const auto& x : v)
        if (std::find(allowed.begin(), allowed.end(), x) == allowed.end()) {
          std::string list;
          for (auto a : allowed)
            list += (list.empty() ? "" : ", ") + std::string(a);
          s->fail(key, "unknown value \"" + x + "\" (allowed: " + list + ")");
        }
      out = v;
    };
    auto& sp = spec.space;
    ints("tp", sp.tp, 1, 1024);
    ints("cp", sp.cp, 1, 1024);
    ints("pp", sp.pp, 1, 1024);
    ints("ep", sp.ep, 1, 1024);
    ints("micro_batch", sp.micro_batch, 1, 1024);
    ints("virtual_stages", sp.virtual_stages, 2, 64);
    ints("channels", sp.channels, 1, 64);
    strings("data_parallel", sp.data_parallel, {"ddp", "fsdp", "hsdp"});
    strings("schedule", sp.schedule, {"gpipe", "1f1b", "interleaved-1f1b"});
    strings("recompute", sp.recompute, {"none", "selective", "full"});
    strings("dp_algorithm", sp.dp_algorithm, {"auto", "ring", "tree", "halving-doubling", "direct", "hierarchical"});
    if (s->has("reshard_after_forward")) {
      const json& v = s->raw("reshard_after_forward");
      if (!v.is_array() || v.empty() || !std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_boolean(); }))
        s->fail("reshard_after_forward", "expected a non-empty list of true/false");
      sp.reshard_after_forward = v.get<std::vector<bool>>();
    }
    if (s->has("order")) {
      const json& v = s->raw("order");
      if (!v.is_array() || v.empty())
        s->fail("order", "expected a list of rank orders, each a permutation of tp, cp, pp, dp");
      sp.order.clear();
      for (const auto& o : v) {
        std::vector<std::string> one;
        for (auto d : placement::parse_placement(json{{"order", o}}, path, "$.search.order").order)
          one.emplace_back(name_of(d));
        sp.order.push_back(one);
      }
    }
    s->finish();
  }
  r.finish();
  return spec;
}

json scenario_json(const OptimizeSpec& spec, const Point& p)
{
  topology::Topology topo(spec.topology);
  json placement = {{"order", p.order}};
  if (!spec.buildings.empty())
    placement["buildings"] = spec.buildings;
  json topology_ref;
  // Presets by name; anything else inline, so the scenario stands alone.
  auto presets = topology::preset_names();
  if (std::find(presets.begin(), presets.end(), spec.topology.name) != presets.end() &&
      spec.topology.file.find("/topology/presets/") != std::string::npos)
    topology_ref = spec.topology.name;
  else {
    topology_ref = spec.topology.to_json();
    topology_ref.erase("file");
    for (const char* k : {"inter_building", "inter_region"})
      if (topology_ref.contains(k)) {
        topology_ref[k].erase("effective_latency");
        for (auto& o : topology_ref[k]["overrides"])
          o.erase("effective_latency");
      }
  }
  return {{"name", spec.name + "-" + std::to_string(std::hash<std::string>{}(p.label()) % 100000)},
          {"description", "from spansim optimize: " + p.label()},
          {"topology", topology_ref},
          {"job", job_json(spec, p, buildings_used(spec, topo))},
          {"placement", placement},
          {"fidelity", name_of(spec.refine)},
          {"collectives", {{"dp", p.dp_algorithm}, {"channels", p.channels}}}};
}

OptimizeResult optimize(const OptimizeSpec& spec, const Progress& progress)
{
  const auto started = std::chrono::steady_clock::now();
  topology::Topology topo(spec.topology);
  const int workers = spec.workers > 0 ? spec.workers : std::max(1u, std::thread::hardware_concurrency());
  OptimizeResult result;
  auto points   = enumerate(spec, result.pruned);
  result.points = points.size();
  for (const auto& [reason, n] : result.pruned)
    result.points += n;

  // Bounds first (cheap), then scores in batches in order of bound, skipping what cannot enter the best K.
  auto bounds = parallel_map(points.size(), workers, [&](std::size_t i) -> std::string {
    try {
      auto b = build(spec, topo, points[i]);
      return json{{"lower_bound", workload::compute_makespan(b.graph)}}.dump();
    } catch (const SpecError& e) {
      return json{{"reason", reason_of(e)}}.dump();
    }
  });
  std::vector<Evaluation> feasible;
  for (std::size_t i = 0; i < points.size(); ++i) {
    auto j = json::parse(bounds[i]);
    if (j.contains("reason")) {
      result.pruned[j["reason"].get<std::string>()]++;
      continue;
    }
    if (j.contains("error"))
      throw SimulationError("evaluating " + points[i].label() + ": " + j["error"].get<std::string>());
    Evaluation e;
    e.point       = points[i];
    e.lower_bound = j["lower_bound"];
    feasible.push_back(e);
  }
  result.feasible = feasible.size();
  std::stable_sort(feasible.begin(), feasible.end(),
                   [](const Evaluation& a, const Evaluation& b) { return a.lower_bound < b.lower_bound; });
  std::vector<Evaluation> scored;
  const std::size_t batch = static_cast<std::size_t>(std::max(4 * workers, spec.top_k));
  for (std::size_t start = 0; start < feasible.size(); start += batch) {
    double kth = std::numeric_limits<double>::infinity();
    if (static_cast<int>(scored.size()) >= spec.top_k) {
      std::vector<double> scores;
      for (const auto& e : scored)
        scores.push_back(e.score);
      std::nth_element(scores.begin(), scores.begin() + spec.top_k - 1, scores.end());
      kth = scores[spec.top_k - 1];
    }
    std::vector<std::size_t> todo;
    for (std::size_t i = start; i < std::min(feasible.size(), start + batch); ++i)
      if (feasible[i].lower_bound < kth)
        todo.push_back(i);
      else
        result.bound_pruned++;
    auto out = parallel_map(todo.size(), workers,
                            [&](std::size_t k) { return score_point(spec, topo, feasible[todo[k]].point).dump(); });
    for (std::size_t k = 0; k < todo.size(); ++k) {
      auto j = json::parse(out[k]);
      if (j.contains("reason")) {
        result.pruned[j["reason"].get<std::string>()]++;
        result.feasible--;
        continue;
      }
      if (j.contains("error"))
        throw SimulationError("scoring " + feasible[todo[k]].point.label() + ": " + j["error"].get<std::string>());
      Evaluation e = feasible[todo[k]];
      e.score      = j["score"];
      e.metrics    = j["metrics"];
      scored.push_back(e);
    }
    if (progress)
      progress("scoring (analytical)", std::min(feasible.size(), start + batch), feasible.size());
  }
  result.scored          = scored.size();
  result.scoring_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (scored.empty())
    throw UsageError("no feasible configuration in the search space (pruned: " + [&] {
      std::string s;
      for (const auto& [reason, n] : result.pruned)
        s += (s.empty() ? "" : ", ") + reason + " " + std::to_string(n);
      return s;
    }() + ")");
  std::stable_sort(scored.begin(), scored.end(),
                   [](const Evaluation& a, const Evaluation& b) { return a.score < b.score; });

  // The production default: order [tp, cp, pp, dp] (DP across the boundary), 1F1B; the best such point scored.
  auto is_default = [&](const Point& p) {
    Point production = p;
    production.order = kProductionOrder;
    return effective_order(p) == effective_order(production) && p.schedule == "1f1b" && p.dp_algorithm == "auto";
  };
  std::optional<Evaluation> baseline;
  for (const auto& e : scored)
    if (is_default(e.point) && !baseline)
      baseline = e;
  if (!baseline) {
    Point p          = scored.front().point;
    p.order          = kProductionOrder;
    p.schedule       = "1f1b";
    p.virtual_stages = 1;
    p.dp_algorithm   = "auto";
    auto j           = score_point(spec, topo, p);
    if (j.contains("reason"))
      throw UsageError("the production default (order [tp, cp, pp, dp], 1F1B) of the best point is infeasible: " +
                       j["reason"].get<std::string>());
    baseline = Evaluation{p, j["lower_bound"], j["score"], std::nullopt, j["metrics"]};
  }

  // The best single change from it: one knob at a time, over the values of the space.
  std::vector<std::pair<std::string, json>> changes;
  const auto& s  = spec.space;
  const Point& b = baseline->point;
  for (int v : s.tp)
    if (v != b.tp)
      changes.emplace_back("tp", v);
  for (int v : s.pp)
    if (v != b.pp)
      changes.emplace_back("pp", v);
  for (int v : s.cp)
    if (v != b.cp)
      changes.emplace_back("cp", v);
  for (const auto& v : s.data_parallel)
    if (v != b.data_parallel)
      changes.emplace_back("data_parallel", v);
  for (int v : s.micro_batch)
    if (v != b.micro_batch)
      changes.emplace_back("micro_batch", v);
  for (const auto& v : s.schedule)
    for (int vs : s.virtual_stages)
      if (v != b.schedule && (v == "interleaved-1f1b" || vs == s.virtual_stages.front()))
        changes.emplace_back("schedule", json{v, v == "interleaved-1f1b" ? vs : 1});
  for (const auto& v : s.order) {
    Point p = b;
    p.order = v;
    if (effective_order(p) != effective_order(b))
      changes.emplace_back("order", v);
  }
  for (const auto& v : s.recompute)
    if (v != b.recompute)
      changes.emplace_back("recompute", v);
  for (const auto& v : s.dp_algorithm)
    if (v != b.dp_algorithm)
      changes.emplace_back("dp_algorithm", v);
  auto change_scores = parallel_map(changes.size(), workers, [&](std::size_t i) {
    Point p = with(b, changes[i].first, changes[i].second);
    if (p.dp < 1)
      return json{{"reason", "divisibility"}}.dump();
    return score_point(spec, topo, p).dump();
  });
  std::optional<Evaluation> single;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    auto j = json::parse(change_scores[i]);
    if (!j.contains("score"))
      continue;
    if (!single || j["score"].get<double>() < single->score) {
      single = Evaluation{with(b, changes[i].first, changes[i].second), j["lower_bound"], j["score"], std::nullopt,
                          j["metrics"]};
      auto v = changes[i].second;
      result.single_change = changes[i].first + " = " +
                             (changes[i].first == "schedule"
                                  ? (v[0].get<std::string>() +
                                     (v[0] == "interleaved-1f1b" ? " (v" + std::to_string(v[1].get<int>()) + ")" : ""))
                              : changes[i].first == "order" ? "[" + join(v.get<std::vector<std::string>>()) + "]"
                                                            : (v.is_string() ? v.get<std::string>() : v.dump()));
    }
  }

  // Re-simulate the best K, the baseline and the best single change at the refine fidelity.
  std::vector<Evaluation> refine(scored.begin(), scored.begin() + std::min<std::size_t>(scored.size(), spec.top_k));
  refine.push_back(*baseline);
  if (single)
    refine.push_back(*single);
  if (progress)
    progress("re-simulating the best (" + std::string(name_of(spec.refine)) + ")", 0, refine.size());
  auto refined = parallel_map(refine.size(), workers,
                              [&](std::size_t i) { return refine_point(spec, topo, refine[i].point).dump(); });
  for (std::size_t i = 0; i < refine.size(); ++i) {
    auto j = json::parse(refined[i]);
    if (j.contains("error"))
      throw SimulationError("re-simulating " + refine[i].point.label() + ": " + j["error"].get<std::string>());
    refine[i].refined = j["refined"].get<double>();
    refine[i].metrics = j["metrics"];
  }
  if (progress)
    progress("re-simulating the best (" + std::string(name_of(spec.refine)) + ")", refine.size(), refine.size());
  if (single) {
    result.best_single_change = refine.back();
    refine.pop_back();
  }
  result.baseline = refine.back();
  refine.pop_back();
  std::stable_sort(refine.begin(), refine.end(),
                   [](const Evaluation& a, const Evaluation& b) { return *a.refined < *b.refined; });
  result.ranked       = refine;
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

} // namespace spansim::optimizer
