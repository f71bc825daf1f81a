#include "common/error.hpp"

namespace spansim {

namespace {
std::string format_spec_error(const std::string& file, const std::string& json_path, const std::string& what)
{
  std::string msg = file.empty() ? std::string("<spec>") : file;
  if (!json_path.empty())
    msg += ": at " + json_path;
  return msg + ": " + what;
}
} // namespace

SpecError::SpecError(const std::string& file, const std::string& json_path, const std::string& what)
    : Error(format_spec_error(file, json_path, what)), file_(file), json_path_(json_path)
{
}

} // namespace spansim
