#pragma once
/// @file
/// @brief The placement stage: ranks of every parallelism group -> GPUs of a topology.
///
/// A rank has coordinates (tp, cp, pp, dp). Its index is their mixed-radix number in `order`, innermost
/// first; rank index i runs on the i-th GPU of the job's GPU list: the first GPUs, in node order, of each
/// building the job uses. So the innermost dimension fills a node (TP on NVLink), dimensions in the middle
/// stay on the same rail of neighbouring nodes, and the outermost dimension is the one whose groups cross
/// building (and region) boundaries. The expert layers of a MoE job fold etp x ep x edp, innermost first, over
/// the ranks of each pipeline stage in rank order (Megatron's parallel folding): with pp outermost, an EP group of
/// up to a node's GPUs stays in a node.

#include "common/json_reader.hpp"
#include "topology/topology.hpp"
#include "workload/workload.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace spansim::placement {

/// @brief How a job is laid out on a topology.
struct PlacementSpec {
  /// @brief Rank order, innermost first, a permutation of tp, cp, pp, dp. Empty: the job's own order.
  std::vector<workload::Dim> order;
  /// @brief Buildings the job uses, in order. Empty: as many buildings as the job needs, from the first.
  std::vector<std::string> buildings;
  /// @brief First GPU (global index, node order) of a contiguous range the job runs on, instead of each
  /// building's first GPUs; -1: per building.
  std::int64_t first_gpu = -1;
  /// @brief Of each node (NVLink domain), the job uses its first this many GPUs and leaves the others idle as spares
  /// (NVL72 racks with 64 GPUs in the job and 8 standing by); 0: every GPU.
  int gpus_per_node = 0;
  /// @brief GPUs other jobs on the same network hold (sized to the topology, or empty). Per building, the job
  /// takes the first GPUs not held; a range that overlaps them is refused. Set by the caller, not read from JSON.
  std::vector<char> taken{};

  /// @brief The spec as JSON (for results).
  nlohmann::json to_json() const;
};

/// @brief Reads a placement spec (the "placement" object of a scenario). Unknown keys are errors.
PlacementSpec parse_placement(const nlohmann::json& json, const std::string& file, const std::string& json_path);

/// @brief A rank's coordinates.
struct Coordinates {
  int tp = 0, cp = 0, pp = 0, dp = 0;
  /// @brief The coordinate of rank dimension `d` (tp, cp, pp or dp).
  int& operator[](workload::Dim d);
  int operator[](workload::Dim d) const;
};

/// @brief Ranks and their groups, without a topology: a rank's index is the mixed-radix number of its coordinates
/// in `order`, innermost first. Placement puts rank i on the i-th GPU of the job; traces name ranks by index.
class RankLayout {
public:
  /// @brief The layout of `parallelism` under `order` (a permutation of tp, cp, pp, dp). @throws std::invalid_argument
  /// when the order does not name each of them once.
  RankLayout(const workload::ParallelismSpec& parallelism, const std::vector<workload::Dim>& order);
  int ranks() const { return ranks_; }
  Coordinates coordinates(int rank) const;
  int rank_of(const Coordinates& c) const;
  const std::vector<workload::Dim>& order() const { return order_; }
  /// @brief The groups of kind `group` among the ranks of pipeline stage `stage` (every group when the group spans
  /// pp), each as rank indices in rank order.
  std::vector<std::vector<int>> groups(int stage, const workload::Group& group) const;
  /// @brief The key shared by the members of a group: the coordinates the group does not span (for the expert axes
  /// etp, ep and edp, those of the expert layout).
  std::array<int, 4> group_key(const Coordinates& c, workload::AxisSet axes) const;
  /// @brief A rank's index among the ranks of its pipeline stage, in rank order: what the expert layout (etp x ep x
  /// edp, innermost first) folds over.
  int stage_index(const Coordinates& c) const;

private:
  workload::ParallelismSpec par_;
  std::vector<workload::Dim> order_;
  workload::DimArray<int> degree_{};       ///< of each rank dimension (ep unused)
  workload::DimArray<int> stride_{};       ///< rank-index stride of each rank dimension
  workload::DimArray<int> stage_stride_{}; ///< the same among the ranks of one stage (pp left out)
  int ranks_ = 0;
};

/// @brief How many groups of one kind cross each level of the hierarchy.
struct GroupCrossing {
  std::string group;                                 ///< e.g. "dp", "cp+dp"
  workload::Dim dim             = workload::Dim::tp; ///< the dimension its traffic is accounted to
  int size                      = 0;                 ///< ranks per group
  int groups                    = 0;                 ///< groups of this kind in the job
  int across_nodes              = 0;                 ///< groups spanning more than one node
  int across_pods               = 0;
  int across_buildings          = 0;
  int across_regions            = 0;
  double bytes_across_buildings = 0; ///< per step, ring lowering, whole job
  double bytes_across_regions   = 0;
  /// @brief Per building (by name), the bytes per step its members send to members in other buildings (ring
  /// lowering, whole job): what crosses that building's boundary outwards. Buildings it never leaves are absent.
  std::map<std::string, double> bytes_out_of_building;
};

/// @brief What a placement does: which groups cross which boundaries, bytes per step across them.
struct PlacementReport {
  std::vector<GroupCrossing> groups;
  std::vector<std::string> buildings_used;
  /// @brief Per dimension, bytes per step sent across building boundaries under ring lowering.
  nlohmann::json to_json() const;
};

/// @brief Ranks placed on GPUs. Built once; queries are arithmetic.
class Placement {
public:
  /// @brief Places `job` on `topology`. @throws SpecError (at `where`, the file and JSON path the placement
  /// comes from; by default the job's file) for impossible placements, naming why.
  Placement(const topology::Topology& topology, const workload::JobSpec& job, const PlacementSpec& spec,
            const spec::Location& where = {});

  int ranks() const { return static_cast<int>(gpus_.size()); }
  /// @brief The GPU that runs rank `rank`.
  int gpu(int rank) const { return gpus_[rank]; }
  /// @brief The rank a GPU runs, -1 for none.
  int rank_of_gpu(int gpu) const { return rank_of_gpu_.at(gpu); }
  Coordinates coordinates(int rank) const { return layout_.coordinates(rank); }
  int rank_of(const Coordinates& c) const { return layout_.rank_of(c); }
  const std::vector<workload::Dim>& order() const { return order_; }
  const RankLayout& layout() const { return layout_; }
  const std::vector<int>& buildings() const { return buildings_; }
  /// @brief Of each node, the GPUs the job uses (0: all of them; the others stand by as spares).
  int gpus_per_node() const { return gpus_per_node_; }

  /// @brief The groups of kind `group` among the ranks of pipeline stage `stage` (every group when the group
  /// spans pp), each as GPU indices in rank order.
  std::vector<std::vector<int>> groups(int stage, const workload::Group& group) const;
  /// @brief GPUs of the ranks of one pipeline stage, in rank order.
  std::vector<int> stage_gpus(int stage) const;
  /// @brief The GPU that rank-coordinates `from`'s counterpart on `stage` runs on.
  int peer_gpu(int gpu_of_rank, int stage) const;

  /// @brief Boundary crossings and bytes for the communication of `graph`.
  PlacementReport report(const workload::StepGraph& graph) const;

private:
  const topology::Topology& topology_;
  workload::ParallelismSpec par_;
  std::vector<workload::Dim> order_;
  RankLayout layout_;
  std::vector<int> gpus_;        ///< rank -> GPU
  int gpus_per_node_ = 0;        ///< of each node, the GPUs in use (0: all; the others are spares)
  std::vector<int> rank_of_gpu_; ///< GPU -> rank, -1 when unused (sized to the topology)
  std::vector<int> buildings_;
};

/// @brief The job's step graph with each pipeline stage costed on the GPU type of the buildings it is placed in
/// (Topology::building_gpu; the job's GPU elsewhere). @throws InfeasibleError ("placement", at `where`) for a
/// stage spanning GPU types.
workload::StepGraph build_stage_graph(const workload::JobSpec& job, const topology::Topology& topology,
                                      const Placement& placement, const spec::Location& where,
                                      const workload::BuildOptions& options = {});

} // namespace spansim::placement
