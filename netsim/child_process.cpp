#include "netsim/child_process.hpp"

#include "common/error.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <sys/wait.h>
#include <unistd.h>

namespace spansim::netsim::detail {

namespace {

bool write_all(int fd, const char* data, std::size_t size)
{
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

} // namespace

std::string run_in_child(const std::function<std::string()>& work)
{
  // Anything buffered in the parent would otherwise be written twice, once by each process.
  std::fflush(nullptr);
  std::cout.flush();
  std::cerr.flush();
  int fds[2];
  if (::pipe(fds) != 0)
    throw SimulationError(std::string("cannot create a pipe to the simulation process: ") + std::strerror(errno));
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw SimulationError(std::string("cannot fork the simulation process: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    // First byte: 'R' result or 'E' error message. The child ends with _exit: it must not run the
    // parent's atexit handlers or flush the parent's stdio buffers a second time.
    std::string out;
    try {
      out = "R" + work();
    } catch (const std::exception& e) {
      out = std::string("E") + e.what();
    } catch (...) {
      out = "Eunknown exception in the simulation process";
    }
    int rc = write_all(fds[1], out.data(), out.size()) ? 0 : 1;
    ::close(fds[1]);
    ::_exit(rc);
  }
  ::close(fds[1]);
  std::string data;
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    data.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    throw SimulationError("the simulation process died with signal " + std::to_string(WTERMSIG(status)) + " (" +
                          strsignal(WTERMSIG(status)) + ")");
  if (data.empty())
    throw SimulationError("the simulation process ended without a result (exit status " +
                          std::to_string(WEXITSTATUS(status)) + ")");
  if (data[0] == 'E')
    throw SimulationError(data.substr(1));
  return data.substr(1);
}

} // namespace spansim::netsim::detail
