// The network section: nccl-tests as published against `spansim collective` on the same cluster, and the fit of each
// fabric's two free parameters on the fit rows.
#include "calibration/network.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/units.hpp"
#include "netsim/netsim.hpp"
#include "topology/site_spec.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

namespace spansim::calibration {

using nlohmann::json;
using spec::ObjectReader;
using topology::Fabric;

namespace {

// The cluster: a preset (or topology file) with the row's node and pod keys over its own; `stated` says which
// fitted parameters it gives.
topology::TopologySpec row_topology(ObjectReader& r, const std::string& file, NetworkRun::Stated& stated)
{
  const std::string name = r.string("topology");
  std::string path       = topology::preset_directory() + "/" + name + ".json";
  if (!std::filesystem::exists(path))
    path = spec::referenced_path(name, r.where().member("topology"));
  json doc = spec::load_referenced_json(path, r.where().member("topology"));
  if (!doc.is_object())
    r.where().member("topology").fail("\"" + path + "\" holds no topology object (a preset or topology file)");
  for (const char* block : {"node", "pod"})
    if (r.has(block)) {
      const auto& over = r.raw(block);
      if (!over.is_object())
        r.where().member(block).fail("expected an object of the preset's " + std::string(block) + " keys");
      for (const auto& [k, v] : over.items())
        doc[block][k] = v;
      // A building of its own copies the template's blocks: the row's keys reach it too.
      if (doc.contains("building_overrides"))
        for (auto& b : doc["building_overrides"])
          if (b.contains(block))
            for (const auto& [k, v] : over.items())
              b[block][k] = v;
    }
  auto given = [&](const char* block, const char* key) {
    return doc.contains(block) && doc[block].is_object() && doc[block].contains(key);
  };
  stated.nccl_efficiency  = given("pod", "nccl_efficiency");
  stated.net_latency      = given("pod", "net_latency");
  stated.step_latency     = given("node", "step_latency");
  stated.nvls_warp_rate   = given("node", "nvls_warp_rate");
  stated.p2p_channel_rate = given("node", "p2p_channel_rate");
  return topology::parse_topology_spec(doc, file, r.where().path);
}

double bus_factor(CollectiveOp op, int k)
{
  return op == CollectiveOp::send_recv ? 1.0 : bus_bandwidth_factor(op, k);
}

// Every pod and node of the site takes its fabric's and NVLink's parameters (the shipped ones, or the
// candidate's) where the preset or row does not state them.
void set_parameters(topology::TopologySpec& spec, const NetworkRun::Stated& stated, const Candidate& candidate)
{
  auto pod = [&](topology::PodSpec& p) {
    const auto v = candidate.fabric == p.fabric ? candidate.value : topology::fabric_defaults(p.fabric);
    if (!stated.nccl_efficiency)
      p.nccl_efficiency = v.nccl_efficiency;
    if (!stated.net_latency)
      p.net_latency = v.net_latency;
  };
  auto node = [&](topology::NodeSpec& n) {
    if (!stated.step_latency)
      n.step_latency = candidate.nvlink == n.nvlink ? candidate.step_latency : topology::nvlink_step_latency(n.nvlink);
    if (!stated.nvls_warp_rate) {
      const auto& w    = candidate.nvls_warp_rate;
      n.nvls_warp_rate = !w ? topology::nvlink_nvls_warp_rate(n.nvlink) : w->count(n.nvlink) ? w->at(n.nvlink) : 0;
    }
    if (!stated.p2p_channel_rate) {
      const auto& c      = candidate.p2p_channel_rate;
      n.p2p_channel_rate = !c ? topology::nvlink_p2p_channel_rate(n.nvlink) : c->count(n.nvlink) ? c->at(n.nvlink) : 0;
      const auto& l      = candidate.p2p_ll_channel_rate;
      n.p2p_ll_channel_rate = !l                   ? topology::nvlink_p2p_ll_channel_rate(n.nvlink)
                              : l->count(n.nvlink) ? l->at(n.nvlink)
                                                   : 0;
    }
  };
  pod(spec.pod);
  node(spec.node);
  for (auto& b : spec.building_overrides) {
    pod(b.pod);
    node(b.node);
  }
}

bool simulated(const NetworkRun& r)
{
  return r.role != Role::excluded;
}

Fabric fabric_of(const NetworkRun& r)
{
  return r.topology.pod.fabric;
}

// A row leans on the NICs (and so on its fabric's parameters) when its group spans nodes.
bool spans_nodes(const NetworkRun& r)
{
  topology::Topology t(r.topology);
  for (int g : r.gpus)
    if (t.locate(g).node != t.locate(r.gpus.front()).node)
      return true;
  return false;
}

} // namespace

std::string default_network_dataset_path()
{
  return std::string(SPANSIM_DATA_DIR) + "/validation/network-runs.json";
}

NetworkDataset load_network_dataset(const std::string& path)
{
  NetworkDataset d;
  d.file         = path;
  const auto doc = spec::load_json_file(path);
  ObjectReader root(doc, spec::Location{path});
  root.string("about");
  auto runs = root.objects("runs", true);
  std::map<std::string, int> seen;
  for (auto& r : runs) {
    NetworkRun run;
    run.name = r.name("name");
    if (!seen.emplace(run.name, 0).second)
      r.fail("name", "duplicate run name \"" + run.name + "\"");
    run.role    = r.enumeration<Role>("role");
    run.source  = r.string("source");
    run.cluster = r.string("cluster");
    run.note    = r.optional_string("note").value_or("");
    if (run.role == Role::excluded) {
      run.excluded_because = r.string("excluded_because");
      r.finish();
      d.runs.push_back(std::move(run));
      continue;
    }
    run.topology      = row_topology(r, path, run.stated);
    const auto ranks  = r.integer("ranks", 2, 1 << 20);
    const auto stride = r.optional_integer("stride", 1, 1 << 20).value_or(1);
    topology::Topology site(run.topology);
    if ((ranks - 1) * stride >= site.gpu_count())
      r.fail("ranks", std::to_string(ranks) + " ranks every " + std::to_string(stride) + " GPU(s) do not fit the " +
                          std::to_string(site.gpu_count()) + " GPUs of " + run.topology.name);
    for (std::int64_t i = 0; i < ranks; ++i)
      run.gpus.push_back(static_cast<int>(i * stride));
    run.op = parse_enum<CollectiveOp>(
        r.choice("op", {"allreduce", "allgather", "reducescatter", "alltoall", "sendrecv", "broadcast", "reduce"}),
        "collective");
    const auto& b = r.raw("bytes");
    run.bytes     = b.is_number() ? r.number("bytes", 1, 1e15) : r.size("bytes");
    if (!(run.bytes > 0))
      r.fail("bytes", "expected a size above 0 bytes");
    if (auto n = r.optional_object("nccl"))
      run.nccl = netsim::read_nccl(*n);
    run.published_busbw = r.bandwidth("busbw");
    r.optional_string("published_row");
    r.optional_string("column");
    r.finish();
    d.runs.push_back(std::move(run));
  }
  root.finish();
  return d;
}

NetworkSimulation simulate_network_run(const NetworkRun& run, netsim::Fidelity fidelity, const Candidate& candidate)
{
  auto spec = run.topology;
  set_parameters(spec, run.stated, candidate);
  topology::Topology t(std::move(spec));
  netsim::Collective c;
  c.op    = run.op;
  c.gpus  = run.gpus;
  c.bytes = run.bytes;
  c.nccl  = run.nccl;
  netsim::FlowGraph g(t.spec().multipath.qps);
  NetworkSimulation out;
  out.call        = netsim::add_collective(g, t, c, {});
  const auto done = netsim::run(t, g, fidelity, netsim::EngineOptions{});
  out.time        = done.ops[out.call.end_op].end;
  if (!(out.time > 0))
    throw UsageError("network run " + run.name + " took no time in the simulation");
  out.busbw = run.bytes / out.time * bus_factor(run.op, static_cast<int>(run.gpus.size()));
  return out;
}

NetworkReport validate_network(const NetworkDataset& dataset, netsim::Fidelity fidelity)
{
  NetworkReport report;
  constexpr double kLarge = 128.0 * 1024 * 1024, kSmall = 16.0 * 1024 * 1024;
  for (const auto& run : dataset.runs) {
    NetworkRow row;
    row.run = &run;
    if (simulated(run)) {
      row.simulated  = simulate_network_run(run, fidelity);
      row.error      = row.simulated.busbw / run.published_busbw - 1;
      auto& m        = run.role == Role::fit ? report.fit : report.check;
      const double e = std::abs(row.error);
      m.all += e;
      ++m.rows;
      m.worst = std::max(m.worst, e);
      if (run.bytes >= kLarge) {
        m.large += e;
        ++m.large_rows;
      }
      if (run.bytes <= kSmall) {
        m.small += e;
        ++m.small_rows;
      }
    }
    report.rows.push_back(row);
  }
  for (auto* m : {&report.fit, &report.check}) {
    m->all /= std::max<std::size_t>(1, m->rows);
    m->large /= std::max<std::size_t>(1, m->large_rows);
    m->small /= std::max<std::size_t>(1, m->small_rows);
  }
  return report;
}

std::vector<NetworkFit> fit_network(const NetworkDataset& dataset, netsim::Fidelity fidelity, const Progress& progress)
{
  std::map<topology::NvLink, std::vector<const NetworkRun*>> inside;
  std::map<Fabric, std::vector<const NetworkRun*>> across;
  for (const auto& run : dataset.runs)
    if (run.role == Role::fit) {
      if (spans_nodes(run))
        across[fabric_of(run)].push_back(&run);
      else if (run.op != CollectiveOp::all_to_all && run.op != CollectiveOp::send_recv)
        inside[run.topology.node.nvlink].push_back(&run); // sends inside a node fit their channel rate (below)
    }
  std::vector<NetworkFit> out;
  Candidate fitted;                // what is fitted so far stays in force for what follows
  fitted.nvls_warp_rate.emplace(); // no warp or channel bound until those rates are fitted
  fitted.p2p_channel_rate.emplace();
  fitted.p2p_ll_channel_rate.emplace();
  auto fit_group = [&](NetworkFit f, const std::vector<const NetworkRun*>& rows, const NetworkFit& shipped) {
    for (const auto* r : rows)
      f.rows.push_back(r->name);
    auto with = [&](const NetworkFit& x) {
      Candidate c = fitted;
      if (x.fabric) {
        c.fabric = x.fabric;
        c.value  = x.value;
      } else if (x.nvls) {
        (*c.nvls_warp_rate)[*x.nvlink] = x.nvls_warp_rate;
      } else if (x.p2p) {
        (*c.p2p_channel_rate)[*x.nvlink]    = x.p2p_channel_rate;
        (*c.p2p_ll_channel_rate)[*x.nvlink] = x.p2p_ll_channel_rate;
      } else {
        c.nvlink       = x.nvlink;
        c.step_latency = x.step_latency;
      }
      return c;
    };
    auto loss = [&](const NetworkFit& x, double* mape) {
      double sum = 0, abs_sum = 0;
      for (const auto* r : rows) {
        const double e = simulate_network_run(*r, fidelity, with(x)).busbw / r->published_busbw;
        sum += std::log(e) * std::log(e);
        abs_sum += std::abs(e - 1);
      }
      if (mape)
        *mape = abs_sum / static_cast<double>(rows.size());
      return sum;
    };
    loss(shipped, &f.mape_before);
    const bool small =
        std::any_of(rows.begin(), rows.end(), [](const NetworkRun* r) { return r->bytes <= 16.0 * 1024 * 1024; });
    const std::string what = "fitting " + std::string(f.fabric ? name_of(*f.fabric) : name_of(*f.nvlink)) +
                             (f.nvls  ? " NVLS"
                              : f.p2p ? " send/recv"
                                      : "") +
                             " on " + std::to_string(rows.size()) + " fit rows";
    auto improve = [&](NetworkFit& best, double& best_loss, auto set, int steps) {
      for (int i = 0; i <= steps; ++i) {
        auto x = best;
        set(x, i);
        if (const double l = loss(x, nullptr); l < best_loss - 1e-15) {
          best_loss = l;
          best      = x;
        }
      }
    };
    for (int round = 0; round < (f.fabric || f.p2p ? 3 : 1); ++round) {
      if (progress)
        progress(what, static_cast<std::size_t>(round), 3);
      double best_loss = loss(f, nullptr);
      // Efficiency moves the bandwidth-bound rows, latency the latency-bound ones: in turns, on grids. A latency
      // only rows of 16 MiB or less identify (large messages barely feel it) stays at its neutral 0 without them.
      if (f.fabric)
        improve(
            f, best_loss, [](NetworkFit& x, int i) { x.value.nccl_efficiency = 0.30 + 0.005 * i; }, 140);
      if (f.fabric && small)
        improve(
            f, best_loss, [](NetworkFit& x, int i) { x.value.net_latency = 0.5e-6 * i; }, 100);
      if (!f.fabric && !f.nvls && !f.p2p && small)
        improve(
            f, best_loss, [](NetworkFit& x, int i) { x.step_latency = 0.1e-6 * i; }, 100);
      // A warp rate binds large calls: from no bound (the start) down to 0.5 GB/s a warp.
      if (f.nvls)
        improve(
            f, best_loss, [](NetworkFit& x, int i) { x.nvls_warp_rate = 10e9 - 0.05e9 * i; }, 190);
      // A channel's rate binds sends that take few channels: from no bound down to 2 GB/s a channel.
      if (f.p2p) {
        improve(
            f, best_loss, [](NetworkFit& x, int i) { x.p2p_channel_rate = 100e9 - 0.1e9 * i; }, 980);
        improve(
            f, best_loss, [](NetworkFit& x, int i) { x.p2p_ll_channel_rate = 100e9 - 0.1e9 * i; }, 995);
      }
    }
    if (progress)
      progress(what, 3, 3);
    loss(f, &f.mape_after);
    fitted = with(f);
    out.push_back(std::move(f));
  };
  // Every search starts from the same neutral point (no step latency, InfiniBand's published 0.94), not from the
  // shipped values, so that a refit on the same rows gives the same file; "MAPE before" is at the shipped values.
  for (const auto& [generation, rows] : inside) {
    NetworkFit f, shipped;
    f.nvlink = shipped.nvlink = generation;
    shipped.step_latency      = topology::nvlink_step_latency(generation);
    fit_group(f, rows, shipped);
  }
  for (const auto& [fabric, rows] : across) {
    NetworkFit f, shipped;
    f.fabric = shipped.fabric = fabric;
    shipped.value             = topology::fabric_defaults(fabric);
    fit_group(f, rows, shipped);
  }
  // The rows whose all-reduce NCCL runs as NVLS or NVLSTree (with what is fitted above), by NVLink generation.
  std::map<topology::NvLink, std::vector<const NetworkRun*>> nvls;
  for (const auto& run : dataset.runs)
    if (run.role == Role::fit && run.op == CollectiveOp::all_reduce) {
      const auto a = simulate_network_run(run, fidelity, fitted).call.algorithm;
      if (a == netsim::Algorithm::nvls || a == netsim::Algorithm::nvls_tree)
        nvls[run.topology.node.nvlink].push_back(&run);
    }
  for (const auto& [generation, rows] : nvls) {
    NetworkFit f, shipped;
    f.nvlink = shipped.nvlink = generation;
    f.nvls = shipped.nvls  = true;
    shipped.nvls_warp_rate = topology::nvlink_nvls_warp_rate(generation);
    fit_group(f, rows, shipped);
  }
  // The all-to-all and send/recv rows inside one node, by NVLink generation.
  std::map<topology::NvLink, std::vector<const NetworkRun*>> p2p;
  for (const auto& run : dataset.runs)
    if (run.role == Role::fit && (run.op == CollectiveOp::all_to_all || run.op == CollectiveOp::send_recv) &&
        !spans_nodes(run))
      p2p[run.topology.node.nvlink].push_back(&run);
  for (const auto& [generation, rows] : p2p) {
    NetworkFit f, shipped;
    f.nvlink = shipped.nvlink = generation;
    f.p2p = shipped.p2p         = true;
    shipped.p2p_channel_rate    = topology::nvlink_p2p_channel_rate(generation);
    shipped.p2p_ll_channel_rate = topology::nvlink_p2p_ll_channel_rate(generation);
    fit_group(f, rows, shipped);
  }
  return out;
}

json fabrics_document(const std::vector<NetworkFit>& fits, const std::string& dataset)
{
  json doc = spec::load_json_file(topology::fabrics_file());
  for (const auto& f : fits) {
    if (f.fabric) {
      auto& j              = doc["fabrics"][std::string(name_of(*f.fabric))];
      j["nccl_efficiency"] = std::round(f.value.nccl_efficiency * 1e4) / 1e4;
      j["net_latency"]     = topology::detail::config_time(f.value.net_latency);
      j["fitted_on"]       = f.rows;
    } else if (f.p2p) {
      auto& j = doc["nvlink"][std::string(name_of(*f.nvlink))];
      if (f.p2p_channel_rate > 0)
        j["p2p_channel_rate"] = topology::detail::config_number(f.p2p_channel_rate / 1e9) + "GBps";
      else
        j.erase("p2p_channel_rate");
      if (f.p2p_ll_channel_rate > 0)
        j["p2p_ll_channel_rate"] = topology::detail::config_number(f.p2p_ll_channel_rate / 1e9) + "GBps";
      else
        j.erase("p2p_ll_channel_rate");
      j["p2p_fitted_on"] = f.rows;
    } else if (f.nvls) {
      auto& j = doc["nvlink"][std::string(name_of(*f.nvlink))];
      if (f.nvls_warp_rate > 0)
        j["nvls_warp_rate"] = topology::detail::config_number(f.nvls_warp_rate / 1e9) + "GBps";
      else
        j.erase("nvls_warp_rate");
      j["nvls_fitted_on"] = f.rows;
    } else {
      auto& j           = doc["nvlink"][std::string(name_of(*f.nvlink))];
      j["step_latency"] = topology::detail::config_time(f.step_latency);
      j["fitted_on"]    = f.rows;
    }
  }
  doc["fitted_by"] = "spansim calibrate --network " + recorded_path(dataset);
  return doc;
}

} // namespace spansim::calibration
