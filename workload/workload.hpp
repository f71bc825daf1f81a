#pragma once
/// @file
/// @brief The workload stage: a training job (model, GPU, parallelism, batch, schedule) becomes a training-step
/// graph: one op program per pipeline stage, communication groups named by parallelism dimensions, not GPU ids.
///
/// Units inside: seconds, bytes, bytes/s, FLOP and FLOP/s as doubles. Spec files carry units as strings.
///
/// An umbrella over the stage's narrow headers; a file that needs one part includes that part.

#include "workload/calibration.hpp"
#include "workload/dlrm.hpp"
#include "workload/gemm_cost.hpp"
#include "workload/gpu.hpp"
#include "workload/job.hpp"
#include "workload/job_costs.hpp"
#include "workload/model.hpp"
#include "workload/moe.hpp"
#include "workload/step_graph.hpp"
#include "workload/summary.hpp"
