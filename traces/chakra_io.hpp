#pragma once
/// @file
/// @brief Internal to traces: reading and writing ET files (length-delimited protobuf: the global metadata, then
/// the nodes), and attribute helpers.

#include "et_def.pb.h"

#include "common/collective.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace spansim {
/// @brief Chakra's protobuf messages (upstream's schema/protobuf/et_def.proto, compiled as published).
namespace chakra = ::ChakraProtoMsg;
} // namespace spansim

namespace spansim::traces::detail {

/// @brief Largest ET file read (256 MiB): a larger one is refused before it is read.
inline constexpr std::uint64_t kMaxEtFileBytes = 256ULL << 20;

/// @brief One ET file, decoded.
struct EtFile {
  chakra::GlobalMetadata metadata;
  std::vector<chakra::Node> nodes;
};

/// @brief Reads an ET file. @throws TraceError naming the file (and the record) when it is missing, truncated or not
/// protobuf, or of a schema version other than kChakraSchemaVersion (declared_schema_version).
EtFile read_et(const std::string& path);
/// @brief Writes an ET file through a temporary name, renamed when complete. @throws UsageError when it cannot.
void write_et(const std::string& path, const chakra::GlobalMetadata& metadata, const std::vector<chakra::Node>& nodes);

/// @brief Adds attribute `name` to a node or the metadata (the oneof member set even for 0: ASTRA-sim needs it).
template <class Message>
chakra::AttributeProto& add_attr(Message& m, const std::string& name)
{
  auto* a = m.add_attr();
  a->set_name(name);
  return *a;
}

/// @brief The first attribute called `name`, or null.
template <class Message>
const chakra::AttributeProto* find_attr(const Message& m, const std::string& name)
{
  for (const auto& a : m.attr())
    if (a.name() == name)
      return &a;
  return nullptr;
}

/// @brief spansim's collectives and their Chakra collective types, for export and import alike (send/recv is a
/// pair of COMM_SEND and COMM_RECV nodes, not a collective type).
inline constexpr std::array<std::pair<CollectiveOp, chakra::CollectiveCommType>, 6> kCommTypes{{
    {CollectiveOp::all_reduce, chakra::ALL_REDUCE},
    {CollectiveOp::reduce_scatter, chakra::REDUCE_SCATTER},
    {CollectiveOp::all_gather, chakra::ALL_GATHER},
    {CollectiveOp::all_to_all, chakra::ALL_TO_ALL},
    {CollectiveOp::broadcast, chakra::BROADCAST},
    {CollectiveOp::reduce, chakra::REDUCE},
}};

/// @brief An attribute's value as an integer (any integer or bool member); none when absent or not an integer.
std::optional<std::int64_t> as_int(const chakra::AttributeProto* a);
/// @brief As a number (any numeric member).
std::optional<double> as_double(const chakra::AttributeProto* a);
/// @brief As a string (string member only).
std::optional<std::string> as_string(const chakra::AttributeProto* a);

/// @brief The Chakra schema version a file declares: its global metadata's `version`, or where that is empty, the
/// Chakra version a `schema` attribute ends with ("1.0.2-chakra.0.0.4", as Chakra's MSCCL and text converters write
/// it); empty when it declares none (Chakra's PyTorch converter, whose `schema` is PyTorch's own).
std::string declared_schema_version(const chakra::GlobalMetadata& metadata);

/// @brief A node type's name in the schema, or "N (not a type of Chakra's schema 0.0.4)" for a number it lacks.
std::string node_type_name(chakra::NodeType t);

} // namespace spansim::traces::detail
