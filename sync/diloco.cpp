// DiLoCo's block and the step averaged over an outer step (the outer exchange itself: outer_sync.cpp).
#include "sync/sync.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/units.hpp"
#include "netsim/collectives.hpp"

#include <algorithm>
#include <map>
#include <sstream>

namespace spansim::sync {

using nlohmann::json;

json DilocoSpec::to_json() const
{
  json out = {
      {"every", every}, {"overlap_steps", overlap_steps}, {"fragments", fragments}, {"workers", name_of(workers)}};
  if (workers == WorkerLevel::ranges) {
    out["workers"] = json::array();
    for (const auto& w : ranges) {
      json g = json::array();
      for (auto [a, b] : w.gpus)
        g.push_back(std::to_string(a) + "-" + std::to_string(b));
      out["workers"].push_back({{"name", w.name}, {"gpus", g}});
      if (w.uplink > 0)
        out["workers"].back()["uplink"] = units::format_bandwidth(w.uplink);
    }
  }
  if (uplink > 0)
    out["uplink"] = units::format_bandwidth(uplink);
  if (compression) {
    out["compression"] = compression->to_json();
    out["compression"].erase("dim");
    out["compression"].erase("across");
    out["compression"].erase("purposes");
  }
  if (quantization) {
    out["quantization"] = {{"bits", quantization->bits}};
    out["quantization"]["rate"] =
        quantization->rate > 0 ? json(units::format_bandwidth(quantization->rate)) : json("hbm");
  }
  return out;
}

std::string DilocoSpec::label() const
{
  std::string s = "H" + std::to_string(every);
  if (workers != WorkerLevel::region)
    s += " per-" + std::string(name_of(workers));
  if (fragments > 1)
    s += " F" + std::to_string(fragments);
  if (overlap_steps > 0)
    s += " overlap" + std::to_string(overlap_steps);
  if (compression) {
    std::ostringstream r;
    r << compression->ratio;
    s += " x" + r.str();
  }
  if (quantization)
    s += " q" + std::to_string(quantization->bits);
  return s;
}

namespace {

// "0-47", "12" or an array of them: inclusive GPU ranges.
std::vector<std::pair<int, int>> read_gpu_ranges(spec::ObjectReader& w)
{
  const auto& raw = w.raw("gpus");
  std::vector<std::string> items;
  if (raw.is_string())
    items.push_back(raw.get<std::string>());
  else if (raw.is_array()) {
    for (const auto& e : raw) {
      if (!e.is_string())
        w.fail("gpus", "expected GPU ranges such as \"0-47\" or [\"0-7\", \"16-23\"]");
      items.push_back(e.get<std::string>());
    }
  } else
    w.fail("gpus", "expected GPU ranges such as \"0-47\" or [\"0-7\", \"16-23\"]");
  std::vector<std::pair<int, int>> out;
  for (const auto& item : items) {
    const auto dash = item.find('-');
    try {
      std::size_t used = 0;
      const int a      = std::stoi(item.substr(0, dash), &used);
      if (used != (dash == std::string::npos ? item.size() : dash))
        throw std::invalid_argument(item);
      int b = a;
      if (dash != std::string::npos) {
        const auto rest = item.substr(dash + 1);
        b               = std::stoi(rest, &used);
        if (used != rest.size())
          throw std::invalid_argument(item);
      }
      if (a < 0 || b < a)
        throw std::invalid_argument(item);
      out.emplace_back(a, b);
    } catch (const std::logic_error&) {
      w.fail("gpus",
             "\"" + item + "\" is not a GPU range (expected \"first-last\" with 0 <= first <= last, or one index)");
    }
  }
  if (out.empty())
    w.fail("gpus", "a worker needs at least one GPU range");
  return out;
}

} // namespace

DilocoSpec read_diloco(spec::ObjectReader& r)
{
  DilocoSpec s;
  s.every         = static_cast<int>(r.integer("every", 1, 100000));
  s.overlap_steps = static_cast<int>(r.optional_integer("overlap_steps", 0, 100000).value_or(0));
  s.fragments     = static_cast<int>(r.optional_integer("fragments", 1, 100000).value_or(1));
  if (s.fragments > s.every)
    r.fail("fragments", "must be at most \"every\" (" + std::to_string(s.every) +
                            "): each fragment is synchronized once every " + std::to_string(s.every) + " steps");
  const int spacing = s.every / s.fragments; // steps between two fragments' exchanges
  if (s.overlap_steps > 0 && s.overlap_steps >= spacing)
    r.fail("overlap_steps", "must be below " + std::to_string(spacing) +
                                (s.fragments > 1 ? " (every / fragments): the next fragment's exchange starts then"
                                                 : " (\"every\"): the next outer step starts after the next " +
                                                       std::to_string(s.every) + " inner steps"));
  if (auto b = r.optional_bandwidth("uplink"))
    s.uplink = *b;
  if (r.has("workers")) {
    const auto& raw = r.raw("workers");
    if (raw.is_string()) {
      const auto level = parse_name<WorkerLevel>(raw.get<std::string>());
      if (!level || *level == WorkerLevel::ranges)
        r.fail("workers", "unknown value \"" + raw.get<std::string>() +
                              "\" (allowed: \"region\", \"building\", \"pod\", \"node\", or an array of "
                              "{\"gpus\": \"0-47\"} ranges)");
      s.workers = *level;
    } else if (raw.is_array()) {
      s.workers = WorkerLevel::ranges;
      int k     = 0;
      for (auto& w : r.objects("workers", true)) {
        WorkerRange range;
        range.name = w.optional_string("name").value_or("worker " + std::to_string(k));
        range.gpus = read_gpu_ranges(w);
        if (auto b = w.optional_bandwidth("uplink"))
          range.uplink = *b;
        w.finish();
        s.ranges.push_back(std::move(range));
        ++k;
      }
      if (s.ranges.size() < 2)
        r.fail("workers", "lists " + std::to_string(s.ranges.size()) + " worker; DiLoCo needs at least 2");
    } else
      r.fail("workers", "expected \"region\", \"building\", \"pod\", \"node\", or an array of "
                        "{\"gpus\": \"0-47\"} ranges");
  }
  if (auto c = r.optional_object("compression")) {
    netsim::CompressionRule rule;
    rule.ratio = c->number("ratio", 1, 1e6);
    for (auto [key, field] :
         {std::pair{"compress_rate", &rule.compress_rate}, std::pair{"decompress_rate", &rule.decompress_rate}})
      if (auto b = c->optional_bandwidth(key)) {
        if (*b <= 0)
          c->fail(key, "expected a positive rate such as \"500GBps\" (leave it out for free)");
        *field = *b;
      }
    c->finish();
    s.compression = rule;
  }
  if (auto q = r.optional_object("quantization")) {
    Quantization quant;
    quant.bits = static_cast<int>(q->integer("bits", 1, 16));
    if (auto b = q->optional_bandwidth("rate"))
      quant.rate = *b;
    q->finish();
    s.quantization = quant;
    if (s.compression)
      r.fail("quantization", "give either \"compression\" (a ratio) or \"quantization\" (bits), not both");
  }
  r.finish();
  return s;
}

DilocoResult average(const DilocoSpec& spec, const InnerStep& inner, const OuterSync& outer)
{
  DilocoResult r;
  r.spec                          = spec;
  r.inner_step                    = inner.seconds;
  r.outer                         = outer;
  r.exposed_outer                 = std::max(0.0, outer.seconds - spec.overlap_steps * inner.seconds);
  const double per                = static_cast<double>(spec.fragments) / spec.every; // exchanges per inner step
  r.mean_step                     = inner.seconds + per * r.exposed_outer;
  r.tokens_per_second             = r.mean_step > 0 ? inner.tokens / r.mean_step : 0;
  r.compute_utilization           = r.mean_step > 0 ? inner.compute / r.mean_step : 0;
  r.bytes_across_regions_per_step = per * outer.bytes_across_regions;
  const double window             = std::max(1, spec.overlap_steps) * inner.seconds;
  r.peak_wan_bandwidth            = window > 0 ? outer.bytes_across_regions / window : 0;
  r.plain_peak_wan_bandwidth      = r.peak_wan_bandwidth * spec.fragments;
  return r;
}

json DilocoResult::to_json() const
{
  json traffic = json::array();
  for (const auto& w : outer.traffic) {
    traffic.push_back({{"name", w.name}, {"gpus", w.gpus}, {"bytes_out", w.bytes_out}, {"bytes_in", w.bytes_in}});
    traffic.back()["uplink_bytes_per_s"] = w.uplink > 0 ? json(w.uplink) : json(nullptr);
  }
  return {{"spec", spec.to_json()},
          {"inner_step_s", inner_step},
          {"outer_sync_s", outer.seconds},
          {"exposed_outer_s", exposed_outer},
          {"mean_step_s", mean_step},
          {"tokens_per_second", tokens_per_second},
          {"compute_utilization", compute_utilization},
          {"bytes_across_regions_per_step", bytes_across_regions_per_step},
          {"peak_wan_bytes_per_s", peak_wan_bandwidth},
          {"plain_diloco_peak_wan_bytes_per_s", plain_peak_wan_bandwidth},
          {"outer",
           {{"bytes_across_regions", outer.bytes_across_regions},
            {"bytes_across_buildings", outer.bytes_across_buildings},
            {"regions", outer.regions},
            {"workers", outer.workers},
            {"members_per_worker", outer.members_per_worker},
            {"segments", outer.segments},
            {"shard_bytes", outer.shard_bytes},
            {"compression_s", outer.compression_seconds},
            {"per_worker", traffic},
            {"transfers", outer.transfers},
            {"engine", outer.engine}}},
          {"note", "time only: what synchronizing every " + std::to_string(spec.every) +
                       " steps costs in convergence is outside a network simulator; one outer exchange is " +
                       (spec.fragments > 1 ? "one fragment's (1/" + std::to_string(spec.fragments) + ")"
                                           : std::string("the whole model's"))}};
}

} // namespace spansim::sync
