#include "common/paths.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

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

void write_file_replacing(const std::string& path, std::string_view contents)
{
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f || !f.write(contents.data(), static_cast<std::streamsize>(contents.size())) || !f.flush()) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw UsageError("cannot write \"" + path + "\"");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw UsageError("cannot write \"" + path + "\": " + ec.message());
  }
}

} // namespace spansim

namespace spansim {

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
