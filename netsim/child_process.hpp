#pragma once
// Internal: runs a function in a forked child and returns the bytes it produced. SimGrid allows one
// Engine per process, so every simulation runs in a child of its own.

#include <functional>
#include <string>

namespace spansim::netsim::detail {

/// @brief Runs `work` in a child process; `work` returns a byte string that is handed back to the parent.
/// A std::exception in the child is rethrown in the parent as SimulationError (or SpecError/UsageError
/// message-preserving); a crash of the child becomes a SimulationError naming the signal.
std::string run_in_child(const std::function<std::string()>& work);

} // namespace spansim::netsim::detail
