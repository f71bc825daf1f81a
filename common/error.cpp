#include "common/error.hpp"

#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

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
// Length of the well-formed UTF-8 sequence starting at text[i] (2-4), or 0 if it is not one (Unicode's table of
// well-formed byte sequences: no lead byte above 0xf4, no overlong form, no surrogate, nothing above U+10FFFF).
std::size_t utf8_length(const std::string& text, std::size_t i)
{
  const auto u        = static_cast<unsigned char>(text[i]);
  const std::size_t n = u >= 0xf0 && u <= 0xf4 ? 4 : u >= 0xe0 && u <= 0xef ? 3 : u >= 0xc2 && u <= 0xdf ? 2 : 0;
  if (n == 0 || i + n > text.size())
    return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80)
      return 0;
  // The second byte's narrower ranges after E0, ED, F0 and F4.
  const auto second = static_cast<unsigned char>(text[i + 1]);
  if ((u == 0xe0 && second < 0xa0) || (u == 0xed && second > 0x9f) || (u == 0xf0 && second < 0x90) ||
      (u == 0xf4 && second > 0x8f))
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
        // Characters that show as a plain space or as nothing, or reorder what follows (C1 controls, no-break and
        // zero-width spaces, bidirectional controls, the byte-order mark), are escaped as controls are: a message
        // must show what the input holds.
        std::uint32_t cp = u & (n == 2 ? 0x1f : n == 3 ? 0x0f : 0x07);
        for (std::size_t k = 1; k < n; ++k)
          cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3f);
        const bool hidden = (cp >= 0x80 && cp <= 0xa0) || cp == 0xad || cp == 0x180e ||
                            (cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f) ||
                            (cp >= 0x205f && cp <= 0x206f) || cp == 0x3000 || cp == 0xfeff;
        if (hidden) {
          char buf[12];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
          out += buf;
        } else {
          out.append(text, i, n);
        }
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

namespace {
// Bytes of the first `chars` UTF-8 characters of text[from, to).
std::size_t utf8_prefix_bytes(const std::string& text, std::size_t from, std::size_t to, std::size_t chars)
{
  std::size_t i = from;
  for (std::size_t n = 0; i < to && n < chars; ++n) {
    ++i;
    while (i < to && (static_cast<unsigned char>(text[i]) & 0xc0) == 0x80)
      ++i;
  }
  return i - from;
}

std::size_t utf8_chars(const std::string& text, std::size_t from, std::size_t to)
{
  std::size_t n = 0;
  for (std::size_t i = from; i < to; ++i)
    n += (static_cast<unsigned char>(text[i]) & 0xc0) != 0x80;
  return n;
}
} // namespace

std::string cut_long_echoes(const std::string& message)
{
  std::string out;
  out.reserve(std::min(message.size(), kMaxMessageBytes + 64));
  // Appends text[from, to), cut to kMaxEchoChars characters with its length said.
  // The length is said after the span (outside its quotes, after a space), so that cutting again changes nothing.
  auto append = [&](std::size_t from, std::size_t to, bool quoted) {
    const std::size_t keep = utf8_prefix_bytes(message, from, to, kMaxEchoChars);
    out += quoted ? "\"" : "";
    out.append(message, from, keep);
    out += quoted ? "\"" : "";
    if (from + keep < to)
      out += " (cut at " + std::to_string(kMaxEchoChars) + " of its " + std::to_string(utf8_chars(message, from, to)) +
             " characters)";
  };
  std::size_t i = 0;
  while (i < message.size()) {
    if (message[i] == '"') {
      const std::size_t close = message.find('"', i + 1);
      if (close != std::string::npos) {
        append(i + 1, close, true);
        i = close + 1;
        continue;
      }
    }
    if (message[i] == ' ') {
      out += ' ';
      ++i;
      continue;
    }
    std::size_t end = i + 1;
    // A colon or comma after a value is the message's own punctuation ("invalid size X: ...").
    while (end < message.size() && message[end] != ' ' && message[end] != '"' && message[end] != ':' &&
           message[end] != ',')
      ++end;
    append(i, end, false);
    i = end;
  }
  return out;
}

std::string bounded_message(const std::string& raw)
{
  const std::string message = cut_long_echoes(raw);
  if (message.size() <= kMaxMessageBytes)
    return message;
  std::size_t cut = kMaxMessageBytes;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xc0) == 0x80)
    --cut; // not inside a UTF-8 sequence
  return message.substr(0, cut) + " ... (message cut: " + std::to_string(message.size()) + " bytes in all)";
}

std::string listing(const std::vector<std::string>& items, std::size_t most)
{
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < most; ++i)
    out += (i == 0 ? "" : ", ") + items[i];
  if (items.size() > most)
    out += ", and " + std::to_string(items.size() - most) + " more";
  return out;
}

SpecError::SpecError(const std::string& file, const std::string& json_path, const std::string& what)
    : Error(format_spec_error(file, json_path, what)), file_(file), json_path_(json_path),
      detail_(cut_long_echoes(escape_controls(what)))
{
}

namespace {
// Fields as "<length>:<bytes>", so that any byte (a NUL in a JSON path) survives.
void put_field(std::string& out, const std::string& field)
{
  out += std::to_string(field.size()) + ":" + field;
}

std::string take_field(const std::string& in, std::size_t& pos)
{
  const std::size_t colon  = in.find(':', pos);
  const std::string length = colon == std::string::npos ? "" : in.substr(pos, colon - pos);
  if (length.empty() || length.size() > 12 || length.find_first_not_of("0123456789") != std::string::npos)
    throw SimulationError("a child process sent an unreadable error");
  const std::size_t n = std::stoul(length);
  if (colon + 1 + n > in.size())
    throw SimulationError("a child process sent a truncated error");
  pos = colon + 1 + n;
  return in.substr(colon + 1, n);
}
} // namespace

std::string encode_error(const std::exception& e)
{
  std::string out;
  if (const auto* i = dynamic_cast<const InfeasibleError*>(&e)) {
    out = "I";
    put_field(out, i->reason());
    put_field(out, i->file());
    put_field(out, i->json_path());
    put_field(out, i->detail());
  } else if (const auto* t = dynamic_cast<const TraceError*>(&e)) {
    out = "T";
    put_field(out, t->file());
    put_field(out, t->where());
    put_field(out, t->detail());
  } else if (const auto* s = dynamic_cast<const SpecError*>(&e)) {
    out = "S";
    put_field(out, s->file());
    put_field(out, s->json_path());
    put_field(out, s->detail());
  } else {
    out = dynamic_cast<const UsageError*>(&e) ? "U" : "X";
  }
  put_field(out, e.what());
  return out;
}

namespace {
// The kind and fields of an encoded error, checked for their count.
std::pair<char, std::vector<std::string>> decode_error(const std::string& encoded, const std::string& context)
{
  const char kind = encoded.empty() ? 'X' : encoded[0];
  std::size_t pos = 1;
  std::vector<std::string> f;
  while (pos < encoded.size())
    f.push_back(take_field(encoded, pos));
  const std::size_t needed = kind == 'I' ? 5 : kind == 'S' || kind == 'T' ? 4 : 1;
  if (f.size() != needed)
    throw SimulationError(context + "a child process sent an unreadable error");
  return {kind, f};
}
} // namespace

std::string encoded_message(const std::string& encoded)
{
  return decode_error(encoded, "").second.back();
}

void rethrow_error(const std::string& encoded, const std::string& context)
{
  const auto decoded = decode_error(encoded, context);
  const char kind    = decoded.first;
  const auto& f      = decoded.second;
  switch (kind) {
  case 'I':
    throw InfeasibleError(f[0], f[1], f[2], f[3]);
  case 'S':
    throw SpecError(f[0], f[1], f[2]);
  case 'T':
    throw TraceError(f[0], f[1], f[2]);
  case 'U':
    throw UsageError(f[0]);
  default:
    throw SimulationError(context + f[0]);
  }
}

} // namespace spansim
