// Model FLOPs per step under the conventions published figures use, so that a TFLOP/s or an MFU can be compared
// with the source's own.
#include "workload/cost_model.hpp"
#include "workload/workload.hpp"

namespace spansim::workload {

namespace {

// Megatron-LM's num_floating_point_operations (megatron/training/training.py), per token: every GEMM three times
// (forward, data and weight gradients), attention over the full score matrix (its `seq_length / hidden_size`
// term), no router, no norms. Later Megatron-Bridge releases halve the attention term; those match `causal` to
// within the router and norms. A multi-token prediction module counts as a layer like the last, plus its norms
// and eh_proj, and its logits.
double megatron_per_token(const ModelSpec& m, double s)
{
  const double h = m.hidden, a = m.heads;
  const auto own = detail::mtp_module_params(m);
  double per     = 6 * m.mtp_layers * (own.norms + own.eh_proj);
  for (int l = 0; l < m.all_layers(); ++l) {
    if (m.attention == AttentionKind::mla) {
      const double qk = m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim;
      const double q  = m.mla.q_lora_rank == 0 ? h * a * qk : m.mla.q_lora_rank * (h + a * qk + 1);
      per += 6 * (q + m.mla.kv_lora_rank * (h + a * (m.mla.qk_nope_head_dim + m.mla.v_head_dim) + 1) +
                  h * m.mla.qk_rope_head_dim + a * m.mla.v_head_dim * h + s * a * qk + s * a * m.mla.v_head_dim);
    } else {
      const double ratio = a * m.head_dim / h;
      per += 12 * h * h * (1 + double(m.kv_heads) / a + s / h) * ratio;
    }
    const double gated = m.mlp == MlpKind::gated ? 1.5 : 1;
    const double ffn =
        m.is_moe_layer(l) ? double(m.moe.experts_per_token + m.moe.shared_experts) * m.moe.expert_ffn : double(m.ffn);
    per += 12 * h * ffn * gated;
  }
  return per + 6 * h * m.vocab * (1.0 + m.mtp_layers);
}

// torchtitan's get_nparams_and_flops: 6 N + 12 L H Q T per token, N the parameters a token goes through less the
// input embedding, H heads of width Q, T the sequence (full attention). MLA's Q is the mean of its query-key and
// value widths.
double torchtitan_per_token(const ModelSpec& m, double s)
{
  const ModelParams p = count_params(m);
  const double q      = (detail::qk_dim(m) + detail::v_dim(m)) / 2;
  return 6 * (p.active - p.embedding) + 12.0 * m.all_layers() * m.heads * q * s;
}

} // namespace

double FlopCounts::get(FlopConvention c) const
{
  return c == FlopConvention::megatron ? megatron : c == FlopConvention::torchtitan ? torchtitan : causal;
}

FlopCounts model_flop_counts(const JobSpec& job, double causal)
{
  FlopCounts out;
  out.causal = causal;
  if (job.dlrm || job.model.layers == 0)
    return out;
  const double tokens = job.tokens_per_step(), s = job.batch.sequence_length;
  out.megatron   = tokens * megatron_per_token(job.model, s);
  out.torchtitan = tokens * torchtitan_per_token(job.model, s);
  return out;
}

double causal_flops_per_token(const ModelSpec& m, double s)
{
  const ModelParams p = count_params(m);
  return 6 * p.matmul_active + 3.0 * m.all_layers() * m.heads * s * (detail::qk_dim(m) + detail::v_dim(m));
}

} // namespace spansim::workload
