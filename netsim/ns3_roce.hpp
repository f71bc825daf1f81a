#pragma once
/// @file
/// @brief Internal to the packet engine: a RoCE-like transport on ns-3 (queue pairs that start at line rate over
/// lossless queues, with DCQCN rate control or none) and routing by flow (each packet follows its queue pair's
/// route, so ECMP's choice per source, destination and QP is the same at every fidelity).

#include "netsim/netsim.hpp"

#include <ns3/event-id.h>
#include <ns3/ipv4-routing-helper.h>
#include <ns3/ipv4-routing-protocol.h>
#include <ns3/node.h>
#include <ns3/socket.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <vector>

namespace spansim::netsim::roce {

/// @brief RoCEv2's own bytes inside a UDP payload: the base transport header (12) and the invariant CRC (4).
inline constexpr int kTransportOverhead = 12 + 4;
/// @brief Bytes of IPv4 (20), UDP (8) and PPP (2) around the UDP payload on every hop.
inline constexpr int kLinkOverhead = 20 + 8 + 2;
/// @brief A congestion notification packet's UDP payload (RoCEv2's CNP: transport header, 16 reserved, CRC).
inline constexpr int kCnpPayload = 12 + 16 + 4;
/// @brief An acknowledgement's UDP payload (transport header, ACK extended header, CRC): sent under a window.
inline constexpr int kAckPayload = 12 + 4 + 4;
/// @brief Under a window, the receiver acknowledges at most every this many bytes (and the last byte), and every
/// eighth of the window when that is less (NCCL frees its slots one at a time, NCCL_STEPS = 8 per connection).
inline constexpr std::uint64_t kAckEvery = 65536;

/// @brief Forwards every packet by its flow id (an ns3::FlowIdTag): each node keeps the output interface and next
/// hop of every flow that crosses it, or several when the flow is sprayed: each packet then takes one by a hash of
/// the packet, the flow, the node and the seed. Packets addressed to the node are delivered locally.
class FlowRouting : public ns3::Ipv4RoutingProtocol {
public:
  /// @brief ns-3's type registration.
  static ns3::TypeId GetTypeId();

  /// @brief Packets of `flow` leave this node on `interface`, towards `gateway` (or on any of the ways added).
  void add(std::uint32_t flow, std::uint32_t interface, ns3::Ipv4Address gateway);
  /// @brief The seed of spraying's hash.
  void set_seed(std::uint64_t seed) { seed_ = seed; }

  ns3::Ptr<ns3::Ipv4Route> RouteOutput(ns3::Ptr<ns3::Packet> p, const ns3::Ipv4Header& header,
                                       ns3::Ptr<ns3::NetDevice> oif, ns3::Socket::SocketErrno& sockerr) override;
  bool RouteInput(ns3::Ptr<const ns3::Packet> p, const ns3::Ipv4Header& header, ns3::Ptr<const ns3::NetDevice> idev,
                  UnicastForwardCallback ucb, MulticastForwardCallback mcb, LocalDeliverCallback lcb,
                  ErrorCallback ecb) override;
  void NotifyInterfaceUp(std::uint32_t) override {}
  void NotifyInterfaceDown(std::uint32_t) override {}
  void NotifyAddAddress(std::uint32_t, ns3::Ipv4InterfaceAddress) override {}
  void NotifyRemoveAddress(std::uint32_t, ns3::Ipv4InterfaceAddress) override {}
  void SetIpv4(ns3::Ptr<ns3::Ipv4> ipv4) override { ipv4_ = ipv4; }
  void PrintRoutingTable(ns3::Ptr<ns3::OutputStreamWrapper> stream, ns3::Time::Unit unit) const override;

private:
  struct Next {
    std::uint32_t interface = 0;
    ns3::Ipv4Address gateway;
  };
  ns3::Ptr<ns3::Ipv4Route> route_for(const ns3::Packet& p, const ns3::Ipv4Header& header) const;

  ns3::Ptr<ns3::Ipv4> ipv4_;
  std::unordered_map<std::uint32_t, std::vector<Next>> next_;
  std::uint64_t seed_ = 1;
};

/// @brief Installs a FlowRouting on every node of an InternetStackHelper.
class FlowRoutingHelper : public ns3::Ipv4RoutingHelper {
public:
  FlowRoutingHelper* Copy() const override { return new FlowRoutingHelper(*this); }
  ns3::Ptr<ns3::Ipv4RoutingProtocol> Create(ns3::Ptr<ns3::Node> node) const override;
};

/// @brief One transfer as a queue pair.
struct QueuePair {
  int op = -1;
  ns3::Ptr<ns3::Node> src;
  ns3::Ptr<ns3::Node> dst;
  ns3::Ipv4Address dst_address;
  std::uint64_t bytes     = 0;
  double line_rate        = 0; ///< bytes/s of the sender's first link (the NIC, or NVLink)
  std::uint32_t data_flow = 0; ///< flow id of its data packets
  std::uint32_t cnp_flow  = 0; ///< flow id of its congestion notifications (the reverse route)
  /// @brief Bytes it may have unacknowledged (0: no limit, and no acknowledgements): the site's window or the
  /// transfer's own (NCCL's slots), the smaller.
  double window = 0;
};

/// @brief The transport's parameters.
struct RoceParams {
  int payload = 0; ///< data bytes per packet
  bool dcqcn  = true;
  DcqcnSettings dcqcn_settings;
};

/// @brief Queue pairs: the sender paces packets at its current rate (line rate at first); the receiver counts bytes
/// and, under DCQCN, answers ECN-marked packets with at most one CNP per interval; the sender cuts its rate on a
/// CNP and recovers by timer and byte counter (fast recovery, additive, then hyper increase).
class RoceTransport {
public:
  /// @brief A transport that calls `done(op)` when a queue pair's receiver has its last byte.
  RoceTransport(const RoceParams& params, std::function<void(int op)> done);
  RoceTransport(const RoceTransport&)            = delete;
  RoceTransport& operator=(const RoceTransport&) = delete;

  /// @brief Opens the queue pair's sockets; its receiver listens from now on.
  void add(const QueuePair& qp);
  /// @brief Starts sending the queue pair of `op`.
  void start(int op);
  /// @brief CNPs and rate cuts, for the results.
  nlohmann::json statistics() const;

private:
  struct Pair {
    QueuePair qp;
    ns3::Ptr<ns3::Socket> send_socket; ///< the source node's
    ns3::Ptr<ns3::Socket> recv_socket; ///< the destination node's
    std::uint64_t sent                 = 0;
    std::uint64_t recvd                = 0;
    double rate                        = 0; ///< current rate Rc, bytes/s
    double target                      = 0; ///< target rate Rt
    double alpha                       = 1;
    int timer_stage                    = 0; ///< increase events by timer since the last cut
    int byte_stage                     = 0; ///< increase events by byte counter since the last cut
    std::uint64_t bytes_since_increase = 0;
    bool cnp_in_period                 = false;
    double last_cnp_sent               = -std::numeric_limits<double>::infinity();
    std::uint64_t payload              = 0;         ///< data bytes per packet
    std::uint64_t ack_every            = kAckEvery; ///< bytes per acknowledgement (under a window)
    std::uint64_t acked                = 0;         ///< bytes the sender knows arrived (under a window)
    std::uint64_t acks_sent            = 0;         ///< by the receiver
    bool window_full                   = false;
    double last_send                   = 0; ///< when the last packet left
    double last_wire                   = 0; ///< its bytes on the wire
    bool done                          = false;
    ns3::EventId send_event, alpha_event, increase_event;
  };

  ns3::Ptr<ns3::Socket> socket_on(ns3::Ptr<ns3::Node> node);
  void on_receive(ns3::Ptr<ns3::Socket> socket);
  void send_next(int index);
  void schedule_next(int index);
  void on_data(int index, const ns3::Packet& packet, const ns3::Address& from);
  void on_cnp(int index);
  void on_ack(int index);
  void update_alpha(int index);
  void increase_by_timer(int index);
  void increase(Pair& p);
  void stop_timers(Pair& p);

  RoceParams params_;
  std::function<void(int)> done_;
  std::vector<Pair> pairs_;
  std::unordered_map<int, int> index_of_op_;
  std::unordered_map<std::uint32_t, int> index_of_flow_;          ///< data and CNP flow ids -> pair
  std::unordered_map<ns3::Node*, ns3::Ptr<ns3::Socket>> sockets_; ///< one per node, as a NIC has one UDP port
  std::uint64_t cnps_      = 0;
  std::uint64_t rate_cuts_ = 0;
  double min_rate_seen_    = std::numeric_limits<double>::infinity();
};

} // namespace spansim::netsim::roce
