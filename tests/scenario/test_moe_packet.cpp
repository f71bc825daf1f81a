// Packet level (slow): Qwen3-235B-A22B's published layout (Megatron-Bridge 25.11 on 256 H100: TP 2, PP 8, VP 4, EP 32
// over TP x DP with expert TP 1) on a model of Qwen3-235B's shape small enough for packet level (whose engine refuses
// flow graphs of more than 64 GiB: the full model's step moves TiBs), at packet and hybrid fidelity against flow.
#include "scenario/scenario.hpp"
#include "tests/scenario/qwen3_layout.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>
#include <set>

namespace sc = spansim::scenario;
using nlohmann::json;

namespace {

// The same layout on a model of Qwen3-235B's shape, small enough for packet level; all-to-alls timed in isolation
// there (a million transfers otherwise).
json small()
{
  json d            = spansim::test::qwen3_layout();
  d["job"]["model"] = {{"name", "qwen3-235b-shape"},
                       {"layers", 32},
                       {"hidden", 256},
                       {"ffn", 768},
                       {"heads", 4},
                       {"kv_heads", 4},
                       {"head_dim", 64},
                       {"vocab", 4096},
                       {"mlp", "swiglu"},
                       {"moe", {{"experts", 128}, {"experts_per_token", 8}, {"expert_ffn", 96}}}};
  d["job"]["batch"] = {{"global_sequences", 128}, {"sequence_length", 256}, {"micro_batch", 1}};
  d["collectives"]  = {{"alltoall", "isolated"}};
  return d;
}

} // namespace

TEST_CASE("The same layout runs at packet and hybrid fidelity, within 2% of flow")
{
  const auto d      = small();
  const double flow = spansim::test::qwen3_step(d, "flow");
  for (const char* f : {"packet", "hybrid"}) {
    const double t = spansim::test::qwen3_step(d, f);
    std::cout << f << ": " << t << " s against flow " << flow << " s\n";
    CHECK(std::fabs(t - flow) <= 0.02 * flow);
  }
}
