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

namespace {
// Length of the well-formed UTF-8 sequence starting at text[i] (1-4), or 0 if it is not one.
std::size_t utf8_length(const std::string& text, std::size_t i)
{
  const auto u        = static_cast<unsigned char>(text[i]);
  const std::size_t n = u >= 0xf0 && u <= 0xf4 ? 4 : u >= 0xe0 ? 3 : u >= 0xc2 && u < 0xe0 ? 2 : 0;
  if (n == 0 || i + n > text.size())
    return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80)
      return 0;
  return n;
}
} // namespace

std::string escape_controls(const std::string& text)
{
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      // Valid UTF-8 passes; a stray byte is escaped, so that the message is always text (Python decodes it).
      if (const auto n = utf8_length(text, i); n > 0) {
        out.append(text, i, n);
        i += n - 1;
      } else {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", u);
        out += buf;
      }
      continue;
    }
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
