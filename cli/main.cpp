// The spansim command line: parses, calls the libraries, prints. Errors from the libraries become
// one line on stderr and exit code 2.
#include "cli/commands.hpp"
#include "common/error.hpp"

#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>
#include <string>

int main(int argc, char** argv)
{
  CLI::App app{"spansim: network co-simulator for LLM training across buildings and regions"};
  spansim::cli::add_commands(app);

  try {
    spansim::cli::check_commands(app, argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "spansim: error: " << spansim::cli::one_line(e) << "\n";
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
