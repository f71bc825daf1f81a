#pragma once
/// @file
/// @brief DLRM specs: embedding tables, the dense MLPs and their sharding.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spansim::workload {

/// @brief How a DLRM's embedding tables are split over the GPUs of a group (the job, or a tower).
enum class Sharding : std::uint8_t { table_wise, row_wise, column_wise, automatic };
constexpr std::array<std::string_view, 4> enum_names(Sharding)
{
  return {"table-wise", "row-wise", "column-wise", "auto"};
}

/// @brief A DLRM's feature interaction: pairwise dot products, or DCNv2's low-rank cross layers.
enum class Interaction : std::uint8_t { dot, dcnv2 };
constexpr std::array<std::string_view, 2> enum_names(Interaction)
{
  return {"dot", "dcnv2"};
}

/// @brief The hierarchy level DLRM towers are aligned to: each tower's GPUs inside one node, pod or building.
enum class TowerLevel : std::uint8_t { node, pod, building };
constexpr std::array<std::string_view, 3> enum_names(TowerLevel)
{
  return {"node", "pod", "building"};
}

/// @brief One embedding table (or `count` identical ones).
struct EmbeddingTable {
  int count      = 1;
  double rows    = 0;
  int dim        = 0;
  double pooling = 1; ///< rows looked up and summed per sample (multi-hot size)
};

/// @brief A recommendation model's architecture (a DLRM zoo entry, workload/dlrm/).
struct DlrmModel {
  std::string name;
  std::string source;
  int dense_features = 0;
  std::vector<EmbeddingTable> tables;
  std::vector<int> bottom_mlp; ///< widths after the dense features; the last is the embedding dimension
  std::vector<int> top_mlp;    ///< widths after the interaction; the last is the output (1)
  Interaction interaction = Interaction::dcnv2;
  int cross_layers        = 3;   ///< DCNv2
  int cross_rank          = 512; ///< DCNv2 low rank
  /// @brief Tables in all.
  int table_count() const;
  /// @brief The embedding dimension (every table's, checked equal).
  int dim() const;
};

/// @brief How a DLRM is trained: its sharding plan, towers and embedding precision.
struct DlrmSpec {
  DlrmModel model;
  Sharding sharding        = Sharding::automatic;
  double embedding_bytes   = 4; ///< per element of the tables and the pooled embeddings (fp32: 4, fp16: 2)
  int towers               = 0; ///< DMT towers (0: none): intra-tower exchange, tower modules, a small cross-tower one
  TowerLevel tower_level   = TowerLevel::node;
  double tower_compression = 4; ///< a tower module's input width over its output width
};

} // namespace spansim::workload
