// Parameters of a model, layer by layer and in all: what each layer holds and how parallelism splits it.
#include "workload/cost_model.hpp"

namespace spansim::workload {

namespace detail {

namespace {

double gated_factor(MlpKind kind)
{
  return kind == MlpKind::gated ? 3 : 2;
}

double attention_params(const ModelSpec& m)
{
  const double h = m.hidden;
  if (m.attention == AttentionKind::mla) {
    const auto& a   = m.mla;
    const double qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    double q        = a.q_lora_rank > 0 ? h * a.q_lora_rank + double(a.q_lora_rank) * m.heads * qk : h * m.heads * qk;
    double kv       = h * (a.kv_lora_rank + a.qk_rope_head_dim) +
                double(a.kv_lora_rank) * m.heads * (a.qk_nope_head_dim + a.v_head_dim);
    return q + kv + double(m.heads) * a.v_head_dim * h;
  }
  const double q  = double(m.heads) * m.head_dim;
  const double kv = double(m.kv_heads) * m.head_dim;
  return h * q + 2 * h * kv + q * h;
}

} // namespace

double v_dim(const ModelSpec& m)
{
  return m.attention == AttentionKind::mla ? m.mla.v_head_dim : m.head_dim;
}

double qk_dim(const ModelSpec& m)
{
  return m.attention == AttentionKind::mla ? m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim : m.head_dim;
}

LayerParams layer_params(const ModelSpec& m, int layer)
{
  LayerParams p;
  const double h    = m.hidden;
  p.attention       = attention_params(m);
  p.norms           = 2 * h + (m.qk_norm ? 2.0 * m.head_dim : 0);
  const double g    = gated_factor(m.mlp);
  double mlp_active = 0;
  if (m.is_moe_layer(layer)) {
    const double expert = g * h * m.moe.expert_ffn;
    p.experts           = m.moe.experts * expert;
    p.router            = h * m.moe.experts;
    p.mlp_dense         = m.moe.shared_experts * expert + p.router;
    mlp_active          = (m.moe.experts_per_token + m.moe.shared_experts) * expert + p.router;
    p.ffn_active        = double(m.moe.experts_per_token + m.moe.shared_experts) * m.moe.expert_ffn;
  } else {
    p.mlp_dense  = g * h * m.ffn;
    mlp_active   = p.mlp_dense;
    p.ffn_active = m.ffn;
  }
  p.active = p.attention + p.norms + mlp_active;
  p.matmul = p.attention + mlp_active;
  return p;
}

} // namespace detail

ModelParams count_params(const ModelSpec& model)
{
  ModelParams p;
  const double emb = double(model.vocab) * model.hidden;
  for (int l = 0; l < model.all_layers(); ++l) {
    detail::LayerParams lp = detail::layer_params(model, l);
    p.total += lp.attention + lp.norms + lp.mlp_dense + lp.experts;
    p.active += lp.active;
    p.matmul_active += lp.matmul;
  }
  const double head = model.tied_embeddings ? 0 : emb;
  p.embedding       = emb;
  p.total += emb + head + model.hidden;
  p.active += emb + head + model.hidden;
  p.matmul_active += emb; // the output projection, tied or not
  // Each multi-token prediction module: eh_proj (2h -> h) and three norms of its own; its tokens pass through the
  // shared output projection again.
  const double mtp = model.mtp_layers;
  const auto own   = detail::mtp_module_params(model);
  p.total += mtp * (own.eh_proj + own.norms);
  p.active += mtp * (own.eh_proj + own.norms + emb);
  p.matmul_active += mtp * (own.eh_proj + emb);
  return p;
}

} // namespace spansim::workload
