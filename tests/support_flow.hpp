#pragma once
// Flow graphs built as the network tests build them (tests/netsim).
#include "netsim/netsim.hpp"

#include <utility>
#include <vector>

namespace spansim::test {

/// @brief Independent transfers of `bytes` each, one per (source GPU, destination GPU) pair, in that order.
inline netsim::FlowGraph transfers(const std::vector<std::pair<int, int>>& pairs, double bytes)
{
  netsim::FlowGraph g;
  for (const auto& [src, dst] : pairs)
    g.add_transfer(src, dst, bytes);
  return g;
}

} // namespace spansim::test
