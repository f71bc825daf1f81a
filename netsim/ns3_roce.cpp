// A RoCE-like transport on ns-3 3.37, which has none: UDP sockets carry queue pairs whose sender paces packets at
// its current rate, and DCQCN's three points (DCQCN paper, Zhu et al., SIGCOMM 2015). Lossless queues stand in for
// PFC: every port can hold every packet of the run, so nothing is dropped and nothing needs retransmission.
#include "netsim/ns3_roce.hpp"

#include "common/error.hpp"

#include <ns3/flow-id-tag.h>
#include <ns3/inet-socket-address.h>
#include <ns3/ipv4-route.h>
#include <ns3/ipv4.h>
#include <ns3/output-stream-wrapper.h>
#include <ns3/packet.h>
#include <ns3/simulator.h>
#include <ns3/udp-socket-factory.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <utility>

namespace spansim::netsim::roce {

namespace {

constexpr std::uint8_t kEct0  = 0x02; // ECN-capable transport, as RoCEv2 NICs send with DCQCN on
constexpr std::uint8_t kEcnCe = 0x03;
// RoCEv2's UDP port. One socket per node, demultiplexed by flow: ns-3 looks a datagram's socket up by walking
// the node's list of sockets, so a socket per queue pair made every packet cost as many steps as the node had
// queue pairs (an all-to-all over 300 GPUs: 174 s).
constexpr std::uint16_t kRocePort = 4791;

std::uint32_t flow_of(const ns3::Packet& p)
{
  ns3::FlowIdTag tag;
  return p.PeekPacketTag(tag) ? tag.GetFlowId() : 0;
}

} // namespace

ns3::TypeId FlowRouting::GetTypeId()
{
  static ns3::TypeId tid =
      ns3::TypeId("spansim::FlowRouting").SetParent<ns3::Ipv4RoutingProtocol>().SetGroupName("Internet");
  return tid;
}

void FlowRouting::add(std::uint32_t flow, std::uint32_t interface, ns3::Ipv4Address gateway)
{
  auto& ways = next_[flow];
  for (const auto& n : ways)
    if (n.interface == interface)
      return;
  ways.push_back({interface, gateway});
}

ns3::Ptr<ns3::Ipv4Route> FlowRouting::route_for(const ns3::Packet& p, const ns3::Ipv4Header& header) const
{
  auto it = next_.find(flow_of(p));
  if (it == next_.end() || it->second.empty())
    return nullptr;
  std::size_t pick = 0;
  if (it->second.size() > 1) { // splitmix64 of the packet, its flow, this node and the seed
    std::uint64_t z = seed_ ^ (std::uint64_t{p.GetUid()} << 20) ^ (std::uint64_t{it->first} << 40) ^
                      ipv4_->GetObject<ns3::Node>()->GetId();
    z    = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z    = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    pick = static_cast<std::size_t>((z ^ (z >> 31)) % it->second.size());
  }
  const Next& next = it->second[pick];
  auto route       = ns3::Create<ns3::Ipv4Route>();
  route->SetDestination(header.GetDestination());
  route->SetGateway(next.gateway);
  route->SetSource(ipv4_->GetAddress(next.interface, 0).GetLocal());
  route->SetOutputDevice(ipv4_->GetNetDevice(next.interface));
  return route;
}

ns3::Ptr<ns3::Ipv4Route> FlowRouting::RouteOutput(ns3::Ptr<ns3::Packet> p, const ns3::Ipv4Header& header,
                                                  ns3::Ptr<ns3::NetDevice>, ns3::Socket::SocketErrno& sockerr)
{
  auto route = p ? route_for(*p, header) : nullptr;
  sockerr    = route ? ns3::Socket::ERROR_NOTERROR : ns3::Socket::ERROR_NOROUTETOHOST;
  return route;
}

bool FlowRouting::RouteInput(ns3::Ptr<const ns3::Packet> p, const ns3::Ipv4Header& header,
                             ns3::Ptr<const ns3::NetDevice> idev, UnicastForwardCallback ucb, MulticastForwardCallback,
                             LocalDeliverCallback lcb, ErrorCallback)
{
  const auto iif = static_cast<std::uint32_t>(ipv4_->GetInterfaceForDevice(idev));
  if (ipv4_->IsDestinationAddress(header.GetDestination(), iif)) {
    lcb(p, header, iif);
    return true;
  }
  auto route = route_for(*p, header);
  if (!route)
    return false; // no way for this flow here: ns-3 drops it, and the run ends with ops not run
  ucb(route, p, header);
  return true;
}

void FlowRouting::PrintRoutingTable(ns3::Ptr<ns3::OutputStreamWrapper> stream, ns3::Time::Unit) const
{
  for (const auto& [flow, ways] : next_)
    for (const auto& next : ways)
      *stream->GetStream() << "flow " << flow << " -> interface " << next.interface << " via " << next.gateway << "\n";
}

ns3::Ptr<ns3::Ipv4RoutingProtocol> FlowRoutingHelper::Create(ns3::Ptr<ns3::Node>) const
{
  return ns3::CreateObject<FlowRouting>();
}

RoceTransport::RoceTransport(const RoceParams& params, std::function<void(int)> done)
    : params_(params), done_(std::move(done))
{
}

ns3::Ptr<ns3::Socket> RoceTransport::socket_on(ns3::Ptr<ns3::Node> node)
{
  auto [it, inserted] = sockets_.try_emplace(ns3::PeekPointer(node));
  if (inserted) {
    it->second = ns3::Socket::CreateSocket(node, ns3::UdpSocketFactory::GetTypeId());
    it->second->SetIpRecvTos(true);
    if (it->second->Bind(ns3::InetSocketAddress(ns3::Ipv4Address::GetAny(), kRocePort)) != 0)
      throw SimulationError("packet level: could not bind a node's RoCE socket");
    it->second->SetRecvCallback(ns3::MakeCallback(&RoceTransport::on_receive, this));
  }
  return it->second;
}

void RoceTransport::add(const QueuePair& qp)
{
  const int index = static_cast<int>(pairs_.size());
  pairs_.push_back({});
  Pair& p                      = pairs_.back();
  p.qp                         = qp;
  index_of_op_[qp.op]          = index;
  index_of_flow_[qp.data_flow] = index;
  index_of_flow_[qp.cnp_flow]  = index;
  // Under a window, packets no larger than an eighth of it and an acknowledgement per whole number of packets,
  // so that a window of a few kilobytes (NCCL's LL slots) still runs at window / round trip.
  p.payload = static_cast<std::uint64_t>(params_.payload);
  if (qp.window > 0) {
    const double eighth = std::max(64.0, qp.window / 8);
    p.payload           = std::min<std::uint64_t>(p.payload, static_cast<std::uint64_t>(eighth));
    if (eighth < static_cast<double>(kAckEvery))
      p.ack_every = p.payload * std::max<std::uint64_t>(1, static_cast<std::uint64_t>(eighth) / p.payload);
  }
  p.send_socket = socket_on(qp.src);
  p.recv_socket = socket_on(qp.dst);
}

void RoceTransport::on_receive(ns3::Ptr<ns3::Socket> socket)
{
  ns3::Address from;
  while (auto packet = socket->RecvFrom(from)) {
    ns3::FlowIdTag tag;
    if (!packet->PeekPacketTag(tag))
      throw SimulationError("packet level: a RoCE packet without its flow id");
    auto it = index_of_flow_.find(tag.GetFlowId());
    if (it == index_of_flow_.end())
      throw SimulationError("packet level: a RoCE packet of unknown flow " + std::to_string(tag.GetFlowId()));
    const int index = it->second;
    if (tag.GetFlowId() == pairs_[index].qp.data_flow)
      on_data(index, *packet, from);
    else if (packet->GetSize() == kAckPayload)
      on_ack(index);
    else
      on_cnp(index);
  }
}

void RoceTransport::start(int op)
{
  const int index = index_of_op_.at(op);
  Pair& p         = pairs_[index];
  p.rate = p.target = p.qp.line_rate;
  send_next(index);
}

void RoceTransport::send_next(int index)
{
  Pair& p = pairs_[index];
  if (p.qp.window > 0 && static_cast<double>(p.sent - p.acked) >= p.qp.window) {
    p.window_full = true; // the next acknowledgement resumes sending
    return;
  }
  const std::uint64_t payload = std::min<std::uint64_t>(p.qp.bytes - p.sent, p.payload);
  auto packet                 = ns3::Create<ns3::Packet>(static_cast<std::uint32_t>(payload + kTransportOverhead));
  packet->AddPacketTag(ns3::FlowIdTag(p.qp.data_flow));
  ns3::InetSocketAddress to(p.qp.dst_address, kRocePort);
  if (params_.dcqcn)
    to.SetTos(kEct0); // ns-3 takes the TOS of a datagram from its address
  if (p.send_socket->SendTo(packet, 0, to) < 0)
    throw SimulationError("packet level: a queue pair could not send (socket error " +
                          std::to_string(static_cast<int>(p.send_socket->GetErrno())) + ")");
  p.sent += payload;
  p.last_send = ns3::Simulator::Now().GetSeconds();
  p.last_wire = static_cast<double>(payload + kTransportOverhead + kLinkOverhead);
  if (params_.dcqcn && p.rate < p.qp.line_rate) {
    p.bytes_since_increase += payload;
    if (p.bytes_since_increase >= params_.dcqcn_settings.byte_counter) {
      p.bytes_since_increase = 0;
      ++p.byte_stage;
      increase(p);
    }
  }
  if (p.sent < p.qp.bytes)
    schedule_next(index);
  else
    stop_timers(p);
}

// The next packet leaves when the last one would have been serialized at the current rate; a rate change moves
// it, as a NIC's rate limiter applies a new rate at once.
void RoceTransport::schedule_next(int index)
{
  Pair& p = pairs_[index];
  ns3::Simulator::Cancel(p.send_event);
  const double wait = std::max(0.0, p.last_send + p.last_wire / p.rate - ns3::Simulator::Now().GetSeconds());
  p.send_event      = ns3::Simulator::Schedule(ns3::Seconds(wait), &RoceTransport::send_next, this, index);
}

void RoceTransport::on_data(int index, const ns3::Packet& packet, const ns3::Address& from)
{
  Pair& p = pairs_[index];
  p.recvd += packet.GetSize() - kTransportOverhead;
  ns3::SocketIpTosTag tos;
  const double now = ns3::Simulator::Now().GetSeconds();
  if (params_.dcqcn && packet.PeekPacketTag(tos) && (tos.GetTos() & 0x3) == kEcnCe &&
      now - p.last_cnp_sent >= params_.dcqcn_settings.cnp_interval) {
    auto cnp = ns3::Create<ns3::Packet>(static_cast<std::uint32_t>(kCnpPayload));
    cnp->AddPacketTag(ns3::FlowIdTag(p.qp.cnp_flow));
    // ECN-capable, so that a marking port marks rather than drops it (RED drops what it cannot mark).
    auto to = ns3::InetSocketAddress::ConvertFrom(from);
    to.SetTos(kEct0);
    if (p.recv_socket->SendTo(cnp, 0, to) < 0)
      throw SimulationError("packet level: a congestion notification could not be sent");
    p.last_cnp_sent = now;
    ++cnps_;
  }
  if (p.qp.window > 0 && (p.recvd / p.ack_every > p.acks_sent || p.recvd >= p.qp.bytes)) {
    // Cumulative: every acknowledgement stands for ack_every bytes, the last for the rest.
    p.acks_sent = p.recvd >= p.qp.bytes ? (p.qp.bytes + p.ack_every - 1) / p.ack_every : p.recvd / p.ack_every;
    auto ack    = ns3::Create<ns3::Packet>(static_cast<std::uint32_t>(kAckPayload));
    ack->AddPacketTag(ns3::FlowIdTag(p.qp.cnp_flow));
    if (p.recv_socket->SendTo(ack, 0, from) < 0)
      throw SimulationError("packet level: an acknowledgement could not be sent");
  }
  if (!p.done && p.recvd >= p.qp.bytes) {
    p.done = true;
    done_(p.qp.op);
  }
}

void RoceTransport::on_cnp(int index)
{
  Pair& p = pairs_[index];
  if (p.sent >= p.qp.bytes)
    return; // all sent: nothing left to slow down
  {
    const auto& s          = params_.dcqcn_settings;
    p.target               = p.rate;
    p.rate                 = std::min(p.qp.line_rate, std::max(s.min_rate, p.rate * (1 - p.alpha / 2)));
    p.alpha                = (1 - s.g) * p.alpha + s.g;
    p.cnp_in_period        = true;
    p.timer_stage          = 0;
    p.byte_stage           = 0;
    p.bytes_since_increase = 0;
    ++rate_cuts_;
    min_rate_seen_ = std::min(min_rate_seen_, p.rate);
    ns3::Simulator::Cancel(p.increase_event);
    p.increase_event =
        ns3::Simulator::Schedule(ns3::Seconds(s.increase_timer), &RoceTransport::increase_by_timer, this, index);
    if (!p.alpha_event.IsRunning())
      p.alpha_event = ns3::Simulator::Schedule(ns3::Seconds(s.alpha_timer), &RoceTransport::update_alpha, this, index);
  }
  schedule_next(index);
}

void RoceTransport::on_ack(int index)
{
  Pair& p = pairs_[index];
  p.acked = std::min(p.qp.bytes, p.acked + p.ack_every);
  if (p.window_full && p.sent < p.qp.bytes) {
    p.window_full = false;
    schedule_next(index);
  }
}

void RoceTransport::update_alpha(int index)
{
  Pair& p = pairs_[index];
  if (!p.cnp_in_period)
    p.alpha *= 1 - params_.dcqcn_settings.g;
  p.cnp_in_period = false;
  if (p.sent < p.qp.bytes)
    p.alpha_event = ns3::Simulator::Schedule(ns3::Seconds(params_.dcqcn_settings.alpha_timer),
                                             &RoceTransport::update_alpha, this, index);
}

void RoceTransport::increase_by_timer(int index)
{
  Pair& p = pairs_[index];
  ++p.timer_stage;
  increase(p);
  if (p.sent < p.qp.bytes)
    schedule_next(index);
  if (p.sent < p.qp.bytes && p.rate < p.qp.line_rate)
    p.increase_event = ns3::Simulator::Schedule(ns3::Seconds(params_.dcqcn_settings.increase_timer),
                                                &RoceTransport::increase_by_timer, this, index);
}

void RoceTransport::increase(Pair& p)
{
  const auto& s      = params_.dcqcn_settings;
  const int low      = std::min(p.timer_stage, p.byte_stage);
  const int high     = std::max(p.timer_stage, p.byte_stage);
  const double scale = p.qp.line_rate / (40e9 / 8);
  if (high < s.fast_recovery) {
    // Fast recovery: halfway back to the rate before the cut.
  } else if (low > s.fast_recovery) {
    p.target += (low - s.fast_recovery) * s.hyper_rate_at_40g * scale;
  } else {
    p.target += s.additive_rate_at_40g * scale;
  }
  p.target = std::min(p.target, p.qp.line_rate);
  p.rate   = std::min(p.qp.line_rate, (p.target + p.rate) / 2);
}

void RoceTransport::stop_timers(Pair& p)
{
  ns3::Simulator::Cancel(p.increase_event);
  ns3::Simulator::Cancel(p.alpha_event);
}

nlohmann::json RoceTransport::statistics() const
{
  return {{"queue_pairs", pairs_.size()},
          {"cnps_sent", cnps_},
          {"rate_cuts", rate_cuts_},
          {"lowest_rate_bps", rate_cuts_ > 0 ? nlohmann::json(min_rate_seen_ * 8) : nlohmann::json(nullptr)}};
}

} // namespace spansim::netsim::roce
