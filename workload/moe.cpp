// MoE routing statistics: how many nodes and GPUs a token copy reaches (the deduplicated bytes of a hierarchical
// dispatch) and how much the busiest expert GPU computes under a routing balance (the seeded expert loads).
#include "common/format.hpp"
#include "common/random.hpp"
#include "workload/workload.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace spansim::workload {

double hit_probability(int experts, int top_k, int in_set)
{
  // C(E - s, k) / C(E, k) = prod_{i<k} (E - s - i) / (E - i): the chance that none of the k draws is in the set.
  double none = 1;
  for (int i = 0; i < top_k && none > 0; ++i)
    none *= std::max(0.0, double(experts - in_set - i)) / double(experts - i);
  return 1 - none;
}

DispatchRates dispatch_rates(int experts, int top_k, int gpus, int nodes, int node_limit)
{
  DispatchRates r;
  if (experts <= 0 || gpus <= 0 || nodes <= 0)
    return r;
  const int per_node = experts / nodes, per_gpu = experts / gpus;
  if (node_limit <= 0 || node_limit >= nodes) {
    r.node = hit_probability(experts, top_k, per_node);
    r.gpu  = hit_probability(experts, top_k, per_gpu);
    return r;
  }
  // Node-limited routing: a token picks node_limit of the nodes first, then its top-k among their experts. Under
  // uniform affinities every node is as likely to be picked (node_limit / nodes), and the k experts are uniform among
  // the picked nodes' experts.
  const double picked = double(node_limit) / nodes;
  const int within    = per_node * node_limit;
  r.node              = picked * hit_probability(within, top_k, per_node);
  r.gpu               = picked * hit_probability(within, top_k, per_gpu);
  return r;
}

double ExpertLoad::mean_busiest() const
{
  double sum = 0;
  int n      = 0;
  for (double b : busiest)
    if (b > 0) {
      sum += b;
      ++n;
    }
  return n > 0 ? sum / n : 1;
}

double ExpertLoad::max_busiest() const
{
  return busiest.empty() ? 1 : *std::max_element(busiest.begin(), busiest.end());
}

std::vector<double> expert_popularity(const JobSpec& job, int layer)
{
  const ModelSpec& m = job.model;
  const auto& r      = job.dispatch.routing;
  const int experts  = m.moe.experts;
  std::vector<double> load(static_cast<std::size_t>(experts), 1);
  // Log-normal popularity with coefficient of variation `skew`: sigma^2 = ln(1 + skew^2), mean 1 by construction.
  const double sigma = std::sqrt(std::log1p(r.skew * r.skew));
  if (r.balance != RoutingBalance::balanced && sigma > 0) {
    Random rng(r.seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(layer));
    for (int e = 0; e < experts; e += 2) {
      // Box-Muller: two standard normals from two uniforms.
      const double radius = std::sqrt(-2 * std::log(rng.uniform())), angle = 2 * M_PI * rng.uniform();
      load[static_cast<std::size_t>(e)] = std::exp(sigma * radius * std::cos(angle) - sigma * sigma / 2);
      if (e + 1 < experts)
        load[static_cast<std::size_t>(e + 1)] = std::exp(sigma * radius * std::sin(angle) - sigma * sigma / 2);
    }
    const double mean = std::accumulate(load.begin(), load.end(), 0.0) / experts;
    for (double& l : load)
      l /= mean;
  }
  if (r.balance == RoutingBalance::token_drop)
    for (double& l : load)
      l = r.pad_to_capacity ? r.capacity_factor : std::min(l, r.capacity_factor);
  return load;
}

ExpertLoad expert_load(const JobSpec& job)
{
  const ModelSpec& m = job.model;
  ExpertLoad out;
  out.busiest.assign(static_cast<std::size_t>(m.all_layers()), 0);
  if (m.moe.experts == 0)
    return out;
  const int experts = m.moe.experts, ep = std::max(1, job.parallelism.ep), local = experts / ep;
  std::vector<double> member_total(static_cast<std::size_t>(ep), 0);
  for (int layer = 0; layer < m.all_layers(); ++layer) {
    if (!m.is_moe_layer(layer))
      continue;
    const auto load = expert_popularity(job, layer);
    double busiest  = 0;
    for (int j = 0; j < ep; ++j) {
      const double mine = std::accumulate(load.begin() + j * local, load.begin() + (j + 1) * local, 0.0) / local;
      member_total[static_cast<std::size_t>(j)] += mine;
      busiest = std::max(busiest, mine);
    }
    out.busiest[static_cast<std::size_t>(layer)] = busiest;
  }
  out.hot_member = static_cast<int>(std::max_element(member_total.begin(), member_total.end()) - member_total.begin());
  return out;
}

namespace {

int effective_sms(const JobSpec& job)
{
  const auto& d = job.dispatch;
  return d.sms > 0 ? d.sms : d.dispatcher == Dispatcher::deepep ? kDeepEpSms : job.gpu.comm_sms;
}

} // namespace

nlohmann::json dispatch_json(const JobSpec& job)
{
  if (job.model.moe.experts == 0)
    return nullptr;
  const auto& d    = job.dispatch;
  const auto load  = expert_load(job);
  nlohmann::json r = {{"balance", name_of(d.routing.balance)}};
  if (d.routing.balance != RoutingBalance::balanced) {
    r["skew"] = d.routing.skew;
    r["seed"] = d.routing.seed;
  }
  if (d.routing.balance == RoutingBalance::token_drop) {
    r["capacity_factor"] = d.routing.capacity_factor;
    r["pad_to_capacity"] = d.routing.pad_to_capacity;
  }
  return {{"dispatcher", name_of(d.dispatcher)},
          {"node_limit", d.node_limit},
          {"dispatch_precision", name_of(d.precision)},
          {"dispatch_sms", effective_sms(job)},
          {"routing", r},
          {"busiest_expert_load", {{"mean", load.mean_busiest()}, {"max", load.max_busiest()}}},
          {"ep_overlap", job.schedule.ep_overlap}};
}

std::string dispatch_line(const JobSpec& job)
{
  if (job.model.moe.experts == 0)
    return {};
  const auto& d    = job.dispatch;
  std::string line = std::string(name_of(d.dispatcher)) + " (";
  if (d.node_limit > 0)
    line += "at most " + std::to_string(d.node_limit) + " nodes per token, ";
  line += std::string(d.precision == Precision::fp8 ? "FP8" : "BF16") + " dispatch, " +
          std::to_string(effective_sms(job)) + " SMs); " + std::string(name_of(d.routing.balance)) + " routing";
  if (d.routing.balance == RoutingBalance::token_drop)
    line += " (capacity factor " + format_significant(d.routing.capacity_factor, 3) +
            (d.routing.pad_to_capacity ? ", padded" : "") + ")";
  const auto load = expert_load(job);
  line += ": the busiest expert GPU computes " + format_significant(load.mean_busiest(), 3) + "x the mean (at most " +
          format_significant(load.max_busiest(), 3) + "x)";
  if (job.schedule.overlapped_pairs())
    line += "; all-to-alls overlapped in forward-backward pairs";
  return line;
}

std::string dispatch_sms_problem(std::int64_t sms, const GpuSpec& gpu, const std::string& gpu_label)
{
  if (sms >= 1 && sms <= gpu.gemm.sms - 1)
    return {};
  return "dispatch_sms " + std::to_string(sms) + ": GPU " + gpu_label + " has " + std::to_string(gpu.gemm.sms) +
         " SMs, and the dispatch and combine kernels leave at least one to the compute they overlap (allowed: 1 "
         "to " +
         std::to_string(gpu.gemm.sms - 1) + ")";
}

} // namespace spansim::workload
