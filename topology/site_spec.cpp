// The node and pod blocks of a topology spec: read (the template's and a building's own, one reader for both),
// checked as a whole (NICs, NVLS, SHARP) and written back as the effective configuration.
#include "topology/site_spec.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace spansim::topology {

using nlohmann::json;
using spec::ObjectReader;

int NodeSpec::nic_of(int local) const
{
  if (!shared_nics())
    return local;
  for (std::size_t n = 0; n < nic_gpus.size(); ++n)
    if (std::find(nic_gpus[n].begin(), nic_gpus[n].end(), local) != nic_gpus[n].end())
      return static_cast<int>(n);
  return local / (gpus / nics); // consecutive blocks (read_node fills nic_gpus; a built spec may leave it empty)
}

namespace detail {

std::string config_number(double v)
{
  // Exact enough to read back: %.15g drops the float noise but keeps every digit a user wrote.
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}
std::string config_bandwidth(double bytes_per_second)
{
  return config_number(bytes_per_second * 8 / 1e9) + "Gbps";
}
std::string config_time(double seconds)
{
  return config_number(seconds * 1e6) + "us";
}
std::string config_distance(double meters)
{
  return config_number(meters / 1e3) + "km";
}

namespace {

// Per NIC the local GPUs behind it: a partition of 0..gpus-1, every NIC with at least one.
std::vector<std::vector<int>> read_nic_gpus(ObjectReader& r, int gpus, int nics)
{
  const auto& raw = r.raw("nic_gpus");
  const auto at   = r.where().member("nic_gpus");
  if (!raw.is_array() || static_cast<int>(raw.size()) != nics)
    at.fail("expected an array of " + std::to_string(nics) + " arrays (one per NIC) of local GPU indices");
  std::vector<std::vector<int>> out;
  std::set<int> seen;
  for (std::size_t n = 0; n < raw.size(); ++n) {
    const auto& list = raw[n];
    if (!list.is_array() || list.empty())
      at.element(n).fail("expected a non-empty array of local GPU indices (0-" + std::to_string(gpus - 1) + ")");
    out.emplace_back();
    for (std::size_t k = 0; k < list.size(); ++k) {
      const auto& v = list[k];
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= gpus)
        at.element(n).element(k).fail("expected a local GPU index of the node (0-" + std::to_string(gpus - 1) +
                                      "): the node has " + std::to_string(gpus) + " GPUs");
      const int g = v.get<int>();
      if (!seen.insert(g).second)
        at.element(n).element(k).fail("GPU " + std::to_string(g) + " is behind two NICs; each GPU has one NIC");
      out.back().push_back(g);
    }
  }
  if (static_cast<int>(seen.size()) != gpus)
    at.fail("every GPU of the node needs a NIC: " + std::to_string(gpus - static_cast<int>(seen.size())) + " of the " +
            std::to_string(gpus) + " GPUs are behind none");
  return out;
}

} // namespace

void read_node(ObjectReader& r, NodeSpec& node, bool required)
{
  if (required) {
    node.gpus             = static_cast<int>(r.integer("gpus", 1, 1024));
    node.nvlink_bandwidth = r.bandwidth("nvlink_bandwidth");
    node.nvlink_latency   = r.time("nvlink_latency");
  } else {
    node.gpus             = static_cast<int>(r.optional_integer("gpus", 1, 1024).value_or(node.gpus));
    node.nvlink_bandwidth = r.optional_bandwidth("nvlink_bandwidth").value_or(node.nvlink_bandwidth);
    node.nvlink_latency   = r.optional_time("nvlink_latency").value_or(node.nvlink_latency);
  }
  node.nccl_efficiency  = r.optional_number("nccl_efficiency", 0.05, 1).value_or(required ? 1 : node.nccl_efficiency);
  const bool new_nvlink = r.has("nvlink");
  node.nvlink           = r.optional_enumeration<NvLink>("nvlink").value_or(node.nvlink);
  node.step_latency     = r.optional_time("step_latency")
                          .value_or(required || new_nvlink ? nvlink_step_latency(node.nvlink) : node.step_latency);
  node.nvls_warp_rate =
      r.optional_bandwidth("nvls_warp_rate")
          .value_or(required || new_nvlink ? nvlink_nvls_warp_rate(node.nvlink) : node.nvls_warp_rate);
  node.p2p_channel_rate =
      r.optional_bandwidth("p2p_channel_rate")
          .value_or(required || new_nvlink ? nvlink_p2p_channel_rate(node.nvlink) : node.p2p_channel_rate);
  node.p2p_ll_channel_rate =
      r.optional_bandwidth("p2p_ll_channel_rate")
          .value_or(required || new_nvlink ? nvlink_p2p_ll_channel_rate(node.nvlink) : node.p2p_ll_channel_rate);
  node.nvls = r.optional_boolean("nvls").value_or(node.nvls);
  if (node.nvls && node.nvlink == NvLink::nvlink3)
    r.fail(r.has("nvls") ? "nvls" : "nvlink",
           "NVLS (NVLink SHARP) needs an NVSwitch that reduces: nvlink4 (H100, H200) or nvlink5 (Blackwell); "
           "this node's is nvlink3");
  if (r.has("nics") || r.has("gpus")) { // a building's own node size: one NIC per GPU unless it says otherwise
    node.nics = static_cast<int>(r.optional_integer("nics", 1, 4096).value_or(0));
    node.nic_gpus.clear();
  }
  if (node.nics > 0) {
    if (node.nics == node.gpus)
      node.nics = 0; // one per GPU: the default
    else if (node.nics < node.gpus && node.gpus % node.nics != 0 && !r.has("nic_gpus"))
      r.fail("nics", std::to_string(node.nics) + " NICs do not split " + std::to_string(node.gpus) +
                         " GPUs evenly: give nic_gpus, the local GPUs behind each NIC");
    else if (node.nics > node.gpus && node.nics % node.gpus != 0)
      r.fail("nics", std::to_string(node.nics) + " NIC ports are not a whole number per GPU of the " +
                         std::to_string(node.gpus) + " (a GPU's ports are fused into one device, as NCCL does)");
  }
  if (r.has("nic_gpus")) {
    if (!node.shared_nics())
      r.fail("nic_gpus", "nic_gpus is for nodes with fewer NICs than GPUs (nics " + std::to_string(node.nic_count()) +
                             ", gpus " + std::to_string(node.gpus) + ")");
    node.nic_gpus = read_nic_gpus(r, node.gpus, node.nics);
  } else if (node.shared_nics() && node.nic_gpus.empty()) {
    const int per = node.gpus / node.nics;
    for (int n = 0; n < node.nics; ++n) {
      node.nic_gpus.emplace_back();
      for (int g = 0; g < per; ++g)
        node.nic_gpus.back().push_back(n * per + g);
    }
  }
  r.finish();
}

void read_pod(ObjectReader& r, PodSpec& pod, bool required)
{
  if (required) {
    pod.nodes            = static_cast<int>(r.integer("nodes", 1, 1'000'000));
    pod.rail_optimized   = r.boolean("rail_optimized");
    pod.nic_bandwidth    = r.bandwidth("nic_bandwidth");
    pod.leaf_radix       = static_cast<int>(r.integer("leaf_radix", 2, 4096));
    pod.spine_radix      = static_cast<int>(r.integer("spine_radix", 2, 4096));
    pod.oversubscription = r.number("oversubscription", 1, 64);
    pod.link_latency     = r.time("link_latency");
  } else {
    pod.nodes            = static_cast<int>(r.optional_integer("nodes", 1, 1'000'000).value_or(pod.nodes));
    pod.rail_optimized   = r.optional_boolean("rail_optimized").value_or(pod.rail_optimized);
    pod.leaf_radix       = static_cast<int>(r.optional_integer("leaf_radix", 2, 4096).value_or(pod.leaf_radix));
    pod.spine_radix      = static_cast<int>(r.optional_integer("spine_radix", 2, 4096).value_or(pod.spine_radix));
    pod.oversubscription = r.optional_number("oversubscription", 1, 64).value_or(pod.oversubscription);
    pod.nic_bandwidth    = r.optional_bandwidth("nic_bandwidth").value_or(pod.nic_bandwidth);
    pod.link_latency     = r.optional_time("link_latency").value_or(pod.link_latency);
  }
  const bool new_fabric = r.has("fabric");
  pod.fabric            = r.optional_enumeration<Fabric>("fabric").value_or(pod.fabric);
  pod.sharp             = r.optional_boolean("sharp").value_or(pod.sharp);
  // What the pod does not say is its fabric's (a building that changes the fabric takes the new one's).
  const auto defaults = fabric_defaults(pod.fabric);
  pod.nccl_efficiency = r.optional_number("nccl_efficiency", 0.05, 1)
                            .value_or(required || new_fabric ? defaults.nccl_efficiency : pod.nccl_efficiency);
  pod.net_latency =
      r.optional_time("net_latency").value_or(required || new_fabric ? defaults.net_latency : pod.net_latency);
  if (pod.sharp && pod.fabric != Fabric::ib)
    r.fail(r.has("sharp") ? "sharp" : "fabric",
           "SHARP (in-network reduction, NCCL's CollNet) needs InfiniBand switches that reduce (fabric \"ib\"); this "
           "pod's fabric is \"" +
               std::string(name_of(pod.fabric)) + "\"");
  r.finish();
}

json node_json(const NodeSpec& node)
{
  json j = {{"gpus", node.gpus},
            {"nvlink_bandwidth", config_bandwidth(node.nvlink_bandwidth)},
            {"nvlink_latency", config_time(node.nvlink_latency)},
            {"nccl_efficiency", node.nccl_efficiency},
            {"nvlink", name_of(node.nvlink)},
            {"nvls", node.nvls},
            {"nics", node.nic_count()},
            {"step_latency", config_time(node.step_latency)}};
  if (node.nvls_warp_rate > 0)
    j["nvls_warp_rate"] = config_bandwidth(node.nvls_warp_rate);
  if (node.p2p_channel_rate > 0)
    j["p2p_channel_rate"] = config_bandwidth(node.p2p_channel_rate);
  if (node.p2p_ll_channel_rate > 0)
    j["p2p_ll_channel_rate"] = config_bandwidth(node.p2p_ll_channel_rate);
  if (node.shared_nics())
    j["nic_gpus"] = node.nic_gpus;
  return j;
}

json pod_json(const PodSpec& pod)
{
  return {{"nodes", pod.nodes},
          {"rail_optimized", pod.rail_optimized},
          {"nic_bandwidth", config_bandwidth(pod.nic_bandwidth)},
          {"leaf_radix", pod.leaf_radix},
          {"spine_radix", pod.spine_radix},
          {"oversubscription", pod.oversubscription},
          {"link_latency", config_time(pod.link_latency)},
          {"fabric", name_of(pod.fabric)},
          {"sharp", pod.sharp},
          {"nccl_efficiency", pod.nccl_efficiency},
          {"net_latency", config_time(pod.net_latency)}};
}

} // namespace detail

std::string fabrics_file()
{
  return std::string(SPANSIM_DATA_DIR) + "/topology/fabrics.json";
}

namespace {

struct Shipped {
  std::map<Fabric, FabricDefaults> fabrics;
  std::map<NvLink, double> step_latency;
  std::map<NvLink, double> nvls_warp_rate;
  std::map<NvLink, double> p2p_channel_rate;
  std::map<NvLink, double> p2p_ll_channel_rate;
};

// Read once per process: reference data, not simulation state.
const Shipped& shipped()
{
  static const Shipped all = [] {
    const std::string file = fabrics_file();
    const auto doc         = spec::load_json_file(file);
    ObjectReader root(doc, spec::Location{file});
    root.string("about");
    root.optional_string("fitted_by");
    Shipped out;
    auto fabrics = root.object("fabrics");
    for (auto f : enum_names(Fabric{})) {
      auto o = fabrics.object(f);
      FabricDefaults d;
      d.nccl_efficiency = o.number("nccl_efficiency", 0.05, 1);
      d.net_latency     = o.time("net_latency");
      o.raw("fitted_on");
      o.finish();
      out.fabrics.emplace(*parse_name<Fabric>(f), d);
    }
    fabrics.finish();
    auto nvlink = root.object("nvlink");
    for (auto g : enum_names(NvLink{})) {
      auto o = nvlink.object(g);
      out.step_latency.emplace(*parse_name<NvLink>(g), o.time("step_latency"));
      out.nvls_warp_rate.emplace(*parse_name<NvLink>(g), o.optional_bandwidth("nvls_warp_rate").value_or(0));
      o.raw("nvls_fitted_on");
      out.p2p_channel_rate.emplace(*parse_name<NvLink>(g), o.optional_bandwidth("p2p_channel_rate").value_or(0));
      out.p2p_ll_channel_rate.emplace(*parse_name<NvLink>(g), o.optional_bandwidth("p2p_ll_channel_rate").value_or(0));
      o.raw("p2p_fitted_on");
      o.raw("fitted_on");
      o.finish();
    }
    nvlink.finish();
    root.finish();
    return out;
  }();
  return all;
}

} // namespace

FabricDefaults fabric_defaults(Fabric fabric)
{
  return shipped().fabrics.at(fabric);
}

double nvlink_step_latency(NvLink generation)
{
  return shipped().step_latency.at(generation);
}

double nvlink_nvls_warp_rate(NvLink generation)
{
  return shipped().nvls_warp_rate.at(generation);
}

double nvlink_p2p_channel_rate(NvLink generation)
{
  return shipped().p2p_channel_rate.at(generation);
}

double nvlink_p2p_ll_channel_rate(NvLink generation)
{
  return shipped().p2p_ll_channel_rate.at(generation);
}

} // namespace spansim::topology
