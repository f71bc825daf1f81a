#pragma once
/// @file
/// @brief What every spansim fuzz target shares: the input handed to a loader as a file, and the rule for findings.
///
/// A parser may refuse input only with a spansim::Error (the one-line message `main` prints with exit code 2).
/// Any other exception (a JSON library error, std::bad_alloc, an out_of_range) escaping a parser is a finding, as
/// are the sanitizers' reports and libFuzzer's timeouts and memory limits.

#include "common/error.hpp"
#include "topology/topology.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <typeinfo>
#include <utility>

#include <unistd.h>

namespace spansim::fuzz {

/// @brief The scratch folder private to this process (under TMPDIR or /tmp). Inputs are written where the shipped
/// examples' relative references still resolve in their mutants: `in/` beside links to examples' `jobs`,
/// `scenarios` and `topologies` (and the GraphML a topology example names), and campaigns in `campaign/in/`
/// beside links to experiments' `scenarios` and `topologies`.
inline const std::filesystem::path& scratch_root()
{
  static const std::filesystem::path root = [] {
    namespace fs     = std::filesystem;
    const char* tmp  = std::getenv("TMPDIR");
    const fs::path d = fs::path(tmp && *tmp ? tmp : "/tmp") / ("spansim-fuzz-" + std::to_string(::getpid()));
    const fs::path src(SPANSIM_SOURCE_DIR);
    fs::create_directories(d / "in");
    fs::create_directories(d / "campaign" / "in");
    const std::pair<fs::path, fs::path> links[] = {
        {src / "examples" / "jobs", d / "jobs"},
        {src / "examples" / "scenarios", d / "scenarios"},
        {src / "examples" / "topologies", d / "topologies"},
        {src / "examples", d / "examples"},
        {src / "examples" / "topologies" / "torus-of-pods.graphml", d / "in" / "torus-of-pods.graphml"},
        {src / "experiments" / "scenarios", d / "campaign" / "scenarios"},
        {src / "experiments" / "topologies", d / "campaign" / "topologies"}};
    for (const auto& [target, link] : links) {
      std::error_code ec;
      fs::create_symlink(target, link, ec);
    }
    return d;
  }();
  return root;
}

/// @brief Where inputs are written (see scratch_root).
inline std::string scratch_dir()
{
  return (scratch_root() / "in").string();
}

/// @brief Writes `data` to `name` in the scratch folder and returns its path: loaders read files, and relative
/// references inside a spec resolve from the file's folder.
inline std::string write_input(const std::uint8_t* data, std::size_t size, const std::string& name,
                               const std::string& dir = scratch_dir())
{
  const std::string path = dir + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out)
    std::abort();
  return path;
}

/// @brief Inputs refused with a spansim::Error in this process (the replay driver reports it: seeds should parse).
inline std::size_t& refused_count()
{
  static std::size_t n = 0;
  return n;
}

/// @brief Runs `parse`. A spansim::Error is the expected refusal of bad input; any other exception is a finding:
/// it is printed and the process aborts so that libFuzzer keeps the input.
template <class F>
int run_parser(F&& parse)
{
  try {
    parse();
  } catch (const spansim::Error& e) {
    ++refused_count();
    if (std::getenv("SPANSIM_FUZZ_VERBOSE") != nullptr)
      std::fprintf(stderr, "refused: %s\n", e.what());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz finding: %s escaped a parser: %s\n", typeid(e).name(), e.what());
    std::abort();
  }
  return 0;
}

/// @brief Vertices (an imported graph) or GPUs (a template) a topology spec describes: small ones are also built,
/// so that a target covers construction and routing without spending its time on valid giant sites.
inline std::int64_t size_of(const spansim::topology::TopologySpec& s)
{
  if (s.graph)
    return static_cast<std::int64_t>(s.graph->vertices.size());
  std::int64_t gpus = 0;
  for (const auto& region : s.regions)
    for (const auto& b : region.buildings) {
      const auto site = s.site_of(b);
      gpus += std::int64_t(site.node->gpus) * site.pod->nodes * site.building->pods;
    }
  return gpus;
}

} // namespace spansim::fuzz
