// The `variability` and `reliability` blocks of a scenario, and failure-model files.
#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/names.hpp"
#include "common/paths.hpp"
#include "common/units.hpp"
#include "reliability/reliability.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>

#ifndef SPANSIM_DATA_DIR
#error "SPANSIM_DATA_DIR must point at the source tree"
#endif

namespace spansim::reliability {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A jitter distribution: {"lognormal_sigma": 0.03} or {"table": "factors.csv"} (a column `factor` of measured
// durations over the modelled one).
Jitter read_jitter(spec::ObjectReader r)
{
  Jitter j;
  const bool lognormal = r.has("lognormal_sigma"), table = r.has("table");
  if (lognormal == table)
    r.fail(lognormal ? "table" : "lognormal_sigma", "give exactly one of \"lognormal_sigma\" and \"table\"");
  if (lognormal) {
    j.kind  = Jitter::Kind::lognormal;
    j.sigma = r.number("lognormal_sigma", 0, 2);
  } else {
    j.kind           = Jitter::Kind::empirical;
    const auto where = r.where().member("table");
    j.file           = spec::referenced_path(r.string("table"), where);
    spec::check_referenced_file(j.file, where);
    std::stringstream in(spec::load_text_file(j.file));
    int number  = 0;
    bool header = false;
    for (std::string line; std::getline(in, line);) {
      ++number;
      line.erase(std::remove(line.begin(), line.end(), '\r'), line.end());
      if (line.find_first_not_of(" \t") == std::string::npos || line.front() == '#')
        continue;
      if (!header) {
        if (line != "factor")
          throw SpecError(j.file, "line " + std::to_string(number), "the header must be \"factor\"");
        header = true;
        continue;
      }
      double v = 0;
      try {
        std::size_t used = 0;
        v                = std::stod(line, &used);
        if (used != line.size())
          throw std::invalid_argument(line);
      } catch (const std::exception&) {
        throw SpecError(j.file, "line " + std::to_string(number), "expected one number, found \"" + line + "\"");
      }
      if (!(v > 0 && v < 100))
        throw SpecError(j.file, "line " + std::to_string(number), "a factor is greater than 0 and below 100");
      j.samples.push_back(v);
    }
    if (j.samples.size() < 2)
      throw SpecError(j.file, "", "at least two factors are needed");
    std::sort(j.samples.begin(), j.samples.end());
  }
  r.finish();
  return j;
}

Component read_component(spec::ObjectReader r)
{
  Component c;
  c.name          = r.name("name");
  c.per           = r.enumeration<Component::Per>("per");
  const bool mttf = r.has("mttf"), fit = r.has("fit");
  if (mttf == fit)
    r.fail(mttf ? "fit" : "mttf", "give exactly one of \"mttf\" (a time per unit) and \"fit\" (failures per 1e9 h)");
  c.mttf = mttf ? r.time("mttf") : 1e9 * 3600 / r.number("fit", 1e-6, 1e12);
  if (!(c.mttf > 0))
    r.fail("mttf", "must be greater than zero");
  c.replica_scoped = r.choice("scope", {"replica", "job"}) == "replica";
  c.hardware = r.optional_boolean("hardware").value_or(c.per == Component::Per::gpu || c.per == Component::Per::node);
  if (c.replica_scoped && (c.per == Component::Per::job || c.per == Component::Per::building))
    r.fail("scope", "a failure of a whole job or building cannot be confined to one replica");
  c.source = r.string("source");
  r.finish();
  return c;
}

std::string models_dir()
{
  return std::string(SPANSIM_DATA_DIR) + "/reliability/models";
}

// A failure model: a shipped name (reliability/models/NAME.json), a path, or an inline object.
std::vector<Component> read_model(spec::ObjectReader& parent, std::string& name)
{
  const json& value = parent.raw("failures");
  const auto where  = parent.where().member("failures");
  json doc;
  spec::Location at = where;
  if (value.is_string()) {
    const std::string ref  = value.get<std::string>();
    const bool shipped     = ref.find('/') == std::string::npos && !ref.ends_with(".json");
    const std::string path = shipped ? models_dir() + "/" + ref + ".json" : spec::referenced_path(ref, where);
    if (shipped && !fs::exists(path))
      where.fail("unknown failure model \"" + ref + "\" (shipped: " + json_names_list(models_dir()) +
                 "; or a path, or an inline object)");
    doc  = spec::load_referenced_json(path, where);
    at   = spec::Location{path};
    name = ref;
  } else if (value.is_object()) {
    doc  = value;
    name = "inline";
  } else {
    where.fail("expected a failure model name, a file path or an inline object");
  }
  spec::ObjectReader m(doc, at);
  if (m.has("name"))
    name = m.name("name");
  m.optional_string("source");
  std::vector<Component> out;
  for (auto c : m.objects("components", true))
    out.push_back(read_component(c));
  if (out.empty())
    m.fail("components", "name at least one component");
  m.finish();
  return out;
}

json jitter_json(const Jitter& j)
{
  if (j.kind == Jitter::Kind::lognormal)
    return {{"lognormal_sigma", j.sigma}};
  if (j.kind == Jitter::Kind::empirical)
    return {{"table", j.file}, {"factors", j.samples.size()}};
  return nullptr;
}

} // namespace

VariabilitySpec read_variability(spec::ObjectReader r)
{
  VariabilitySpec v;
  v.seed = static_cast<std::uint64_t>(r.integer("seed", 0, (std::int64_t{1} << 53)));
  if (auto s = r.optional_object("slow_gpus")) {
    v.slow_fraction = s->number("fraction", 0, 1);
    v.slowdown      = s->number("slowdown", 1, 10);
    s->finish();
  }
  if (auto d = r.optional_object("degraded_links")) {
    v.degraded_fraction  = d->number("fraction", 0, 1);
    v.degraded_bandwidth = d->number("bandwidth", 0.01, 1);
    d->finish();
  }
  if (auto c = r.optional_object("compute_jitter"))
    v.compute = read_jitter(*c);
  if (auto c = r.optional_object("communication_jitter"))
    v.communication = read_jitter(*c);
  r.finish();
  return v;
}

json to_json(const VariabilitySpec& v)
{
  return {{"seed", v.seed},
          {"slow_gpus", {{"fraction", v.slow_fraction}, {"slowdown", v.slowdown}}},
          {"degraded_links", {{"fraction", v.degraded_fraction}, {"bandwidth", v.degraded_bandwidth}}},
          {"compute_jitter", jitter_json(v.compute)},
          {"communication_jitter", jitter_json(v.communication)}};
}

ReliabilitySpec read_reliability(spec::ObjectReader r)
{
  ReliabilitySpec s;
  s.where      = r.where();
  s.seed       = static_cast<std::uint64_t>(r.integer("seed", 0, (std::int64_t{1} << 53)));
  s.components = read_model(r, s.model_name);
  if (auto m = r.optional_enumeration<Recovery>("recovery"))
    s.recovery = *m;
  if (auto c = r.optional_object("checkpoint")) {
    if (c->has("interval")) {
      const json& i = c->raw("interval");
      if (!(i.is_string() && i.get<std::string>() == "auto")) {
        s.interval = c->time("interval");
        if (!(s.interval > 0))
          c->fail("interval", "must be greater than zero, or \"auto\"");
      }
    }
    if (auto b = c->optional_bandwidth("storage_bandwidth"))
      s.storage_bandwidth = *b;
    if (auto b = c->optional_string("storage_building"))
      s.storage_building = *b;
    if (auto b = c->optional_number("bytes_per_parameter", 1, 64))
      s.bytes_per_parameter = *b;
    c->finish();
  }
  if (auto c = r.optional_object("restart")) {
    s.launch         = c->optional_time("launch").value_or(s.launch);
    s.nccl_init      = c->optional_time("nccl_init").value_or(s.nccl_init);
    s.nccl_init_gpus = c->optional_number("nccl_init_gpus", 1, 1e7).value_or(s.nccl_init_gpus);
    s.data_loader    = c->optional_time("data_loader").value_or(s.data_loader);
    c->finish();
  }
  if (auto h = r.optional_time("horizon")) {
    if (!(*h > 0))
      r.fail("horizon", "must be greater than zero");
    s.horizon_days = *h / 86400;
  }
  if (auto c = r.optional_object("spares")) {
    s.spares_modelled = true;
    s.spare_nodes     = static_cast<int>(c->integer("nodes", 0, 1000000));
    s.repair          = c->time("repair");
    c->finish();
  }
  if (auto c = r.optional_object("replica")) {
    s.replica_stall = c->optional_time("stall").value_or(s.replica_stall);
    c->finish();
  }
  r.finish();
  return s;
}

json to_json(const ReliabilitySpec& r)
{
  json comps = json::array();
  for (const auto& c : r.components)
    comps.push_back({{"name", c.name},
                     {"per", name_of(c.per)},
                     {"mttf", units::format_time(c.mttf)},
                     {"scope", c.replica_scoped ? "replica" : "job"},
                     {"hardware", c.hardware},
                     {"source", c.source}});
  return {{"seed", r.seed},
          {"failures", {{"name", r.model_name}, {"components", comps}}},
          {"recovery", name_of(r.recovery)},
          {"checkpoint",
           {{"interval", r.interval > 0 ? units::format_time(r.interval) : "auto"},
            {"storage_bandwidth_Bps", r.storage_bandwidth},
            {"storage_building", r.storage_building.empty() ? "local" : r.storage_building},
            {"bytes_per_parameter", r.bytes_per_parameter}}},
          {"restart",
           {{"launch_s", r.launch},
            {"nccl_init_s", r.nccl_init},
            {"nccl_init_gpus", r.nccl_init_gpus},
            {"data_loader_s", r.data_loader}}},
          {"replica", {{"stall_s", r.replica_stall}}},
          {"horizon_days", r.horizon_days},
          {"spares", r.spares_modelled ? json{{"nodes", r.spare_nodes}, {"repair_s", r.repair}} : json(nullptr)}};
}

} // namespace spansim::reliability
