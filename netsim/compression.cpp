// Compression rules: reading them, and picking the one that applies to an op.
#include "netsim/compression.hpp"

#include "common/json_reader.hpp"
#include "common/names.hpp"
#include "common/units.hpp"
#include "topology/topology.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace spansim::netsim {

using nlohmann::json;

double CompressionRule::cost(double bytes) const
{
  double s = 0;
  if (compress_rate > 0)
    s += bytes / compress_rate;
  if (decompress_rate > 0)
    s += bytes / decompress_rate;
  return s;
}

json CompressionRule::to_json() const
{
  json purposes_json = json::array();
  for (auto p : purposes)
    purposes_json.push_back(name_of(p));
  json out = {{"dim", name_of(dim)}, {"across", name_of(across)}, {"ratio", ratio}};
  if (!purposes.empty())
    out["purposes"] = purposes_json;
  auto exact = [](double rate) { return std::to_string(static_cast<long long>(std::llround(rate))) + "Bps"; };
  if (compress_rate > 0)
    out["compress_rate"] = exact(compress_rate);
  if (decompress_rate > 0)
    out["decompress_rate"] = exact(decompress_rate);
  return out;
}

std::string CompressionRule::label() const
{
  std::ostringstream ratio_text;
  ratio_text << ratio;
  std::string s = std::string(name_of(dim));
  for (auto p : purposes)
    s += (p == purposes.front() ? "(" : ",") + std::string(name_of(p));
  if (!purposes.empty())
    s += ")";
  return s + "/" + std::string(name_of(across)) + " x" + ratio_text.str();
}

std::string CompressionSpec::label() const
{
  std::string s;
  for (const auto& r : rules)
    s += (s.empty() ? "" : "+") + r.label();
  return s.empty() ? "none" : s;
}

const CompressionRule* CompressionSpec::rule_for(workload::Dim dim, workload::Purpose purpose, Boundary crossed) const
{
  const CompressionRule* best = nullptr;
  for (const auto& r : rules) {
    if (r.dim != dim || crossed < r.across)
      continue;
    if (!r.purposes.empty() && std::find(r.purposes.begin(), r.purposes.end(), purpose) == r.purposes.end())
      continue;
    if (!best || r.across > best->across)
      best = &r;
  }
  return best;
}

json CompressionSpec::to_json() const
{
  json out = json::array();
  for (const auto& r : rules)
    out.push_back(r.to_json());
  return out;
}

CompressionSpec read_compression(const json& list, const std::string& file, const std::string& json_path)
{
  const spec::Location where{file, json_path};
  if (!list.is_array())
    where.fail("expected a list of rules such as {\"dim\": \"dp\", \"across\": \"region\", \"ratio\": 4}");
  CompressionSpec out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    spec::ObjectReader r(list[i], where.element(i));
    CompressionRule rule;
    rule.dim = r.enumeration<workload::Dim>("dim");
    if (r.has("across"))
      rule.across = r.choice("across", {"building", "region"}) == "building" ? Boundary::building : Boundary::region;
    rule.ratio = r.number("ratio", 1, 1e6);
    for (auto [key, field] :
         {std::pair{"compress_rate", &rule.compress_rate}, std::pair{"decompress_rate", &rule.decompress_rate}})
      if (auto b = r.optional_bandwidth(key)) {
        if (*b <= 0)
          r.fail(key, "expected a positive rate such as \"500GBps\" (leave it out for free)");
        *field = *b;
      }
    if (r.has("purposes")) {
      for (const auto& name : r.strings("purposes")) {
        auto p = parse_name<workload::Purpose>(name);
        if (!p || *p == workload::Purpose::compute)
          r.fail("purposes", "\"" + name + "\" is not a communication purpose; allowed: " +
                                 "tp_activations, cp_kv, cp_kv_grads, pp_activations, pp_gradients, param_gather, "
                                 "grad_reduce, ep_dispatch, ep_combine");
        rule.purposes.push_back(*p);
      }
    }
    for (const auto& other : out.rules)
      if (other.dim == rule.dim && other.across == rule.across && other.purposes == rule.purposes)
        r.fail("dim", "a rule for this dimension, boundary and purposes is already given");
    r.finish();
    out.rules.push_back(std::move(rule));
  }
  return out;
}

Boundary crossed(const topology::Topology& topology, const std::vector<int>& gpus)
{
  Boundary out = Boundary::none;
  if (gpus.empty())
    return out;
  const auto first = topology.locate(gpus.front());
  for (int g : gpus) {
    const auto l = topology.locate(g);
    if (l.region != first.region)
      return Boundary::region;
    if (l.building != first.building)
      out = Boundary::building;
  }
  return out;
}

} // namespace spansim::netsim
