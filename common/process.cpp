#include "common/process.hpp"

#include "common/build.hpp"
#include "common/error.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace spansim::process {

bool write_all(int fd, std::string_view data)
{
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

std::string read_all(int fd)
{
  std::string data;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    data.append(buffer, static_cast<std::size_t>(n));
  }
  return data;
}

void flush_stdio()
{
  std::fflush(nullptr);
  std::cout.flush();
  std::cerr.flush();
}

int exit_code(int status)
{
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int available_cores()
{
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

double physical_memory()
{
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

namespace {

struct Pipe {
  int read = -1, write = -1;
  Pipe()
  {
    int fds[2];
    if (::pipe(fds) != 0)
      throw SimulationError(std::string("cannot create a pipe to a child process: ") + std::strerror(errno));
    read  = fds[0];
    write = fds[1];
  }
};

pid_t fork_or_throw()
{
  flush_stdio();
  const pid_t pid = ::fork();
  if (pid < 0)
    throw SimulationError(std::string("cannot fork a child process: ") + std::strerror(errno));
  // A child that crashes (SimGrid aborts when it cannot map an actor's stack) dies of its signal, which its
  // parent reports; the parent's crash handlers (a test framework's failure report) must not run in it. Under
  // AddressSanitizer its handlers stay: they report where the child crashed.
  if (pid == 0 && !kAddressSanitizer)
    for (int crash : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL})
      ::signal(crash, SIG_DFL);
  return pid;
}

} // namespace

ChildResult run_child(const std::function<std::string()>& work, const ChildOptions& options)
{
  Pipe p;
  const pid_t pid = fork_or_throw();
  // With a timeout the child leads a process group of its own, so that the kill ends what it started too.
  const bool group = options.timeout_s > 0;
  if (pid == 0) {
    if (group)
      ::setpgid(0, 0);
    ::close(p.read);
    // First byte: 'R' result or 'E' error message. The child ends with _exit: it must not run the parent's
    // atexit handlers or flush the parent's stdio buffers a second time.
    std::string out;
    try {
      out = "R" + work();
    } catch (const std::exception& e) {
      out = "E" + encode_error(e);
    } catch (...) {
      out = "Eunknown exception in the child process";
    }
    const int rc = write_all(p.write, out) ? 0 : 1;
    ::close(p.write);
    ::_exit(rc);
  }
  ::close(p.write);
  if (group)
    ::setpgid(pid, pid);
  ChildResult r;
  std::string data;
  const auto start = std::chrono::steady_clock::now();
  char buffer[1 << 16];
  for (;;) {
    if (options.timeout_s > 0) {
      const double left =
          options.timeout_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      pollfd fd{p.read, POLLIN, 0};
      if (left <= 0 || ::poll(&fd, 1, static_cast<int>(left * 1000) + 1) == 0) {
        r.timed_out = true;
        ::kill(-pid, SIGKILL);
        break;
      }
    }
    const ssize_t n = ::read(p.read, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    data.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(p.read);
  int status = 0;
  rusage usage{};
  while (::wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  r.max_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
  if (r.timed_out)
    r.error = "gave up after " + std::to_string(options.timeout_s) + " s (the time limit)";
  else if (WIFSIGNALED(status))
    r.error = "the child process died with signal " + std::to_string(WTERMSIG(status)) + " (" +
              strsignal(WTERMSIG(status)) + ")";
  else if (data.empty())
    r.error = "the child process ended without a result (exit status " + std::to_string(WEXITSTATUS(status)) + ")";
  else if (data[0] == 'E') {
    r.thrown = data.substr(1);
    r.error  = encoded_message(r.thrown);
  } else
    r.output = data.substr(1);
  return r;
}

std::string run_in_child(const std::function<std::string()>& work)
{
  auto r = run_child(work);
  if (!r.thrown.empty())
    rethrow_error(r.thrown);
  if (!r.error.empty())
    throw SimulationError(r.error);
  return std::move(r.output);
}

std::vector<std::string> parallel_map(std::size_t n, int workers, const std::function<std::string(std::size_t)>& fn,
                                      const std::function<void(std::size_t, const std::string&)>& on_done,
                                      const MapOptions& options)
{
  std::vector<std::string> out(n);
  if (n == 0)
    return out;
  workers           = std::max(1, std::min<int>(workers > 0 ? workers : available_cores(), static_cast<int>(n)));
  const auto stride = static_cast<std::size_t>(workers);
  struct Worker {
    pid_t pid;
    int fd;
    std::size_t first; ///< its items: first, first + workers, ...
    std::string pending;
    bool open = true;
  };
  // A worker takes its items in order, so the first of them not done when it dies is the one it died on.
  auto start = [&](std::size_t first) {
    Pipe p;
    const pid_t pid = fork_or_throw();
    if (pid == 0) {
      ::close(p.read);
      if (options.memory_limit > 0) {
        // The data segment (heap and private mappings) is what a simulation grows; past it, allocation throws
        // std::bad_alloc in this worker instead of the kernel's OOM killer choosing a process of the machine.
        const auto bytes = static_cast<rlim_t>(options.memory_limit);
        const rlimit limit{bytes, bytes};
        ::setrlimit(RLIMIT_DATA, &limit);
      }
      // Records: index, status ('R' or 'E'), length, bytes.
      for (std::size_t i = first; i < n; i += stride) {
        std::string r;
        char status = 'R';
        try {
          r = fn(i);
        } catch (const std::exception& e) {
          status = 'E';
          r      = encode_error(e);
        }
        const std::uint64_t header[2] = {i, r.size()};
        std::string record(reinterpret_cast<const char*>(header), sizeof header);
        record += status;
        record += r;
        if (!write_all(p.write, record))
          ::_exit(1);
      }
      ::close(p.write);
      ::_exit(0);
    }
    ::close(p.write);
    return Worker{pid, p.read, first, {}, true};
  };
  std::vector<Worker> children;
  for (std::size_t w = 0; w < stride; ++w)
    children.push_back(start(w));
  std::vector<bool> done(n, false);
  std::size_t finished = 0;
  std::string first_error; // encoded (encode_error)
  std::uint64_t first_error_item = 0;
  std::string died; // why a worker died, when nothing took its item
  auto finish = [&](std::size_t i, std::string text) {
    out[i]  = std::move(text);
    done[i] = true;
    ++finished;
    if (on_done)
      on_done(finished, out[i]);
  };
  // Every worker's pipe is read as records arrive (a worker blocked on a full pipe would stall the others), and
  // each complete record counts as an item done.
  auto take_records = [&](std::string& data) {
    std::size_t pos = 0;
    while (pos + 17 <= data.size()) {
      std::uint64_t header[2];
      std::memcpy(header, data.data() + pos, sizeof header);
      if (pos + 17 + header[1] > data.size())
        break;
      const char kind = data[pos + 16];
      pos += 17;
      std::string text = data.substr(pos, header[1]);
      pos += header[1];
      if (kind == 'E' && first_error.empty()) {
        first_error      = text;
        first_error_item = header[0];
      }
      if (header[0] < n && !done[header[0]])
        finish(header[0], std::move(text));
    }
    data.erase(0, pos);
  };
  // A worker's pipe closed: reap it; if it left items, the first is lost (on_lost gives its result) and a new
  // worker takes the rest of its stride.
  auto ended = [&](std::size_t c) {
    ::close(children[c].fd);
    int status = 0;
    while (::waitpid(children[c].pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::size_t lost = children[c].first;
    while (lost < n && done[lost])
      lost += stride;
    if (lost >= n)
      return;
    const std::string why =
        WIFSIGNALED(status)
            ? "its worker process died with signal " + std::to_string(WTERMSIG(status)) + " (" +
                  strsignal(WTERMSIG(status)) + ")"
            : "its worker process ended (exit status " + std::to_string(WEXITSTATUS(status)) + ") without its result";
    if (!options.on_lost) {
      if (died.empty())
        died = "item " + std::to_string(lost) + ": " + why;
      return;
    }
    finish(lost, options.on_lost(lost, why));
    if (lost + stride < n)
      children.push_back(start(lost + stride));
  };
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::size_t> which;
    for (std::size_t c = 0; c < children.size(); ++c)
      if (children[c].open) {
        fds.push_back({children[c].fd, POLLIN, 0});
        which.push_back(c);
      }
    if (fds.empty())
      break;
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0)
        continue;
      const std::size_t c = which[k];
      char buffer[1 << 16];
      const ssize_t got = ::read(children[c].fd, buffer, sizeof buffer);
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0) {
        children[c].open = false;
        ended(c); // may start a worker: `children` grows, `c` stays valid as an index
        continue;
      }
      children[c].pending.append(buffer, static_cast<std::size_t>(got));
      take_records(children[c].pending);
    }
  }
  if (!first_error.empty())
    rethrow_error(first_error, "item " + std::to_string(first_error_item) + ": ");
  if (!died.empty() || std::find(done.begin(), done.end(), false) != done.end())
    throw SimulationError("a worker process died before finishing its items (" +
                          (died.empty() ? std::string("a pipe failed") : died) + ")");
  return out;
}

pid_t start_worker(const std::function<void()>& body, bool die_with_parent)
{
  const pid_t parent = ::getpid();
  const pid_t pid    = fork_or_throw();
  if (pid == 0) {
    if (die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent)
        ::_exit(1);
    }
    try {
      body();
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  return pid;
}

ProgramResult run_program(const std::vector<std::string>& argv, Capture capture)
{
  int fds[2];
  if (::pipe(fds) != 0)
    throw UsageError(std::string("cannot create a pipe: ") + std::strerror(errno));
  flush_stdio();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw UsageError(std::string("cannot fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    if (capture == Capture::output_and_errors)
      ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> args;
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(fds[1]);
  ProgramResult r;
  r.captured = read_all(fds[0]);
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = exit_code(status);
  return r;
}

Mapper local_mapper(int workers)
{
  return [workers](std::size_t n, const std::function<std::string(std::size_t)>& fn) {
    return parallel_map(n, workers, fn);
  };
}

} // namespace spansim::process
