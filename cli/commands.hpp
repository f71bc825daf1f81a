#pragma once
/// @file
/// @brief The spansim subcommands; each registers itself on the CLI11 app and prints its own result.

#include <CLI/CLI.hpp>

namespace spansim::cli {

/// @brief `spansim topology describe FILE|PRESET [--dot FILE] [--json]`.
void add_topology_command(CLI::App& app);
/// @brief `spansim collective --topology T --op allreduce --ranks R --sizes A:B [--json]`.
void add_collective_command(CLI::App& app);
/// @brief `spansim workload describe JOB [--json [--graph]]`: training-step graph size, FLOPs, bytes per dimension,
/// memory per GPU and the compute-and-bubble lower bound on the step time.
void add_workload_command(CLI::App& app);

/// @brief `spansim run [SCENARIO] [--fidelity F] [--out DIR] [--json]`: one co-simulated training step.
void add_run_command(CLI::App& app);
/// @brief `spansim report DIR`: a run result as one HTML page.
void add_report_command(CLI::App& app);

/// @brief `spansim reliability SCENARIO --days D | --tokens T [--json]`: goodput under failures and recovery.
void add_reliability_command(CLI::App& app);

/// @brief `spansim campaign run|merge|slurm|plot`: sweeps of scenarios on all cores or a Slurm job array, gathered
/// into one HDF5 file and a CSV, and plotted.
void add_campaign_command(CLI::App& app);

/// @brief `spansim calibrate RUNS.json --gpu GPU [--out PROFILE.json]` and `spansim validate [RUNS.json]`: fit the
/// compute model on published runs, and compare every run with its simulation.
void add_calibration_commands(CLI::App& app);

/// @brief `spansim share FILE [--fidelity F] [--json]`: several jobs on one network, each against itself alone.
void add_share_command(CLI::App& app);

/// @brief `spansim optimize SPEC [--top-k K] [--workers W] [--out DIR] [--json]`: the placement optimizer.
void add_optimize_command(CLI::App& app);

/// @brief Registers every subcommand and the version flag on `app`.
void add_commands(CLI::App& app);
/// @brief Refuses a command line whose command or subcommand is not one of `app`'s, naming it and the commands
/// there (CLI11 alone says "A subcommand is required"). @throws UsageError.
void check_commands(CLI::App& app, int argc, char** argv);
/// @brief A CLI11 parse error as spansim's one line (without the "spansim: error: " prefix).
std::string one_line(const CLI::ParseError& e);
/// @brief Runs one command line (without the program name) in this process and returns what it printed on
/// standard output. @throws UsageError for a bad command line; the commands' own errors as they throw them.
std::string run_captured(std::vector<std::string> args);

} // namespace spansim::cli
