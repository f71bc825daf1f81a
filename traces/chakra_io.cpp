// ET files: length-delimited protobuf (a varint32 length before each message), as Chakra's tools and ASTRA-sim
// write and read them.
#include "traces/chakra_io.hpp"

#include "common/error.hpp"
#include "common/paths.hpp"
#include "traces/traces.hpp"

#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/util/delimited_message_util.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace spansim::traces::detail {

EtFile read_et(const std::string& path)
{
  // Non-blocking, so that a FIFO (or a device) is refused below rather than waited on in open().
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (fd < 0)
    throw TraceError(path, "", std::string("cannot open the trace: ") + std::strerror(errno));
  google::protobuf::io::FileInputStream in(fd);
  in.SetCloseOnDelete(true);
  // Decoded nodes take several times their bytes: a trace over the limit is refused before it is read.
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw TraceError(path, "",
                     std::string("not a regular file") + (S_ISFIFO(st.st_mode) ? " (a FIFO)" : "") +
                         ": a Chakra ET is read from a file");
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (static_cast<std::uint64_t>(st.st_size) > kMaxEtFileBytes)
    throw TraceError(path, "",
                     "the trace has " + std::to_string(st.st_size) + " bytes; ET files are limited to " +
                         std::to_string(kMaxEtFileBytes >> 20) + " MiB each");
  // Protobuf reports a "clean end" whenever the length's varint did not advance, which a malformed varint (ten
  // bytes of 0xff) does too: an end is only an end when no byte is left.
  const auto at_end = [&in] {
    const void* data = nullptr;
    int size         = 0;
    while (in.Next(&data, &size))
      if (size > 0)
        return false;
    return true;
  };
  EtFile out;
  bool clean_eof = false;
  if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(&out.metadata, &in, &clean_eof))
    throw TraceError(path, "",
                     clean_eof && at_end() ? std::string("empty file: a Chakra ET starts with its global metadata")
                                           : std::string("the global metadata is truncated or not a Chakra ET"));
  // Another schema version may keep its fields elsewhere: reading it with 0.0.4's layout would misread it silently.
  if (const auto v = declared_schema_version(out.metadata); !v.empty() && v != kChakraSchemaVersion)
    throw TraceError(path, "global metadata",
                     "Chakra schema version \"" + v + "\" is not supported: spansim reads schema " +
                         kChakraSchemaVersion + " (traces/et_def.proto), from files whose version is \"" +
                         kChakraSchemaVersion +
                         "\" or empty (Chakra's converters leave it empty); convert the trace with Chakra's tools "
                         "of schema " +
                         kChakraSchemaVersion);
  for (;;) {
    chakra::Node node;
    if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(&node, &in, &clean_eof)) {
      if (clean_eof && at_end())
        break;
      throw TraceError(path, "",
                       "record " + std::to_string(out.nodes.size() + 1) + " (after node " +
                           (out.nodes.empty() ? std::string("none") : std::to_string(out.nodes.back().id())) +
                           ") is truncated or not a Chakra node");
    }
    out.nodes.push_back(std::move(node));
  }
  return out;
}

void write_et(const std::string& path, const chakra::GlobalMetadata& metadata, const std::vector<chakra::Node>& nodes)
{
  // Created exclusively under an unpredictable name and renamed into place: never written through a planted symlink.
  const auto tmp            = create_temporary(path);
  const std::string partial = tmp.name;
  const int fd              = tmp.fd;
  bool ok                   = true;
  errno                     = 0; // a failed write that sets none is named as such, not as "Success"
  {
    google::protobuf::io::FileOutputStream out(fd);
    ok = google::protobuf::util::SerializeDelimitedToZeroCopyStream(metadata, &out);
    for (std::size_t i = 0; ok && i < nodes.size(); ++i)
      ok = google::protobuf::util::SerializeDelimitedToZeroCopyStream(nodes[i], &out);
    ok = out.Close() && ok;
  }
  if (!ok) {
    const int e = errno;
    std::remove(partial.c_str());
    throw UsageError("cannot write \"" + path + "\": " +
                     (e != 0
                          ? std::string(std::strerror(e))
                          : std::string("the write did not complete (no space left, or the file system refused it)")));
  }
  replace_with(partial, path);
}

std::string declared_schema_version(const chakra::GlobalMetadata& metadata)
{
  if (!metadata.version().empty())
    return metadata.version();
  // Chakra's PyTorch converter copies the execution trace's own schema ("1.0.1"), which is not Chakra's; its
  // MSCCL and text converters write "1.0.2-chakra.0.0.4", whose tail is.
  const auto schema               = as_string(find_attr(metadata, "schema"));
  constexpr std::string_view kTag = "-chakra.";
  if (!schema)
    return "";
  const auto at = schema->rfind(kTag);
  return at == std::string::npos ? "" : schema->substr(at + kTag.size());
}

std::optional<std::int64_t> as_int(const chakra::AttributeProto* a)
{
  if (!a)
    return std::nullopt;
  using A = chakra::AttributeProto;
  switch (a->value_case()) {
  case A::kInt32Val:
    return a->int32_val();
  case A::kInt64Val:
    return a->int64_val();
  case A::kUint32Val:
    return a->uint32_val();
  case A::kUint64Val:
    return static_cast<std::int64_t>(a->uint64_val());
  case A::kSint32Val:
    return a->sint32_val();
  case A::kSint64Val:
    return a->sint64_val();
  case A::kFixed32Val:
    return a->fixed32_val();
  case A::kFixed64Val:
    return static_cast<std::int64_t>(a->fixed64_val());
  case A::kSfixed32Val:
    return a->sfixed32_val();
  case A::kSfixed64Val:
    return a->sfixed64_val();
  case A::kBoolVal:
    return a->bool_val() ? 1 : 0;
  default:
    return std::nullopt;
  }
}

std::optional<double> as_double(const chakra::AttributeProto* a)
{
  if (!a)
    return std::nullopt;
  if (a->value_case() == chakra::AttributeProto::kDoubleVal)
    return a->double_val();
  if (a->value_case() == chakra::AttributeProto::kFloatVal)
    return a->float_val();
  if (auto i = as_int(a))
    return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<std::string> as_string(const chakra::AttributeProto* a)
{
  if (!a || a->value_case() != chakra::AttributeProto::kStringVal)
    return std::nullopt;
  return a->string_val();
}

std::string node_type_name(chakra::NodeType t)
{
  return chakra::NodeType_IsValid(t)
             ? chakra::NodeType_Name(t)
             : std::to_string(int(t)) + " (not a type of Chakra's schema " + kChakraSchemaVersion + ")";
}

} // namespace spansim::traces::detail
