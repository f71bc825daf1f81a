#pragma once
/// @file
/// @brief One name table per enum, used by every parser, printer and the command line.
///
/// An enum E gets its names by specializing `EnumNames<E>` next to its declaration:
///
///     template <> struct EnumNames<Fidelity> {
///       static constexpr std::array table{std::pair{Fidelity::analytical, std::string_view{"analytical"}}, ...};
///     };
///
/// and optionally `static constexpr std::array aliases{...}` of further spellings accepted when parsing (never
/// printed). `name_of`, `parse_name`, `allowed_names` and `parse_enum` then work for it.

#include "common/error.hpp"

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace spansim {

/// @brief Specialize with a `table` of (value, name) pairs: the names printed and parsed.
template <class E>
struct EnumNames;

namespace detail {
template <class E>
concept HasAliases = requires
{
  EnumNames<E>::aliases;
};
} // namespace detail

/// @brief The name of `value` ("?" for a value outside the table).
template <class E>
constexpr std::string_view name_of(E value)
{
  for (const auto& [v, name] : EnumNames<E>::table)
    if (v == value)
      return name;
  return "?";
}

/// @brief The value named `text` (a name or an alias), if any.
template <class E>
constexpr std::optional<E> parse_name(std::string_view text)
{
  for (const auto& [v, name] : EnumNames<E>::table)
    if (name == text)
      return v;
  if constexpr (detail::HasAliases<E>)
    for (const auto& [v, name] : EnumNames<E>::aliases)
      if (name == text)
        return v;
  return std::nullopt;
}

/// @brief The names, comma-separated, for messages: "ring, tree, direct" (quoted: "\"ring\", \"tree\"").
template <class E>
std::string allowed_names(bool quoted = false)
{
  std::string out;
  for (const auto& [v, name] : EnumNames<E>::table)
    out += (out.empty() ? "" : ", ") + (quoted ? "\"" + std::string(name) + "\"" : std::string(name));
  return out;
}

/// @brief The value named `text`. @throws UsageError "unknown WHAT "text" (allowed: ...)".
template <class E>
E parse_enum(std::string_view text, std::string_view what)
{
  if (auto v = parse_name<E>(text))
    return *v;
  throw UsageError("unknown " + std::string(what) + " \"" + std::string(text) + "\" (allowed: " + allowed_names<E>() +
                   ")");
}

} // namespace spansim
