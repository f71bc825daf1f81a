// `spansim share`: several jobs on one network, each against itself alone.
#include "cli/commands.hpp"
#include "cli/output.hpp"
#include "common/units.hpp"
#include "sharing/sharing.hpp"

#include <iostream>
#include <memory>
#include <optional>

namespace spansim::cli {

namespace {

struct ShareOptions {
  std::string file;
  std::string fidelity;
  std::string place;
  bool json = false;
};

std::string gb(double bytes)
{
  return fixed(bytes / 1e9, 1);
}

std::string fixed_slowdown(double s)
{
  return fixed(s, 3) + "x";
}

void place(const ShareOptions& o, const sharing::SharedSpec& spec)
{
  const auto progress = progress_bar(!o.json && stderr_is_terminal());
  auto step           = [&](std::size_t done, std::size_t total) {
    if (progress)
      progress("placing " + o.place + " (sets of buildings)", done, total);
  };
  const auto search = sharing::place_around(spec, o.place, step);
  if (o.json) {
    std::cout << sharing::to_json(search).dump(2) << "\n";
    return;
  }
  std::string others;
  for (const auto& f : search.fixed)
    others += (others.empty() ? "" : ", ") + f;
  std::cout << "Placing " << search.job << " around " << others << " on " << spec.topology.name << " at "
            << name_of(spec.fidelity) << " fidelity: " << search.options.size()
            << " sets of buildings, ranked by the GPU-weighted mean slowdown of all jobs\n\n";
  std::vector<std::string> headers{"rank", "buildings", search.job + " step (s)", search.job + " slowdown"};
  for (const auto& f : search.fixed)
    headers.push_back(f + " slowdown");
  headers.push_back("weighted slowdown");
  Table t{"Placements", headers, {}};
  int rank = 0;
  for (const auto& option : search.options) {
    std::string buildings;
    for (const auto& b : option.buildings)
      buildings += (buildings.empty() ? "" : ",") + b;
    if (!option.refused.empty()) {
      std::vector<std::string> row{"-", buildings, "refused", ""};
      row.resize(headers.size());
      t.rows.push_back(row);
      continue;
    }
    std::vector<std::string> row{std::to_string(++rank), buildings, fmt(option.step, 6),
                                 fixed_slowdown(option.slowdown)};
    for (std::size_t j = 0, f = 0; j < option.slowdowns.size() && f < search.fixed.size(); ++j)
      if (spec.jobs[j].scenario.name != search.job) {
        row.push_back(fixed_slowdown(option.slowdowns[j]));
        ++f;
      }
    row.push_back(fixed(option.weighted_slowdown, 4) + "x");
    t.rows.push_back(std::move(row));
  }
  print_table(std::cout, t);
}

void run(const ShareOptions& o)
{
  auto spec = sharing::load_shared(o.file);
  if (!o.fidelity.empty()) {
    spec.fidelity = parse_enum<netsim::Fidelity>(o.fidelity, "fidelity");
    if (spec.fidelity == netsim::Fidelity::hybrid)
      throw UsageError("--fidelity: jobs on a shared network run at analytical, flow or packet fidelity");
  }
  if (!o.place.empty()) {
    place(o, spec);
    return;
  }
  const auto progress = progress_bar(!o.json && stderr_is_terminal());
  std::size_t phases  = 0;
  const std::size_t n = 2 * spec.jobs.size() + 2; // topology, placements, alone runs, together
  auto phase          = [&](const std::string& what) {
    if (progress)
      progress(what, std::min(phases++, n - 1), n);
  };
  const auto run = sharing::run_shared(spec, phase);
  if (progress)
    progress("done", n, n);
  if (o.json) {
    std::cout << sharing::to_json(run).dump(2) << "\n";
    return;
  }
  std::cout << "Shared network " << spec.name << " on " << spec.topology.name << " at " << name_of(spec.fidelity)
            << " fidelity: " << spec.jobs.size() << " jobs; window " << fmt(run.window, 4) << " s, run until "
            << fmt(run.makespan, 4) << " s, steps averaged until " << fmt(run.measured_until, 4) << " s\n\n";
  Table jobs{"Jobs",
             {"job", "GPUs", "first-last GPU", "buildings", "alone (s)", "shared (s)", "slowdown", "steps",
              "exposed comm alone (s)", "together (s)"},
             {}};
  for (const auto& j : run.jobs) {
    std::string buildings;
    for (const auto& b : j.buildings)
      buildings += (buildings.empty() ? "" : ",") + b;
    // The communication the compute stream waited for, all dimensions (mean over stages and measured steps).
    auto exposed = [](const std::vector<double>& parts) {
      double total = 0;
      for (std::size_t k = 0; k < netsim::kParts.size(); ++k)
        if (netsim::kParts[k] >= netsim::Part::exposed_tp && netsim::kParts[k] <= netsim::Part::exposed_ep)
          total += parts[k];
      return fmt(total, 4);
    };
    jobs.rows.push_back({j.name, std::to_string(j.gpus), std::to_string(j.first_gpu) + "-" + std::to_string(j.last_gpu),
                         buildings, fmt(j.alone_step, 6), fmt(j.shared_step, 6), fixed(j.slowdown, 3) + "x",
                         std::to_string(j.measured_to - j.measured_from) + " of " + std::to_string(j.step_ends.size()),
                         exposed(j.alone_parts), exposed(j.shared_parts)});
  }
  print_table(std::cout, jobs);
  for (const auto& j : run.jobs) {
    if (!j.measured_under_load)
      std::cout << "note: no step of " << j.name
                << " ended while every job ran; its first step (partly alone) is shown: lengthen the window\n";
    if (j.all_to_all_isolated)
      std::cout << "note: the all-to-alls of " << j.name
                << " were timed in isolation (delays that share no link with the other jobs)\n";
  }
  if (!run.boundaries.empty()) {
    std::vector<std::string> headers{"boundary link", "tier"};
    for (const auto& j : run.jobs)
      headers.push_back(j.name + " (GB/step)");
    Table b{"Bytes across boundaries, per job", headers, {}};
    for (const auto& l : run.boundaries) {
      std::vector<std::string> row{l.link, l.tier};
      for (double x : l.bytes)
        row.push_back(gb(x));
      b.rows.push_back(std::move(row));
    }
    std::cout << "\n";
    print_table(std::cout, b);
  }
}

} // namespace

void add_share_command(CLI::App& app)
{
  auto o  = std::make_shared<ShareOptions>();
  auto* c = app.add_subcommand("share", "Several jobs on one network: each job's step alone and with the others, "
                                        "slowdown and bytes per boundary");
  c->add_option("file", o->file, "Shared-network file (examples/shared/)")->required();
  c->add_option("--fidelity", o->fidelity, "Override the file's fidelity: analytical, flow, packet");
  c->add_option("--place", o->place,
                "Search where to put this job around the others: every even split over a set of buildings, ranked "
                "by the GPU-weighted mean slowdown of all jobs");
  c->add_flag("--json", o->json, "Print one JSON document");
  c->callback([o] { run(*o); });
}

} // namespace spansim::cli
