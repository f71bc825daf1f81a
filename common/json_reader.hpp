#pragma once
/// @file
/// @brief Strict reading of JSON spec files: typed getters, units, JSON paths in errors, unknown keys refused.

#include "common/names.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace spansim::spec {

/// @brief Largest spec file (or document) read: 64 MiB. Larger input is refused before it is read.
inline constexpr std::size_t kMaxSpecFileBytes = 64ULL * 1024 * 1024;
/// @brief Deepest nesting of objects and arrays accepted in a spec document.
inline constexpr int kMaxJsonDepth = 64;

/// @brief Reads and parses a JSON spec file. Missing files, non-regular files (directories, devices, FIFOs),
/// files over kMaxSpecFileBytes, syntax errors, duplicate keys and nesting beyond kMaxJsonDepth become a
/// SpecError naming the file (and the JSON path where there is one).
nlohmann::json load_json_file(const std::string& path);
/// @brief Loads a spec file that another spec names at `referrer`: a missing or unreadable file is reported at
/// the referrer (file and JSON path of the reference); errors inside the file name the file itself. A referrer
/// without a file (a command-line argument) gives load_json_file's errors.
nlohmann::json load_referenced_json(const std::string& path, const struct Location& referrer);
/// @brief Reads a spec file's text (JSON or CSV) with load_json_file's checks on the file itself; files over
/// `max_bytes` are refused before they are read.
std::string load_text_file(const std::string& path, std::size_t max_bytes = kMaxSpecFileBytes);
/// @brief Reports at `referrer` a file it names that is missing or not a regular file.
void check_referenced_file(const std::string& path, const struct Location& referrer);
/// @brief Resolves `path` as named at `referrer`: relative paths are taken from the referring file's directory.
std::string referenced_path(const std::string& path, const struct Location& referrer);
/// @brief Parses JSON text with the checks of load_json_file; `file` names it in errors. Text over `max_bytes` is
/// refused (a trace reader allows more than a spec's limit).
nlohmann::json parse_json_text(std::string_view text, const std::string& file,
                               std::size_t max_bytes = kMaxSpecFileBytes);

/// @brief Where a JSON value sits: the file it came from and its JSON path ("$.pod.nic_bandwidth").
struct Location {
  std::string file;
  std::string path = "$";
  /// @brief The location of member `key` of this object.
  Location member(std::string_view key) const;
  /// @brief The location of element `index` of this array.
  Location element(std::size_t index) const;
  /// @brief Throws a SpecError at this location.
  [[noreturn]] void fail(const std::string& what) const;
};

/// @brief One JSON object being read. Every key asked for is remembered; finish() refuses the others.
class ObjectReader {
public:
  /// @brief Throws a SpecError if `value` is not an object.
  ObjectReader(const nlohmann::json& value, Location where);

  bool has(std::string_view key) const;
  const Location& where() const { return where_; }
  /// @brief Throws a SpecError located at member `key`.
  [[noreturn]] void fail(std::string_view key, const std::string& what) const;

  std::string string(std::string_view key);
  /// @brief A name that will name output files: one safe path component (see common/paths.hpp).
  std::string name(std::string_view key);
  std::optional<std::string> optional_string(std::string_view key);
  /// @brief A string that must be one of `allowed`.
  std::string choice(std::string_view key, std::initializer_list<std::string_view> allowed);
  /// @brief A string naming a value of enum E (its enum_names table); errors list the allowed names.
  template <class E>
  E enumeration(std::string_view key)
  {
    const std::string s = string(key);
    if (auto v = parse_name<E>(s))
      return *v;
    fail(key, "unknown value \"" + s + "\" (allowed: " + allowed_names<E>(true) + ")");
  }
  template <class E>
  std::optional<E> optional_enumeration(std::string_view key)
  {
    if (!has(key))
      return std::nullopt;
    return enumeration<E>(key);
  }
  bool boolean(std::string_view key);
  std::optional<bool> optional_boolean(std::string_view key);
  /// @brief A number in [min, max].
  double number(std::string_view key, double min, double max);
  std::optional<double> optional_number(std::string_view key, double min, double max);
  /// @brief An integer in [min, max].
  std::int64_t integer(std::string_view key, std::int64_t min, std::int64_t max);
  std::optional<std::int64_t> optional_integer(std::string_view key, std::int64_t min, std::int64_t max);

  /// @brief A bandwidth string ("400Gbps") in bytes/s; must be > 0.
  double bandwidth(std::string_view key);
  std::optional<double> optional_bandwidth(std::string_view key);
  /// @brief A time string ("5us") in seconds; must be >= 0.
  double time(std::string_view key);
  std::optional<double> optional_time(std::string_view key);
  /// @brief A size string ("80GiB") in bytes.
  double size(std::string_view key);
  std::optional<double> optional_size(std::string_view key);
  /// @brief A distance string ("120km") in meters.
  double distance(std::string_view key);
  std::optional<double> optional_distance(std::string_view key);

  /// @brief A nested object.
  ObjectReader object(std::string_view key);
  std::optional<ObjectReader> optional_object(std::string_view key);
  /// @brief An array of objects (empty if the key is absent and `required` is false).
  std::vector<ObjectReader> objects(std::string_view key, bool required);
  /// @brief An array of strings.
  std::vector<std::string> strings(std::string_view key);
  /// @brief The raw JSON of a member, marked as read.
  const nlohmann::json& raw(std::string_view key);

  /// @brief Throws a SpecError if the object has a key that was never asked for, listing the allowed keys.
  /// @param also_allowed keys that are valid but were not asked for on this path (e.g. alternatives).
  void finish(std::initializer_list<std::string_view> also_allowed = {}) const;

private:
  const nlohmann::json& member(std::string_view key);
  const nlohmann::json* find(std::string_view key);

  const nlohmann::json* value_;
  Location where_;
  // Every key asked for, present or not: the allowed keys of this object.
  mutable std::set<std::string, std::less<>> known_;
};

} // namespace spansim::spec
