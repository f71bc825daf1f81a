#pragma once
// Runs the spansim binary as a user would, capturing exit code, stdout and stderr.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace cli_test {

struct Run {
  int exit_code;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::string& path)
{
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// @brief Runs a shell command (in `cwd` when given), capturing its exit code and output.
inline Run run_shell(const std::string& command, const std::string& cwd = "")
{
  std::string base = "/tmp/spansim-test-cli-" + std::to_string(::getpid());
  std::string cmd =
      (cwd.empty() ? "" : "cd '" + cwd + "' && ") + "{ " + command + " ; } >" + base + ".out 2>" + base + ".err";
  int status = std::system(cmd.c_str());
  Run r{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp(base + ".out"), slurp(base + ".err")};
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

/// @brief Runs `spansim ARGS` (in `cwd` when given).
inline Run spansim(const std::string& args, const std::string& cwd = "")
{
  return run_shell(std::string(SPANSIM_BINARY) + " " + args, cwd);
}

/// @brief Lines in `s` (newline characters).
inline std::size_t lines(const std::string& s)
{
  std::size_t n = 0;
  for (char c : s)
    n += c == '\n';
  return n;
}

} // namespace cli_test
