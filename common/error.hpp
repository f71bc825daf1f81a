#pragma once
/// @file
/// @brief Typed exceptions thrown by spansim libraries; only `main` turns them into exit codes.

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace spansim {

/// @brief `text` with its control characters escaped as JSON escapes them (\n, \t, \u001b, \u0000) and bytes that
/// are not UTF-8 as \xNN: an error message echoes names and values from the input, and must stay one line of text
/// that colours no terminal.
std::string escape_controls(const std::string& text);

/// @brief Bytes an error message keeps (a message that lists a large file's names is cut, and says so).
inline constexpr std::size_t kMaxMessageBytes = 4000;

/// @brief Characters of any one value an error message echoes from its input.
inline constexpr std::size_t kMaxEchoChars = 200;

/// @brief `message` with each echoed value cut to kMaxEchoChars characters, saying how long it was: a quoted span
/// ("...") or a run of characters without a space, quote, colon or comma longer than that is input (a name, a
/// value, a path, an argument), since spansim's own wording has no such words. Applied to every Error and CLI11
/// message, so that no call site can forget it.
std::string cut_long_echoes(const std::string& message);

/// @brief `message` with its echoes cut (cut_long_echoes), then cut to kMaxMessageBytes at a character boundary,
/// with the cut said at its end.
std::string bounded_message(const std::string& message);

/// @brief The first `most` of `items` joined by ", ", then "and N more" when there are more: a message names what it
/// can show of a long list.
std::string listing(const std::vector<std::string>& items, std::size_t most = 20);

/// @brief Base of every error spansim reports to a user (exit code 2 in the CLI). Its message is one line: control
/// characters are escaped (escape_controls).
class Error : public std::runtime_error {
public:
  explicit Error(const std::string& what) : std::runtime_error(bounded_message(escape_controls(what))) {}
  explicit Error(const char* what) : Error(std::string(what)) {}
};

/// @brief A spec file (topology, job, scenario, ...) is unreadable, malformed or inconsistent.
/// The message names the file, the JSON path and what is allowed.
class SpecError : public Error {
public:
  /// @brief Builds "FILE: at PATH: WHAT".
  SpecError(const std::string& file, const std::string& json_path, const std::string& what);
  const std::string& file() const { return file_; }
  const std::string& json_path() const { return json_path_; }
  /// @brief What is wrong, without the file and place (the constructor's `what`, escaped as the message is: the
  /// escape leaves escaped text as it is, so an error rebuilt from its parts has the same message).
  const std::string& detail() const { return detail_; }

protected:
  /// @brief Tags the constructor for errors that word their whole message themselves.
  struct Worded {};
  /// @brief An error in `file` at `place` whose message is `message` as it stands; `detail` is its part that says
  /// what is wrong.
  SpecError(Worded, std::string file, std::string place, const std::string& message, std::string detail)
      : Error(message), file_(std::move(file)), json_path_(std::move(place)),
        detail_(cut_long_echoes(escape_controls(detail)))
  {
  }

private:
  std::string file_;
  std::string json_path_;
  std::string detail_;
};

/// @brief A well-formed spec that cannot run (heads not divisible by tp, a job that does not fit in memory, an
/// impossible placement). `reason()` is a short code that names the check (e.g. "memory", "tp"), so that searches
/// can count infeasible points by reason without reading messages.
class InfeasibleError : public SpecError {
public:
  InfeasibleError(std::string reason, const std::string& file, const std::string& json_path, const std::string& what)
      : SpecError(file, json_path, what), reason_(std::move(reason))
  {
  }
  const std::string& reason() const { return reason_; }

private:
  std::string reason_;
};

/// @brief A command-line argument or API argument is invalid.
class UsageError : public Error {
public:
  using Error::Error;
};

/// @brief A trace file (a Chakra execution trace, a profiler trace) is unreadable or inconsistent: bad input as a
/// bad spec is, its place (json_path) the node, record or event. The message names the file and that place.
class TraceError : public SpecError {
public:
  /// @param where the node, record or event ("node 12", "$.traceEvents[3]"); empty: the file as a whole.
  TraceError(const std::string& file, const std::string& where, const std::string& what)
      : SpecError(Worded{}, file, where, file + (where.empty() ? "" : ": " + where) + ": " + what, what)
  {
  }
  /// @brief The node, record or event (empty: the file as a whole).
  const std::string& where() const { return json_path(); }
};

/// @brief A simulation could not be run as asked (too large for the fidelity, engine failure, ...).
class SimulationError : public Error {
public:
  using Error::Error;
};

/// @brief An exception written as text that can cross a process boundary: its type and, for a SpecError,
/// InfeasibleError or TraceError, its file, place and reason (rethrow_error reads it back).
std::string encode_error(const std::exception& e);

/// @brief The message of the error that encode_error wrote.
std::string encoded_message(const std::string& encoded);

/// @brief Throws the error that encode_error wrote as its own type, with its own message; an error of another type
/// (SimulationError, anything not spansim's) as a SimulationError with `context` before its message.
[[noreturn]] void rethrow_error(const std::string& encoded, const std::string& context = "");

} // namespace spansim
