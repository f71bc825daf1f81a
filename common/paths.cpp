#include "common/paths.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <sys/stat.h>
#include <unistd.h>

namespace spansim {

namespace {
bool allowed_char(char c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-' || c == '+';
}
} // namespace

std::string unsafe_name_reason(std::string_view name)
{
  if (name.empty())
    return "a name must not be empty";
  if (name.size() > kMaxNameLength)
    return "a name has at most " + std::to_string(kMaxNameLength) + " characters";
  if (name.front() == '.' || name.front() == '-')
    return "a name must not start with '.' or '-'";
  for (char c : name)
    if (!allowed_char(c))
      return "a name names output files: letters, digits and . _ - + only";
  return {};
}

bool is_safe_name(std::string_view name)
{
  return unsafe_name_reason(name).empty();
}

std::string sanitized_name(std::string_view text)
{
  std::string out;
  for (char c : text.substr(0, kMaxNameLength))
    out += allowed_char(c) ? c : '_';
  if (out.empty() || out.front() == '.' || out.front() == '-')
    out.insert(out.begin(), '_');
  return out.substr(0, kMaxNameLength);
}

std::string path_in(const std::string& directory, std::string_view name)
{
  if (auto why = unsafe_name_reason(name); !why.empty())
    throw UsageError("refusing to write \"" + std::string(name) + "\" into \"" + directory + "\": " + why);
  return (std::filesystem::path(directory) / std::string(name)).string();
}

} // namespace spansim

namespace spansim {

TemporaryFile create_temporary(const std::string& path, unsigned mode)
{
  // The PID first, so that a later run can tell a killed writer's leftovers (experiments' stale-temporary sweep).
  std::string name = path + ".tmp-" + std::to_string(::getpid()) + "-XXXXXX";
  const int fd     = ::mkstemp(name.data());
  if (fd < 0)
    throw UsageError("cannot write \"" + path + "\": " + std::strerror(errno));
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, static_cast<mode_t>(mode) & ~mask);
  return {name, fd};
}

void replace_with(const std::string& tmp, const std::string& path)
{
  // rename() replaces what `path` names, a planted symlink included, without following it.
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw UsageError("cannot write \"" + path + "\": " + why);
  }
}

ReplacingFile::ReplacingFile(std::string path, unsigned mode) : path_(std::move(path))
{
  auto [tmp, fd] = create_temporary(path_, mode);
  tmp_           = std::move(tmp);
  ::close(fd);
  stream_.open(tmp_, std::ios::binary | std::ios::trunc);
  if (!stream_) {
    ::unlink(tmp_.c_str());
    throw UsageError("cannot write \"" + path_ + "\"");
  }
}

ReplacingFile::~ReplacingFile()
{
  if (!committed_) {
    stream_.close();
    ::unlink(tmp_.c_str());
  }
}

void ReplacingFile::commit()
{
  stream_.flush();
  const bool ok = static_cast<bool>(stream_);
  stream_.close();
  if (!ok || stream_.fail()) {
    ::unlink(tmp_.c_str());
    committed_ = true;
    throw UsageError("cannot write \"" + path_ + "\"");
  }
  committed_ = true;
  replace_with(tmp_, path_);
}

void write_file_replacing(const std::string& path, std::string_view contents, unsigned mode)
{
  ReplacingFile f(path, mode);
  f.stream().write(contents.data(), static_cast<std::streamsize>(contents.size()));
  f.commit();
}

} // namespace spansim

namespace spansim {

bool path_exists(const std::string& path)
{
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

std::vector<std::string> json_names_in(const std::string& directory)
{
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(directory, ec))
    if (entry.path().extension() == ".json")
      names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string json_names_list(const std::string& directory)
{
  std::string list;
  for (const auto& n : json_names_in(directory))
    list += (list.empty() ? "" : ", ") + n;
  return list;
}

} // namespace spansim
