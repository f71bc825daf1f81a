#pragma once
/// @file
/// @brief Names taken from specs that become file or directory names: checked so that no spec can make spansim
/// write outside the output directory it was given.

#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace spansim {

/// @brief Longest name accepted for a scenario, job, optimize spec or campaign.
inline constexpr std::size_t kMaxNameLength = 128;

/// @brief Whether `name` can be one path component: 1 to kMaxNameLength characters among letters, digits and
/// ". _ - +", not starting with '.' or '-' (so never ".", ".." or an option).
bool is_safe_name(std::string_view name);

/// @brief Why `name` is not safe, or empty when it is.
std::string unsafe_name_reason(std::string_view name);

/// @brief A safe name made from `text` (a file stem, say): unsafe characters become '_', cut to the maximum length.
std::string sanitized_name(std::string_view text);

/// @brief `directory`/`name`, after checking that `name` is one safe path component.
/// @throws UsageError if it is not (a bug or a spec that escaped validation).
std::string path_in(const std::string& directory, std::string_view name);

} // namespace spansim

namespace spansim {

/// @brief A temporary file beside a path: its name and an open descriptor the caller owns.
struct TemporaryFile {
  std::string name;
  int fd = -1;
};
/// @brief Creates a temporary file beside `path`, exclusively (never through a symlink someone planted) and under an
/// unpredictable name, `path.tmp-PID-XXXXXX` (the PID lets a later run remove what a killed one left), with `mode`
/// less the umask. @throws UsageError if it cannot.
TemporaryFile create_temporary(const std::string& path, unsigned mode = 0644);
/// @brief Renames `tmp` over `path`: whatever `path` names, a symlink included, is replaced and not followed.
/// @throws UsageError (removing `tmp`) if it cannot.
void replace_with(const std::string& tmp, const std::string& path);

/// @brief An output file written under a temporary name (create_temporary) and renamed over its path by commit():
/// a reader sees the old file or the new one, and a planted symlink is replaced, never written through. Destroyed
/// uncommitted (a failure on the way), it removes the temporary and leaves the old file.
class ReplacingFile {
public:
  /// @brief Opens the temporary. @throws UsageError if it cannot.
  explicit ReplacingFile(std::string path, unsigned mode = 0644);
  ReplacingFile(const ReplacingFile&)            = delete;
  ReplacingFile& operator=(const ReplacingFile&) = delete;
  ~ReplacingFile();
  /// @brief The stream to write to.
  std::ostream& stream() { return stream_; }
  /// @brief The path it replaces.
  const std::string& path() const { return path_; }
  /// @brief Closes the temporary and renames it over the path. @throws UsageError if a write failed.
  void commit();

private:
  std::string path_;
  std::string tmp_;
  std::ofstream stream_;
  bool committed_ = false;
};

/// @brief Writes `contents` to `path` through a ReplacingFile, with `mode` (less the umask). @throws UsageError if
/// it cannot.
void write_file_replacing(const std::string& path, std::string_view contents, unsigned mode = 0644);

/// @brief Whether `path` names something that exists; never throws (a name too long for the file system, or one
/// that cannot be looked at, is no file).
bool path_exists(const std::string& path);

/// @brief The stems of the `.json` files in `directory`, sorted (shipped presets, profiles, failure models); empty
/// when the directory cannot be read.
std::vector<std::string> json_names_in(const std::string& directory);
/// @brief The same joined with ", ", for error messages that list what is allowed.
std::string json_names_list(const std::string& directory);

} // namespace spansim
