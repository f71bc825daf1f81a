// Packet fidelity: a flow graph run on ns-3 (3.37). Only the sub-graph the graph's routes touch is built: one
// ns-3 node per vertex, one point-to-point link per topology link, so every fidelity sends a flow over the same
// links. Two transports:
// - RoCE (the default; netsim/ns3_roce.cpp): a transfer is a queue pair routed by flow along
//   Topology::route(src, dst, qp), its congestion notifications along route(dst, src, qp);
// - TCP (DCTCP or NewReno): a BulkSend to a PacketSink over static host routes along route(src, dst), ACKs along
//   route(dst, src); one path per GPU pair, so no queue pairs.
// A transfer ends when its receiver has its last byte, and its dependents are started from that callback.
#include "common/error.hpp"
#include "common/process.hpp"
#include "common/units.hpp"
#include "netsim/netsim.hpp"
#include "netsim/ns3_roce.hpp"

#include <ns3/boolean.h>
#include <ns3/bulk-send-helper.h>
#include <ns3/config.h>
#include <ns3/data-rate.h>
#include <ns3/double.h>
#include <ns3/inet-socket-address.h>
#include <ns3/internet-stack-helper.h>
#include <ns3/ipv4-address-helper.h>
#include <ns3/ipv4-static-routing-helper.h>
#include <ns3/ipv4-static-routing.h>
#include <ns3/ipv4.h>
#include <ns3/log.h>
#include <ns3/nstime.h>
#include <ns3/packet-sink-helper.h>
#include <ns3/packet.h>
#include <ns3/point-to-point-helper.h>
#include <ns3/queue-disc-container.h>
#include <ns3/queue-disc.h>
#include <ns3/queue-size.h>
#include <ns3/rng-seed-manager.h>
#include <ns3/simulator.h>
#include <ns3/socket.h>
#include <ns3/string.h>
#include <ns3/tcp-socket-factory.h>
#include <ns3/traffic-control-helper.h>
#include <ns3/type-id.h>
#include <ns3/uinteger.h>
#include <ns3/version-defines.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

namespace spansim::netsim {

namespace {

constexpr double kTcpIpHeaders  = 20 + 20 + 12; // IPv4, TCP and the timestamp option padded to 4 bytes
constexpr int kMaxSocketsPerGpu = 16000;        // ns-3 hands out 16,384 ephemeral ports per node
constexpr int kFirstSinkPort    = 1024;
// Linux's default: the first ECN mark halves the window. It costs long-haul flows dearly (see the README).
constexpr double kDctcpAlphaOnInit = 1.0;

std::string version()
{
  return std::to_string(NS3_VERSION_MAJOR) + "." + std::to_string(NS3_VERSION_MINOR);
}

/// One ordered GPU pair (and queue pair) the graph sends over, with both directions of its route.
struct PairRoute {
  int src = -1;
  int dst = -1;
  int qp  = 0;
  std::vector<topology::Hop> data; ///< route(src, dst, qp)
  std::vector<topology::Hop> acks; ///< route(dst, src, qp): ACKs or congestion notifications
  /// Sprayed data: every vertex's hops that stay on a least-cost route (empty: data follows `data`).
  std::vector<std::pair<int, std::vector<topology::Hop>>> spray;
};

/// One used link with the queue it gets at each of its two ports.
struct LinkPlan {
  int link          = -1;
  int ecn_threshold = 0; ///< packets (DCTCP: the step; DCQCN: where marking starts); 0: the port never marks
  int ecn_max       = 0; ///< packets (DCQCN: where marking reaches pmax)
  int queue_limit   = 0; ///< packets
};

/// The part of the topology a graph touches, computed in the parent so that limits are checked before forking.
struct Plan {
  std::vector<int> transfers; ///< ops that move bytes between two GPUs
  std::vector<int> pair_of;   ///< per op: index into pairs, or -1
  std::vector<PairRoute> pairs;
  std::vector<LinkPlan> links;
  std::vector<int> vertices;
  int gpus             = 0;
  double total_bytes   = 0;
  double socket_buffer = 0;
};

std::uint64_t op_bytes(const Op& op)
{
  return static_cast<std::uint64_t>(op.bytes * op.stretch + 0.5);
}

bool moves_bytes(const Op& op)
{
  return op.kind == Op::Kind::transfer && op_bytes(op) > 0 && op.src != op.dst;
}

bool is_roce(const PacketSettings& s)
{
  return s.transport == "roce";
}

/// Data bytes per RoCE packet.
int roce_payload(const PacketSettings& s)
{
  return s.mtu - roce::kTransportOverhead - (roce::kLinkOverhead - 2);
}

void check_settings(const PacketSettings& s)
{
  if (s.transport != "roce" && s.transport != "dctcp" && s.transport != "newreno")
    throw UsageError("packet settings: transport \"" + s.transport + "\" is not one of roce, dctcp, newreno");
  if (s.congestion_control != "dcqcn" && s.congestion_control != "none")
    throw UsageError("packet settings: congestion control \"" + s.congestion_control + "\" is not one of dcqcn, none");
  if (s.mtu < 576 || s.mtu > 65535)
    throw UsageError("packet settings: MTU " + std::to_string(s.mtu) + " is outside 576..65535 bytes");
  const auto& d = s.dcqcn;
  if (!(d.g > 0 && d.g < 1) || !(d.pmax > 0 && d.pmax <= 1) || d.alpha_timer <= 0 || d.increase_timer <= 0 ||
      d.byte_counter <= 0 || d.fast_recovery < 1 || d.additive_rate_at_40g <= 0 || d.hyper_rate_at_40g <= 0 ||
      d.min_rate <= 0 || d.cnp_interval < 0 || d.kmin_at_40g <= 0 || d.kmax_at_40g <= d.kmin_at_40g)
    throw UsageError("packet settings: DCQCN's gain must lie in (0, 1) and pmax in (0, 1], its timers, counters "
                     "and rates be positive (the CNP interval may be 0), and kmax exceed kmin");
  if (s.segment_size < 1 || s.segment_size + kTcpIpHeaders > s.mtu)
    throw UsageError("packet settings: segment size " + std::to_string(s.segment_size) +
                     " does not fit the MTU with 52 bytes of IP and TCP headers");
  if (s.send_size < 1 || s.socket_buffer < 0 || s.socket_buffer > 4e9 || s.initial_cwnd < 1 || s.min_rto <= 0 ||
      s.delayed_ack <= 0 || s.queue_packets < 1 || s.ecn_threshold < 1 || s.device_queue_packets < 1)
    throw UsageError("packet settings: sizes, windows, timers and queue limits must be positive "
                     "(socket buffer at most 4e9 bytes)");
}

Plan make_plan(const topology::Topology& topology, const FlowGraph& graph, const PacketSettings& settings)
{
  const auto& ops = graph.ops();
  const auto& lks = topology.links();
  const int ngpus = topology.gpu_count();
  Plan plan;
  plan.pair_of.assign(ops.size(), -1);
  const bool spray = topology.spec().multipath.spray;
  if (spray && !is_roce(settings))
    throw UsageError("per-packet spraying (multipath routing \"spray\") needs the roce transport: TCP over "
                     "sprayed paths would take reordering for loss");
  // The limits first: a graph too large is refused before any of its routes is looked up.
  const std::string advice = "; run it with --fidelity flow, or split it";
  if (const auto why = packet_refusal(topology, graph, settings); !why.empty())
    throw UsageError(why + advice);
  std::map<std::tuple<int, int, int>, int> pair_index;
  std::vector<int> connections(ngpus, 0);
  std::vector<bool> gpu_used(ngpus, false);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (op.kind == Op::Kind::transfer && (op.src < 0 || op.dst < 0 || op.src >= ngpus || op.dst >= ngpus))
      throw UsageError("flow graph: transfer between GPUs " + std::to_string(op.src) + " and " +
                       std::to_string(op.dst) + " outside the topology's " + std::to_string(ngpus) + " GPUs");
    if (!moves_bytes(op))
      continue;
    if (op.qp != 0 && !is_roce(settings)) // TCP's static routes are per destination address: one path per pair
      throw UsageError("queue pairs per GPU pair (multipath qps) need the roce transport at packet fidelity; "
                       "transport " +
                       settings.transport + " has one path per GPU pair");
    plan.transfers.push_back(static_cast<int>(i));
    plan.total_bytes += static_cast<double>(op_bytes(op));
    ++connections[op.src];
    ++connections[op.dst];
    gpu_used[op.src] = gpu_used[op.dst] = true;
    auto [it, inserted] = pair_index.try_emplace({op.src, op.dst, op.qp}, static_cast<int>(plan.pairs.size()));
    if (inserted) {
      plan.pairs.push_back(
          {op.src, op.dst, op.qp, topology.route(op.src, op.dst, op.qp), topology.route(op.dst, op.src, op.qp), {}});
      if (spray)
        plan.pairs.back().spray = topology.spray_hops(op.src, op.dst, op.qp);
    }
    plan.pair_of[i] = it->second;
  }
  plan.gpus = static_cast<int>(std::count(gpu_used.begin(), gpu_used.end(), true));

  for (int g = 0; g < ngpus && !is_roce(settings); ++g) // RoCE: one socket per node
    if (connections[g] > kMaxSocketsPerGpu)
      throw UsageError("packet level: GPU " + std::to_string(g) + " takes part in " + std::to_string(connections[g]) +
                       " transfers, more than the " + std::to_string(kMaxSocketsPerGpu) +
                       " TCP connections a node can open" + advice);

  // A port marks at K > C x RTT / 7 (the DCTCP paper's rule for full throughput), where RTT is the longest
  // round trip of the routes that cross it; long-haul ports thus get deep thresholds, datacenter ports small ones.
  std::vector<double> link_rtt(lks.size(), -1);
  double max_bdp = 0;
  for (const auto& p : plan.pairs) {
    double rtt = topology.route_latency(p.data) + topology.route_latency(p.acks);
    max_bdp    = std::max(max_bdp, topology.route_bandwidth(p.data) * rtt);
    for (const auto* route : {&p.data, &p.acks})
      for (const auto& h : *route)
        link_rtt[h.link] = std::max(link_rtt[h.link], rtt);
    for (const auto& [vertex, hops] : p.spray)
      for (const auto& h : hops)
        link_rtt[h.link] = std::max(link_rtt[h.link], rtt);
  }
  // RoCE runs lossless: a port can hold every packet the run sends (PFC would pause upstream instead).
  double packets = 0;
  for (int op : plan.transfers)
    packets += std::ceil(static_cast<double>(op_bytes(ops[op])) / roce_payload(settings)) + 1;
  const int lossless_limit = static_cast<int>(std::min(2e9, 2 * packets + 1000));
  std::vector<bool> vertex_used(topology.vertex_kinds().size(), false);
  for (std::size_t l = 0; l < lks.size(); ++l) {
    if (link_rtt[l] < 0)
      continue;
    LinkPlan lp;
    lp.link = static_cast<int>(l);
    if (is_roce(settings)) {
      lp.queue_limit = lossless_limit;
      // DCQCN's thresholds scale with the port's rate; NVLink never marks (credit-based, lossless).
      if (settings.congestion_control == "dcqcn" && lks[l].tier != topology::Tier::nvlink) {
        const double scale = lks[l].bandwidth / (40e9 / 8);
        lp.ecn_threshold =
            static_cast<int>(std::max(1.0, std::round(settings.dcqcn.kmin_at_40g * scale / settings.mtu)));
        lp.ecn_max = std::max(lp.ecn_threshold + 1,
                              static_cast<int>(std::round(settings.dcqcn.kmax_at_40g * scale / settings.mtu)));
      }
    } else {
      double k         = std::ceil(lks[l].bandwidth * link_rtt[l] / 7 / settings.mtu);
      lp.ecn_threshold = static_cast<int>(std::max<double>(settings.ecn_threshold, std::min(k, 1e6)));
      lp.ecn_max       = lp.ecn_threshold + 1;
      lp.queue_limit   = std::max(settings.queue_packets, 4 * lp.ecn_threshold);
    }
    plan.links.push_back(lp);
    vertex_used[lks[l].a] = vertex_used[lks[l].b] = true;
  }
  for (std::size_t v = 0; v < vertex_used.size(); ++v)
    if (vertex_used[v])
      plan.vertices.push_back(static_cast<int>(v));
  plan.socket_buffer =
      settings.socket_buffer > 0 ? settings.socket_buffer : std::min(4e9, std::max(4194304.0, std::ceil(2 * max_bdp)));
  if (topology.spec().window > 0) // TCP's window is its socket buffer
    plan.socket_buffer = std::min(plan.socket_buffer, topology.spec().window);
  return plan;
}

void set_default(const std::string& name, const ns3::AttributeValue& value)
{
  if (!ns3::Config::SetDefaultFailSafe(name, value))
    throw SimulationError("ns-3 " + version() + " has no attribute " + name);
}

/// One packet-level run inside the child process: owns the ns-3 objects of the sub-graph and the op state.
class PacketRun {
public:
  PacketRun(const topology::Topology& topology, const FlowGraph& graph, const PacketSettings& settings,
            const Plan& plan)
      : topology_(topology), graph_(graph), settings_(settings), plan_(plan)
  {
  }

  /// Op timings, then queue statistics as JSON.
  std::pair<std::vector<OpTiming>, nlohmann::json> run()
  {
    configure();
    build_network();
    if (is_roce(settings_)) {
      install_queue_pairs();
    } else {
      install_routes();
      install_sinks();
    }
    const auto& ops = graph_.ops();
    timing_.assign(ops.size(), {});
    remaining_.assign(ops.size(), 0);
    dependents_.assign(ops.size(), {});
    for (std::size_t i = 0; i < ops.size(); ++i) {
      remaining_[i] = static_cast<int>(ops[i].deps.size());
      for (int d : ops[i].deps)
        dependents_[d].push_back(static_cast<int>(i));
    }
    // Collect the ready ops first: starting one may end it at once and start its dependents, which must
    // not be started a second time by this loop.
    std::vector<int> initial;
    for (std::size_t i = 0; i < remaining_.size(); ++i)
      if (remaining_[i] == 0)
        initial.push_back(static_cast<int>(i));
    ns3::Simulator::ScheduleNow([this, initial] {
      for (int i : initial)
        start(i);
    });
    ns3::Simulator::Run();
    auto statistics = queue_statistics();
    if (roce_)
      statistics["roce"] = roce_->statistics();
    ns3::Simulator::Destroy();
    if (done_ != ops.size())
      throw SimulationError("packet simulation ended with " + std::to_string(ops.size() - done_) + " of " +
                            std::to_string(ops.size()) + " ops not run (" + statistics.dump() + ")");
    return {timing_, statistics};
  }

private:
  // Process-wide defaults: every socket, queue disc and device created below picks them up.
  void configure()
  {
    // Picoseconds: a 9 kB frame takes 20 ns on NVLink and under 1 ns on an aggregation trunk.
    ns3::Time::SetResolution(ns3::Time::PS);
    ns3::LogComponentDisableAll(ns3::LOG_LEVEL_ALL);
    ns3::RngSeedManager::SetSeed(settings_.seed);
    ns3::RngSeedManager::SetRun(1);
    const bool dctcp = settings_.transport == "dctcp";
    set_default("ns3::TcpL4Protocol::SocketType", ns3::StringValue(dctcp ? "ns3::TcpDctcp" : "ns3::TcpNewReno"));
    set_default("ns3::TcpSocketBase::UseEcn", ns3::StringValue(dctcp ? "On" : "Off"));
    set_default("ns3::TcpSocket::SegmentSize", ns3::UintegerValue(static_cast<std::uint32_t>(settings_.segment_size)));
    const auto buffer = static_cast<std::uint32_t>(plan_.socket_buffer);
    set_default("ns3::TcpSocket::SndBufSize", ns3::UintegerValue(buffer));
    set_default("ns3::TcpSocket::RcvBufSize", ns3::UintegerValue(buffer));
    set_default("ns3::TcpSocket::InitialCwnd", ns3::UintegerValue(static_cast<std::uint32_t>(settings_.initial_cwnd)));
    set_default("ns3::TcpSocket::DelAckCount", ns3::UintegerValue(2));
    set_default("ns3::TcpSocket::DelAckTimeout", ns3::TimeValue(ns3::Seconds(settings_.delayed_ack)));
    set_default("ns3::TcpSocketBase::MinRto", ns3::TimeValue(ns3::Seconds(settings_.min_rto)));
    set_default("ns3::TcpDctcp::DctcpAlphaOnInit", ns3::DoubleValue(kDctcpAlphaOnInit));
    set_default("ns3::RedQueueDisc::UseEcn", ns3::BooleanValue(true));
    set_default("ns3::RedQueueDisc::UseHardDrop", ns3::BooleanValue(false));
    // Instantaneous queue and a step at K: DCTCP's marking, not RED's averaged ramp.
    set_default("ns3::RedQueueDisc::QW", ns3::DoubleValue(1));
    set_default("ns3::RedQueueDisc::Gentle", ns3::BooleanValue(false));
    set_default("ns3::RedQueueDisc::LInterm", ns3::DoubleValue(1));
    set_default("ns3::RedQueueDisc::MeanPktSize", ns3::UintegerValue(static_cast<std::uint32_t>(settings_.mtu)));
    set_default("ns3::UdpSocket::RcvBufSize", ns3::UintegerValue(1u << 30));
  }

  void build_network()
  {
    const auto& lks = topology_.links();
    node_of_.assign(topology_.vertex_kinds().size(), -1);
    nodes_.Create(static_cast<std::uint32_t>(plan_.vertices.size()));
    for (std::size_t i = 0; i < plan_.vertices.size(); ++i)
      node_of_[plan_.vertices[i]] = static_cast<int>(i);

    ns3::InternetStackHelper stack;
    stack.SetIpv6StackInstall(false);
    if (is_roce(settings_))
      stack.SetRoutingHelper(roce::FlowRoutingHelper());
    else
      stack.SetRoutingHelper(ns3::Ipv4StaticRoutingHelper());
    stack.Install(nodes_);
    if (is_roce(settings_))
      for (std::uint32_t i = 0; i < nodes_.GetN(); ++i)
        ns3::DynamicCast<roce::FlowRouting>(nodes_.Get(i)->GetObject<ns3::Ipv4>()->GetRoutingProtocol())
            ->set_seed(topology_.spec().multipath.seed ^ settings_.seed);

    // Queue discs go in before addresses: assigning an address installs the default one otherwise.
    std::vector<ns3::NetDeviceContainer> devices;
    devices.reserve(plan_.links.size());
    for (const auto& lp : plan_.links) {
      const auto& link = lks[lp.link];
      const ns3::DataRate rate(static_cast<std::uint64_t>(std::llround(link.bandwidth * 8)));
      const ns3::Time delay = ns3::Seconds(link.latency);
      ns3::PointToPointHelper p2p;
      p2p.SetDeviceAttribute("DataRate", ns3::DataRateValue(rate));
      p2p.SetDeviceAttribute("Mtu", ns3::UintegerValue(static_cast<std::uint16_t>(settings_.mtu)));
      p2p.SetChannelAttribute("Delay", ns3::TimeValue(delay));
      p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize",
                   ns3::QueueSizeValue(ns3::QueueSize(ns3::QueueSizeUnit::PACKETS,
                                                      static_cast<std::uint32_t>(settings_.device_queue_packets))));
      devices.push_back(p2p.Install(nodes_.Get(node_of_[link.a]), nodes_.Get(node_of_[link.b])));

      const ns3::QueueSize limit(ns3::QueueSizeUnit::PACKETS, static_cast<std::uint32_t>(lp.queue_limit));
      ns3::TrafficControlHelper tc;
      if (lp.ecn_threshold > 0 && settings_.transport != "newreno")
        tc.SetRootQueueDisc("ns3::RedQueueDisc", "MaxSize", ns3::QueueSizeValue(limit), "MinTh",
                            ns3::DoubleValue(lp.ecn_threshold), "MaxTh", ns3::DoubleValue(lp.ecn_max), "LInterm",
                            ns3::DoubleValue(is_roce(settings_) ? 1 / settings_.dcqcn.pmax : 1), "LinkBandwidth",
                            ns3::DataRateValue(rate), "LinkDelay", ns3::TimeValue(delay));
      else
        tc.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", ns3::QueueSizeValue(limit));
      queue_discs_.Add(tc.Install(devices.back()));
    }

    ns3::Ipv4AddressHelper addresses("10.0.0.0", "255.255.255.252");
    ends_.resize(lks.size());
    for (std::size_t i = 0; i < plan_.links.size(); ++i) {
      auto interfaces = addresses.Assign(devices[i]);
      addresses.NewNetwork();
      auto& e = ends_[plan_.links[i].link];
      for (int side = 0; side < 2; ++side) {
        e.address[side]   = interfaces.GetAddress(side);
        e.interface[side] = interfaces.Get(side).second;
      }
    }
    // GPUs are endpoints only: a packet that reaches a GPU for another address is dropped, never forwarded.
    for (int v : plan_.vertices)
      if (topology_.vertex_kinds()[v] == topology::VertexKind::gpu)
        nodes_.Get(node_of_[v])->GetObject<ns3::Ipv4>()->SetAttribute("IpForward", ns3::BooleanValue(false));
  }

  nlohmann::json queue_statistics()
  {
    std::uint64_t sent = 0, dropped = 0, marked = 0;
    for (auto it = queue_discs_.Begin(); it != queue_discs_.End(); ++it) {
      const auto& stats = (*it)->GetStats();
      sent += stats.nTotalSentPackets;
      dropped += stats.nTotalDroppedPackets;
      marked += stats.nTotalMarkedPackets;
    }
    return {{"packets_sent_by_ports", sent}, {"packets_dropped", dropped}, {"packets_ecn_marked", marked}};
  }

  /// The address of `vertex` on `link` (the side of the link it is on).
  ns3::Ipv4Address address_on(int link, int vertex) const
  {
    return ends_[link].address[topology_.links()[link].a == vertex ? 0 : 1];
  }

  // Host routes, one per (node, destination address): topology routes go up the hierarchy and down again,
  // so every node forwards a given destination the same way whatever the source; a clash is an error.
  void add_path(const std::vector<topology::Hop>& route, ns3::Ipv4Address destination)
  {
    ns3::Ipv4StaticRoutingHelper helper;
    for (const auto& h : route) {
      const auto& link    = topology_.links()[h.link];
      const int from      = h.forward ? 0 : 1;
      const int vertex    = h.forward ? link.a : link.b;
      const auto& e       = ends_[h.link];
      auto [it, inserted] = next_hop_.try_emplace({vertex, destination.Get()}, h.link);
      if (!inserted) {
        if (it->second != h.link)
          throw SimulationError("packet level: " + topology_.vertex_name(vertex) +
                                " would forward one destination over two links; routes are not destination-based");
        continue;
      }
      auto ipv4 = nodes_.Get(node_of_[vertex])->GetObject<ns3::Ipv4>();
      helper.GetStaticRouting(ipv4)->AddHostRouteTo(destination, e.address[1 - from], e.interface[from]);
    }
  }

  void install_routes()
  {
    for (const auto& p : plan_.pairs) {
      destination_.push_back(address_on(p.data.back().link, p.dst));
      add_path(p.data, destination_.back());
      add_path(p.acks, address_on(p.data.front().link, p.src));
    }
  }

  // Each queue pair's packets carry its flow id, and every node on its routes forwards that id one way.
  void install_queue_pairs()
  {
    roce::RoceParams params;
    params.payload        = roce_payload(settings_);
    params.dcqcn          = settings_.congestion_control == "dcqcn";
    params.dcqcn_settings = settings_.dcqcn;
    roce_                 = std::make_unique<roce::RoceTransport>(params, [this](int op) { finish(op); });
    const auto& ops       = graph_.ops();
    for (std::size_t i = 0; i < plan_.transfers.size(); ++i) {
      const int op          = plan_.transfers[i];
      const PairRoute& pair = plan_.pairs[plan_.pair_of[op]];
      roce::QueuePair qp;
      qp.op          = op;
      qp.src         = nodes_.Get(node_of_[pair.src]);
      qp.dst         = nodes_.Get(node_of_[pair.dst]);
      qp.dst_address = address_on(pair.data.back().link, pair.dst);
      qp.bytes       = op_bytes(ops[op]);
      qp.window      = topology_.effective_window(ops[op].window);
      qp.line_rate   = topology_.links()[pair.data.front().link].bandwidth;
      if (ops[op].rate > 0) { // paced at its cap from the start, and DCQCN recovers to it, not beyond
        // The cap counts payload; the pacer counts wire bytes, headers included.
        const double payload = roce_payload(settings_);
        qp.line_rate         = std::min(
                    qp.line_rate, ops[op].rate * (payload + roce::kTransportOverhead + roce::kLinkOverhead - 2) / payload);
      }
      qp.data_flow = static_cast<std::uint32_t>(2 * i + 1);
      qp.cnp_flow  = static_cast<std::uint32_t>(2 * i + 2);
      if (pair.spray.empty()) {
        add_flow_path(pair.data, qp.data_flow);
      } else {
        for (const auto& [vertex, hops] : pair.spray)
          add_flow_path(hops, qp.data_flow);
      }
      add_flow_path(pair.acks, qp.cnp_flow);
      roce_->add(qp);
    }
  }

  void add_flow_path(const std::vector<topology::Hop>& route, std::uint32_t flow)
  {
    for (const auto& h : route) {
      const auto& link = topology_.links()[h.link];
      const int from   = h.forward ? 0 : 1;
      const int vertex = h.forward ? link.a : link.b;
      const auto& e    = ends_[h.link];
      auto routing     = ns3::DynamicCast<roce::FlowRouting>(
          nodes_.Get(node_of_[vertex])->GetObject<ns3::Ipv4>()->GetRoutingProtocol());
      routing->add(flow, e.interface[from], e.address[1 - from]);
    }
  }

  // Every sink listens from time 0 on a port of its own, so a transfer only has to connect when it starts.
  void install_sinks()
  {
    const auto& ops = graph_.ops();
    port_.assign(ops.size(), 0);
    received_.assign(ops.size(), 0);
    std::vector<int> next_port(topology_.vertex_kinds().size(), kFirstSinkPort);
    for (int op : plan_.transfers) {
      const int dst = ops[op].dst;
      port_[op]     = static_cast<std::uint16_t>(next_port[dst]++);
      ns3::PacketSinkHelper helper("ns3::TcpSocketFactory",
                                   ns3::InetSocketAddress(ns3::Ipv4Address::GetAny(), port_[op]));
      auto app                  = helper.Install(nodes_.Get(node_of_[dst])).Get(0);
      const std::uint64_t bytes = op_bytes(ops[op]);
      app->TraceConnectWithoutContext("Rx",
                                      ns3::Callback<void, ns3::Ptr<const ns3::Packet>, const ns3::Address&>(
                                          [this, op, bytes](ns3::Ptr<const ns3::Packet> packet, const ns3::Address&) {
                                            received_[op] += packet->GetSize();
                                            if (received_[op] == bytes)
                                              finish(op);
                                          }));
    }
  }

  void start(int op)
  {
    const Op& o       = graph_.ops()[op];
    timing_[op].start = ns3::Simulator::Now().GetSeconds();
    if (moves_bytes(o) && roce_) {
      roce_->start(op);
    } else if (moves_bytes(o) && o.window > 0) {
      send_windowed(op);
    } else if (moves_bytes(o)) {
      // An application added while the simulation runs is initialized and started at the current time.
      ns3::BulkSendHelper helper("ns3::TcpSocketFactory",
                                 ns3::InetSocketAddress(destination_[plan_.pair_of[op]], port_[op]));
      helper.SetAttribute("MaxBytes", ns3::UintegerValue(op_bytes(o)));
      helper.SetAttribute("SendSize", ns3::UintegerValue(static_cast<std::uint32_t>(settings_.send_size)));
      helper.Install(nodes_.Get(node_of_[o.src]));
    } else if (o.kind == Op::Kind::delay && o.duration > 0) {
      ns3::Simulator::Schedule(ns3::Seconds(o.duration), [this, op] { finish(op); });
    } else {
      finish(op);
    }
  }

  // A TCP transfer under its own window (NCCL's slots): a socket whose send buffer is the window, so that no more
  // than the window is ever unacknowledged, filled as acknowledgements free it (as BulkSend does, but BulkSend
  // takes its buffer from the process-wide defaults when it starts, later than this op).
  void send_windowed(int op)
  {
    const Op& o         = graph_.ops()[op];
    auto socket         = ns3::Socket::CreateSocket(nodes_.Get(node_of_[o.src]), ns3::TcpSocketFactory::GetTypeId());
    const double window = std::min(plan_.socket_buffer, topology_.effective_window(o.window));
    socket->SetAttribute("SndBufSize", ns3::UintegerValue(static_cast<std::uint32_t>(std::max(1.0, window))));
    if (socket->Bind() < 0)
      throw SimulationError("packet level: a TCP socket could not be bound");
    auto left = std::make_shared<std::uint64_t>(op_bytes(o));
    auto fill = [this, left](ns3::Ptr<ns3::Socket> s, std::uint32_t) {
      while (*left > 0) {
        const auto n = static_cast<std::uint32_t>(
            std::min<std::uint64_t>({*left, static_cast<std::uint64_t>(settings_.send_size), s->GetTxAvailable()}));
        if (n == 0 || s->Send(ns3::Create<ns3::Packet>(n)) < 0)
          break;
        *left -= n;
      }
    };
    socket->SetSendCallback(ns3::Callback<void, ns3::Ptr<ns3::Socket>, std::uint32_t>(fill));
    socket->SetConnectCallback(
        ns3::Callback<void, ns3::Ptr<ns3::Socket>>([fill](ns3::Ptr<ns3::Socket> s) { fill(s, 0); }),
        ns3::Callback<void, ns3::Ptr<ns3::Socket>>(
            [](ns3::Ptr<ns3::Socket>) { throw SimulationError("packet level: a TCP connection failed"); }));
    socket->Connect(ns3::InetSocketAddress(destination_[plan_.pair_of[op]], port_[op]));
    senders_.push_back(socket);
  }

  void finish(int op)
  {
    timing_[op].end = ns3::Simulator::Now().GetSeconds();
    if (++done_ == timing_.size())
      ns3::Simulator::Stop();
    for (int d : dependents_[op])
      if (--remaining_[d] == 0)
        start(d);
  }

  struct LinkEnds {
    ns3::Ipv4Address address[2]; ///< a side, b side
    std::uint32_t interface[2] = {0, 0};
  };

  const topology::Topology& topology_;
  const FlowGraph& graph_;
  const PacketSettings& settings_;
  const Plan& plan_;
  ns3::NodeContainer nodes_;
  ns3::QueueDiscContainer queue_discs_;
  std::vector<int> node_of_;                              ///< per vertex: index in nodes_, or -1
  std::vector<LinkEnds> ends_;                            ///< per link id
  std::map<std::pair<int, std::uint32_t>, int> next_hop_; ///< (vertex, destination) -> link
  std::vector<ns3::Ipv4Address> destination_;             ///< per pair: the destination GPU's address on the route
  std::vector<std::uint16_t> port_;                       ///< per op: the sink's port
  std::vector<std::uint64_t> received_;                   ///< per op: bytes at the sink
  std::vector<OpTiming> timing_;
  std::vector<int> remaining_;
  std::vector<std::vector<int>> dependents_;
  std::unique_ptr<roce::RoceTransport> roce_;
  std::vector<ns3::Ptr<ns3::Socket>> senders_; ///< windowed TCP senders, kept alive until the run ends
  std::size_t done_ = 0;
};

nlohmann::json plan_json(const Plan& plan)
{
  int k_min = 0, k_max = 0;
  for (const auto& lp : plan.links) {
    k_min = k_min == 0 ? lp.ecn_threshold : std::min(k_min, lp.ecn_threshold);
    k_max = std::max(k_max, lp.ecn_threshold);
  }
  return {{"socket_buffer_bytes", plan.socket_buffer},
          {"nodes", plan.vertices.size()},
          {"links", plan.links.size()},
          {"gpus", plan.gpus},
          {"transfers", plan.transfers.size()},
          {"ecn_threshold_packets_min", k_min},
          {"ecn_threshold_packets_max", k_max}};
}

} // namespace

nlohmann::json DcqcnSettings::to_json() const
{
  return {{"g", g},
          {"alpha_timer_s", alpha_timer},
          {"increase_timer_s", increase_timer},
          {"byte_counter_bytes", byte_counter},
          {"fast_recovery_steps", fast_recovery},
          {"additive_increase_bps_at_40gbps", additive_rate_at_40g * 8},
          {"hyper_increase_bps_at_40gbps", hyper_rate_at_40g * 8},
          {"min_rate_bps", min_rate * 8},
          {"cnp_interval_s", cnp_interval},
          {"kmin_bytes_at_40gbps", kmin_at_40g},
          {"kmax_bytes_at_40gbps", kmax_at_40g},
          {"pmax", pmax}};
}

nlohmann::json PacketSettings::to_json() const
{
  if (transport == "roce") {
    const bool with_dcqcn = congestion_control == "dcqcn";
    nlohmann::json queue;
    if (with_dcqcn)
      queue = {{"type", "RedQueueDisc (NVLink ports: FifoQueueDisc)"},
               {"use_ecn", true},
               {"qw", 1},
               {"gentle", false},
               {"min_th_packets", "round(kmin * C / 40 Gb/s / MTU), at least 1"},
               {"max_th_packets", "round(kmax * C / 40 Gb/s / MTU), above min_th"},
               {"max_mark_probability", dcqcn.pmax}};
    else
      queue = {{"type", "FifoQueueDisc"}};
    queue["limit_packets"] = "every packet of the run (lossless)";
    nlohmann::json j       = {
              {"engine", "ns-3"},
              {"ns3_version", version()},
              {"transport", transport},
              {"congestion_control", congestion_control},
              {"mtu_bytes", mtu},
              {"payload_bytes", mtu - 44},
              {"headers", "IPv4 20 + UDP 8 + BTH 12 + ICRC 4 (+ PPP 2 per hop)"},
              {"start", "line rate of the sender's first link"},
              {"lossless", "deep queues stand in for PFC (its pauses are not modelled)"},
              {"in_switch_reduction", "not simulated: an NVLS or CollNet (SHARP) call runs as the flows a ring over the "
                                            "same GPUs moving its per-link volume moves (netsim/README.md)"},
              {"device_queue_packets", device_queue_packets},
              {"queue_disc", queue},
              {"time_resolution", "ps"},
              {"rng_seed", seed},
              {"rng_run", 1},
              {"routing", "by flow: each queue pair along Topology::route(src, dst, qp); sprayed per packet over "
                                "every equal-cost next hop under multipath routing \"spray\""},
              {"limits", {{"max_gpus", max_gpus}, {"max_total_bytes", max_total_bytes}, {"max_transfers", max_transfers}}}};
    if (with_dcqcn)
      j["dcqcn"] = dcqcn.to_json();
    return j;
  }
  const bool dctcp = transport == "dctcp";
  nlohmann::json queue;
  if (dctcp)
    queue = {{"type", "RedQueueDisc"},
             {"use_ecn", true},
             {"use_hard_drop", false},
             {"qw", 1},
             {"gentle", false},
             {"min_th_packets", "max(ecn_threshold, ceil(C * RTT / 7 / MTU)) per port"},
             {"max_th_packets", "min_th + 1"},
             {"limit_packets", "max(queue_packets, 4 * min_th) per port"}};
  else
    queue = {{"type", "FifoQueueDisc"},
             {"limit_packets", "max(queue_packets, 4 * max(ecn_threshold, ceil(C * RTT / 7 / MTU))) per port"}};
  return {{"engine", "ns-3"},
          {"ns3_version", std::to_string(NS3_VERSION_MAJOR) + "." + std::to_string(NS3_VERSION_MINOR)},
          {"transport", transport},
          {"socket_type", dctcp ? "ns3::TcpDctcp" : "ns3::TcpNewReno"},
          {"ecn", dctcp},
          {"mtu_bytes", mtu},
          {"segment_size_bytes", segment_size},
          {"send_size_bytes", send_size},
          {"socket_buffer_bytes", socket_buffer > 0 ? nlohmann::json(socket_buffer) : nlohmann::json("auto")},
          {"initial_cwnd_segments", initial_cwnd},
          {"min_rto_s", min_rto},
          {"delayed_ack_count", 2},
          {"delayed_ack_timeout_s", delayed_ack},
          {"dctcp_alpha_on_init", kDctcpAlphaOnInit},
          {"sack", true},
          {"timestamps", true},
          {"queue_packets", queue_packets},
          {"ecn_threshold_packets", ecn_threshold},
          {"device_queue_packets", device_queue_packets},
          {"queue_disc", queue},
          {"time_resolution", "ps"},
          {"rng_seed", seed},
          {"rng_run", 1},
          {"routing", "static host routes along Topology::route"},
          {"limits", {{"max_gpus", max_gpus}, {"max_total_bytes", max_total_bytes}, {"max_transfers", max_transfers}}}};
}

std::string packet_refusal(const topology::Topology& topology, const FlowGraph& graph, const PacketSettings& settings)
{
  const int ngpus = topology.gpu_count();
  std::vector<bool> gpu_used(ngpus, false);
  double total          = 0;
  std::size_t transfers = 0;
  for (const auto& op : graph.ops()) {
    if (!moves_bytes(op) || op.src < 0 || op.dst < 0 || op.src >= ngpus || op.dst >= ngpus)
      continue;
    total += static_cast<double>(op_bytes(op));
    ++transfers;
    gpu_used[op.src] = gpu_used[op.dst] = true;
  }
  const auto gpus = std::count(gpu_used.begin(), gpu_used.end(), true);
  if (gpus > settings.max_gpus)
    return "packet level: the flow graph touches " + std::to_string(gpus) + " GPUs, more than the " +
           std::to_string(settings.max_gpus) + " ns-3 can simulate in reasonable time";
  if (total > settings.max_total_bytes)
    return "packet level: the flow graph moves " + units::format_size(total) + ", more than the limit of " +
           units::format_size(settings.max_total_bytes) +
           " (ns-3 needs 1-4 s of wall time per GB over RoCE, 4-12 s over TCP)";
  if (transfers > static_cast<std::size_t>(settings.max_transfers))
    return "packet level: the flow graph has " + std::to_string(transfers) + " transfers, more than the limit of " +
           std::to_string(settings.max_transfers);
  return {};
}

RunResult run_packet(const topology::Topology& topology, const FlowGraph& graph, const PacketSettings& settings)
{
  check_settings(settings);
  if (!is_roce(settings))
    for (const auto& op : graph.ops())
      if (op.kind == Op::Kind::transfer && op.rate > 0)
        throw UsageError("packet level: transfers capped at a rate (a DiLoCo worker's uplink) are paced by the RoCE "
                         "transport only; run with \"transport\": \"roce\" (the default), or at flow level");
  const Plan plan                = make_plan(topology, graph, settings);
  std::string bytes              = process::run_in_child([&] {
    auto [timing, statistics] = PacketRun(topology, graph, settings, plan).run();
    return std::string(reinterpret_cast<const char*>(timing.data()), timing.size() * sizeof(OpTiming)) +
           statistics.dump();
  });
  const std::size_t timing_bytes = graph.ops().size() * sizeof(OpTiming);
  if (bytes.size() <= timing_bytes)
    throw SimulationError("the packet simulation process returned a truncated result");
  RunResult result;
  result.ops.resize(graph.ops().size());
  std::memcpy(result.ops.data(), bytes.data(), timing_bytes);
  for (const auto& t : result.ops)
    result.makespan = std::max(result.makespan, t.end);
  result.settings              = settings.to_json();
  result.settings["effective"] = plan_json(plan);
  try {
    result.settings["statistics"] = nlohmann::json::parse(bytes.substr(timing_bytes));
  } catch (const nlohmann::json::exception& e) {
    throw SimulationError(std::string("the packet simulation process returned unreadable statistics: ") + e.what());
  }
  result.link_bytes = link_bytes(topology, graph);
  return result;
}

} // namespace spansim::netsim
