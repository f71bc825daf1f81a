// `spansim collective`: an nccl-tests-style sweep of one collective over chosen GPUs of a topology.
#include "cli/commands.hpp"
#include "cli/output.hpp"
#include "common/error.hpp"
#include "common/units.hpp"
#include "netsim/collectives.hpp"
#include "netsim/netsim.hpp"
#include "topology/topology.hpp"

#include <algorithm>
#include <charconv>
#include <iostream>
#include <limits>
#include <memory>

namespace spansim::cli {

namespace {

// What packet level cannot carry: the switches' arithmetic of an in-switch reduction.
constexpr const char* kInSwitchAtPacket =
    "the switches' reduction (NVLS, CollNet) is not simulated at packet level: the call runs as the flows a ring over "
    "the same GPUs moving its per-link volume moves";

bool in_switch(netsim::Algorithm a)
{
  return a == netsim::Algorithm::nvls || a == netsim::Algorithm::nvls_tree || a == netsim::Algorithm::collnet_direct ||
         a == netsim::Algorithm::collnet_chain;
}

struct CollectiveOptions {
  std::string topology;
  std::string op       = "allreduce";
  std::string algo     = "auto";
  std::string fidelity = "flow";
  bool compare         = false;
  int root             = 0;
  int flows_per_pair   = 1;
  int ranks            = 0;
  int stride           = 1;
  int first            = 0;
  std::string gpus;
  std::string sizes         = "1MiB:1GiB";
  double factor             = 2;
  bool json                 = false;
  std::string protocol      = "auto";
  std::string nccl_channels = "auto";
  std::string buffsize;
  std::string nccl_version = "2.27";
  std::string nccl_algo    = "all";
  std::string nvls         = "on";
  std::string collnet      = "off";
  bool no_pxn              = false;
  bool no_windows          = false;
  bool root_given          = false; ///< --root on the command line: refused where the collective has no root
  bool factor_given        = false; ///< --factor on the command line: refused with a list of sizes
};

/// @brief NCCL's settings from the command line (as the environment variables NCCL_ALGO, NCCL_PROTO,
/// NCCL_MIN/MAX_NCHANNELS, NCCL_BUFFSIZE, NCCL_NVLS_ENABLE, NCCL_COLLNET_ENABLE and NCCL_PXN_DISABLE would set them).
netsim::NcclSettings nccl_settings(const CollectiveOptions& o)
{
  netsim::NcclSettings n;
  n.protocol = parse_enum<netsim::Protocol>(o.protocol, "protocol");
  if (o.nccl_channels != "auto") {
    int v           = 0;
    const auto* end = o.nccl_channels.data() + o.nccl_channels.size();
    if (std::from_chars(o.nccl_channels.data(), end, v).ptr != end || v < 1 || v > 64)
      throw UsageError("--nccl-channels: expected \"auto\" or a whole number from 1 to 64, got \"" + o.nccl_channels +
                       "\"");
    n.channels       = v;
    n.fixed_channels = true;
  }
  if (!o.buffsize.empty()) {
    try {
      n.buffsize = units::parse_size(o.buffsize);
    } catch (const UsageError& e) {
      throw UsageError(std::string("--buffsize: ") + e.what());
    }
    if (!(n.buffsize >= 4096))
      throw UsageError("--buffsize: expected at least 4KiB, such as 4MiB (NCCL's default) or 64MiB");
  }
  n.windows = !o.no_windows;
  try {
    n.version = netsim::NcclVersion::parse(o.nccl_version);
  } catch (const UsageError& e) {
    throw UsageError(std::string("--nccl-version: ") + e.what());
  }
  if (o.nccl_algo != "all") {
    try {
      n.algorithms = netsim::NcclAlgorithmSet::parse(o.nccl_algo);
    } catch (const UsageError& e) {
      throw UsageError(std::string("--nccl-algo: ") + e.what());
    }
  }
  auto on_off = [](const std::string& flag, const std::string& v) {
    if (v != "on" && v != "off")
      throw UsageError(flag + ": expected \"on\" or \"off\", got \"" + v.substr(0, 40) + "\"");
    return v == "on";
  };
  n.nvls    = on_off("--nvls", o.nvls);
  n.collnet = on_off("--collnet", o.collnet);
  n.pxn     = !o.no_pxn;
  return n;
}

/// @brief Most sizes in one sweep: each is one call in the graph, and a range is refused before it grows past this.
constexpr std::size_t kMaxSweepSizes = 64;

/// @brief The sizes of --sizes, each checked as it is read: a range stops at kMaxSweepSizes points instead of
/// building a sweep of billions (a factor just above 1) and counting it afterwards.
std::vector<double> parse_sizes(const std::string& text, double factor)
{
  auto size = [](const std::string& part) {
    double s = 0;
    try {
      s = units::parse_size(part);
    } catch (const UsageError& e) {
      throw UsageError(std::string("--sizes: ") + e.what());
    }
    // A call of 0 bytes moves nothing: its bandwidth would be 0/0; a fraction of a byte prints as a 0-byte row.
    if (!(s >= 1))
      throw UsageError("--sizes: \"" + part + "\" is " + (s > 0 ? "less than a byte" : "0 bytes") +
                       "; sizes are at least 1 byte (such as 1B or 1MiB)");
    return s;
  };
  auto too_many = [&] {
    return UsageError("--sizes \"" + text + "\": more than " + std::to_string(kMaxSweepSizes) +
                      " sizes per sweep (give a larger --factor or a narrower range)");
  };
  std::vector<double> out;
  if (const auto colon = text.find(':'); colon != std::string::npos) {
    const double lo = size(text.substr(0, colon));
    const double hi = size(text.substr(colon + 1));
    if (hi < lo)
      throw UsageError("--sizes \"" + text + "\": the range must go from a smaller size up to a larger one");
    if (!(factor > 1))
      throw UsageError("--factor must be greater than 1");
    for (double s = lo; s <= hi * (1 + 1e-12); s *= factor) {
      if (out.size() == kMaxSweepSizes)
        throw too_many();
      out.push_back(s);
    }
    return out;
  }
  for (std::size_t pos = 0;;) {
    const auto comma = text.find(',', pos);
    if (out.size() == kMaxSweepSizes)
      throw too_many();
    out.push_back(size(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos)));
    if (comma == std::string::npos)
      return out;
    pos = comma + 1;
  }
}

std::vector<int> select_gpus(const CollectiveOptions& o, std::int64_t gpu_count)
{
  std::vector<int> gpus;
  if (!o.gpus.empty()) {
    if (o.ranks > 0)
      throw UsageError("give either --gpus or --ranks, not both");
    return parse_index_list("--gpus", "GPU", "the topology", o.gpus, gpu_count);
  }
  if (o.ranks < 1)
    throw UsageError("give --ranks R (the first R GPUs, or every --stride-th from --first) or --gpus LIST");
  const std::int64_t last = o.first + std::int64_t{o.ranks - 1} * o.stride;
  if (last >= gpu_count)
    throw UsageError("--ranks " + std::to_string(o.ranks) + " from GPU " + std::to_string(o.first) + " every " +
                     std::to_string(o.stride) + " reaches GPU " + std::to_string(last) + ", outside the topology (" +
                     std::to_string(gpu_count) + " GPUs)");
  for (int i = 0; i < o.ranks; ++i)
    gpus.push_back(o.first + i * o.stride);
  return gpus;
}

struct SweepPoint {
  double bytes;
  std::vector<double> time; // per fidelity
};

void run(const CollectiveOptions& o)
{
  topology::Topology topo(topology::load_topology_spec(o.topology));
  netsim::Collective c;
  c.op             = parse_enum<CollectiveOp>(o.op, "collective");
  c.algorithm      = parse_enum<netsim::Algorithm>(o.algo, "algorithm");
  c.gpus           = select_gpus(o, topo.counts().gpus);
  c.root           = o.root;
  c.flows_per_pair = o.flows_per_pair;
  c.nccl           = nccl_settings(o);
  // Options that cannot apply are refused rather than ignored.
  if (o.root_given && c.op != CollectiveOp::broadcast && c.op != CollectiveOp::reduce)
    throw UsageError("--root: " + o.op + " has no root (it applies to broadcast and reduce)");
  if (o.factor_given && o.sizes.find(':') == std::string::npos)
    throw UsageError("--factor spaces the sizes of a MIN:MAX range; --sizes \"" + o.sizes + "\" lists them");
  auto sizes = parse_sizes(o.sizes, o.factor);

  std::vector<netsim::Fidelity> fidelities;
  if (o.compare)
    fidelities = {netsim::Fidelity::analytical, netsim::Fidelity::flow, netsim::Fidelity::packet};
  else
    fidelities = {parse_enum<netsim::Fidelity>(o.fidelity, "fidelity")};

  // Sizes run one after another in one graph: each sweep point starts when the previous one has ended.
  netsim::FlowGraph graph(topo.spec().multipath.qps);
  std::vector<int> begin_ops, end_ops;
  std::vector<int> deps;
  std::vector<std::string> algorithms; // the policy may pick a different algorithm per size
  std::vector<netsim::Lowered> calls;
  std::size_t flows = 0;
  for (double s : sizes) {
    c.bytes      = s;
    int begin    = graph.add_delay(0, deps);
    auto lowered = netsim::add_collective(graph, topo, c, {begin});
    begin_ops.push_back(begin);
    end_ops.push_back(lowered.end_op);
    deps  = {lowered.end_op};
    flows = std::max(flows, lowered.flows);
    algorithms.emplace_back(name_of(lowered.algorithm));
    calls.push_back(lowered);
  }

  std::vector<SweepPoint> points;
  for (double s : sizes)
    points.push_back({s, {}});
  nlohmann::json engines = nlohmann::json::object();
  for (auto f : fidelities) {
    auto result                      = netsim::run(topo, graph, f, netsim::EngineOptions{});
    engines[std::string(name_of(f))] = result.settings;
    for (std::size_t i = 0; i < sizes.size(); ++i)
      points[i].time.push_back(result.ops[end_ops[i]].end - result.ops[begin_ops[i]].start);
  }

  const int k             = static_cast<int>(c.gpus.size());
  const double bus_factor = bus_bandwidth_factor(c.op, k);
  if (o.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (std::size_t i = 0; i < points.size(); ++i) {
      nlohmann::json row = {{"bytes", points[i].bytes},
                            {"algorithm", algorithms[i]},
                            {"protocol", name_of(calls[i].nccl.protocol)},
                            {"nccl_channels", calls[i].nccl.channels},
                            {"nodes", calls[i].nodes},
                            {"nics_per_node", calls[i].nics},
                            {"nccl_latency_s", calls[i].nccl.latency},
                            {"window_bytes_per_channel", calls[i].nccl.window},
                            {"bound", name_of(calls[i].bound)},
                            {"estimate_s", calls[i].estimate}};
      if (calls[i].estimate <= 0) { // send/recv lowerings: their windows are the p2p slots, no pipelined call
        row["protocol"]                 = "p2p";
        row["nccl_channels"]            = nullptr;
        row["nccl_latency_s"]           = nullptr;
        row["window_bytes_per_channel"] = nullptr;
        row["bound"]                    = nullptr;
      }
      for (std::size_t f = 0; f < fidelities.size(); ++f) {
        double t                                 = points[i].time[f];
        double algbw                             = points[i].bytes / t;
        row[std::string(name_of(fidelities[f]))] = {
            {"time_s", t}, {"algbw_Bps", algbw}, {"busbw_Bps", algbw * bus_factor}};
        if (fidelities[f] == netsim::Fidelity::packet && in_switch(calls[i].algorithm))
          row["packet"]["approximated"] = kInSwitchAtPacket;
      }
      rows.push_back(row);
    }
    nlohmann::json j;
    j["spansim"]    = provenance();
    j["topology"]   = topo.spec().to_json();
    j["collective"] = {{"op", name_of(c.op)},
                       {"algorithm", name_of(c.algorithm)},
                       {"ranks", k},
                       {"gpus", c.gpus},
                       {"root", c.root},
                       {"flows_per_pair", c.flows_per_pair},
                       {"max_flows_per_call", flows},
                       {"nccl", c.nccl.to_json()}};
    j["engines"]    = engines;
    j["results"]    = rows;
    std::cout << j.dump(2) << "\n";
    return;
  }
  Table table;
  table.headers = {"size", "bytes", "algorithm", "protocol", "channels", "NICs", "bound"};
  for (auto f : fidelities) {
    const std::string name(name_of(f));
    if (fidelities.size() == 1) {
      table.headers.insert(table.headers.end(), {"time(us)", "algbw(GB/s)", "busbw(GB/s)"});
    } else {
      table.headers.push_back(name + "(us)");
    }
  }
  if (fidelities.size() > 1)
    table.headers.push_back("busbw(GB/s) flow");
  for (std::size_t i = 0; i < points.size(); ++i) {
    std::vector<std::string> row{units::format_size(points[i].bytes), fixed(points[i].bytes, 0), algorithms[i],
                                 // Send/recv lowerings (direct, halving-doubling) have no pipelined call to name.
                                 calls[i].estimate > 0 ? std::string(name_of(calls[i].nccl.protocol)) : "p2p",
                                 calls[i].estimate > 0 ? std::to_string(calls[i].nccl.channels) : "-",
                                 calls[i].nodes > 1 ? std::to_string(calls[i].nics) : "-",
                                 calls[i].estimate > 0 ? std::string(name_of(calls[i].bound)) : "-"};
    for (std::size_t f = 0; f < fidelities.size(); ++f) {
      double t = points[i].time[f];
      row.push_back(fixed(t * 1e6, 2));
      if (fidelities.size() == 1) {
        row.push_back(fixed(points[i].bytes / t / 1e9, 2));
        row.push_back(fixed(points[i].bytes / t * bus_factor / 1e9, 2));
      }
    }
    if (fidelities.size() > 1)
      row.push_back(fixed(points[i].bytes / points[i].time[1] * bus_factor / 1e9, 2));
    table.rows.push_back(row);
  }
  std::string fids;
  for (auto f : fidelities)
    fids += (fids.empty() ? "" : ", ") + std::string(name_of(f));
  table.title = std::string(name_of(c.op)) + " over " + std::to_string(k) + " GPUs of " + topo.spec().name + " (" +
                fids + " fidelity; NCCL " + c.nccl.version.name() +
                (c.algorithm == netsim::Algorithm::automatic ? ", its tuner's pick" : "") + "; up to " +
                std::to_string(flows) + " flows per call, " + std::to_string(c.flows_per_pair) +
                " flow(s) per GPU pair)";
  print_table(std::cout, table);
  const bool packet = std::find(fidelities.begin(), fidelities.end(), netsim::Fidelity::packet) != fidelities.end();
  if (packet && std::any_of(calls.begin(), calls.end(), [](const auto& l) { return in_switch(l.algorithm); }))
    std::cout << "packet: " << kInSwitchAtPacket << "\n";
}

} // namespace

void add_collective_command(CLI::App& app)
{
  auto o  = std::make_shared<CollectiveOptions>();
  auto* c = app.add_subcommand("collective", "Sweep a collective's time over message sizes (nccl-tests style)");
  c->add_option("--topology,-t", o->topology, "Topology file or preset name")->required();
  c->add_option("--op", o->op, "Collective: " + allowed_names<CollectiveOp>());
  c->add_option("--algo", o->algo,
                "Algorithm (auto: as NCCL's tuner picks, laid out as NCCL lays it out): " +
                    allowed_names<netsim::Algorithm>());
  c->add_option("--fidelity", o->fidelity,
                "Engine (flow: SimGrid, packet: ns-3): " + allowed_names<netsim::Fidelity>());
  c->add_flag("--compare", o->compare, "Run the three fidelities side by side");
  const int int_max = std::numeric_limits<int>::max();
  auto* root = c->add_option("--root", o->root, "Root rank for broadcast and reduce")->check(integer_in(0, int_max));
  c->add_option("--flows-per-pair", o->flows_per_pair, "Flows per GPU pair (spread over ECMP's paths)")
      ->check(integer_in(1, 64));
  c->add_option("--nccl-version", o->nccl_version, "NCCL release whose tuner and channel rules apply (2.18-2.30)");
  c->add_option("--nccl-algo", o->nccl_algo, "NCCL_ALGO: the algorithms auto may pick (e.g. Ring,Tree or ^NVLS)");
  c->add_option("--nvls", o->nvls, "NCCL_NVLS_ENABLE: on (where the NVSwitch reduces) or off");
  c->add_option("--collnet", o->collnet, "NCCL_COLLNET_ENABLE: on (where the fabric has SHARP) or off");
  c->add_flag("--no-pxn", o->no_pxn, "NCCL_PXN_DISABLE=1: a send leaves by its own NIC, not the destination's rail");
  c->add_option("--protocol", o->protocol,
                "NCCL protocol (auto: as NCCL's tuner picks): " + allowed_names<netsim::Protocol>());
  c->add_option("--nccl-channels", o->nccl_channels,
                "NCCL channels per call (auto: NCCL's graph search, fewer for small messages as NCCL drops them)");
  c->add_option("--buffsize", o->buffsize, "NCCL_BUFFSIZE: Simple's buffer per connection (default 4MiB)");
  c->add_flag("--no-windows", o->no_windows, "Leave NCCL's slot windows out (every transfer at its links' share)");
  c->add_option("--ranks,-r", o->ranks, "Number of GPUs: the first R in node order (see --stride, --first)")
      ->check(integer_in(1, int_max));
  auto* stride = c->add_option("--stride", o->stride, "Take every N-th GPU (8 = one GPU per HGX node, same rail)")
                     ->check(integer_in(1, int_max));
  auto* first = c->add_option("--first", o->first, "Index of the first GPU")->check(integer_in(0, int_max));
  // An explicit list has no stride or first GPU: taken with one, the other would be ignored.
  c->add_option("--gpus", o->gpus, "Explicit GPU list in ring order, e.g. 0,8,16 or 0-7 (not with --stride, --first)")
      ->excludes(stride)
      ->excludes(first);
  c->add_option("--sizes,-s", o->sizes,
                "Sizes per rank: MIN:MAX (multiplied by --factor) or a list A,B,C; each above 0 bytes, at most " +
                    std::to_string(kMaxSweepSizes) + " sizes");
  auto* factor = c->add_option("--factor,-f", o->factor, "Size multiplier between sweep points of a MIN:MAX range")
                     ->check(finite_number(1, true));
  c->add_flag("--json", o->json, "Print one JSON document");
  c->callback([o, root, factor] {
    o->root_given   = root->count() > 0;
    o->factor_given = factor->count() > 0;
    run(*o);
  });
}

} // namespace spansim::cli
