#include "common/json_reader.hpp"

#include "common/error.hpp"
#include "common/paths.hpp"
#include "common/units.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace spansim::spec {

using nlohmann::json;

namespace {

const char* file_kind(const std::filesystem::file_status& st)
{
  switch (st.type()) {
  case std::filesystem::file_type::directory:
    return "a directory";
  case std::filesystem::file_type::fifo:
    return "a FIFO";
  case std::filesystem::file_type::character:
    return "a character device";
  case std::filesystem::file_type::block:
    return "a block device";
  case std::filesystem::file_type::socket:
    return "a socket";
  default:
    return "not a regular file";
  }
}

// Where the parser is: one frame per open object or array, so that errors name a JSON path.
struct Frame {
  bool object = false;
  std::set<std::string, std::less<>> keys; // objects: keys seen so far
  std::string key;                         // objects: the member being read
  std::size_t index = 0;                   // arrays: the element being read
};

std::string path_of(const std::vector<Frame>& frames, std::size_t depth)
{
  std::string path = "$";
  for (std::size_t i = 0; i < depth && i < frames.size(); ++i)
    path += frames[i].object ? "." + frames[i].key : "[" + std::to_string(frames[i].index) + "]";
  return path;
}

// The checks of a spec document, as SAX events: duplicate keys and nesting, with the JSON path where they are.
class DocumentCheck : public nlohmann::json_sax<json> {
public:
  explicit DocumentCheck(const std::string& file) : file_(file) {}

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override
  {
    auto& top = frames_.back();
    top.key   = k;
    if (!top.keys.insert(top.key).second)
      throw SpecError(file_, path_of(frames_, frames_.size()),
                      "duplicate key \"" + top.key + "\" (each key may appear once per object)");
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override
  {
    // nlohmann's text starts with "[json.exception.parse_error.101] "; keep what follows.
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos)
      what = what.substr(pos + 2);
    throw SpecError(file_, "", "invalid JSON: " + what);
  }

private:
  bool value()
  {
    if (!frames_.empty() && !frames_.back().object)
      ++frames_.back().index;
    return true;
  }
  bool open(bool object)
  {
    if (frames_.size() >= static_cast<std::size_t>(kMaxJsonDepth))
      throw SpecError(file_, path_of(frames_, frames_.size()),
                      "nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    frames_.emplace_back();
    frames_.back().object = object;
    return true;
  }
  bool close()
  {
    frames_.pop_back();
    return value();
  }

  const std::string& file_;
  std::vector<Frame> frames_;
};

} // namespace

std::string load_text_file(const std::string& path, std::size_t max_bytes)
{
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status))
    throw SpecError(path, "", "cannot open file: no such file");
  // Devices, FIFOs and directories are refused before opening: /dev/zero never ends and a FIFO with no writer
  // blocks forever.
  if (!fs::is_regular_file(status))
    throw SpecError(path, "", std::string("cannot read it as a spec file: it is ") + file_kind(status));
  const auto bytes = fs::file_size(path, ec);
  if (ec)
    throw SpecError(path, "", "cannot read its size: " + ec.message());
  if (bytes > max_bytes)
    throw SpecError(path, "",
                    "the file has " + std::to_string(bytes) + " bytes; such files are limited to " +
                        std::to_string(max_bytes / (1024 * 1024)) + " MiB");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw SpecError(path, "", "cannot open file");
  std::string text(bytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(bytes));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

json load_json_file(const std::string& path)
{
  return parse_json_text(load_text_file(path), path);
}

std::string referenced_path(const std::string& path, const Location& referrer)
{
  namespace fs = std::filesystem;
  if (referrer.file.empty() || fs::path(path).is_absolute())
    return path;
  return (fs::path(referrer.file).parent_path() / path).string();
}

void check_referenced_file(const std::string& path, const Location& referrer)
{
  namespace fs = std::filesystem;
  if (referrer.file.empty())
    return;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status))
    referrer.fail("no such file \"" + path + "\"");
  if (!fs::is_regular_file(status))
    referrer.fail("\"" + path + "\" cannot be read as a spec file: it is " + file_kind(status));
}

json load_referenced_json(const std::string& path, const Location& referrer)
{
  check_referenced_file(path, referrer);
  return load_json_file(path);
}

json parse_json_text(std::string_view text, const std::string& file, std::size_t max_bytes)
{
  if (text.size() > max_bytes)
    throw SpecError(file, "",
                    "the document has " + std::to_string(text.size()) + " bytes; such documents are limited to " +
                        std::to_string(max_bytes / (1024 * 1024)) + " MiB");
  // A SAX pass checks keys and depth; then a plain parse builds the document. nlohmann's callback parser would
  // do both at once, but it rescans an array at every object that ends in it: quadratic in a graph of 200K links.
  DocumentCheck check(file);
  json::sax_parse(text.begin(), text.end(), &check);
  return json::parse(text.begin(), text.end());
}

Location Location::member(std::string_view key) const
{
  return {file, path + "." + std::string(key)};
}

Location Location::element(std::size_t index) const
{
  return {file, path + "[" + std::to_string(index) + "]"};
}

void Location::fail(const std::string& what) const
{
  throw SpecError(file, path, what);
}

namespace {
const char* type_name(const json& v)
{
  return v.type_name();
}

std::size_t edit_distance(std::string_view a, std::string_view b)
{
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0]               = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j]         = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal       = up;
    }
  }
  return row[b.size()];
}
} // namespace

ObjectReader::ObjectReader(const json& value, Location where) : value_(&value), where_(std::move(where))
{
  if (!value.is_object())
    where_.fail(std::string("expected an object, found ") + type_name(value));
}

bool ObjectReader::has(std::string_view key) const
{
  known_.emplace(key);
  return value_->contains(key);
}

void ObjectReader::fail(std::string_view key, const std::string& what) const
{
  where_.member(key).fail(what);
}

const json* ObjectReader::find(std::string_view key)
{
  known_.emplace(key);
  auto it = value_->find(key);
  return it == value_->end() ? nullptr : &*it;
}

const json& ObjectReader::member(std::string_view key)
{
  const json* v = find(key);
  if (v == nullptr) {
    // A missing key is most often a misspelt one: point at the closest key that is present.
    std::string hint;
    for (const auto& [present, _] : value_->items())
      if (!known_.contains(present) && edit_distance(present, key) <= 2)
        hint = " (is \"" + present + "\" a misspelling of it?)";
    where_.fail("missing required key \"" + std::string(key) + "\"" + hint);
  }
  return *v;
}

const json& ObjectReader::raw(std::string_view key)
{
  return member(key);
}

std::string ObjectReader::string(std::string_view key)
{
  const json& v = member(key);
  if (!v.is_string())
    fail(key, std::string("expected a string, found ") + type_name(v));
  return v.get<std::string>();
}

std::string ObjectReader::name(std::string_view key)
{
  std::string s = string(key);
  if (auto why = unsafe_name_reason(s); !why.empty())
    fail(key, "invalid name \"" + s + "\": " + why);
  return s;
}

std::optional<std::string> ObjectReader::optional_string(std::string_view key)
{
  if (!has(key))
    return std::nullopt;
  return string(key);
}

std::string ObjectReader::choice(std::string_view key, std::initializer_list<std::string_view> allowed)
{
  std::string s = string(key);
  std::string list;
  for (auto a : allowed) {
    if (a == s)
      return s;
    list += (list.empty() ? "" : ", ") + std::string("\"") + std::string(a) + "\"";
  }
  fail(key, "unknown value \"" + s + "\" (allowed: " + list + ")");
}

bool ObjectReader::boolean(std::string_view key)
{
  const json& v = member(key);
  if (!v.is_boolean())
    fail(key, std::string("expected true or false, found ") + type_name(v));
  return v.get<bool>();
}

std::optional<bool> ObjectReader::optional_boolean(std::string_view key)
{
  if (!has(key))
    return std::nullopt;
  return boolean(key);
}

double ObjectReader::number(std::string_view key, double min, double max)
{
  const json& v = member(key);
  if (!v.is_number())
    fail(key, std::string("expected a number, found ") + type_name(v));
  double d = v.get<double>();
  if (!std::isfinite(d) || d < min || d > max) {
    std::ostringstream os;
    os << "value " << d << " out of range (allowed: " << min << " to " << max << ")";
    fail(key, os.str());
  }
  return d;
}

std::optional<double> ObjectReader::optional_number(std::string_view key, double min, double max)
{
  if (!has(key))
    return std::nullopt;
  return number(key, min, max);
}

std::int64_t ObjectReader::integer(std::string_view key, std::int64_t min, std::int64_t max)
{
  const json& v = member(key);
  auto range    = [&] { return "(allowed: " + std::to_string(min) + " to " + std::to_string(max) + ")"; };
  if (v.is_number_float()) {
    // 3e9 or 1e20 is written as a float but is a whole number: say it is out of range, not fractional.
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d)) {
      if (d < static_cast<double>(min) || d > static_cast<double>(max) || std::fabs(d) >= 9.2e18)
        fail(key, "value " + v.dump() + " out of range " + range());
      return static_cast<std::int64_t>(d);
    }
    fail(key, "expected an integer, found the fractional number " + v.dump());
  }
  if (!v.is_number_integer())
    fail(key, std::string("expected an integer, found ") + type_name(v));
  // Unsigned values beyond int64 are refused as out of range rather than wrapped.
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max))
    fail(key, "value " + v.dump() + " out of range " + range());
  std::int64_t i = v.get<std::int64_t>();
  if (i < min || i > max)
    fail(key, "value " + std::to_string(i) + " out of range " + range());
  return i;
}

std::optional<std::int64_t> ObjectReader::optional_integer(std::string_view key, std::int64_t min, std::int64_t max)
{
  if (!has(key))
    return std::nullopt;
  return integer(key, min, max);
}

namespace {
template <class Parse>
double parse_quantity(ObjectReader& r, std::string_view key, const json& v, Parse parse, bool positive)
{
  if (!v.is_string())
    r.fail(key, std::string("expected a quantity with a unit as a string (e.g. \"400Gbps\", \"5us\"), found ") +
                    type_name(v));
  double d = 0;
  try {
    d = parse(v.get<std::string>());
  } catch (const UsageError& e) {
    r.fail(key, e.what());
  }
  if (positive && !(d > 0))
    r.fail(key, "must be greater than zero, found \"" + v.get<std::string>() + "\"");
  return d;
}
} // namespace

double ObjectReader::bandwidth(std::string_view key)
{
  return parse_quantity(*this, key, member(key), units::parse_bandwidth, true);
}
std::optional<double> ObjectReader::optional_bandwidth(std::string_view key)
{
  if (!has(key))
    return std::nullopt;
  return bandwidth(key);
}
double ObjectReader::time(std::string_view key)
{
  return parse_quantity(*this, key, member(key), units::parse_time, false);
}
std::optional<double> ObjectReader::optional_time(std::string_view key)
{
  if (!has(key))
    return std::nullopt;
  return time(key);
}
double ObjectReader::size(std::string_view key)
{
  return parse_quantity(*this, key, member(key), units::parse_size, false);
}
std::optional<double> ObjectReader::optional_size(std::string_view key)
{
  if (!has(key))
    return std::nullopt;
  return size(key);
}
double ObjectReader::distance(std::string_view key)
{
  return parse_quantity(*this, key, member(key), units::parse_distance, false);
}
std::optional<double> ObjectReader::optional_distance(std::string_view key)
{
  if (!has(key))
    return std::nullopt;
  return distance(key);
}

ObjectReader ObjectReader::object(std::string_view key)
{
  return ObjectReader(member(key), where_.member(key));
}

std::optional<ObjectReader> ObjectReader::optional_object(std::string_view key)
{
  if (!has(key))
    return std::nullopt;
  return object(key);
}

std::vector<ObjectReader> ObjectReader::objects(std::string_view key, bool required)
{
  std::vector<ObjectReader> out;
  const json* v = required ? &member(key) : find(key);
  if (v == nullptr)
    return out;
  if (!v->is_array())
    fail(key, std::string("expected an array, found ") + type_name(*v));
  Location at = where_.member(key);
  for (std::size_t i = 0; i < v->size(); ++i)
    out.emplace_back((*v)[i], at.element(i));
  return out;
}

std::vector<std::string> ObjectReader::strings(std::string_view key)
{
  const json& v = member(key);
  if (!v.is_array())
    fail(key, std::string("expected an array of strings, found ") + type_name(v));
  std::vector<std::string> out;
  Location at = where_.member(key);
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      at.element(i).fail(std::string("expected a string, found ") + type_name(v[i]));
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

void ObjectReader::finish(std::initializer_list<std::string_view> also_allowed) const
{
  for (const auto& [key, _] : value_->items()) {
    if (known_.contains(key))
      continue;
    bool allowed_elsewhere = false;
    for (auto a : also_allowed)
      allowed_elsewhere = allowed_elsewhere || a == key;
    if (allowed_elsewhere)
      continue;
    std::string list;
    for (const auto& k : known_)
      list += (list.empty() ? "" : ", ") + k;
    for (auto a : also_allowed)
      list += (list.empty() ? "" : ", ") + std::string(a);
    where_.fail("unknown key \"" + key + "\" (allowed here: " + list + ")");
  }
}

} // namespace spansim::spec
