#pragma once
/// @file
/// @brief One name table per enum, used by every parser, printer and the command line.
///
/// An enum E (numbered 0, 1, 2, ... in declaration order) gets its names from a function declared next to it, in its
/// own namespace, so that it is found by argument-dependent lookup:
///
///     enum class Fidelity { analytical, flow, packet };
///     constexpr std::array<std::string_view, 3> enum_names(Fidelity) { return {"analytical", "flow", "packet"}; }
///
/// and optionally `enum_aliases(E)` returning (value, name) pairs of further spellings accepted when parsing (never
/// printed). `name_of`, `parse_name`, `allowed_names`, `parse_enum` and `enum_values` then work for it.

#include "common/error.hpp"

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace spansim {

/// @brief An enum with an `enum_names` table.
template <class E>
concept NamedEnum = std::is_enum_v<E> && requires(E e)
{
  enum_names(e);
};

/// @brief Every value of E, in order.
template <NamedEnum E>
constexpr auto enum_values()
{
  constexpr auto names = enum_names(E{});
  std::array<E, names.size()> out{};
  for (std::size_t i = 0; i < names.size(); ++i)
    out[i] = static_cast<E>(i);
  return out;
}

/// @brief The name of `value` ("?" for a value outside the table).
template <NamedEnum E>
constexpr std::string_view name_of(E value)
{
  const auto names = enum_names(value);
  const auto i     = static_cast<std::size_t>(value);
  return i < names.size() ? names[i] : std::string_view{"?"};
}

/// @brief The value named `text` (a name or an alias), if any.
template <NamedEnum E>
constexpr std::optional<E> parse_name(std::string_view text)
{
  const auto names = enum_names(E{});
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == text)
      return static_cast<E>(i);
  if constexpr (requires { enum_aliases(E{}); })
    for (const auto& [v, name] : enum_aliases(E{}))
      if (name == text)
        return v;
  return std::nullopt;
}

/// @brief The names, comma-separated, for messages: "ring, tree, direct" (quoted: "\"ring\", \"tree\"").
template <NamedEnum E>
std::string allowed_names(bool quoted = false)
{
  std::string out;
  for (auto name : enum_names(E{}))
    out += (out.empty() ? "" : ", ") + (quoted ? "\"" + std::string(name) + "\"" : std::string(name));
  return out;
}

/// @brief The value named `text`. @throws UsageError "unknown WHAT "text" (allowed: ...)".
template <NamedEnum E>
E parse_enum(std::string_view text, std::string_view what)
{
  if (auto v = parse_name<E>(text))
    return *v;
  throw UsageError("unknown " + std::string(what) + " \"" + std::string(text) + "\" (allowed: " + allowed_names<E>() +
                   ")");
}

} // namespace spansim
