// Campaign files: reading them and expanding them into points.
#include "experiments/campaign.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "scenario/scenario.hpp"
#include "topology/topology.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#ifndef SPANSIM_DATA_DIR
#error "SPANSIM_DATA_DIR must point at the source tree"
#endif

namespace spansim::experiments {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A path in a campaign, absolute: its points run in worker processes that record it.
std::string resolve(const std::string& name, const std::string& anchor_file)
{
  const std::string found = scenario::resolve_path(name, anchor_file);
  std::error_code ec;
  return fs::exists(found, ec) ? fs::absolute(found).lexically_normal().string() : name;
}

using scenario::looks_like_path;

// "topology.regions.0.buildings" or "/topology/regions/0/buildings" -> a JSON pointer.
json::json_pointer to_pointer(const std::string& path, const spec::Location& where)
{
  if (path.empty())
    where.fail("expected a field path such as \"topology.inter_region.bandwidth\"");
  if (path[0] == '/') {
    try {
      return json::json_pointer(path);
    } catch (const json::exception& e) {
      where.fail(std::string("not a valid JSON pointer: ") + e.what());
    }
  }
  std::string pointer;
  std::size_t start = 0;
  while (start <= path.size()) {
    auto dot         = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty())
      where.fail("empty segment in field path \"" + path + "\"");
    pointer += "/";
    for (char c : part)
      pointer += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
    if (dot == std::string::npos)
      break;
    start = dot + 1;
  }
  return json::json_pointer(pointer);
}

std::string number_text(double v)
{
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.12g", v);
  return buf;
}

std::string label_of(const json& v)
{
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_number())
    return number_text(v.get<double>());
  if (v.is_array()) {
    std::string s;
    for (const auto& e : v)
      s += (s.empty() ? "" : "-") + label_of(e);
    return s;
  }
  return v.dump();
}

// "400Gbps" -> (400, "Gbps"); nothing for text that does not start with a number.
bool split_quantity(const json& v, double& number, std::string& unit)
{
  if (v.is_number()) {
    number = v.get<double>();
    unit.clear();
    return true;
  }
  if (!v.is_string())
    return false;
  const std::string s = v.get<std::string>();
  char* end           = nullptr;
  number              = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(number))
    return false;
  unit = std::string(end);
  return true;
}

std::vector<json> range_values(spec::ObjectReader r)
{
  const double from       = r.number("from", -1e300, 1e300);
  const double to         = r.number("to", -1e300, 1e300);
  const std::string scale = r.has("scale") ? r.choice("scale", {"linear", "log"}) : "linear";
  auto step               = r.optional_number("step", -1e300, 1e300);
  auto count              = r.optional_integer("count", 1, 100000);
  auto unit               = r.optional_string("unit");
  if (step.has_value() == count.has_value())
    r.fail("step", "give exactly one of \"step\" (linear: added, log: multiplied) or \"count\"");
  if (scale == "log" && (from <= 0 || to <= 0))
    r.fail("from", "a log range needs positive \"from\" and \"to\"");
  std::vector<double> xs;
  if (count) {
    for (std::int64_t k = 0; k < *count; ++k) {
      double f = *count == 1 ? 0.0 : static_cast<double>(k) / static_cast<double>(*count - 1);
      xs.push_back(scale == "log" ? from * std::pow(to / from, f) : from + (to - from) * f);
    }
  } else {
    const double s = *step;
    if (scale == "linear" ? (s == 0 || (to - from) / s < 0)
                          : (s <= 0 || s == 1 || std::log(to / from) / std::log(s) < 0))
      r.fail("step", "the step never reaches \"to\" from \"from\"");
    // Inclusive end, with a relative tolerance so that 0.1 steps reach 1.0.
    const double tolerance = 1e-9 * std::max(std::fabs(from), std::fabs(to));
    for (int k = 0; k < 100001; ++k) {
      double x = scale == "log" ? from * std::pow(s, k) : from + s * k;
      if ((to >= from && x > to + tolerance) || (to < from && x < to - tolerance))
        break;
      xs.push_back(x);
    }
    if (xs.size() > 100000)
      r.fail("step", "more than 100,000 values");
  }
  r.finish();
  std::vector<json> values;
  for (double x : xs) {
    // Rounded to 12 digits so that 0.1-steps give 0.3, not 0.30000000000000004, in files and labels.
    double rounded = std::stod(number_text(x));
    if (unit)
      values.emplace_back(number_text(rounded) + *unit);
    else if (rounded == std::floor(rounded) && std::fabs(rounded) < 9e15)
      values.emplace_back(static_cast<std::int64_t>(rounded)); // integer fields (GPUs, lengths) refuse 512.0
    else
      values.emplace_back(rounded);
  }
  return values;
}

std::vector<json> field_values(spec::ObjectReader& r)
{
  if (r.has("values") && r.has("range"))
    r.fail("range", "give either \"values\" or \"range\", not both");
  if (r.has("range"))
    return range_values(r.object("range"));
  const json& v = r.raw("values");
  if (!v.is_array() || v.empty())
    r.fail("values", "expected a non-empty list of values");
  return std::vector<json>(v.begin(), v.end());
}

AxisField read_field(spec::ObjectReader& r)
{
  AxisField f;
  f.path      = r.string("path");
  f.pointer   = to_pointer(f.path, r.where().member("path"));
  f.json_path = r.where().member("path").path;
  f.values    = field_values(r);
  return f;
}

Axis read_axis(spec::ObjectReader r)
{
  Axis a;
  a.name = r.optional_string("name").value_or("");
  if (r.has("zip")) {
    if (r.has("path"))
      r.fail("path", "an axis has either \"path\" (one field) or \"zip\" (several fields), not both");
    for (auto& z : r.objects("zip", true)) {
      a.fields.push_back(read_field(z));
      z.finish();
    }
    if (a.fields.empty())
      r.fail("zip", "expected a non-empty list of {\"path\", \"values\"|\"range\"}");
    for (std::size_t k = 1; k < a.fields.size(); ++k)
      if (a.fields[k].values.size() != a.fields[0].values.size())
        r.fail("zip", "zipped fields need as many values each: \"" + a.fields[0].path + "\" has " +
                          std::to_string(a.fields[0].values.size()) + ", \"" + a.fields[k].path + "\" has " +
                          std::to_string(a.fields[k].values.size()));
  } else {
    a.fields.push_back(read_field(r));
  }
  if (a.name.empty()) {
    a.name = a.fields[0].path;
    for (std::size_t k = 1; k < a.fields.size(); ++k)
      a.name += "+" + a.fields[k].path;
  }
  for (char c : a.name)
    if (c == '/' || c == '\0')
      r.fail("name", "axis names are HDF5 column names: no '/'");
  const std::size_t n = a.fields[0].values.size();
  if (r.has("labels")) {
    a.labels = r.strings("labels");
    if (a.labels.size() != n)
      r.fail("labels",
             "expected one label per value (" + std::to_string(n) + "), got " + std::to_string(a.labels.size()));
  } else {
    for (std::size_t s = 0; s < n; ++s) {
      std::string l;
      for (const auto& f : a.fields)
        l += (l.empty() ? "" : ", ") + label_of(f.values[s]);
      a.labels.push_back(l);
    }
  }
  if (r.has("numbers")) {
    // Explicit numbers for the table and the plots, e.g. the oversubscription ratio a bandwidth stands for.
    const json& v = r.raw("numbers");
    if (!v.is_array() || v.size() != n)
      r.fail("numbers", "expected one number per value (" + std::to_string(n) + ")");
    for (const auto& x : v) {
      if (!x.is_number())
        r.fail("numbers", "expected numbers");
      a.numbers.push_back(x.get<double>());
    }
    a.numeric = true;
    a.unit    = r.optional_string("unit").value_or("");
  } else if (!r.has("labels")) {
    // Numeric when one field has numbers, or numbers all written in the same unit.
    if (a.fields.size() == 1) {
      std::string unit0;
      a.numeric = true;
      for (std::size_t s = 0; s < n && a.numeric; ++s) {
        double x = 0;
        std::string unit;
        a.numeric = split_quantity(a.fields[0].values[s], x, unit) && (s == 0 || unit == unit0);
        unit0     = s == 0 ? unit : unit0;
        a.numbers.push_back(x);
      }
      if (a.numeric)
        a.unit = unit0;
      else
        a.numbers.clear();
    }
  }
  std::map<std::string, int> seen;
  for (const auto& l : a.labels)
    if (seen[l]++ > 0)
      r.fail("labels", "two steps of axis \"" + a.name + "\" have the same label \"" + l + "\"");
  r.finish();
  return a;
}

// Replaces a preset name or file path by its JSON, so that axes can edit fields inside it.
void inline_member(json& base, const std::string& member, const std::string& anchor, const spec::Location& where)
{
  if (!base.contains(member) || !base[member].is_string())
    return;
  const std::string name = base[member].get<std::string>();
  std::string path;
  if (member == "topology" && !looks_like_path(name)) {
    path = topology::preset_directory() + "/" + name + ".json";
    std::error_code ec;
    if (!fs::exists(path, ec))
      where.member(member).fail("\"" + name + "\" is not a topology preset, so its fields cannot be swept");
  } else {
    path = resolve(name, anchor);
  }
  base[member] = spec::load_referenced_json(path, where.member(member));
}

// FNV-1a, 64 bits: stable across runs and machines (std::hash is not).
std::string content_hash(const std::string& text)
{
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

} // namespace

Campaign load_campaign(const std::string& path)
{
  return parse_campaign(spec::load_json_file(path), path);
}

Campaign parse_campaign(const json& document, const std::string& file)
{
  Campaign c;
  c.file     = fs::absolute(file).lexically_normal().string();
  c.document = document;
  spec::ObjectReader r(document, spec::Location{file});
  c.name        = r.name("name");
  c.description = r.optional_string("description").value_or("");

  const json& scenario = r.raw("scenario");
  if (scenario.is_string()) {
    c.scenario_file = resolve(scenario.get<std::string>(), c.file);
    c.base          = spec::load_referenced_json(c.scenario_file, r.where().member("scenario"));
  } else if (scenario.is_object()) {
    c.scenario_file      = c.file;
    c.scenario_json_path = "$.scenario";
    c.base               = scenario;
  } else {
    r.fail("scenario", "expected a scenario file path or an inline scenario object");
  }
  if (!c.base.is_object())
    r.fail("scenario", "the base scenario is not a JSON object");

  auto axes = r.objects("axes", false);
  for (std::size_t k = 0; k < axes.size(); ++k)
    c.axes.push_back(read_axis(axes[k]));
  std::map<std::string, int> names;
  for (std::size_t k = 0; k < c.axes.size(); ++k)
    if (names[c.axes[k].name]++ > 0)
      r.where().member("axes").element(k).fail("two axes are named \"" + c.axes[k].name + "\"");
  // Two fields that set the same value (or one inside the other) would leave a point labelled by one and run with
  // the other's value.
  std::vector<const AxisField*> fields;
  for (const auto& a : c.axes)
    for (const auto& f : a.fields)
      fields.push_back(&f);
  for (std::size_t i = 0; i < fields.size(); ++i)
    for (std::size_t j = 0; j < i; ++j) {
      const std::string x = fields[j]->pointer.to_string(), y = fields[i]->pointer.to_string();
      const bool inside = x == y || y.rfind(x + "/", 0) == 0 || x.rfind(y + "/", 0) == 0;
      if (inside)
        spec::Location{r.where().file, fields[i]->json_path}.fail(
            "\"" + fields[i]->path + "\" " + (x == y ? "is the field" : "overlaps the field") + " \"" +
            fields[j]->path + "\" that " + fields[j]->json_path +
            " already sweeps: each field is set by one axis only (zip fields that move together)");
    }

  c.repetitions = static_cast<int>(r.optional_integer("repetitions", 1, 10000).value_or(1));
  // Repetition k runs with seed + k as a 32-bit RNG seed: the last one must not wrap around to 0 or to the seeds
  // of other repetitions, which would make "independent" repetitions repeat each other.
  constexpr std::int64_t max_seed = 4294967295ll;
  const std::int64_t seed         = r.optional_integer("seed", 1, max_seed).value_or(1);
  if (seed + c.repetitions - 1 > max_seed)
    r.fail("seed", "seed " + std::to_string(seed) + " with " + std::to_string(c.repetitions) +
                       " repetitions needs seeds up to " + std::to_string(seed + c.repetitions - 1) +
                       ", past the largest 32-bit seed " + std::to_string(max_seed));
  c.seed = static_cast<std::uint32_t>(seed);
  if (auto rec = r.optional_object("record")) {
    c.record.links  = rec->optional_boolean("links").value_or(false);
    c.record.stages = rec->optional_boolean("stages").value_or(true);
    c.record.ranks  = rec->optional_boolean("ranks").value_or(false);
    rec->finish();
  }
  c.output = r.optional_string("output").value_or("out/campaigns/" + c.name + ".h5");
  {
    // A campaign file names where its results go, but cannot send them outside the working directory: a
    // shared or hostile spec must not write to /etc. `--out` chooses any other place.
    const fs::path out = fs::path(c.output).lexically_normal();
    if (out.empty() || out.is_absolute() || *out.begin() == ".." || !out.has_filename() ||
        c.output.find('\0') != std::string::npos)
      r.fail("output", "\"" + c.output +
                           "\" must be a relative file path inside the working directory "
                           "(give --out for another place)");
  }
  r.finish();

  // Axes that reach into the topology or the job need them as JSON: inline preset names and file paths.
  for (const auto& a : c.axes)
    for (const auto& f : a.fields) {
      std::string top = f.pointer.empty() ? "" : f.pointer.to_string().substr(1);
      top             = top.substr(0, top.find('/'));
      if ((top == "topology" || top == "job") && f.pointer.to_string().size() > top.size() + 1)
        inline_member(c.base, top, c.scenario_file, spec::Location{file}.member("scenario"));
    }
  return c;
}

void set_field(json& document, const AxisField& field, const json& value, const std::string& file)
{
  const json::json_pointer parent = field.pointer.parent_pointer();
  const std::string last          = field.pointer.back();
  if (!document.contains(parent))
    throw SpecError(file, field.json_path,
                    "the swept field \"" + field.path + "\" is not in the base scenario (its parent \"" +
                        parent.to_string() + "\" does not exist)");
  json& p = document[parent];
  if (p.is_array()) {
    std::size_t i = 0;
    try {
      i = std::stoul(last);
    } catch (const std::exception&) {
      throw SpecError(file, field.json_path,
                      "the swept field \"" + field.path + "\" indexes a list with \"" + last + "\"");
    }
    if (i >= p.size())
      throw SpecError(file, field.json_path,
                      "the swept field \"" + field.path + "\" is past the end of its list (" +
                          std::to_string(p.size()) + " elements)");
    p[i] = value;
  } else if (p.is_object()) {
    p[last] = value;
  } else {
    throw SpecError(file, field.json_path,
                    "the swept field \"" + field.path + "\" is inside a " + p.type_name() +
                        ", not an object or a list");
  }
}

std::vector<Point> expand(const Campaign& campaign)
{
  std::size_t total = static_cast<std::size_t>(campaign.repetitions);
  for (const auto& a : campaign.axes) {
    total *= a.size();
    if (total > 1000000)
      throw SpecError(campaign.file, "$.axes", "more than 1,000,000 points");
  }
  std::vector<Point> points;
  std::vector<std::size_t> steps(campaign.axes.size(), 0);
  for (std::size_t n = 0; n < total; ++n) {
    // Mixed radix, last axis innermost, repetitions innermost of all.
    std::size_t rest = n;
    const int rep    = static_cast<int>(rest % static_cast<std::size_t>(campaign.repetitions));
    rest /= static_cast<std::size_t>(campaign.repetitions);
    for (std::size_t k = campaign.axes.size(); k-- > 0;) {
      steps[k] = rest % campaign.axes[k].size();
      rest /= campaign.axes[k].size();
    }
    Point p;
    p.index      = static_cast<int>(n);
    p.repetition = rep;
    p.seed       = campaign.seed + static_cast<std::uint32_t>(rep);
    p.steps      = steps;
    p.scenario   = campaign.base;
    std::string label;
    for (std::size_t k = 0; k < campaign.axes.size(); ++k) {
      const auto& a = campaign.axes[k];
      for (const auto& f : a.fields)
        set_field(p.scenario, f, f.values[steps[k]], campaign.file);
      label += (label.empty() ? "" : ", ") + a.name + "=" + a.labels[steps[k]];
    }
    try {
      scenario::parse_scenario(p.scenario, campaign.scenario_file, campaign.scenario_json_path);
    } catch (const SpecError& e) {
      throw SpecError(campaign.file, "$.axes",
                      "point " + std::to_string(n) + " (" + label + ") is not a valid scenario: " + e.what());
    }
    p.key = content_hash(p.scenario.dump() + "|seed=" + std::to_string(p.seed) + "|rep=" + std::to_string(rep));
    points.push_back(std::move(p));
  }
  return points;
}

} // namespace spansim::experiments
