#pragma once
/// @file
/// @brief The traces stage: Chakra execution traces (ETs) in and out.
///
/// Export writes a step graph as one ET per rank (`PREFIX.<rank>.et`, as ASTRA-sim reads them) with the
/// communicator-group file ASTRA-sim's `--comm-group-configuration` takes; import reads such traces back as a
/// step graph that is placed and simulated like any other job. The schema is Chakra's own, version 0.0.4
/// (traces/et_def.proto, upstream's file). spansim's exports carry every field of an op as
/// `spansim_*` attributes, so a round trip is exact; a foreign trace is read from Chakra's own fields.

#include "placement/placement.hpp"
#include "workload/workload.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace spansim::traces {

/// @brief The Chakra schema version spansim follows and writes, and the one it reads (or a file that declares none).
inline constexpr const char* kChakraSchemaVersion = "0.0.4";

/// @brief Which ranks an export writes.
struct ExportOptions {
  std::string prefix = "et"; ///< files are DIR/PREFIX.<rank>.et
  /// @brief One rank per pipeline stage (its first) and a rank-map file naming the ranks each stands for.
  bool representatives = false;
  std::vector<int> ranks; ///< only these ranks (empty: all, or the representatives)
};

/// @brief What an export wrote.
struct ExportReport {
  std::vector<std::string> files; ///< the ETs written
  std::string comm_groups;        ///< DIR/PREFIX.comm_groups.json: {"<id>": [ranks]}, ids from 1
  std::string rank_map;           ///< DIR/PREFIX.rank_map.json (representatives only)
  std::size_t nodes = 0;          ///< nodes written over all files
  int world         = 0;          ///< ranks of the job
  double seconds    = 0;          ///< wall time
  nlohmann::json to_json() const;
};

/// @brief Exports `graph` (its ranks numbered by `layout`): one ET per rank written. `job` is the job as JSON, kept
/// in every file's metadata so that the trace imports as the same job. Files are written to a temporary name and
/// renamed, so an interrupted export never leaves a truncated ET. @throws UsageError when the folder cannot be written.
ExportReport export_chakra(const workload::StepGraph& graph, const placement::RankLayout& layout,
                           const nlohmann::json& job, const std::string& dir, const ExportOptions& options);

/// @brief Reads a job of `"kind": "chakra"`: `{"name", "kind": "chakra", "trace": "DIR/PREFIX"}`, and for a trace
/// spansim did not write, the job's own keys (model, gpu, gpus, parallelism, batch, ...) for what the trace lacks.
/// A foreign trace read without a model has one rank per file, PREFIX.0.et to PREFIX.<N-1>.et, or `gpus` (at least
/// the files) ranks. @throws SpecError naming the file and JSON path (a `gpus` below the files' count); TraceError for
/// an unreadable trace, a gap in its rank files or a Chakra schema version other than kChakraSchemaVersion.
workload::JobSpec load_chakra_job(const nlohmann::json& job, const std::string& file, const std::string& json_path);

/// @brief The step graph of a Chakra job (`job.trace` set): each pipeline stage's program read from one of its
/// ranks' ETs (the rank map's representative, or its first rank whose file exists), in dependency order.
/// @throws TraceError naming the file and node for a truncated file, a dangling dependency, a cycle, an unknown
/// communicator group, a send without its receive or an unsupported node type; the file of a rank the job lacks; a
/// step that would take 0 s (nothing takes time or moves bytes, collectives over groups of one rank included).
workload::StepGraph import_chakra(const workload::JobSpec& job);

} // namespace spansim::traces
