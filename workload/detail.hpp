#pragma once
/// @file
/// @brief Internal to workload: helpers the spec readers share.

#include "workload/workload.hpp"

namespace spansim::workload::detail {

/// @brief Largest degree, layer count or width accepted in a spec.
inline constexpr int kMaxDim = 1 << 30;

/// @brief A positive integer key (a degree, a width).
int dim(spec::ObjectReader& r, std::string_view key, int min = 1, int max = kMaxDim);
/// @brief The same, optional, with a fallback.
int optional_dim(spec::ObjectReader& r, std::string_view key, int fallback, int min = 1, int max = kMaxDim);
/// @brief The attention libraries a GPU file gives rates for, quoted, for error messages.
std::string listed_kernels(const GpuSpec& g);

/// @brief One model chunk of a pipeline layout: what it holds, in order.
struct LayoutChunk {
  std::string items; ///< its characters, E t m L, unrolled
  int decoder   = 0;
  int mtp       = 0;
  int embedding = 0; ///< E characters
  int loss      = 0; ///< L characters
};
/// @brief Parses Megatron's pipeline_model_parallel_layout syntax into chunks (in chunk id order); throws
/// std::invalid_argument naming what is wrong. Placement rules are the caller's.
std::vector<LayoutChunk> parse_pipeline_layout(std::string_view layout);

/// @brief Reads a DLRM model object (a workload/dlrm/ zoo file or an inline object).
DlrmModel read_dlrm_model(spec::ObjectReader r);
/// @brief Reads a DLRM job's "model": a name of the DLRM zoo (workload/dlrm/), a path or an inline object.
DlrmModel read_dlrm_model_ref(spec::ObjectReader& r, std::string_view key);
/// @brief Reads a job of kind "dlrm" (parse_job hands it over).
JobSpec parse_dlrm_job(spec::ObjectReader& r, JobSpec job);

} // namespace spansim::workload::detail
