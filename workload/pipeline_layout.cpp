// Megatron-LM's pipeline_model_parallel_layout (megatron/core/transformer/pipeline_parallel_layer_layout.py): one
// string names what each model chunk holds, chunks in id order (g = v x pp + stage) separated by '|': E the
// embedding, t a decoder layer, m a multi-token prediction module, L the loss (final norm and output layer).
// "(xy|)*n" and "x*n" repeat; commas are cosmetic.
#include "workload/detail.hpp"

#include <cctype>
#include <stdexcept>

namespace spansim::workload::detail {

namespace {

// Above this an unrolled layout is no pipeline anyone runs (and building it would exhaust memory).
constexpr std::size_t kMaxUnrolled = 10'000'000;

// The repeat count of "*n" at `star` ('*'); `end` is set past its digits. nullopt: no digits follow.
std::optional<std::size_t> count_at(const std::string& s, std::size_t star, std::size_t& end)
{
  end           = star + 1;
  std::size_t n = 0;
  while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) {
    n = std::min<std::size_t>(n * 10 + static_cast<std::size_t>(s[end] - '0'), kMaxUnrolled + 1);
    ++end;
  }
  if (end == star + 1)
    return std::nullopt;
  return n;
}

void append_repeated(std::string& out, std::string_view what, std::size_t n)
{
  if (n > 0 && what.size() > (kMaxUnrolled - out.size()) / n)
    throw std::invalid_argument("the layout unrolls to more than 10M characters");
  for (std::size_t i = 0; i < n; ++i)
    out += what;
}

// One left-to-right pass of Megatron's first expression, r'\(([^)]+)\)\*(\d+)': a '(' and what follows up to the
// first ')' (not empty), then '*n', repeated n times. A '(' that starts no such match stays (and is refused later
// as a character).
std::string unroll_groups(const std::string& s)
{
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t close = s[i] == '(' ? s.find(')', i + 1) : std::string::npos;
    std::size_t end         = 0;
    const auto n            = close != std::string::npos && close > i + 1 && close + 1 < s.size() && s[close + 1] == '*'
                                  ? count_at(s, close + 1, end)
                                  : std::nullopt;
    if (!n) {
      out += s[i++];
      continue;
    }
    append_repeated(out, std::string_view(s).substr(i + 1, close - i - 1), *n);
    i = end;
  }
  return out;
}

// One left-to-right pass of Megatron's second expression, r'(.)\*(\d+)': a character followed by '*n', n times.
std::string unroll_characters(const std::string& s)
{
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t end = 0;
    const auto n    = i + 1 < s.size() && s[i + 1] == '*' ? count_at(s, i + 1, end) : std::nullopt;
    if (!n) {
      out += s[i++];
      continue;
    }
    append_repeated(out, std::string_view(s).substr(i, 1), *n);
    i = end;
  }
  return out;
}

} // namespace

std::vector<LayoutChunk> parse_pipeline_layout(std::string_view layout)
{
  std::string s;
  for (char ch : layout)
    if (ch != ',' && !std::isspace(static_cast<unsigned char>(ch)))
      s += ch;
  if (s.empty())
    throw std::invalid_argument("an empty layout (give one chunk per pipeline stage and virtual stage)");
  s = unroll_characters(unroll_groups(s));
  std::vector<LayoutChunk> out(1);
  for (char ch : s) {
    LayoutChunk& c = out.back();
    switch (ch) {
    case '|':
      out.emplace_back();
      break;
    case 'E':
      ++c.embedding;
      c.items += ch;
      break;
    case 'L':
      ++c.loss;
      c.items += ch;
      break;
    case 't':
      ++c.decoder;
      c.items += ch;
      break;
    case 'm':
      ++c.mtp;
      c.items += ch;
      break;
    default:
      throw std::invalid_argument(std::string("unknown layer character '") + ch +
                                  "' (allowed: E embedding, t decoder layer, m MTP module, L loss, | between "
                                  "chunks, (...)*n and x*n to repeat, as Megatron unrolls them: one pass each, "
                                  "groups without nested parentheses)");
    }
  }
  return out;
}

} // namespace spansim::workload::detail
