// Fitting a profile and validating a dataset.
//
// A row's step time depends on the two parameters smoothly: compute-bound kernels take 1/clock of their measured
// time, and every kernel adds a gap. So each fit row is simulated once at the corners and middle of the bounds (a
// grid in 1/clock and gap) and interpolated between them; the least squares runs on the interpolants (exhaustive
// over a fine grid, then refined), and the fitted point is checked, and polished by Gauss-Newton steps, with real
// simulations. Leave-one-out refits reuse the interpolants.
#include "calibration/calibration.hpp"

#include "common/error.hpp"
#include "common/process.hpp"
#include "common/version.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>

namespace spansim::calibration {

using nlohmann::json;

double Residual::log_error() const
{
  return std::log(simulated_step / published_step);
}

namespace {

constexpr std::array<double, 3> kClockGrid{0, 0.5, 1}; // as fractions of the way from clock_min to clock_max
constexpr std::array<double, 2> kGapGrid{0, 1};        // as fractions of the way from gap_min to gap_max

std::string pack(double v)
{
  return std::string(reinterpret_cast<const char*>(&v), sizeof v);
}
double unpack(const std::string& s)
{
  double v = 0;
  if (s.size() == sizeof v)
    std::memcpy(&v, s.data(), sizeof v);
  return v;
}

workload::Calibration candidate(const std::vector<std::string>& gpus, double clock, double gap, double alltoall = 1)
{
  workload::Calibration c;
  c.name                = "candidate";
  c.gpus                = gpus;
  c.clock_fraction      = clock;
  c.kernel_gap          = gap;
  c.alltoall_efficiency = alltoall;
  return c;
}

bool is_moe(const PublishedRun& run)
{
  return run.job->model.moe.experts > 0;
}

// One row's step time over the grid, interpolated: piecewise linear in 1/clock (compute time is linear in it) and
// linear in the gap.
struct Interpolant {
  std::array<double, kClockGrid.size()> x{}; // 1/clock at the grid points, decreasing
  double gap_min = 0, gap_max = 0;
  std::array<std::array<double, kGapGrid.size()>, kClockGrid.size()> t{};

  double operator()(double clock, double gap) const
  {
    const double xv = 1 / clock;
    std::size_t i   = 0;
    while (i + 2 < x.size() && xv < x[i + 1])
      ++i;
    const double u = (xv - x[i]) / (x[i + 1] - x[i]);
    const double w = gap_max > gap_min ? (gap - gap_min) / (gap_max - gap_min) : 0;
    auto along_gap = [&](std::size_t k) { return t[k][0] + w * (t[k][1] - t[k][0]); };
    return along_gap(i) + u * (along_gap(i + 1) - along_gap(i));
  }
};

struct Row {
  const PublishedRun* run;
  double published;
  Interpolant surface;
};

double clock_at(const Bounds& b, double f)
{
  return b.clock_min + f * (b.clock_max - b.clock_min);
}
double gap_at(const Bounds& b, double f)
{
  return b.gap_min + f * (b.gap_max - b.gap_min);
}

// The fit rows of a GPU with their interpolants: every grid point of every row simulated in worker processes.
std::string joined(const std::vector<std::string>& names)
{
  std::string s;
  for (const auto& n : names)
    s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::vector<Row> surfaces(const Dataset& d, const std::vector<std::string>& gpus, const Bounds& b,
                          netsim::Fidelity fidelity, const process::Mapper& map, const Progress& progress)
{
  std::vector<Row> rows;
  for (const auto& run : d.runs)
    if (run.role == Role::fit && !is_moe(run) && std::find(gpus.begin(), gpus.end(), run.job->gpu.name) != gpus.end())
      rows.push_back({&run, run.published_step_time(), {}});
  const std::size_t per_row = kClockGrid.size() * kGapGrid.size();
  if (progress)
    progress("simulating the fit rows of " + joined(gpus) + " over the parameter grid", 0, rows.size() * per_row);
  auto out = map(rows.size() * per_row, [&](std::size_t k) {
    const Row& r = rows[k / per_row];
    const auto i = (k % per_row) / kGapGrid.size(), j = k % kGapGrid.size();
    return pack(
        simulate_step_time(*r.run, candidate(gpus, clock_at(b, kClockGrid[i]), gap_at(b, kGapGrid[j])), fidelity));
  });
  for (std::size_t r = 0; r < rows.size(); ++r) {
    auto& s   = rows[r].surface;
    s.gap_min = b.gap_min;
    s.gap_max = b.gap_max;
    for (std::size_t i = 0; i < kClockGrid.size(); ++i) {
      s.x[i] = 1 / clock_at(b, kClockGrid[i]);
      for (std::size_t j = 0; j < kGapGrid.size(); ++j)
        s.t[i][j] = unpack(out[r * per_row + i * kGapGrid.size() + j]);
    }
  }
  if (progress)
    progress("simulating the fit rows of " + joined(gpus) + " over the parameter grid", out.size(), out.size());
  return rows;
}

double objective(const std::vector<Row>& rows, double clock, double gap, std::size_t skip)
{
  double f = 0;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (i != skip) {
      const double e = std::log(rows[i].surface(clock, gap) / rows[i].published);
      f += e * e;
    }
  return f;
}

// Bounded least squares on the interpolants: an exhaustive grid, then three rounds on finer grids around the best.
std::pair<double, double> minimise(const std::vector<Row>& rows, const Bounds& b, std::size_t skip)
{
  double lo_c = b.clock_min, hi_c = b.clock_max, lo_g = b.gap_min, hi_g = b.gap_max;
  double best_c = lo_c, best_g = lo_g, best_f = std::numeric_limits<double>::infinity();
  constexpr int kSteps = 40;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i <= kSteps; ++i)
      for (int j = 0; j <= kSteps; ++j) {
        const double c = lo_c + (hi_c - lo_c) * i / kSteps;
        const double g = lo_g + (hi_g - lo_g) * j / kSteps;
        const double f = objective(rows, c, g, skip);
        if (f < best_f) {
          best_f = f;
          best_c = c;
          best_g = g;
        }
      }
    const double dc = 2 * (hi_c - lo_c) / kSteps, dg = 2 * (hi_g - lo_g) / kSteps;
    lo_c = std::max(b.clock_min, best_c - dc);
    hi_c = std::min(b.clock_max, best_c + dc);
    lo_g = std::max(b.gap_min, best_g - dg);
    hi_g = std::min(b.gap_max, best_g + dg);
  }
  return {best_c, best_g};
}

// The MoE parameters, fitted on the MoE fit rows with the compute parameters fixed: NCCL all-to-all's share, the
// host's seconds per MoE layer and micro-batch, and what Megatron's all-to-all overlap adds to them (fitted on the
// rows that run it). Each moves its own rows (the all-to-all share those whose all-to-alls are exposed, the host
// floor those whose layers are too small to hide it, the overlap's only the overlapped ones), so they are fitted in
// turn, each in one dimension over interpolants of real simulations, until none moves.
enum class MoeParam { alltoall, host, overlap };

struct MoePoint {
  double alltoall = 1, host = 0, overlap = 0;
};

bool overlapped(const PublishedRun& run)
{
  return run.job->schedule.ep_overlap;
}

/// @brief One MoE parameter as the fit sees it: its bounds, its grid of simulated values, the coordinate its
/// interpolant is linear in, and the end that changes nothing (a share of 1, no host floor), which wins ties.
struct MoeAxis {
  MoeParam param;
  double lo, hi;
  std::size_t points;

  static MoeAxis of(MoeParam param, const Bounds& b)
  {
    switch (param) {
    case MoeParam::alltoall:
      return {param, b.alltoall_min, b.alltoall_max, 5};
    case MoeParam::host:
      return {param, b.moe_host_min, b.moe_host_max, 11};
    case MoeParam::overlap:
      break;
    }
    return {param, b.moe_overlap_min, b.moe_overlap_max, 11};
  }
  /// @brief The value a fraction `f` of the way from the neutral end to the far one.
  double at(double f) const { return neutral() + (far() - neutral()) * f; }
  /// @brief The k-th grid value, in increasing order of the interpolant's coordinate.
  double value(std::size_t k) const { return at(double(k) / double(points - 1)); }
  /// @brief The interpolant's coordinate: 1/share for the all-to-all share (the all-to-alls' time is linear in
  /// it), seconds for the host floor.
  double coordinate(double v) const { return param == MoeParam::alltoall ? 1 / v : v; }
  double neutral() const { return param == MoeParam::alltoall ? hi : lo; }
  double far() const { return param == MoeParam::alltoall ? lo : hi; }
  double& in(MoePoint& p) const
  {
    return param == MoeParam::alltoall ? p.alltoall : param == MoeParam::host ? p.host : p.overlap;
  }
  const char* what() const
  {
    return param == MoeParam::alltoall ? "all-to-all shares"
           : param == MoeParam::host   ? "host seconds per MoE layer"
                                       : "host seconds the all-to-all overlap adds per MoE layer";
  }
  /// @brief Whether the parameter moves `run`'s step (the overlap's, only runs with ep_overlap).
  bool moves(const PublishedRun& run) const { return param != MoeParam::overlap || overlapped(run); }
};

// One MoE fit row's step time over one parameter (the other held), interpolated piecewise linearly in the axis's
// coordinate. For the host floor each pass is the larger of the host's time and the GPU's, so the step is convex and
// piecewise linear with a kink per pass and stage; the chords between grid points 2 ms apart lie above it near a
// kink, and the fitted point is checked by a real simulation, not polished.
struct MoeRow {
  const PublishedRun* run;
  double published;
  MoeAxis axis;
  std::vector<double> x, t; ///< increasing; step times
  double operator()(double v) const
  {
    const double xv = axis.coordinate(v);
    std::size_t i   = 0;
    while (i + 2 < x.size() && xv > x[i + 1])
      ++i;
    return t[i] + (xv - x[i]) / (x[i + 1] - x[i]) * (t[i + 1] - t[i]);
  }
};

constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max(); // skip no row

/// @brief What every MoE simulation of one profile group shares: the rows, the compute parameters held fixed, and
/// how to run.
struct MoeFit {
  const Dataset& dataset;
  const std::vector<std::string>& gpus;
  const Bounds& bounds;
  double clock, gap;
  netsim::Fidelity fidelity;
  const process::Mapper& map;
  const Progress& progress;

  workload::Calibration candidate(MoePoint p) const
  {
    auto c             = spansim::calibration::candidate(gpus, clock, gap, p.alltoall);
    c.moe_host         = p.host;
    c.moe_host_overlap = p.overlap;
    return c;
  }
  std::vector<const PublishedRun*> rows() const
  {
    std::vector<const PublishedRun*> out;
    for (const auto& run : dataset.runs)
      if (run.role == Role::fit && is_moe(run) && std::find(gpus.begin(), gpus.end(), run.job->gpu.name) != gpus.end())
        out.push_back(&run);
    return out;
  }
  // The MoE fit rows' interpolants over `param`, the other parameter at `at`'s.
  std::vector<MoeRow> surfaces(MoeParam param, MoePoint at) const
  {
    const MoeAxis axis = MoeAxis::of(param, bounds);
    std::vector<MoeRow> out;
    for (const auto* run : rows())
      if (axis.moves(*run))
        out.push_back({run, run->published_step_time(), axis, {}, {}});
    if (out.empty())
      return out;
    const std::string what = "simulating the MoE fit rows of " + joined(gpus) + " over " + axis.what();
    if (progress)
      progress(what, 0, out.size() * axis.points);
    auto steps = map(out.size() * axis.points, [&](std::size_t k) {
      MoePoint p = at;
      axis.in(p) = axis.value(k % axis.points);
      return pack(simulate_step_time(*out[k / axis.points].run, candidate(p), fidelity));
    });
    for (std::size_t r = 0; r < out.size(); ++r)
      for (std::size_t k = 0; k < axis.points; ++k) {
        out[r].x.push_back(axis.coordinate(axis.value(k)));
        out[r].t.push_back(unpack(steps[r * axis.points + k]));
      }
    if (progress)
      progress(what, steps.size(), steps.size());
    return out;
  }
};

// The value of the rows' parameter minimising the squared log errors of the MoE fit rows (all but `skip`): a fine
// search on its bounds; ties go to the end that changes nothing.
double minimise_moe(const std::vector<MoeRow>& rows, std::size_t skip)
{
  if (rows.empty())
    return 0;
  const MoeAxis& axis = rows.front().axis;
  double best = axis.neutral(), best_f = std::numeric_limits<double>::infinity();
  constexpr int kSteps = 1000;
  for (int i = 0; i <= kSteps; ++i) {
    const double a = axis.at(double(i) / kSteps);
    double f       = 0;
    for (std::size_t r = 0; r < rows.size(); ++r)
      if (r != skip) {
        const double e = std::log(rows[r](a) / rows[r].published);
        f += e * e;
      }
    if (f < best_f * (1 - 1e-12)) {
      best_f = f;
      best   = a;
    }
  }
  return best;
}

// The MoE parameters `params`, in turn from `p` until none moves by more than a thousandth of its range, four
// turns at most (they move mostly different rows, so two or three turns settle them). A parameter no fit row moves
// keeps its value.
MoePoint fit_moe(const MoeFit& fit, MoePoint p, const std::vector<MoeParam>& params)
{
  if (fit.rows().empty())
    return p;
  constexpr int kRounds = 4;
  for (int round = 0; round < kRounds; ++round) {
    bool settled = true;
    for (const MoeParam param : params) {
      const MoeAxis axis = MoeAxis::of(param, fit.bounds);
      const auto rows    = fit.surfaces(param, p);
      if (rows.empty())
        continue;
      double& value    = axis.in(p);
      const double was = value;
      value            = minimise_moe(rows, kNone);
      settled          = settled && std::abs(value - was) <= 1e-3 * (axis.hi - axis.lo);
    }
    if (settled)
      break;
  }
  return p;
}

// A duration in microseconds, as profiles write it.
std::string microseconds(double seconds)
{
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6gus", seconds * 1e6);
  return buf;
}

} // namespace

Profile fit_profile(const Dataset& dataset, const FitOptions& options)
{
  const auto& b = options.bounds;
  if (options.gpus.empty())
    throw UsageError("name the GPU (--gpu) whose fit rows to use");
  // The donor of the MoE parameters is read, and its use checked, before minutes of fitting.
  std::optional<workload::Calibration> donor;
  if (!options.moe_from.empty()) {
    std::size_t own = 0;
    for (const auto& run : dataset.runs)
      if (run.role == Role::fit && is_moe(run) && !overlapped(run) &&
          std::find(options.gpus.begin(), options.gpus.end(), run.job->gpu.name) != options.gpus.end())
        ++own;
    if (own > 0)
      throw UsageError("--moe-from carries the all-to-all share and MoE host seconds to GPUs without MoE fit rows "
                       "(rows with ep_overlap may stay: they fit the overlap's host seconds); " +
                       joined(options.gpus) + " has " + std::to_string(own) + " without ep_overlap");
    donor = workload::load_calibration(options.moe_from);
  }
  const auto map = process::local_mapper(options.workers);
  auto rows      = surfaces(dataset, options.gpus, b, options.fidelity, map, options.progress);
  if (rows.empty())
    throw UsageError("no fit rows for GPU " + joined(options.gpus) + " in " + dataset.file);
  // Plain variables, not a structured binding: clang 14 cannot capture bindings in the lambdas below.
  double clock = 0, gap = 0;
  std::tie(clock, gap) = minimise(rows, b, rows.size());

  // Gauss-Newton on real simulations from the interpolants' optimum: the interpolation is close, not exact.
  auto simulate_all = [&](double c, double g) {
    auto out = process::parallel_map(rows.size(), options.workers, [&](std::size_t i) {
      return pack(simulate_step_time(*rows[i].run, candidate(options.gpus, c, g), options.fidelity));
    });
    std::vector<double> t;
    for (const auto& s : out)
      t.push_back(unpack(s));
    return t;
  };
  std::vector<double> at = simulate_all(clock, gap);
  for (int step = 0; step < 2; ++step) {
    if (options.progress)
      options.progress("polishing the fit with real simulations", static_cast<std::size_t>(step), 2);
    const double dc = 0.01 * (b.clock_max - b.clock_min), dg = 0.05 * (b.gap_max - b.gap_min);
    const double c2 = clock - dc >= b.clock_min ? clock - dc : clock + dc;
    const double g2 = gap + dg <= b.gap_max ? gap + dg : gap - dg;
    const auto tc = simulate_all(c2, gap), tg = simulate_all(clock, g2);
    // Normal equations of the linearised log residuals: J d = -r.
    double a11 = 0, a12 = 0, a22 = 0, v1 = 0, v2 = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const double r  = std::log(at[i] / rows[i].published);
      const double j1 = (std::log(tc[i]) - std::log(at[i])) / (c2 - clock);
      const double j2 = (std::log(tg[i]) - std::log(at[i])) / (g2 - gap);
      a11 += j1 * j1;
      a12 += j1 * j2;
      a22 += j2 * j2;
      v1 -= j1 * r;
      v2 -= j2 * r;
    }
    const double det = a11 * a22 - a12 * a12;
    double nc = clock, ng = gap;
    if (std::abs(det) > 1e-30 * (a11 * a22 + 1e-300)) {
      nc = clock + (v1 * a22 - v2 * a12) / det;
      ng = gap + (a11 * v2 - a12 * v1) / det;
    } else if (a11 > 0) {
      nc = clock + v1 / a11;
    }
    nc            = std::clamp(nc, b.clock_min, b.clock_max);
    ng            = std::clamp(ng, b.gap_min, b.gap_max);
    const auto tn = simulate_all(nc, ng);
    double before = 0, after = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      before += std::pow(std::log(at[i] / rows[i].published), 2);
      after += std::pow(std::log(tn[i] / rows[i].published), 2);
    }
    if (!(after < before))
      break;
    clock = nc;
    gap   = ng;
    at    = tn;
  }

  // The MoE parameters on the MoE fit rows with the compute parameters fixed; checked by real simulations.
  const MoeFit moe_fit{dataset, options.gpus, b, clock, gap, options.fidelity, map, options.progress};
  const auto moe          = moe_fit.rows();
  const auto overlaps     = std::count_if(moe.begin(), moe.end(), [](const auto* r) { return overlapped(*r); });
  const std::string added = "what the all-to-all overlap adds to the host seconds on the " + std::to_string(overlaps) +
                            " MoE fit rows with ep_overlap";
  MoePoint moe_p;
  std::string moe_source;
  if (donor) {
    moe_p      = fit_moe(moe_fit,
                         {.alltoall = donor->alltoall_efficiency,
                          .host     = donor->moe_host,
                          .overlap  = overlaps > 0 ? b.moe_overlap_min : donor->moe_host_overlap},
                         {MoeParam::overlap});
    moe_source = "; NCCL all-to-all's share and the host seconds per MoE layer carried from profile " +
                 options.moe_from + " (--moe-from; both are the software's and the host CPU's, not the GPU's)" +
                 (overlaps > 0 ? ", then " + added : ", with the overlap's host seconds");
  } else {
    moe_p      = fit_moe(moe_fit, {.alltoall = b.alltoall_max, .host = b.moe_host_min, .overlap = b.moe_overlap_min},
                         {MoeParam::alltoall, MoeParam::host, MoeParam::overlap});
    moe_source = ", then NCCL all-to-all's share and the host seconds per MoE layer on " + std::to_string(moe.size()) +
                 " MoE fit rows, and " + added;
  }
  std::vector<double> moe_at;
  if (!moe.empty()) {
    auto out = process::parallel_map(moe.size(), options.workers, [&](std::size_t i) {
      return pack(simulate_step_time(*moe[i], moe_fit.candidate(moe_p), options.fidelity));
    });
    for (const auto& o : out)
      moe_at.push_back(unpack(o));
  }

  Profile p;
  p.calibration      = moe_fit.candidate(moe_p);
  p.calibration.name = options.name.empty() ? options.gpus.front() + "-published" : options.name;
  std::string flags;
  for (const auto& g : options.gpus)
    flags += " --gpu " + g;
  if (!options.moe_from.empty())
    flags += " --moe-from " + options.moe_from;
  p.calibration.source = "spansim calibrate " + recorded_path(dataset.file) + flags +
                         ": bounded least squares on "
                         "the log of simulated over published step time, " +
                         std::to_string(rows.size()) + " dense fit rows" + moe_source + ", " +
                         std::string(name_of(options.fidelity)) + " fidelity";
  p.bounds  = b;
  p.dataset = recorded_path(dataset.file);
  for (std::size_t i = 0; i < rows.size(); ++i)
    p.residuals.push_back({rows[i].run->name, Role::fit, rows[i].published, at[i], rows[i].run->source});
  for (std::size_t i = 0; i < moe.size(); ++i)
    p.residuals.push_back({moe[i]->name, Role::fit, moe[i]->published_step_time(), moe_at[i], moe[i]->source});
  return p;
}

json Profile::to_json() const
{
  json fit = json::array();
  for (const auto& r : residuals)
    fit.push_back({{"run", r.name},
                   {"published_step_s", r.published_step},
                   {"simulated_step_s", r.simulated_step},
                   {"throughput_error", r.published_step / r.simulated_step - 1},
                   {"source", r.source}});
  return {{"name", calibration.name},
          {"gpus", calibration.gpus},
          {"source", calibration.source},
          {"parameters",
           {{"clock_fraction", calibration.clock_fraction},
            {"kernel_gap", microseconds(calibration.kernel_gap)},
            {"alltoall_efficiency", calibration.alltoall_efficiency},
            {"moe_host", microseconds(calibration.moe_host)},
            {"moe_host_overlap", microseconds(calibration.moe_host_overlap)}}},
          {"bounds",
           {{"clock_fraction", {bounds.clock_min, bounds.clock_max}},
            {"kernel_gap_s", {bounds.gap_min, bounds.gap_max}},
            {"alltoall_efficiency", {bounds.alltoall_min, bounds.alltoall_max}},
            {"moe_host_s", {bounds.moe_host_min, bounds.moe_host_max}},
            {"moe_host_overlap_s", {bounds.moe_overlap_min, bounds.moe_overlap_max}}}},
          {"fit", {{"dataset", dataset}, {"rows", fit}}},
          {"spansim", provenance()}};
}

ValidationReport validate(const Dataset& dataset, const ValidateOptions& options)
{
  ValidationReport report;
  std::vector<const PublishedRun*> simulated;
  for (const auto& run : dataset.runs)
    if (run.role != Role::excluded)
      simulated.push_back(&run);
  if (options.progress)
    options.progress("simulating every row with its profile", 0, simulated.size());
  const auto map = options.map ? options.map : process::local_mapper(options.workers);
  auto steps     = map(simulated.size(), [&](std::size_t i) {
    const auto sim  = simulate_run(*simulated[i], simulated[i]->job->calibration, options.fidelity);
    std::string out = pack(sim.step_time) + pack(sim.inner_step);
    for (double p : sim.parts)
      out += pack(p);
    return out;
  });
  if (options.progress)
    options.progress("simulating every row with its profile", simulated.size(), simulated.size());

  // Leave one out: per profile in force (its GPUs; a row without one, its own GPU), the fit rows' interpolants,
  // refitted without each row in turn.
  std::map<std::string, double> loo; // run name -> step time with the profile fitted without it
  if (options.leave_one_out) {
    // Each group's profile: the one its rows ran with.
    std::map<std::vector<std::string>, workload::Calibration> groups;
    for (const auto* r : simulated)
      if (r->role == Role::fit)
        groups.emplace(r->job->calibration.gpus.empty() ? std::vector{r->job->gpu.name} : r->job->calibration.gpus,
                       r->job->calibration);
    for (const auto& [group, group_profile] : groups) {
      // Named copies: clang 14 cannot capture structured bindings in the lambdas below.
      const std::vector<std::string>& gpus = group;
      const workload::Calibration& profile = group_profile;
      Bounds b;
      auto rows = surfaces(dataset, gpus, b, options.fidelity, map, options.progress);
      for (std::size_t i = 0; i < rows.size() && rows.size() > 1; ++i) {
        auto [c, g]            = minimise(rows, b, i);
        loo[rows[i].run->name] = rows[i].surface(c, g);
      }
      // MoE fit rows: each MoE parameter refitted without each row from the profile's point (all at once, not in
      // turns), the compute parameters kept, then the row simulated at the refitted point.
      const MoeFit moe_fit{dataset,         gpus, b, profile.clock_fraction, profile.kernel_gap, options.fidelity, map,
                           options.progress};
      if (moe_fit.rows().size() > 1) {
        const MoePoint at{
            .alltoall = profile.alltoall_efficiency, .host = profile.moe_host, .overlap = profile.moe_host_overlap};
        const auto rows     = moe_fit.rows();
        const auto overlaps = moe_fit.surfaces(MoeParam::overlap, at); // the overlapped rows alone
        // Fit rows that all run the overlap fitted only its host seconds (the share and host seconds came with
        // --moe-from): only that is refitted, and the other two are not simulated.
        const bool overlap_only = overlaps.size() == rows.size();
        const auto shares       = overlap_only ? std::vector<MoeRow>{} : moe_fit.surfaces(MoeParam::alltoall, at);
        const auto hosts        = overlap_only ? std::vector<MoeRow>{} : moe_fit.surfaces(MoeParam::host, at);
        std::vector<MoePoint> refit;
        for (std::size_t i = 0; i < rows.size(); ++i) {
          MoePoint p = at;
          if (!overlap_only) {
            p.alltoall = minimise_moe(shares, i);
            p.host     = minimise_moe(hosts, i);
          }
          if (!overlaps.empty()) {
            const auto it =
                std::find_if(overlaps.begin(), overlaps.end(), [&](const MoeRow& r) { return r.run == rows[i]; });
            p.overlap = minimise_moe(overlaps, it == overlaps.end() ? kNone : std::size_t(it - overlaps.begin()));
          }
          refit.push_back(p);
        }
        auto out = map(rows.size(), [&](std::size_t i) {
          return pack(simulate_step_time(*rows[i], moe_fit.candidate(refit[i]), options.fidelity));
        });
        for (std::size_t i = 0; i < rows.size(); ++i)
          loo[rows[i]->name] = unpack(out[i]);
      }
    }
  }

  double fit_sum = 0, check_sum = 0, loo_sum = 0;
  std::size_t loo_n = 0;
  for (std::size_t i = 0; i < simulated.size(); ++i) {
    const auto& run = *simulated[i];
    ValidationRow row;
    row.name            = run.name;
    row.gpu             = run.job->gpu.name;
    row.role            = run.role;
    row.metric          = run.published.metric;
    row.published       = run.published.value;
    row.flop_convention = run.published.flop_convention;
    const double step   = unpack(steps[i].substr(0, sizeof(double)));
    const double inner  = unpack(steps[i].substr(sizeof(double), sizeof(double)));
    for (std::size_t k = 0; k < row.parts.size(); ++k)
      row.parts[k] = unpack(steps[i].substr((k + 2) * sizeof(double), sizeof(double)));
    row.simulated = run.in_published_metric(step, inner);
    // Throughput error, whatever the published metric: positive when the simulation is faster.
    const double published_step = run.published_step_time(inner);
    row.error                   = published_step / step - 1;
    row.profile                 = run.job->calibration.name;
    if (auto it = loo.find(run.name); it != loo.end()) {
      row.loo_error = published_step / it->second - 1;
      loo_sum += std::abs(*row.loo_error);
      ++loo_n;
    }
    (run.role == Role::fit ? fit_sum : check_sum) += std::abs(row.error);
    (run.role == Role::fit ? report.fit_rows : report.check_rows)++;
    auto& part  = run.cross_site() ? report.cross_site : is_moe(run) ? report.moe : report.dense;
    row.section = run.cross_site() ? "cross_site" : is_moe(run) ? "moe" : "dense";
    (run.role == Role::fit ? part.fit : part.check) += std::abs(row.error);
    (run.role == Role::fit ? part.fit_rows : part.check_rows)++;
    if (row.loo_error) {
      part.loo += std::abs(*row.loo_error);
      ++part.loo_rows;
    }
    report.rows.push_back(row);
  }
  for (const auto& run : dataset.runs)
    if (run.role == Role::excluded) {
      ValidationRow row;
      row.name             = run.name;
      row.role             = run.role;
      row.metric           = run.published.metric;
      row.published        = run.published.value;
      row.excluded_because = run.excluded_because;
      row.flop_convention  = run.published.flop_convention;
      report.rows.push_back(row);
    }
  report.mape_fit   = report.fit_rows ? fit_sum / static_cast<double>(report.fit_rows) : 0;
  report.mape_check = report.check_rows ? check_sum / static_cast<double>(report.check_rows) : 0;
  report.mape_loo   = loo_n ? loo_sum / static_cast<double>(loo_n) : 0;
  for (auto* part : {&report.dense, &report.moe, &report.cross_site}) {
    part->fit /= std::max<std::size_t>(1, part->fit_rows);
    part->check /= std::max<std::size_t>(1, part->check_rows);
    part->loo /= std::max<std::size_t>(1, part->loo_rows);
  }
  return report;
}

} // namespace spansim::calibration
