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

} // namespace spansim::cli
