#pragma once
// Optimize specs for the optimizer's tests.

#include "optimizer/indexed_space.hpp"
#include "optimizer/optimizer.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace spansim::test {

using nlohmann::json;

/// @brief Loads an optimize spec given as JSON (through a scratch file, as the command line would).
inline optimizer::OptimizeSpec spec_from(const json& j)
{
  // Removed however the load ends: the bad-input tests expect it to throw.
  struct Scratch {
    std::string path = "/tmp/spansim-optimize-" + std::to_string(::getpid()) + ".json";
    ~Scratch() { std::remove(path.c_str()); }
  } scratch;
  std::ofstream(scratch.path) << j.dump();
  return optimizer::load_optimize_spec(scratch.path);
}

/// @brief Llama 3 8B on 32 H100s over two regions: a space small enough to search exhaustively at flow level.
inline json small_space()
{
  return {{"name", "small"},
          {"topology", "two-regions"},
          {"model", "llama3-8b"},
          {"gpu", "h100"},
          {"gpus", 32},
          {"buildings", {"east-b0", "west-b0"}},
          {"batch", {{"global_tokens", 1048576}, {"sequence_length", 8192}}},
          {"search",
           {{"tp", {4, 8}},
            {"pp", {1, 2}},
            {"data_parallel", {"fsdp", "hsdp"}},
            {"schedule", {"1f1b"}},
            {"order", {{"tp", "cp", "pp", "dp"}, {"tp", "cp", "dp", "pp"}}},
            {"recompute", {"none"}},
            {"dp_algorithm", {"auto"}}}},
          {"top_k", 3},
          {"workers", 2},
          {"refine_fidelity", "flow"}};
}

/// @brief Qwen3-30B-A3B on 128 H100s of two-buildings, tp = cp = pp = 1, EP 8, 16 and 32 with `dispatchers` and
/// DeepEP node limits 0, 1, 2 and 4.
inline json ep_space(const json& dispatchers)
{
  return {{"name", "node-limits"},
          {"topology", "two-buildings"},
          {"model", "qwen3-30b-a3b"},
          {"gpu", "h100"},
          {"gpus", 128},
          {"buildings", {"bldg-a", "bldg-b"}},
          {"batch", {{"global_sequences", 512}, {"sequence_length", 4096}}},
          {"search",
           {{"tp", {1}},
            {"pp", {1}},
            {"ep", {8, 16, 32}},
            {"data_parallel", {"fsdp"}},
            {"schedule", {"1f1b"}},
            {"order", {{"tp", "cp", "pp", "dp"}}},
            {"recompute", {"selective"}},
            {"dispatcher", dispatchers},
            {"node_limit", {0, 1, 2, 4}}}}};
}

/// @brief Llama 3 8B on 256 H100s over the two regions of two-regions, loaded as a spec: about 2,000 distinct
/// points once duplicates go, screened to the best 1%.
inline optimizer::OptimizeSpec screened_spec()
{
  auto j      = small_space();
  j["name"]   = "screened";
  j["gpus"]   = 256;
  j["batch"]  = {{"global_tokens", 4194304}, {"sequence_length", 8192}};
  j["search"] = {{"tp", {1, 2, 4, 8}},
                 {"cp", {1, 2}},
                 {"pp", {1, 2, 4}},
                 {"data_parallel", {"fsdp", "hsdp"}},
                 {"micro_batch", {1}},
                 {"schedule", {"1f1b", "interleaved-1f1b"}},
                 {"virtual_stages", {2}},
                 {"order", "all"},
                 {"recompute", {"none", "selective"}},
                 {"dp_algorithm", {"auto"}}};
  j["top_k"]  = 5;
  j["screen"] = {{"above", 0}, {"keep", 0.01}, {"keep_min", 20}, {"keep_max", 400}};
  return spec_from(j);
}

/// @brief The distinct points of a space: its divisible, canonical combinations, in index order.
inline std::vector<optimizer::Point> canonical_points(const optimizer::IndexedSpace& space)
{
  std::vector<optimizer::Point> out;
  for (std::uint64_t i = 0; i < space.size(); ++i) {
    const auto at = space.decode(i);
    if (space.divisible(at) && space.canonical(at))
      out.push_back(space.point(at));
  }
  return out;
}

/// @brief The optimizer's search and the exhaustive one (every feasible point re-simulated) on the same spec.
struct PickAndExhaustive {
  optimizer::OptimizeResult picked, exhaustive;
  double pick = 0, best = 0; ///< their winners' refined step times
};
inline PickAndExhaustive pick_and_exhaustive(optimizer::OptimizeSpec spec)
{
  PickAndExhaustive r;
  r.picked     = optimizer::optimize(spec);
  spec.top_k   = 1000;
  r.exhaustive = optimizer::optimize(spec);
  r.pick       = *r.picked.ranked.front().refined;
  r.best       = *r.exhaustive.ranked.front().refined;
  return r;
}

} // namespace spansim::test
