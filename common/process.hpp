#pragma once
/// @file
/// @brief Child processes, written once: work in a forked child with its result piped back, a pool mapping work
/// over forked workers, worker processes with their own exit, and external programs. SimGrid allows one engine per
/// process, so every simulation and every parallel search runs through here.

#include <functional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace spansim::process {

/// @brief Writes every byte (retrying on EINTR and short writes); false on error.
bool write_all(int fd, std::string_view data);
/// @brief Reads to end of file.
std::string read_all(int fd);
/// @brief Flushes C and C++ standard streams: anything buffered before a fork would be written twice.
void flush_stdio();
/// @brief An exit status from waitpid as a shell reports it: the exit code, or 128 + the signal.
int exit_code(int status);
/// @brief Cores this process may run on (its CPU affinity).
int available_cores();
/// @brief Bytes of physical memory of the machine.
double physical_memory();

/// @brief How a child ran.
struct ChildOptions {
  double timeout_s = 0; ///< kill the child's process group after this long (0: wait for it)
};
/// @brief What a child handed back.
struct ChildResult {
  std::string output; ///< what `work` returned
  std::string error;  ///< the message of an exception thrown in the child, or why the child failed
  std::string thrown; ///< an exception thrown in the child as encode_error wrote it (empty: none)
  bool timed_out     = false;
  double max_rss_mib = 0; ///< peak resident memory of the child and the processes it waited for
};

/// @brief Runs `work` in a forked child (with a timeout, leading a process group of its own) and returns what it
/// returned. An
/// exception in the child comes back as `error`; a crash or a timeout too, with the signal or the limit named.
ChildResult run_child(const std::function<std::string()>& work, const ChildOptions& options = {});

/// @brief Runs `work` in a forked child and returns its result. @throws the child's spansim error as its own type
/// (rethrow_error), or SimulationError when the child failed otherwise.
std::string run_in_child(const std::function<std::string()>& work);

/// @brief How parallel_map treats its workers.
struct MapOptions {
  /// @brief Set: an item whose worker died on it (a signal, the OOM killer) gets on_lost(index, why) as its result
  /// and a new worker takes the rest of the dead one's items. Unset: a worker's death throws.
  std::function<std::string(std::size_t, const std::string&)> on_lost;
  /// @brief Bytes of data segment each worker may hold (RLIMIT_DATA); past it an allocation throws std::bad_alloc
  /// in the worker. 0: no limit.
  double memory_limit = 0;
};

/// @brief Runs fn(i) for i in [0, n) in up to `workers` forked workers (0: one per core); worker w takes the
/// indices w, w + workers, ..., so results do not depend on timing. Returns the results in index order.
/// @throws fn's spansim error in a worker as its own type (rethrow_error; a SimulationError or another exception
/// as a SimulationError naming the index), or SimulationError when a worker dies (unless options.on_lost).
/// `on_done`, when set, is called in this process each time an item finishes, with the number finished so far and
/// the item's result.
std::vector<std::string> parallel_map(std::size_t n, int workers, const std::function<std::string(std::size_t)>& fn,
                                      const std::function<void(std::size_t, const std::string&)>& on_done = {},
                                      const MapOptions& options                                           = {});

/// @brief Maps fn over [0, n), results in index order: in worker processes here (local_mapper) or elsewhere (a
/// Slurm job array, experiments/slurm_map.hpp). fn must give the same result for the same index in any process.
using Mapper =
    std::function<std::vector<std::string>(std::size_t n, const std::function<std::string(std::size_t)>& fn)>;
/// @brief parallel_map over `workers` worker processes (0: one per core) as a Mapper.
Mapper local_mapper(int workers);

/// @brief Starts a worker process running `body`, which ends with exit code 0 (1 if it throws). With
/// `die_with_parent` the worker is killed when its parent dies (a killed run must not leave workers racing a
/// re-run). @return its pid, to wait for with waitpid. @throws SimulationError if fork fails.
pid_t start_worker(const std::function<void()>& body, bool die_with_parent);

/// @brief What an external program printed.
enum class Capture { output_and_errors, errors };
/// @brief An external program's exit code and captured text.
struct ProgramResult {
  int exit_code = 0;
  std::string captured;
};
/// @brief Runs `argv` (no shell) to its end; captures stdout and stderr together, or stderr alone (stdout then
/// goes to ours). A program that cannot be started exits 127 with the reason captured.
/// @throws UsageError if the pipe or the fork fails.
ProgramResult run_program(const std::vector<std::string>& argv, Capture capture);

} // namespace spansim::process
