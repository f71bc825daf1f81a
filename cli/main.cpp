// The spansim command line: parses, calls the libraries, prints. Errors from the libraries become
// one line on stderr and exit code 2.
#include "cli/commands.hpp"
#include "common/error.hpp"
#include "common/version.hpp"

#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>
#include <string>

int main(int argc, char** argv)
{
  CLI::App app{"spansim: network co-simulator for LLM training across buildings and regions"};
  app.set_version_flag("--version", std::string("spansim ") + spansim::version() + " (" + spansim::git_hash() + ")");
  app.require_subcommand(1);
  spansim::cli::add_topology_command(app);
  spansim::cli::add_collective_command(app);
  spansim::cli::add_workload_command(app);
  spansim::cli::add_run_command(app);
  spansim::cli::add_reliability_command(app);
  spansim::cli::add_share_command(app);
  spansim::cli::add_optimize_command(app);
  spansim::cli::add_campaign_command(app);
  spansim::cli::add_calibration_commands(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints two lines ("... / Run with --help"); spansim's errors are one line with one prefix.
    std::string what = e.what();
    for (auto& c : what)
      if (c == '\n')
        c = ' ';
    std::cerr << "spansim: error: " << what << " (see --help)\n";
    return 2;
  } catch (const spansim::Error& e) {
    std::cerr << "spansim: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    // Anything else is a bug in spansim, but it still deserves one line rather than a core dump.
    std::cerr << "spansim: internal error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
