// Megatron-LM's pipeline_model_parallel_layout (megatron/core/transformer/pipeline_parallel_layer_layout.py): one
// string names what each model chunk holds, chunks in id order (g = v x pp + stage) separated by '|': E the
// embedding, t a decoder layer, m a multi-token prediction module, L the loss (final norm and output layer).
// "(xy|)*n" and "x*n" repeat; commas are cosmetic.
#include "workload/detail.hpp"

#include <cctype>
#include <stdexcept>

namespace spansim::workload::detail {

namespace {

// Repeats a group or one character followed by "*n" n times, innermost (a group without parentheses inside)
// first, as Megatron's two regular expressions do.
std::string unroll(std::string s)
{
  auto count_at = [&](std::size_t star, std::size_t& end) {
    end = star + 1;
    while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end])))
      ++end;
    if (end == star + 1)
      throw std::invalid_argument("'*' must be followed by a repeat count");
    if (end - star - 1 > 6)
      throw std::invalid_argument("a repeat count above 999999");
    return std::stoi(s.substr(star + 1, end - star - 1));
  };
  for (std::size_t close; (close = s.find(')')) != std::string::npos;) {
    const std::size_t open = s.rfind('(', close);
    if (open == std::string::npos)
      throw std::invalid_argument("')' without '('");
    if (close + 1 >= s.size() || s[close + 1] != '*')
      throw std::invalid_argument("a parenthesised group must be followed by '*n'");
    std::size_t end;
    const int n             = count_at(close + 1, end);
    const std::string group = s.substr(open + 1, close - open - 1);
    if (group.empty())
      throw std::invalid_argument("an empty parenthesised group");
    std::string rep;
    for (int i = 0; i < n; ++i)
      rep += group;
    s = s.substr(0, open) + rep + s.substr(end);
    if (s.size() > 10'000'000)
      throw std::invalid_argument("the layout unrolls to more than 10M characters");
  }
  if (s.find('(') != std::string::npos)
    throw std::invalid_argument("'(' without ')'");
  for (std::size_t star; (star = s.find('*')) != std::string::npos;) {
    if (star == 0)
      throw std::invalid_argument("'*' repeats nothing");
    std::size_t end;
    const int n = count_at(star, end);
    s           = s.substr(0, star - 1) + std::string(static_cast<std::size_t>(n), s[star - 1]) + s.substr(end);
    if (s.size() > 10'000'000)
      throw std::invalid_argument("the layout unrolls to more than 10M characters");
  }
  return s;
}

} // namespace

std::vector<LayoutChunk> parse_pipeline_layout(std::string_view layout)
{
  std::string s;
  for (char ch : layout)
    if (ch != ',' && !std::isspace(static_cast<unsigned char>(ch)))
      s += ch;
  s = unroll(s);
  std::vector<LayoutChunk> out(1);
  for (char ch : s) {
    LayoutChunk& c = out.back();
    switch (ch) {
    case '|':
      out.emplace_back();
      break;
    case 'E':
      c.embedding = true;
      c.items += ch;
      break;
    case 'L':
      c.loss = true;
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
                                  "chunks, (...)*n and x*n to repeat)");
    }
  }
  return out;
}

} // namespace spansim::workload::detail
