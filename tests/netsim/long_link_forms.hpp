#pragma once
// The chain-and-window formula of a ring all-reduce over links of unequal latency (netsim/README.md), shared by the
// analytical/flow tests (test_long_links.cpp) and the packet ones (test_packet_links.cpp).
#include "topology/topology.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace spansim::test {

/// @brief The two bounds of a ring all-reduce; it ends at the larger.
struct RingForm {
  double bandwidth_part = 0; ///< the bytes at the narrowest link's rate plus the chain of dependent steps
  double window_part    = 0; ///< the worst edge's latency plus its bytes at window / round trip
  double total() const { return std::max(bandwidth_part, window_part); }
};

/// The chain-and-window formula of a ring all-reduce (netsim/README.md): every edge carries V = 2(K-1)/K S payload
/// (times the protocol's wire factor w) at once; the ring ends when the slowest of two things is done:
///  - the bytes at the narrowest link's rate plus the chain of dependent steps, the sum of the 2(K-1) consecutive
///    edge latencies from the worst start;
///  - on each edge, its one-way latency plus V w over what its window W (all channels) lets through per round trip.
inline RingForm ring_form(const topology::Topology& t, const std::vector<int>& gpus, double bytes, double wire,
                          double window)
{
  const auto k = gpus.size();
  std::vector<double> latency;
  double narrowest = 1e300, window_part = 0;
  for (std::size_t i = 0; i < k; ++i) {
    const int a = gpus[i], b = gpus[(i + 1) % k];
    const auto route = t.route(a, b);
    latency.push_back(t.route_latency(route));
    narrowest           = std::min(narrowest, t.route_bandwidth(route));
    const double volume = 2.0 * (k - 1) / k * bytes * wire;
    const double rtt    = t.route_latency(route) + t.route_latency(t.route(b, a));
    window_part         = std::max(window_part, t.route_latency(route) + volume * rtt / window);
  }
  // 2(K-1) consecutive edges from the worst start: whole turns of the ring, then the worst run of the rest.
  const std::size_t steps = 2 * (k - 1), turns = steps / k, rest = steps % k;
  double turn = 0, worst = 0;
  for (double l : latency)
    turn += l;
  for (std::size_t s = 0; s < k; ++s) {
    double run = 0;
    for (std::size_t j = 0; j < rest; ++j)
      run += latency[(s + j) % k];
    worst = std::max(worst, run);
  }
  const double chain = static_cast<double>(turns) * turn + worst;
  return {2.0 * (k - 1) / k * bytes * wire / narrowest + chain, window_part};
}

} // namespace spansim::test
