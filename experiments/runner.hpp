#pragma once
/// @file
/// @brief Running a campaign: points in forked worker processes, one result file per point, resumable.
///
/// Next to the HDF5 result `R.h5` sits `R.h5.d/points/KEY.json`, one record per finished point, each written to
/// a temporary name and renamed: these records are the durable state. The HDF5 file and the CSV (`R.csv`) are
/// rebuilt from them by the parent alone and swapped in atomically, so a run killed at any moment (SIGKILL
/// included) loses only the points that were running, and a re-run skips every recorded point.

#include "experiments/campaign.hpp"
#include "experiments/results.hpp"

#include <functional>
#include <string>
#include <vector>

namespace spansim::experiments {

/// @brief Progress of a run, reported after every finished point.
struct Progress {
  int total        = 0; ///< points this run is responsible for (its shard)
  int done         = 0; ///< recorded, including those found from earlier runs
  int found        = 0; ///< recorded by earlier runs
  int failed       = 0; ///< recorded with an error
  int running      = 0;
  double elapsed_s = 0;
};

/// @brief How to run a campaign.
struct RunOptions {
  std::string output;       ///< HDF5 path; empty: the campaign's own
  int jobs             = 0; ///< worker processes; 0: one per core
  int shard            = 0; ///< run only points with index % shards == shard
  int shards           = 1;
  double flush_every_s = 2;     ///< rewrite the HDF5 file at most this often while running (0: after every point)
  bool merge_only      = false; ///< run nothing: gather the recorded points into the HDF5 file and the CSV
  std::function<void(const Progress&)> on_progress;
};

/// @brief What a run did.
struct RunReport {
  int points       = 0;            ///< in the campaign
  int shard_points = 0;            ///< this run's share
  int found        = 0;            ///< already recorded when the run started
  int ran          = 0;            ///< run now
  int failed       = 0;            ///< recorded with an error (all runs)
  int missing      = 0;            ///< not recorded at the end (crashed workers, other shards)
  std::vector<int> missing_points; ///< indices of those points, in order
  std::vector<std::string> errors; ///< "point N (axes): message"
  std::string hdf5;
  std::string csv;
  std::string points_directory;
  double elapsed_s = 0;
};

/// @brief Paths of a campaign's outputs derived from the HDF5 path.
struct OutputPaths {
  std::string hdf5;
  std::string csv;
  std::string directory; ///< R.h5.d
  std::string points;    ///< R.h5.d/points
};
/// @brief The outputs that belong to the HDF5 path `hdf5`.
OutputPaths output_paths(const std::string& hdf5);

/// @brief Runs the campaign's unrecorded points (of the shard), then writes the HDF5 file and the CSV: the whole
/// campaign's, or with shards > 1 the shard's own (R.h5.d/shards/shard-K.h5), leaving the merge to a last job.
/// @throws UsageError if another run of the same shard holds the lock.
RunReport run_campaign(const Campaign& campaign, const RunOptions& options);

/// @brief The records of finished points found under `points_directory` (unreadable ones are ignored).
ResultMap load_results(const std::vector<Point>& points, const std::string& points_directory);

/// @brief Writes `text` to `path` through a synced temporary file and a rename: whole or not at all.
/// @return false on any error (nothing is left at `path` then but what was there).
bool write_record(const std::string& path, const std::string& text);

/// @brief "axis=label, axis=label" for a point.
std::string describe_point(const Campaign& campaign, const Point& point);

} // namespace spansim::experiments
