// `spansim campaign run|merge|slurm|report|plot`: sweeps of scenarios, run on all cores or as a Slurm job array,
// gathered into one HDF5 file and a CSV, drawn as a page and plotted.
#include "cli/commands.hpp"
#include "cli/output.hpp"
#include "cli/slurm_options.hpp"
#include "common/error.hpp"
#include "common/paths.hpp"
#include "common/process.hpp"
#include "common/units.hpp"
#include "experiments/runner.hpp"
#include "experiments/slurm.hpp"
#include "report/html.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sys/wait.h>
#include <tuple>
#include <unistd.h>

#ifndef SPANSIM_SOURCE_DIR
#error "SPANSIM_SOURCE_DIR must point at the source tree (experiments/plot_campaign.py lives there)"
#endif

namespace spansim::cli {

namespace {

namespace ex = experiments;
using nlohmann::json;

struct CampaignRunOptions {
  std::string campaign;
  std::string out;
  int jobs = 0;
  std::string shard;
  double flush_every = 2;
  bool json          = false;
  bool report        = false; ///< also the page, beside the HDF5 file (RESULTS with .html)
};

struct CampaignSlurmOptions {
  std::string campaign;
  ex::SlurmOptions sbatch;
  bool dry_run = false;
  bool json    = false;
};

struct CampaignReportOptions {
  std::string results;
  std::string out; ///< the page (default: RESULTS with .html)
  bool json = false;
};

struct CampaignPlotOptions {
  std::string results;
  std::string x;
  std::string series;
  std::string out;
  std::string python = "/usr/bin/python3"; // Debian's, where python3-matplotlib and python3-h5py install
  bool json          = false;
};

std::string clock_text(double seconds)
{
  const long s = std::lround(seconds);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

void draw_progress(const ex::Progress& p)
{
  std::string tail =
      std::to_string(p.running) + " running, " + std::to_string(p.failed) + " failed, " + clock_text(p.elapsed_s);
  // Points found from an earlier run took no time in this one, so the rate counts only those run now.
  const int ran_now = p.done - p.found;
  if (ran_now > 0 && p.done < p.total)
    tail += ", ETA " + clock_text(p.elapsed_s / ran_now * (p.total - p.done));
  draw_progress_line("campaign", p.done, p.total, tail);
}

// A --json document about campaign c: provenance and the campaign, then `fields`.
json campaign_document(const ex::Campaign& c, json fields)
{
  fields["spansim"]  = provenance();
  fields["campaign"] = {{"name", c.name}, {"file", c.file}};
  return fields;
}

json report_json(const ex::Campaign& c, const ex::RunReport& r)
{
  return campaign_document(c, {{"points", r.points},
                               {"shard_points", r.shard_points},
                               {"found", r.found},
                               {"ran", r.ran},
                               {"failed", r.failed},
                               {"missing", r.missing},
                               {"missing_points", r.missing_points},
                               {"errors", r.errors},
                               {"hdf5", r.hdf5},
                               {"csv", r.csv},
                               {"points_directory", r.points_directory},
                               {"elapsed_s", r.elapsed_s}});
}

// The /points table of a result file as campaign_page draws it: every column but the points' scenario and
// configuration texts (a JSON document each, which the page does not draw).
json result_table(const std::string& results)
{
  const auto t = ex::read_results_hdf5(results);
  json numbers = json::object(), texts = json::object();
  for (const auto& [name, column] : t.numbers) {
    auto& out = numbers[name] = json::array();
    for (double v : column)
      out.push_back(std::isfinite(v) ? json(v) : json(nullptr));
  }
  for (const auto& [name, column] : t.texts)
    if (name != "scenario" && name != "configuration")
      texts[name] = column;
  return {{"file", results}, {"attributes", t.attributes}, {"units", t.units},
          {"rows", t.rows},  {"numbers", numbers},         {"texts", texts}};
}

// Writes the page of a result file; returns its path.
std::string write_campaign_page(const std::string& results, std::string page)
{
  if (page.empty())
    page = std::filesystem::path(results).replace_extension(".html").string();
  write_file_replacing(page, report::campaign_page(result_table(results)));
  return page;
}

void print_report(const ex::Campaign& c, const ex::RunReport& r, bool json_output, bool merge_only,
                  const std::string& page)
{
  if (json_output) {
    auto j = report_json(c, r);
    if (!page.empty())
      j["report"] = page;
    std::cout << j.dump(2) << "\n";
  } else if (merge_only) {
    std::cout << "Campaign " << c.name << ": merged " << r.found << " of " << r.points << " points (" << r.failed
              << " failed, " << r.missing << " missing)\n";
    for (const auto& e : r.errors)
      std::cout << "  " << escape_controls(e) << "\n";
    std::cout << "Results: " << escape_controls(r.hdf5) << " and " << escape_controls(r.csv) << "\n";
  } else {
    std::cout << "Campaign " << c.name << ": " << r.points << " points";
    if (r.shard_points != r.points)
      std::cout << " (" << r.shard_points << " in this shard)";
    std::cout << "; " << r.found << " already recorded, " << r.ran << " run now in " << units::format_time(r.elapsed_s)
              << ", " << r.failed << " failed, " << r.missing << " missing\n";
    for (const auto& e : r.errors)
      std::cout << "  " << escape_controls(e) << "\n";
    std::cout << "Results: " << escape_controls(r.hdf5) << (r.csv.empty() ? "" : " and " + escape_controls(r.csv))
              << "\n";
  }
  if (!json_output && !page.empty())
    std::cout << "Page: " << escape_controls(page) << "\n";
}

ex::Campaign load(const std::string& path)
{
  if (path.empty())
    throw UsageError("a campaign file is required");
  return ex::load_campaign(path);
}

void run(const CampaignRunOptions& o, bool merge_only)
{
  auto campaign = load(o.campaign);
  ex::RunOptions options;
  options.output        = o.out;
  options.jobs          = o.jobs;
  options.flush_every_s = o.flush_every;
  options.merge_only    = merge_only;
  if (!o.shard.empty())
    std::tie(options.shard, options.shards) = parse_role_pair("--shard", o.shard, "K/N");
  if (stderr_is_terminal() && !merge_only)
    options.on_progress = draw_progress;
  auto report = ex::run_campaign(campaign, options);
  // The page of the points recorded so far, also when some are missing (the error below says which).
  const std::string page = o.report && !report.hdf5.empty() ? write_campaign_page(report.hdf5, "") : "";
  print_report(campaign, report, o.json, merge_only, page);
  if (report.missing > 0 && (merge_only || options.shards == 1)) {
    // Named by index, so that one can see which shard (index % N) or which worker did not finish.
    const std::size_t shown = 20;
    std::string which;
    for (std::size_t k = 0; k < report.missing_points.size() && k < shown; ++k)
      which += (k ? ", " : "") + std::to_string(report.missing_points[k]);
    if (report.missing_points.size() > shown)
      which += ", ...";
    throw SimulationError(std::to_string(report.missing) + " of " + std::to_string(report.shard_points) +
                          " points have no result (points " + which + "; " +
                          (merge_only ? "a shard did not finish" : "a worker crashed") +
                          "); run the campaign again to complete it");
  }
}

void slurm(const CampaignSlurmOptions& o)
{
  auto campaign            = load(o.campaign);
  ex::SlurmOptions options = o.sbatch;
  options.submit           = !o.dry_run;
  auto s                   = ex::submit_slurm(campaign, options);
  if (o.json) {
    std::cout << campaign_document(campaign, {{"tasks", s.tasks},
                                              {"array_script", s.array_script},
                                              {"merge_script", s.merge_script},
                                              {"array_job", s.array_job},
                                              {"merge_job", s.merge_job},
                                              {"merge_exit", s.merge_exit},
                                              {"hdf5", s.hdf5}})
                     .dump(2)
              << "\n";
  } else {
    std::cout << "Campaign " << campaign.name << ": " << s.tasks << " array tasks\n  "
              << escape_controls(s.array_script) << "\n  " << escape_controls(s.merge_script) << "\n";
    if (!s.array_job.empty())
      std::cout << "Submitted array job " << s.array_job << " and merge job " << s.merge_job << " (after the array)\n";
    if (options.wait)
      std::cout << "Merge job ended with exit status " << s.merge_exit << "\n";
    std::cout << "Results: " << escape_controls(s.hdf5) << "\n";
  }
  if (options.wait && s.merge_exit != 0)
    throw SimulationError("the merge job " + s.merge_job + " failed (exit " + std::to_string(s.merge_exit) + "); see " +
                          std::filesystem::path(s.merge_script).parent_path().string() + "/merge.log");
}

void report_page(const CampaignReportOptions& o)
{
  if (!std::filesystem::is_regular_file(o.results))
    throw UsageError("no campaign result file \"" + o.results + "\" (`spansim campaign run` writes one)");
  const std::string page = write_campaign_page(o.results, o.out);
  if (o.json)
    std::cout << json{{"spansim", provenance()}, {"results", o.results}, {"report", page}}.dump(2) << "\n";
  else
    std::cout << "Wrote " << escape_controls(page) << "\n";
}

void plot(const CampaignPlotOptions& o)
{
  // Checked here so that a wrong path is a usage error with one clear line, not a Python traceback.
  if (!std::filesystem::is_regular_file(o.results))
    throw UsageError("no campaign result file \"" + o.results + "\"");
  try {
    ex::read_results_hdf5(o.results);
  } catch (const Error& e) {
    throw UsageError("\"" + o.results + "\" is not a spansim campaign result (" + e.what() + ")");
  }
  const std::string script = std::string(SPANSIM_SOURCE_DIR) + "/experiments/plot_campaign.py";
  std::vector<std::string> argv{o.python, script, o.results, "--provenance", provenance().dump()};
  if (!o.x.empty())
    argv.insert(argv.end(), {"--x", o.x});
  if (!o.series.empty())
    argv.insert(argv.end(), {"--series", o.series});
  if (!o.out.empty())
    argv.insert(argv.end(), {"--out", o.out});
  if (o.json)
    argv.push_back("--json");
  run_plot_script(argv);
}

} // namespace

void add_campaign_command(CLI::App& app)
{
  auto* c = app.add_subcommand("campaign", "Sweeps of scenarios: run them on all cores or on Slurm, gather the "
                                           "results into HDF5 and CSV, plot them");
  c->require_subcommand(1);

  auto ro = std::make_shared<CampaignRunOptions>();
  auto* r = c->add_subcommand("run", "Run a campaign's points in worker processes (resumes an interrupted run)");
  r->add_option("campaign", ro->campaign, "Campaign file")->required();
  r->add_option("--out", ro->out, "HDF5 result file (default: the campaign's \"output\")");
  r->add_option("--jobs,-j", ro->jobs, "Worker processes (default: one per core)")->check(integer_in(0, 256));
  r->add_option("--shard", ro->shard, "Run only shard K of N (K/N, from 0): points with index % N == K");
  r->add_option("--flush-every", ro->flush_every, "Rewrite the HDF5 file at most every S seconds while running")
      ->check(finite_number(0));
  r->add_flag("--json", ro->json, "Print one JSON document (what the run did)");
  r->add_flag("--report", ro->report, "Also write the results as a page (HTML) beside the HDF5 file");
  r->callback([ro] { run(*ro, false); });

  auto mo = std::make_shared<CampaignRunOptions>();
  auto* m = c->add_subcommand("merge", "Gather every recorded point (all shards) into the HDF5 file and the CSV");
  m->add_option("campaign", mo->campaign, "Campaign file")->required();
  m->add_option("--out", mo->out, "HDF5 result file (default: the campaign's \"output\")");
  m->add_flag("--json", mo->json, "Print one JSON document");
  m->callback([mo] { run(*mo, true); });

  auto so = std::make_shared<CampaignSlurmOptions>();
  auto* s = c->add_subcommand("slurm", "Submit a campaign as a Slurm job array plus a dependent merge job");
  s->add_option("campaign", so->campaign, "Campaign file")->required();
  s->add_option("--out", so->sbatch.output, "HDF5 result file, on a file system the nodes share");
  s->add_option("--tasks", so->sbatch.tasks, "Array tasks (default: one per 8 points, at most 64)")
      ->check(integer_in(1, 100000));
  add_sbatch_flags(s, so->sbatch);
  s->add_flag("--dry-run", so->dry_run, "Write the batch scripts, submit nothing");
  s->add_flag("--wait", so->sbatch.wait, "Wait for the merge job to end");
  s->add_flag("--json", so->json, "Print one JSON document");
  s->callback([so] { slurm(*so); });

  auto qo = std::make_shared<CampaignReportOptions>();
  auto* q = c->add_subcommand("report", "Draw a campaign result as one page (HTML): step time against each axis, "
                                        "each point's breakdown");
  q->add_option("results", qo->results, "HDF5 result file")->required();
  q->add_option("--out", qo->out, "The page (default: the results' path with .html)");
  q->add_flag("--json", qo->json, "Print one JSON document (the page written)");
  q->callback([qo] { report_page(*qo); });

  auto po = std::make_shared<CampaignPlotOptions>();
  auto* p = c->add_subcommand("plot", "Plot a campaign result: step time against an axis, time breakdown (PNG, SVG)");
  p->add_option("results", po->results, "HDF5 result file")->required();
  p->add_option("--x", po->x, "Axis on the horizontal axis (default: the first numeric axis)");
  p->add_option("--series", po->series, "Axis giving one series per value (default: the first other axis)");
  p->add_option("--out", po->out, "Directory for the figures (default: next to the results)");
  p->add_option("--python", po->python, "Python interpreter with matplotlib and h5py");
  p->add_flag("--json", po->json, "Print one JSON document (the figures written)");
  p->callback([po] { plot(*po); });
}

} // namespace spansim::cli
