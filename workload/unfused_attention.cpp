// The unfused attention kernel: Megatron's attention before FlashAttention, as batched GEMMs around a score matrix
// in HBM.
#include "workload/cost_model.hpp"

namespace spansim::workload::detail {

// The pre-FlashAttention path (Megatron's): Q K^T and P V as batched GEMMs over the rank's heads, and the
// fused scale-mask-softmax and the dropout reading and writing the whole s x s score matrix in HBM. It computes the
// masked half too. Backward: four GEMMs (dQ, dK, dP, dV), dropout and softmax backward.
void unfused_attention(const Context& c, LayerCost& k)
{
  const ModelSpec& m = c.m;
  const double s     = c.job.batch.sequence_length;
  const double q     = s / c.cp; // the rank's queries against every key
  const int heads    = static_cast<int>(c.job.batch.micro_batch * m.heads / c.tp);
  const std::vector<GemmShape> fwd{{.m = q, .n = s, .k = qk_dim(m), .groups = heads},
                                   {.m = q, .n = v_dim(m), .k = s, .groups = heads}};
  const std::vector<GemmShape> bwd{{.m = q, .n = qk_dim(m), .k = s, .groups = heads},
                                   {.m = s, .n = qk_dim(m), .k = q, .groups = heads},
                                   {.m = q, .n = s, .k = v_dim(m), .groups = heads},
                                   {.m = s, .n = v_dim(m), .k = q, .groups = heads}};
  const double mem_rate = c.job.gpu.hbm_bandwidth * c.job.gpu.elementwise_efficiency;
  const double scores   = double(heads) * q * s;
  // Forward: softmax reads and writes the scores (2 + 2 bytes), dropout reads them and writes them and a mask
  // (2 + 2 + 1). Backward: dropout's (read the gradient and the mask, write: 5) and softmax's (read the gradient
  // and the softmax output, write: 6).
  const double fwd_bytes = 9 * scores, bwd_bytes = 11 * scores;
  for (const auto& g : fwd) {
    const GemmCost at = gemm_cost(c.job.gpu, Precision::bf16, g, c.clock);
    k.unfused_fwd_seconds += at.seconds;
    k.unfused_fwd_bytes += at.bytes;
    k.unfused_flops += at.flops;
    if (c.clock < 1)
      k.unfused_fwd_clock += at.seconds - gemm_cost(c.job.gpu, Precision::bf16, g).seconds;
  }
  k.clock_fwd_seconds += k.unfused_fwd_clock;
  for (const auto& g : bwd) {
    const GemmCost at = gemm_cost(c.job.gpu, Precision::bf16, g, c.clock);
    k.unfused_bwd_seconds += at.seconds;
    k.unfused_bwd_bytes += at.bytes;
    if (c.clock < 1)
      k.clock_bwd_seconds += at.seconds - gemm_cost(c.job.gpu, Precision::bf16, g).seconds;
  }
  k.unfused_fwd_seconds += fwd_bytes / mem_rate;
  k.unfused_bwd_seconds += bwd_bytes / mem_rate;
  k.unfused_fwd_bytes += fwd_bytes;
  k.unfused_bwd_bytes += bwd_bytes;
  k.scores_bytes = 5 * scores; // softmax output (2), dropout mask (1), dropout output (2)
  k.kernels_fwd += 2 + 2;      // two batched GEMMs, softmax, dropout
  k.kernels_bwd += 4 + 2;
}

} // namespace spansim::workload::detail
