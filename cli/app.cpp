// The command line as a library: every subcommand on one CLI11 app, and a command run in this process with its
// printed JSON returned (the Python module's collective and optimize).
#include "cli/commands.hpp"
#include "common/error.hpp"
#include "common/version.hpp"

#include <iostream>
#include <mutex>
#include <sstream>

namespace spansim::cli {

void add_commands(CLI::App& app)
{
  app.set_version_flag("--version", std::string("spansim ") + spansim::version() + " (" + spansim::git_hash() + ")");
  app.require_subcommand(1);
  add_topology_command(app);
  add_collective_command(app);
  add_workload_command(app);
  add_run_command(app);
  add_report_command(app);
  add_reliability_command(app);
  add_share_command(app);
  add_optimize_command(app);
  add_campaign_command(app);
  add_calibration_commands(app);
}

void check_commands(CLI::App& app, int argc, char** argv)
{
  // CLI11 answers a mistyped command ("topolgy") with "A subcommand is required": name it and the commands there.
  CLI::App* at       = &app;
  std::string prefix = "spansim";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.empty() || arg.front() == '-' || at->get_require_subcommand_min() == 0)
      return;
    CLI::App* next = nullptr;
    std::string names;
    for (CLI::App* sub : at->get_subcommands({})) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      if (sub->check_name(arg))
        next = sub;
    }
    if (!next)
      throw UsageError("unknown command \"" + arg.substr(0, 64) + "\" for " + prefix + " (commands: " + names + ")");
    at = next;
    prefix += " " + next->get_name();
  }
}

std::string one_line(const CLI::ParseError& e)
{
  // CLI11 prints two lines ("... / Run with --help"); spansim's errors are one line with one prefix.
  std::string what = e.what();
  for (auto& c : what)
    if (c == '\n')
      c = ' ';
  // CLI11 echoes the argument as given: its control characters are escaped as every spansim message's are.
  return bounded_message(escape_controls(what)) + " (see --help)";
}

std::string run_captured(std::vector<std::string> args)
{
  // std::cout is one per process: two callers (Python threads) must not swap its buffer under each other.
  static std::mutex one_at_a_time;
  const std::lock_guard<std::mutex> lock(one_at_a_time);
  CLI::App app{"spansim"};
  add_commands(app);
  // CLI11 takes the arguments last first.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  std::ostringstream out;
  auto* saved = std::cout.rdbuf(out.rdbuf());
  try {
    app.parse(reversed);
  } catch (const CLI::Success&) {
    std::cout.rdbuf(saved);
    return out.str();
  } catch (const CLI::ParseError& e) {
    std::cout.rdbuf(saved);
    throw UsageError(one_line(e));
  } catch (...) {
    std::cout.rdbuf(saved);
    throw;
  }
  std::cout.rdbuf(saved);
  return out.str();
}

} // namespace spansim::cli
