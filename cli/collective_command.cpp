// `spansim collective`: an nccl-tests-style sweep of one collective over chosen GPUs of a topology.
#include "cli/commands.hpp"
#include "cli/output.hpp"
#include "common/error.hpp"
#include "common/units.hpp"
#include "netsim/netsim.hpp"
#include "topology/topology.hpp"

#include <algorithm>
#include <charconv>
#include <iostream>
#include <limits>
#include <memory>

namespace spansim::cli {

namespace {

struct CollectiveOptions {
  std::string topology;
  std::string op   = "allreduce";
  std::string algo = "ring";
  int ranks        = 0;
  int stride       = 1;
  int first        = 0;
  std::string gpus;
  std::string sizes = "1MiB:1GiB";
  double factor     = 2;
  bool json         = false;
};

int parse_int(const std::string& text, const std::string& what)
{
  int v     = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < 0)
    throw UsageError("--gpus: \"" + text + "\" is not a GPU index (" + what + ")");
  return v;
}

// "0,8,16" or "0-7,64-71".
std::vector<int> parse_gpu_list(const std::string& text)
{
  std::vector<int> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    auto comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    auto dash        = item.find('-');
    if (dash == std::string::npos) {
      out.push_back(parse_int(item, "write e.g. 0,8,16 or 0-7"));
    } else {
      int a = parse_int(item.substr(0, dash), "range start");
      int b = parse_int(item.substr(dash + 1), "range end");
      if (b < a)
        throw UsageError("--gpus: empty range \"" + item + "\"");
      for (int g = a; g <= b; ++g)
        out.push_back(g);
    }
    if (comma == std::string::npos)
      break;
    pos = comma + 1;
  }
  return out;
}

std::vector<double> parse_sizes(const std::string& text, double factor)
{
  std::vector<double> out;
  auto colon = text.find(':');
  try {
    if (colon != std::string::npos) {
      double lo = units::parse_size(text.substr(0, colon));
      double hi = units::parse_size(text.substr(colon + 1));
      if (!(lo > 0) || hi < lo)
        throw UsageError("--sizes: the range must go from a positive size up to a larger one");
      if (!(factor > 1))
        throw UsageError("--factor must be greater than 1");
      for (double s = lo; s <= hi * (1 + 1e-12); s *= factor)
        out.push_back(s);
    } else {
      std::size_t pos = 0;
      while (pos <= text.size()) {
        auto comma = text.find(',', pos);
        out.push_back(units::parse_size(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos)));
        if (comma == std::string::npos)
          break;
        pos = comma + 1;
      }
    }
  } catch (const UsageError& e) {
    throw UsageError(std::string("--sizes: ") + e.what());
  }
  if (out.size() > 64)
    throw UsageError("--sizes: at most 64 sizes per sweep");
  return out;
}

void run(const CollectiveOptions& o)
{
  topology::Topology topo(topology::load_topology_spec(o.topology));
  if (o.op != "allreduce")
    throw UsageError("--op \"" + o.op + "\" is not supported yet (allowed: allreduce)");
  if (o.algo != "ring")
    throw UsageError("--algo \"" + o.algo + "\" is not supported yet (allowed: ring)");

  std::vector<int> gpus;
  if (!o.gpus.empty()) {
    if (o.ranks > 0)
      throw UsageError("give either --gpus or --ranks, not both");
    gpus = parse_gpu_list(o.gpus);
  } else {
    if (o.ranks < 1)
      throw UsageError("give --ranks R (the first R GPUs, or every --stride-th from --first) or --gpus LIST");
    for (int i = 0; i < o.ranks; ++i)
      gpus.push_back(o.first + i * o.stride);
  }
  for (int g : gpus)
    if (g < 0 || g >= topo.gpu_count())
      throw UsageError("GPU " + std::to_string(g) + " is outside the topology (" + std::to_string(topo.gpu_count()) +
                       " GPUs: 0 to " + std::to_string(topo.gpu_count() - 1) + ")");
  {
    auto sorted = gpus;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      throw UsageError("a GPU appears twice in the group");
  }
  if (gpus.size() < 2)
    throw UsageError("a collective needs at least 2 GPUs");
  auto sizes = parse_sizes(o.sizes, o.factor);

  // Alpha-beta reference: the slowest ring edge's latency, the narrowest link on any ring edge.
  const int k      = static_cast<int>(gpus.size());
  double alpha     = 0;
  double bandwidth = std::numeric_limits<double>::infinity();
  for (int i = 0; i < k; ++i) {
    auto r    = topo.route(gpus[i], gpus[(i + 1) % k]);
    alpha     = std::max(alpha, topo.route_latency(r));
    bandwidth = std::min(bandwidth, topo.route_bandwidth(r));
  }

  netsim::FlowGraph graph;
  std::vector<int> begin_ops;
  std::vector<int> end_ops;
  std::vector<int> deps;
  for (double s : sizes) {
    // Sizes run one after another: each sweep point starts when the previous one has ended.
    int begin = graph.add_delay(0, deps);
    int end   = netsim::add_ring_allreduce(graph, topo, {gpus, s}, {begin});
    begin_ops.push_back(begin);
    end_ops.push_back(end);
    deps = {end};
  }
  auto result = netsim::run_flow(topo, graph);

  const double bus_factor = 2.0 * (k - 1) / k;
  nlohmann::json rows     = nlohmann::json::array();
  Table table{"", {"size", "bytes", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "alpha-beta(us)"}, {}};
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    double t     = result.ops[end_ops[i]].end - result.ops[begin_ops[i]].start;
    double algbw = sizes[i] / t;
    double model = netsim::ring_allreduce_time(k, sizes[i], bandwidth, alpha);
    rows.push_back({{"bytes", sizes[i]},
                    {"time_s", t},
                    {"algbw_Bps", algbw},
                    {"busbw_Bps", algbw * bus_factor},
                    {"alpha_beta_s", model}});
    table.rows.push_back({units::format_size(sizes[i]), fixed(sizes[i], 0), fixed(t * 1e6, 2), fixed(algbw / 1e9, 2),
                          fixed(algbw * bus_factor / 1e9, 2), fixed(model * 1e6, 2)});
  }
  if (o.json) {
    nlohmann::json j;
    j["spansim"]    = provenance();
    j["topology"]   = topo.spec().to_json();
    j["collective"] = {{"op", o.op}, {"algorithm", o.algo}, {"ranks", k}, {"gpus", gpus}};
    j["fidelity"]   = "flow";
    j["engine"]     = result.settings;
    j["alpha_beta"] = {{"alpha_s", alpha}, {"bandwidth_Bps", bandwidth}};
    j["flows_per_collective"] = k;
    j["results"]    = rows;
    std::cout << j.dump(2) << "\n";
    return;
  }
  table.title = "Ring all-reduce over " + std::to_string(k) + " GPUs of " + topo.spec().name +
                " (flow fidelity: SimGrid " + result.settings["config"]["network/model"].get<std::string>() +
                ")\nalpha-beta reference: 2(K-1)/K*S/B + 2(K-1)*alpha with B = " + units::format_bandwidth(bandwidth) +
                ", alpha = " + units::format_time(alpha);
  print_table(std::cout, table);
}

} // namespace

void add_collective_command(CLI::App& app)
{
  auto o   = std::make_shared<CollectiveOptions>();
  auto* c  = app.add_subcommand("collective", "Sweep a collective's time over message sizes (nccl-tests style)");
  c->add_option("--topology,-t", o->topology, "Topology file or preset name")->required();
  c->add_option("--op", o->op, "Collective operation (allreduce)");
  c->add_option("--algo", o->algo, "Algorithm (ring)");
  c->add_option("--ranks,-r", o->ranks, "Number of GPUs: the first R in node order (see --stride, --first)");
  c->add_option("--stride", o->stride, "Take every N-th GPU (8 = one GPU per HGX node, same rail)")
      ->check(CLI::PositiveNumber);
  c->add_option("--first", o->first, "Index of the first GPU")->check(CLI::NonNegativeNumber);
  c->add_option("--gpus", o->gpus, "Explicit GPU list in ring order, e.g. 0,8,16 or 0-7");
  c->add_option("--sizes,-s", o->sizes, "Sizes per rank: MIN:MAX (multiplied by --factor) or a list A,B,C");
  c->add_option("--factor,-f", o->factor, "Size multiplier between sweep points");
  c->add_flag("--json", o->json, "Print one JSON document");
  c->callback([o] { run(*o); });
}

} // namespace spansim::cli
