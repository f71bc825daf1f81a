// Campaign results as HDF5 (HDF5 C API) and CSV. Files are written under a temporary name and renamed over
// the old ones, so that a SIGKILL at any moment leaves the previous complete file in place.
#include "experiments/results.hpp"

#include "common/error.hpp"
#include "common/paths.hpp"
#include "common/units.hpp"
#include "common/version.hpp"

#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unistd.h>

namespace spansim::experiments {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The breakdown parts summarised over stages: every part of netsim::kParts, and their exposed total.
const std::vector<std::string>& summary_parts()
{
  static const std::vector<std::string> parts = [] {
    std::vector<std::string> p;
    for (auto part : netsim::kParts)
      p.emplace_back(name_of(part));
    p.emplace_back("exposed_total");
    return p;
  }();
  return parts;
}
// nlohmann writes a non-finite double as null, so null reads back as NaN; any other non-number throws.
double number(const json& v)
{
  return v.is_null() ? kNaN : v.get<double>();
}

// The value of a metric column from a point record (NaN when the point failed or lacks it). Only at() here:
// operator[] on a const json with a missing key is undefined, and usable_record() relies on the throw.
double metric_value(const json& record, const std::string& column)
{
  if (record.value("status", "") != "ok")
    return kNaN;
  const json& s = record.at("summary");
  if (column == "elapsed_s")
    return record.value("elapsed_s", kNaN);
  if (s.at("metrics").contains(column))
    return number(s.at("metrics").at(column));
  for (auto t : enum_values<topology::Tier>()) {
    const std::string tier(name_of(t));
    if (column == "bytes_" + tier || column == "utilisation_" + tier) {
      for (const auto& t : s.at("network").at("tiers"))
        if (t.at("tier") == tier)
          return number(column[0] == 'b' ? t.at("bytes") : t.at("mean_utilisation"));
      return 0;
    }
  }
  for (const auto& part : summary_parts())
    for (const char* stat : {"mean", "max"})
      if (column == part + "_" + stat + "_s")
        return number(s.at("breakdown").at("over_stages").at(part + "_s").at(stat));
  if (column == "boundary_bytes_out_max") {
    double m = 0;
    for (const auto& b : s.at("network").at("boundaries"))
      m = std::max(m, number(b.at("bytes_out")));
    return m;
  }
  return kNaN;
}

/// @brief Why HDF5's last call failed, as ": cause": the system's message where HDF5 recorded one (a full disk, a
/// permission), else the innermost description on HDF5's error stack ("" when it has none).
std::string hdf5_cause()
{
  std::vector<std::string> descriptions; // from the API call down to the innermost
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
        static_cast<std::vector<std::string>*>(out)->push_back(e->desc ? e->desc : "");
        return 0;
      },
      &descriptions);
  const std::string marker = "error message = '";
  for (const auto& d : descriptions)
    if (auto at = d.find(marker); at != std::string::npos) {
      const auto from = at + marker.size();
      return ": " + d.substr(from, d.find('\'', from) - from);
    }
  return descriptions.empty() || descriptions.back().empty() ? "" : ": " + descriptions.back();
}

class Hid {
public:
  Hid(hid_t id, herr_t (*close)(hid_t), const std::string& what) : id_(id), close_(close)
  {
    if (id_ < 0)
      throw Error("HDF5: cannot " + what + hdf5_cause());
  }
  Hid(const Hid&)            = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { close_(id_); }
  operator hid_t() const { return id_; }

private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

void check(herr_t status, const std::string& what)
{
  if (status < 0)
    throw Error("HDF5: cannot " + what + hdf5_cause());
}

hid_t string_type()
{
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

void write_strings(hid_t where, const std::string& name, const std::vector<std::string>& values)
{
  Hid type(string_type(), H5Tclose, "make a string type");
  hsize_t n = values.size();
  Hid space(H5Screate_simple(1, &n, nullptr), H5Sclose, "make a dataspace");
  Hid set(H5Dcreate2(where, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose,
          "create dataset " + name);
  std::vector<const char*> p;
  for (const auto& v : values)
    p.push_back(v.c_str());
  if (n > 0)
    check(H5Dwrite(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data()), "write " + name);
}

hid_t write_numbers(hid_t where, const std::string& name, const void* data, hid_t mem_type, hid_t file_type,
                    std::vector<hsize_t> dims)
{
  Hid space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose, "make a dataspace");
  hid_t set = H5Dcreate2(where, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (set < 0)
    throw Error("HDF5: cannot create dataset " + name);
  bool empty = false;
  for (auto d : dims)
    empty = empty || d == 0;
  if (!empty && H5Dwrite(set, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
    H5Dclose(set);
    throw Error("HDF5: cannot write " + name);
  }
  return set;
}

void write_doubles(hid_t where, const std::string& name, const std::vector<double>& v, std::vector<hsize_t> dims = {})
{
  if (dims.empty())
    dims = {v.size()};
  H5Dclose(write_numbers(where, name, v.data(), H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, dims));
}

void write_ints(hid_t where, const std::string& name, const std::vector<long long>& v)
{
  H5Dclose(write_numbers(where, name, v.data(), H5T_NATIVE_LLONG, H5T_STD_I64LE, {v.size()}));
}

void string_attribute(hid_t where, const std::string& name, const std::string& value)
{
  Hid type(string_type(), H5Tclose, "make a string type");
  Hid space(H5Screate(H5S_SCALAR), H5Sclose, "make a dataspace");
  Hid attr(H5Acreate2(where, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
           "create attribute " + name);
  const char* p = value.c_str();
  check(H5Awrite(attr, type, &p), "write attribute " + name);
}

void int_attribute(hid_t where, const std::string& name, long long value)
{
  Hid space(H5Screate(H5S_SCALAR), H5Sclose, "make a dataspace");
  Hid attr(H5Acreate2(where, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
           "create attribute " + name);
  check(H5Awrite(attr, H5T_NATIVE_LLONG, &value), "write attribute " + name);
}

void sync_path(const std::string& path, bool directory)
{
  int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Makes `tmp` durable and moves it over `path` in one step.
void commit(const std::string& tmp, const std::string& path)
{
  sync_path(tmp, false);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    // Nothing left behind: an --out that names a directory, say, fails here after every point has run.
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw Error("cannot write \"" + path + "\": " +
                (fs::is_directory(path, ignored)
                     ? std::string("it is a directory (--out names the results file, such as "
                                   "out/R.h5)")
                     : ec.message()));
  }
  auto dir = fs::path(path).parent_path();
  sync_path(dir.empty() ? "." : dir.string(), true);
}

// A fresh temporary beside `path`, created exclusively under an unpredictable name (never a planted symlink).
std::string temp_name(const std::string& path)
{
  const auto tmp = create_temporary(path);
  ::close(tmp.fd);
  return tmp.name;
}

void prepare_directory(const std::string& path)
{
  auto dir = fs::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty())
    fs::create_directories(dir, ec);
  if (ec)
    throw UsageError("cannot create the directory \"" + dir.string() + "\": " + ec.message());
}

std::vector<const Point*> finished(const std::vector<Point>& points, const ResultMap& results)
{
  std::vector<const Point*> rows;
  for (const auto& p : points)
    if (results.count(p.key))
      rows.push_back(&p);
  return rows;
}

// The group /NAME, with a subgroup per point whose result has NAME (named by the point's key), filled by
// write(subgroup, result[NAME]).
template <class Write>
void write_point_groups(hid_t file, const std::string& name, const std::vector<const Point*>& rows,
                        const ResultMap& results, Write write)
{
  Hid group(H5Gcreate2(file, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose, "create /" + name);
  for (const Point* p : rows) {
    const json& r = results.at(p->key);
    if (!r.contains(name))
      continue;
    Hid g(H5Gcreate2(group, p->key.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
          "create /" + name + "/" + p->key);
    write(g, r.at(name));
  }
}

void write_file(const Campaign& campaign, const std::vector<Point>& points, const ResultMap& results,
                const std::string& path)
{
  Hid file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose, "create \"" + path + "\"");
  const auto rows = finished(points, results);
  string_attribute(file, "format", "spansim-campaign/1");
  string_attribute(file, "campaign", campaign.name);
  string_attribute(file, "campaign_file", campaign.file);
  string_attribute(file, "campaign_json", campaign.document.dump());
  string_attribute(file, "spansim_version", version());
  string_attribute(file, "git_hash", git_hash());
  int_attribute(file, "points_total", static_cast<long long>(points.size()));
  int_attribute(file, "points_done", static_cast<long long>(rows.size()));
  // The breakdown parts, in order: plots read them from here rather than keep a list of their own.
  string_attribute(file, "breakdown_parts", json(summary_parts()).dump());

  Hid table(H5Gcreate2(file, "points", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose, "create /points");
  std::vector<long long> index, repetition, seed;
  std::vector<std::string> key, status, error, scenario, configuration, versions, hashes;
  for (const Point* p : rows) {
    const json& r = results.at(p->key);
    index.push_back(p->index);
    repetition.push_back(p->repetition);
    seed.push_back(p->seed);
    key.push_back(p->key);
    status.push_back(r.value("status", "error"));
    error.push_back(r.value("error", ""));
    scenario.push_back(p->scenario.dump());
    bool ok = status.back() == "ok";
    configuration.push_back(ok ? r.at("summary").at("configuration").dump() : "");
    versions.push_back(ok ? r.at("summary").at("spansim").at("version").get<std::string>()
                          : r.value("spansim_version", ""));
    hashes.push_back(ok ? r.at("summary").at("spansim").at("git_hash").get<std::string>() : r.value("git_hash", ""));
  }
  write_ints(table, "index", index);
  write_ints(table, "repetition", repetition);
  write_ints(table, "seed", seed);
  write_strings(table, "key", key);
  write_strings(table, "status", status);
  for (std::size_t k = 0; k < campaign.axes.size(); ++k) {
    const Axis& a = campaign.axes[k];
    std::vector<std::string> labels;
    std::vector<double> numbers;
    for (const Point* p : rows) {
      labels.push_back(a.labels[p->steps[k]]);
      if (a.numeric)
        numbers.push_back(a.numbers[p->steps[k]]);
    }
    if (a.numeric) {
      write_doubles(table, "axis." + a.name, numbers);
      Hid set(H5Dopen2(table, ("axis." + a.name).c_str(), H5P_DEFAULT), H5Dclose, "open axis." + a.name);
      string_attribute(set, "unit", a.unit);
    } else {
      write_strings(table, "axis." + a.name, labels);
    }
    write_strings(table, "label." + a.name, labels);
  }
  for (const auto& column : metric_columns()) {
    std::vector<double> v;
    for (const Point* p : rows)
      v.push_back(metric_value(results.at(p->key), column));
    write_doubles(table, column, v);
  }
  write_strings(table, "error", error);
  write_strings(table, "scenario", scenario);
  write_strings(table, "configuration", configuration);
  write_strings(table, "spansim_version", versions);
  write_strings(table, "git_hash", hashes);

  if (campaign.record.stages)
    write_point_groups(file, "stages", rows, results, [](hid_t g, const json& stages) {
      std::vector<long long> stage;
      for (const auto& s : stages)
        stage.push_back(s.at("stage").get<long long>());
      write_ints(g, "stage", stage);
      for (const auto& c : stage_columns()) {
        std::vector<double> v;
        for (const auto& s : stages)
          v.push_back(number(s.at(c)));
        write_doubles(g, c, v);
      }
    });
  if (campaign.record.ranks)
    write_point_groups(file, "ranks", rows, results, [](hid_t g, const json& ranks) {
      for (const char* c : {"gpu", "tp", "cp", "pp", "dp"})
        write_ints(g, c, ranks.at(c).get<std::vector<long long>>());
      for (const auto& c : stage_columns())
        write_doubles(g, c, ranks.at(c).get<std::vector<double>>());
    });
  if (campaign.record.links)
    write_point_groups(file, "links", rows, results, [](hid_t g, const json& l) {
      write_strings(g, "name", l.at("name").get<std::vector<std::string>>());
      write_strings(g, "tier", l.at("tier").get<std::vector<std::string>>());
      write_doubles(g, "capacity_Bps", l.at("capacity_Bps").get<std::vector<double>>());
      auto bytes = l.at("bytes").get<std::vector<double>>();
      write_doubles(g, "bytes", bytes, {bytes.size() / 2, 2});
    });
  check(H5Fflush(file, H5F_SCOPE_GLOBAL), "flush \"" + path + "\"");
}

std::string csv_cell(const std::string& s)
{
  if (s.find_first_of(",\"\n") == std::string::npos)
    return s;
  std::string q = "\"";
  for (char c : s)
    q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// 17 digits give back the same double (results); axis values read better with 12 (0.4, not 0.40000000000000002).
std::string number_cell(double v, int digits = 17)
{
  if (std::isnan(v))
    return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

// h5py and HDF5 agree on names; listing a group's members needs a callback.
herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* data)
{
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

std::string read_string_attribute(hid_t where, const char* name)
{
  Hid attr(H5Aopen(where, name, H5P_DEFAULT), H5Aclose, std::string("open attribute ") + name);
  Hid type(H5Aget_type(attr), H5Tclose, "read an attribute type");
  if (H5Tget_class(type) == H5T_INTEGER) {
    long long v = 0;
    check(H5Aread(attr, H5T_NATIVE_LLONG, &v), std::string("read attribute ") + name);
    return std::to_string(v);
  }
  Hid mem(string_type(), H5Tclose, "make a string type");
  char* p = nullptr;
  check(H5Aread(attr, mem, &p), std::string("read attribute ") + name);
  std::string s = p ? p : "";
  H5free_memory(p);
  return s;
}

} // namespace

const std::vector<std::string>& stage_columns()
{
  static const std::vector<std::string> columns = [] {
    std::vector<std::string> c;
    for (auto part : netsim::kParts)
      c.push_back(std::string(name_of(part)) + "_s");
    return c;
  }();
  return columns;
}

const std::vector<std::string>& metric_columns()
{
  static const std::vector<std::string> columns = [] {
    std::vector<std::string> c{"step_time_s",
                               "tokens_per_s",
                               "tflops_per_gpu",
                               "mfu",
                               "model_flops_per_step",
                               "tflops_per_gpu_megatron",
                               "mfu_megatron",
                               "tflops_per_gpu_torchtitan",
                               "mfu_torchtitan",
                               "flow_graph_ops",
                               "transfers"};
    for (const auto& part : summary_parts())
      for (const char* stat : {"mean", "max"})
        c.push_back(part + "_" + stat + "_s");
    for (auto t : enum_values<topology::Tier>())
      c.push_back("bytes_" + std::string(name_of(t)));
    for (auto t : enum_values<topology::Tier>())
      c.push_back("utilisation_" + std::string(name_of(t)));
    c.push_back("boundary_bytes_out_max");
    for (const char* r : {"sampled_mean_s", "sampled_p99_s", "variability_loss", "ettr", "interruptions_per_day",
                          "checkpoint_interval_s", "goodput_tokens_per_s", "diloco_outer_s", "diloco_mean_step_s",
                          "diloco_tokens_per_s"})
      c.push_back(r);
    c.push_back("elapsed_s");
    return c;
  }();
  return columns;
}

bool usable_record(const json& record, const std::string& key)
{
  // A dry run of everything the writers read: a record from another spansim version or edited by hand must make
  // its point count as missing (and run again), not throw half-way through writing the result files.
  try {
    if (!record.is_object() || !record.contains("key") || record.at("key") != key || !record.at("status").is_string())
      return false;
    // The key is the point (its scenario, seed and repetition); the build is the rest of what a record answers for:
    // a record of another spansim build is computed again, as optimize's and validate's are.
    if (record.value("git_hash", std::string()) != git_hash())
      return false;
    record.value("error", std::string());
    record.value("spansim_version", std::string());
    record.value("git_hash", std::string());
    if (record.at("status") != "ok")
      return true;
    const json& summary = record.at("summary");
    // contains() is false on a non-object and iterating a null sees nothing, so these shapes are checked here.
    if (!summary.is_object() || !summary.at("metrics").is_object() || !summary.at("network").is_object() ||
        !summary.at("network").at("tiers").is_array() || !summary.at("network").at("boundaries").is_array() ||
        !summary.at("breakdown").at("over_stages").is_object())
      return false;
    for (const char* part : {"stages", "ranks", "links"})
      if (record.contains(part) && record.at(part).is_array() != (std::string(part) == "stages"))
        return false;
    summary.at("configuration");
    summary.at("spansim").at("version").get<std::string>();
    summary.at("spansim").at("git_hash").get<std::string>();
    // A record's figures are read as any input's: a step of -1 s or 1e308 s (an edited or damaged record) is no
    // result, and the point runs again.
    for (const auto& column : metric_columns()) {
      const double v = metric_value(record, column);
      if (std::isnan(v))
        continue;
      const bool time = column.size() > 2 && column.compare(column.size() - 2, 2, "_s") == 0;
      if (!std::isfinite(v) || v < 0 || (time && v > units::kMaxTime) || (column == "step_time_s" && !(v > 0)))
        return false;
    }
    if (record.contains("stages"))
      for (const auto& s : record.at("stages")) {
        s.at("stage").get<long long>();
        for (const auto& c : stage_columns())
          number(s.at(c));
      }
    if (record.contains("ranks")) {
      for (const char* c : {"gpu", "tp", "cp", "pp", "dp"})
        record.at("ranks").at(c).get<std::vector<long long>>();
      for (const auto& c : stage_columns())
        record.at("ranks").at(c).get<std::vector<double>>();
    }
    if (record.contains("links")) {
      const json& l = record.at("links");
      l.at("name").get<std::vector<std::string>>();
      l.at("tier").get<std::vector<std::string>>();
      l.at("capacity_Bps").get<std::vector<double>>();
      if (l.at("bytes").get<std::vector<double>>().size() % 2 != 0)
        return false;
    }
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

void write_results_hdf5(const Campaign& campaign, const std::vector<Point>& points, const ResultMap& results,
                        const std::string& path)
{
  prepare_directory(path);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::string tmp = temp_name(path);
  try {
    write_file(campaign, points, results, tmp);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  commit(tmp, path);
}

void write_results_csv(const Campaign& campaign, const std::vector<Point>& points, const ResultMap& results,
                       const std::string& path)
{
  prepare_directory(path);
  const std::string tmp = temp_name(path);
  {
    std::ofstream f(tmp);
    if (!f)
      throw UsageError("cannot write \"" + tmp + "\"");
    f << "index,repetition,seed,key,status";
    for (const auto& a : campaign.axes)
      f << "," << csv_cell(a.name);
    for (const auto& c : metric_columns())
      f << "," << c;
    f << ",spansim_version,git_hash,error\n";
    for (const Point* p : finished(points, results)) {
      const json& r = results.at(p->key);
      const bool ok = r.value("status", "") == "ok";
      f << p->index << "," << p->repetition << "," << p->seed << "," << p->key << "," << r.value("status", "error");
      for (std::size_t k = 0; k < campaign.axes.size(); ++k) {
        const Axis& a = campaign.axes[k];
        f << "," << (a.numeric ? number_cell(a.numbers[p->steps[k]], 12) : csv_cell(a.labels[p->steps[k]]));
      }
      for (const auto& c : metric_columns())
        f << "," << number_cell(metric_value(r, c));
      f << "," << (ok ? r.at("summary").at("spansim").at("version").get<std::string>() : "") << ","
        << (ok ? r.at("summary").at("spansim").at("git_hash").get<std::string>() : "") << ","
        << csv_cell(r.value("error", "")) << "\n";
    }
    if (!f.flush())
      throw UsageError("cannot write \"" + tmp + "\"");
  }
  commit(tmp, path);
}

ResultTable read_results_hdf5(const std::string& path)
{
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (H5Fis_hdf5(path.c_str()) <= 0)
    throw Error("\"" + path + "\" is not a readable HDF5 file");
  Hid file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "open \"" + path + "\"");
  ResultTable t;
  for (const char* a :
       {"format", "campaign", "campaign_file", "spansim_version", "git_hash", "points_total", "points_done"})
    t.attributes[a] = read_string_attribute(file, a);
  if (t.attributes["format"] != "spansim-campaign/1")
    throw Error("\"" + path + "\" is not a spansim campaign result (format \"" + t.attributes["format"] + "\")");
  Hid table(H5Gopen2(file, "points", H5P_DEFAULT), H5Gclose, "open /points");
  std::vector<std::string> names;
  check(H5Literate(table, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_name, &names), "list /points");
  for (const auto& name : names) {
    Hid set(H5Dopen2(table, name.c_str(), H5P_DEFAULT), H5Dclose, "open /points/" + name);
    Hid type(H5Dget_type(set), H5Tclose, "read a dataset type");
    Hid space(H5Dget_space(set), H5Sclose, "read a dataspace");
    hsize_t n = 0;
    H5Sget_simple_extent_dims(space, &n, nullptr);
    t.rows = n;
    if (H5Tget_class(type) == H5T_STRING) {
      Hid mem(string_type(), H5Tclose, "make a string type");
      std::vector<char*> p(n, nullptr);
      if (n > 0)
        check(H5Dread(set, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data()), "read /points/" + name);
      auto& column = t.texts[name];
      for (char* s : p)
        column.push_back(s ? s : "");
      if (n > 0)
        H5Dvlen_reclaim(mem, space, H5P_DEFAULT, p.data());
    } else {
      if (H5Aexists(set, "unit") > 0)
        t.units[name] = read_string_attribute(set, "unit");
      auto& column = t.numbers[name];
      column.resize(n);
      if (n > 0)
        check(H5Dread(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, column.data()), "read /points/" + name);
    }
  }
  return t;
}

} // namespace spansim::experiments
