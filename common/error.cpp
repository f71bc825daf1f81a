#include "common/error.hpp"

#include <cstdio>

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

std::string escape_controls(const std::string& text)
{
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      out += c;
      continue;
    }
    switch (c) {
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default: {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    }
    }
  }
  return out;
}

SpecError::SpecError(const std::string& file, const std::string& json_path, const std::string& what)
    : Error(format_spec_error(file, json_path, what)), file_(file), json_path_(json_path)
{
}

} // namespace spansim
