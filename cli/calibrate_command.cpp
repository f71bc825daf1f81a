// `spansim calibrate` and `spansim validate`: the compute model fitted on published runs, and every run compared
// with its simulation.
#include "calibration/calibration.hpp"
#include "calibration/network.hpp"
#include "cli/commands.hpp"
#include "cli/output.hpp"
#include "cli/slurm_options.hpp"
#include "common/error.hpp"
#include "common/paths.hpp"
#include "common/units.hpp"
#include "experiments/slurm_map.hpp"
#include "report/html.hpp"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

namespace spansim::cli {

namespace {

struct CalibrateOptions {
  std::string runs;
  std::vector<std::string> gpus;
  std::string name;
  std::string out;
  std::string fidelity = "analytical";
  int workers          = 0;
  bool json            = false;
  std::string moe_from;
  bool network = false; ///< fit the network section's fabric parameters instead
  std::string network_runs;
};

struct ValidateOptions {
  std::string runs;
  std::string fidelity = "analytical";
  int workers          = 0;
  bool no_loo          = false;
  bool breakdown       = false;
  bool json            = false;
  std::string report; ///< the page's path (report::validate_page)
  std::vector<std::string> only;
  std::string network_runs; ///< the network section's dataset (default validation/network-runs.json)
  bool no_network = false;
  std::string out;         ///< with --slurm: records, scripts and logs
  SlurmFlags slurm;        ///< the simulations as Slurm job arrays (experiments/slurm_map.hpp)
  int slurm_task = 0;      ///< a batch script's role: an array task of this map (1-based)
  std::string slurm_merge; ///< a batch script's role: the merge job of map "P/N"
};

// The command again, for the batch scripts: the same inputs, so that its maps are the same maps.
std::string validate_command(const ValidateOptions& o, const std::string& out)
{
  using experiments::shell_quote;
  std::string c = shell_quote(experiments::spansim_binary(o.slurm.options())) + " validate";
  if (!o.runs.empty())
    c += " " + shell_quote(std::filesystem::absolute(o.runs).string());
  c += " --fidelity " + shell_quote(o.fidelity) + " --out " + shell_quote(out) + " --cpus-per-task " +
       std::to_string(o.slurm.sbatch.cpus_per_task);
  if (o.no_loo)
    c += " --no-loo";
  for (const auto& s : o.only)
    c += " --only " + shell_quote(s);
  return c;
}

// What the records depend on: the dataset's bytes, the options that change the maps, and this build.
std::string validate_fingerprint(const ValidateOptions& o, const std::string& dataset)
{
  std::ifstream f(dataset, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  std::string text =
      s.str() + "\n" + o.fidelity + (o.no_loo ? " no-loo" : " loo") + "\n" + provenance()["git_hash"].dump();
  for (const auto& only : o.only)
    text += "\nonly " + only;
  std::uint64_t h = 14695981039346656037ull;
  for (char ch : text) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ull;
  }
  return std::to_string(h);
}

std::string figure(calibration::Metric m, double v)
{
  switch (m) {
  case calibration::Metric::step_time:
    return units::format_time(v);
  case calibration::Metric::tokens_per_second_per_gpu:
    return fixed(v, 0) + " tok/s";
  case calibration::Metric::tflops_per_gpu:
    return fixed(v, 1) + " TFLOP/s";
  case calibration::Metric::mfu:
    return fixed(100 * v, 1) + "% MFU";
  case calibration::Metric::compute_utilization:
    return fixed(100 * v, 1) + "% CU";
  }
  return fmt(v);
}

// Writes a fitted document to --out, and with --json prints it (true: printed, nothing more to say).
bool write_and_print(const CalibrateOptions& o, const nlohmann::json& doc)
{
  if (!o.out.empty())
    write_file_replacing(o.out, doc.dump(2) + "\n");
  if (!o.json)
    return false;
  nlohmann::json j = doc;
  j["written"]     = o.out;
  std::cout << j.dump(2) << "\n";
  return true;
}

std::string network_dataset_path(const std::string& given)
{
  return given.empty() ? calibration::default_network_dataset_path() : given;
}

// `calibrate --network`: each fabric's NCCL efficiency and net latency on the network section's fit rows.
void calibrate_network(const CalibrateOptions& o)
{
  if (!o.gpus.empty() || !o.moe_from.empty() || !o.name.empty() || !o.runs.empty())
    throw UsageError("--network fits the fabrics on the network dataset (--network-runs); --gpu, --name, --moe-from "
                     "and a runs file are the compute fit's");
  const auto dataset = calibration::load_network_dataset(network_dataset_path(o.network_runs));
  const auto fits    = calibration::fit_network(dataset, parse_enum<netsim::Fidelity>(o.fidelity, "fidelity"),
                                                progress_bar(!o.json && stderr_is_terminal()));
  if (fits.empty())
    throw UsageError(dataset.file + " has no fit rows: nothing to fit");
  if (write_and_print(o, calibration::fabrics_document(fits, dataset.file)))
    return;
  Table t{"Fitted on " + calibration::recorded_path(dataset.file),
          {"fabric or NVLink", "fit rows", "NCCL efficiency", "net latency", "step latency", "NVLS warp rate",
           "send/recv channel", "MAPE before", "MAPE after"},
          {}};
  for (const auto& f : fits) {
    const bool step = !f.fabric && !f.nvls && !f.p2p;
    t.rows.push_back({std::string(f.fabric ? name_of(*f.fabric) : name_of(*f.nvlink)), std::to_string(f.rows.size()),
                      f.fabric ? fixed(f.value.nccl_efficiency, 4) : "-",
                      f.fabric ? units::format_time(f.value.net_latency) : "-",
                      step ? units::format_time(f.step_latency) : "-",
                      !f.nvls                ? "-"
                      : f.nvls_warp_rate > 0 ? units::format_bandwidth(f.nvls_warp_rate)
                                             : "none",
                      !f.p2p                   ? "-"
                      : f.p2p_channel_rate > 0 ? units::format_bandwidth(f.p2p_channel_rate)
                                               : "none",
                      percent(f.mape_before), percent(f.mape_after)});
  }
  print_table(std::cout, t);
  if (!o.out.empty())
    std::cout << "written to " << o.out << "\n";
}

void calibrate(const CalibrateOptions& o)
{
  if (o.network)
    return calibrate_network(o);
  if (o.gpus.empty())
    throw UsageError("name the GPU (--gpu) whose fit rows to use, or --network to fit the fabrics");
  const auto dataset = calibration::load_dataset(o.runs.empty() ? calibration::default_dataset_path() : o.runs);
  calibration::FitOptions fo;
  fo.gpus = o.gpus;
  fo.name = o.name;
  if (!o.name.empty() && !is_safe_name(o.name))
    throw UsageError("--name: " + unsafe_name_reason(o.name));
  fo.fidelity        = parse_enum<netsim::Fidelity>(o.fidelity, "fidelity");
  fo.workers         = o.workers;
  fo.moe_from        = o.moe_from;
  fo.progress        = progress_bar(!o.json && stderr_is_terminal());
  const auto profile = calibration::fit_profile(dataset, fo);
  if (write_and_print(o, profile.to_json()))
    return;
  std::cout << "Calibration profile " << profile.calibration.name << " (" << profile.residuals.size() << " fit rows, "
            << o.fidelity << " fidelity)\n";
  std::cout << "  clock_fraction " << fixed(profile.calibration.clock_fraction, 4) << " (bounds "
            << fixed(profile.bounds.clock_min, 2) << " to " << fixed(profile.bounds.clock_max, 2) << ")\n";
  std::cout << "  kernel_gap     " << units::format_time(profile.calibration.kernel_gap) << " (bounds "
            << units::format_time(profile.bounds.gap_min) << " to " << units::format_time(profile.bounds.gap_max)
            << ")\n";
  std::cout << "  alltoall_efficiency " << fixed(profile.calibration.alltoall_efficiency, 4) << " (bounds "
            << fixed(profile.bounds.alltoall_min, 2) << " to " << fixed(profile.bounds.alltoall_max, 2)
            << "; 1 without MoE fit rows or --moe-from)\n";
  std::cout << "  moe_host       " << units::format_time(profile.calibration.moe_host) << " per MoE layer (bounds "
            << units::format_time(profile.bounds.moe_host_min) << " to "
            << units::format_time(profile.bounds.moe_host_max) << "; 0 without MoE fit rows or --moe-from)\n";
  std::cout << "  moe_host_overlap " << units::format_time(profile.calibration.moe_host_overlap)
            << " more per MoE layer under ep_overlap (bounds " << units::format_time(profile.bounds.moe_overlap_min)
            << " to " << units::format_time(profile.bounds.moe_overlap_max)
            << "; 0 without MoE fit rows that run it)\n\n";
  Table t{"", {"run", "published step", "simulated step", "throughput error"}, {}};
  for (const auto& r : profile.residuals)
    t.rows.push_back({r.name, units::format_time(r.published_step), units::format_time(r.simulated_step),
                      percent(r.published_step / r.simulated_step - 1, true)});
  print_table(std::cout, t);
  if (!o.out.empty())
    std::cout << "\nWritten: " << o.out << "\n";
}

// "4.7% (31)", or "- (0)" when no row has the role: a mean over no rows is no figure.
std::string mape(double value, std::size_t rows)
{
  return (rows > 0 ? fixed(100 * value, 1) + "%" : std::string("-")) + " (" + std::to_string(rows) + ")";
}

void print_step_rows(const ValidateOptions& o, const calibration::ValidationReport& report, bool leave_one_out);

std::string size_text(double bytes)
{
  return units::format_size(bytes);
}

nlohmann::json network_json(const calibration::NetworkDataset& d, const calibration::NetworkReport& r)
{
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.rows) {
    const auto& run  = *row.run;
    nlohmann::json j = {
        {"run", run.name}, {"role", name_of(run.role)}, {"cluster", run.cluster}, {"source", run.source}};
    if (run.role == calibration::Role::excluded) {
      j["excluded_because"] = run.excluded_because;
    } else {
      j["op"]              = name_of(run.op);
      j["ranks"]           = run.gpus.size();
      j["bytes"]           = run.bytes;
      j["nccl"]            = run.nccl.to_json();
      j["algorithm"]       = name_of(row.simulated.call.algorithm);
      j["protocol"]        = name_of(row.simulated.call.nccl.protocol);
      j["channels"]        = row.simulated.call.nccl.channels;
      j["published_busbw"] = run.published_busbw;
      j["simulated_busbw"] = row.simulated.busbw;
      j["busbw_error"]     = row.error;
      if (!run.note.empty())
        j["note"] = run.note;
    }
    rows.push_back(j);
  }
  auto mape = [](const calibration::NetworkReport::Mape& m) {
    return nlohmann::json{{"all", m.all},
                          {"rows", m.rows},
                          {"128MiB_and_above", m.large},
                          {"large_rows", m.large_rows},
                          {"16MiB_and_below", m.small},
                          {"small_rows", m.small_rows},
                          {"worst", m.worst}};
  };
  return {{"dataset", calibration::recorded_path(d.file)},
          {"fabrics", topology::fabrics_file()},
          {"rows", rows},
          {"mape", {{"fit", mape(r.fit)}, {"check", mape(r.check)}}}};
}

void print_network(const calibration::NetworkDataset& d, const calibration::NetworkReport& r, bool after_steps)
{
  if (after_steps)
    std::cout << "\n";
  Table t{"Network: nccl-tests as published against spansim collective on the same cluster (" +
              calibration::recorded_path(d.file) + ")",
          {"run", "role", "op", "GPUs", "size", "NCCL", "published", "simulated", "error"},
          {}};
  std::vector<const calibration::NetworkRun*> excluded;
  for (const auto& row : r.rows) {
    const auto& run = *row.run;
    if (run.role == calibration::Role::excluded) {
      excluded.push_back(&run);
      continue;
    }
    t.rows.push_back({run.name, std::string(name_of(run.role)), std::string(name_of(run.op)),
                      std::to_string(run.gpus.size()), size_text(run.bytes),
                      std::string(name_of(row.simulated.call.algorithm)) + "/" +
                          std::string(name_of(row.simulated.call.nccl.protocol)),
                      fixed(run.published_busbw / 1e9, 1), fixed(row.simulated.busbw / 1e9, 1),
                      percent(row.error, true)});
  }
  print_table(std::cout, t);
  std::cout << "\nbus bandwidth in GB/s as nccl-tests reports it; NCCL: the algorithm and protocol NCCL's tuner picks "
               "(spansim's simulation of them); error: simulated over published, minus 1\n";
  auto line = [](const char* role, const calibration::NetworkReport::Mape& m) {
    std::cout << "  " << role << " rows: " << mape(m.all, m.rows) << "; 128 MiB and above "
              << mape(m.large, m.large_rows) << "; 16 MiB and below " << mape(m.small, m.small_rows) << "; worst "
              << (m.rows > 0 ? fixed(100 * m.worst, 1) + "%" : std::string("-")) << "\n";
  };
  std::cout << "MAPE of bus bandwidth:\n";
  line("fit", r.fit);
  line("check", r.check);
  if (!excluded.empty()) {
    std::cout << "\nNot simulated (" << excluded.size() << "):\n";
    for (const auto* x : excluded)
      std::cout << "  " << x->name << ": " << x->excluded_because << "\n";
  }
}

void validate(const ValidateOptions& o)
{
  const bool role = o.slurm_task > 0 || !o.slurm_merge.empty(); // a batch script's: it passes what its task needs
  if (!role)
    o.slurm.check_used();
  // --out holds Slurm's records: a local run writes nothing there, so a folder given for it would stay empty.
  if (!o.out.empty() && !o.slurm.any() && !role)
    throw UsageError("--out \"" + o.out +
                     "\" is the folder of --slurm's records, scripts and logs; it needs --slurm or "
                     "--slurm-dry-run (a local validate writes no files: use --json to keep its results)");
  auto dataset = calibration::load_dataset(o.runs.empty() ? calibration::default_dataset_path() : o.runs);
  if (!o.only.empty())
    std::erase_if(dataset.runs, [&](const calibration::PublishedRun& r) {
      return std::none_of(o.only.begin(), o.only.end(),
                          [&](const std::string& s) { return r.name.find(s) != std::string::npos; });
    });
  // The network section (nccl-tests as published): simulated here, whatever runs the step rows.
  std::optional<calibration::NetworkDataset> network;
  if (!o.no_network && !role) {
    network = calibration::load_network_dataset(network_dataset_path(o.network_runs));
    if (!o.only.empty())
      std::erase_if(network->runs, [&](const calibration::NetworkRun& r) {
        return std::none_of(o.only.begin(), o.only.end(),
                            [&](const std::string& s) { return r.name.find(s) != std::string::npos; });
      });
  }
  if (!o.only.empty() && dataset.runs.empty() && (!network || network->runs.empty())) {
    std::string list;
    for (const auto& s : o.only)
      list += (list.empty() ? "\"" : ", \"") + s + "\"";
    throw UsageError("--only " + list + " matches no run of " + dataset.file +
                     (network ? " or " + network->file : std::string()) +
                     " (a run matches when its name contains the text)");
  }
  // An empty dataset would print a MAPE of nothing.
  if (dataset.runs.empty() && (!network || network->runs.empty()))
    throw UsageError(dataset.file + ": no runs to simulate (\"runs\" is empty" +
                     (network ? std::string(", and so is ") + network->file : std::string(", and --no-network")) + ")");
  const bool steps = !dataset.runs.empty();
  calibration::ValidateOptions vo;
  vo.fidelity           = parse_enum<netsim::Fidelity>(o.fidelity, "fidelity");
  vo.leave_one_out      = !o.no_loo;
  vo.workers            = o.workers;
  vo.progress           = progress_bar(!o.json && stderr_is_terminal());
  const std::string out = o.out.empty() ? std::string("out/validate") : o.out;
  if (!o.slurm_merge.empty()) {
    const auto [map, items] = parse_role_pair("--slurm-merge", o.slurm_merge, "P/N");
    const auto j            = experiments::merge_slurm_map(out, static_cast<int>(map), static_cast<std::size_t>(items));
    std::cout << "merged " << j["recorded"] << " of " << j["items"] << " items of map " << j["map"] << "\n";
    return;
  }
  std::optional<experiments::SlurmMap> slurm;
  if (o.slurm.any() || o.slurm_task > 0) {
    experiments::SlurmMapOptions m;
    m.directory    = out;
    m.command      = validate_command(o, std::filesystem::absolute(out).string());
    m.fingerprint  = validate_fingerprint(o, dataset.file);
    m.slurm        = o.slurm.options();
    m.task_seconds = o.slurm.task_seconds();
    m.max_tasks    = o.slurm.max_tasks;
    m.progress     = vo.progress;
    if (o.slurm_task > 0) {
      m.task_map                = o.slurm_task;
      std::tie(m.task, m.tasks) = o.slurm.share();
      m.slurm.cpus_per_task     = o.slurm.sbatch.cpus_per_task;
    }
    slurm.emplace(m);
    vo.map = std::ref(*slurm);
  }
  calibration::ValidationReport report;
  try {
    if (steps)
      report = calibration::validate(dataset, vo);
  } catch (const experiments::SlurmMapTaskDone&) {
    std::cout << "task " << o.slurm.task << " of map " << o.slurm_task << " recorded\n";
    return;
  } catch (const experiments::SlurmMapDryRun& dry) {
    std::cout << (o.json ? nlohmann::json{{"spansim", provenance()},
                                          {"dry_run", true},
                                          {"tasks", dry.tasks},
                                          {"per_task", dry.per_task},
                                          {"array_script", dry.scripts.array_script},
                                          {"merge_script", dry.scripts.merge_script}}
                               .dump(2)
                         : "Dry run: the first map's array (" + std::to_string(dry.tasks) +
                               " tasks) written, not "
                               "submitted:\n  " +
                               dry.scripts.array_script + "\n  " + dry.scripts.merge_script)
              << "\n";
    return;
  }
  std::optional<calibration::NetworkReport> net;
  if (network && !network->runs.empty())
    net = calibration::validate_network(*network, vo.fidelity);
  if (o.json || !o.report.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : report.rows) {
      nlohmann::json j = {{"run", r.name},
                          {"role", name_of(r.role)},
                          {"metric", name_of(r.metric)},
                          {"published", r.published},
                          {"flop_convention", r.flop_convention}};
      if (r.role == calibration::Role::excluded) {
        j["excluded_because"] = r.excluded_because;
      } else {
        j["gpu"]              = r.gpu;
        j["profile"]          = r.profile;
        j["section"]          = r.section;
        j["simulated"]        = r.simulated;
        j["throughput_error"] = r.error;
        if (r.loo_error)
          j["leave_one_out_throughput_error"] = *r.loo_error;
        nlohmann::json parts;
        for (std::size_t k = 0; k < netsim::kParts.size(); ++k)
          parts[std::string(name_of(netsim::kParts[k]))] = r.parts[k];
        j["breakdown_s"] = parts;
        // What the row ran, as its job states it (issue 62: each row names its kernels).
        for (const auto& run : dataset.runs)
          if (run.name == r.name && run.job) {
            const auto& job = *run.job;
            j["precision"]  = workload::precision_spec(job);
            j["kernels"]    = workload::kernels_spec(job);
            if (job.model.moe.experts > 0)
              j["dispatcher"] = name_of(job.dispatch.dispatcher);
            break;
          }
      }
      rows.push_back(j);
    }
    nlohmann::json profiles = nlohmann::json::object();
    for (const auto& run : dataset.runs)
      if (run.job && run.job->calibration.name != "none") {
        const auto& c    = run.job->calibration;
        profiles[c.name] = {{"gpus", c.gpus},
                            {"clock_fraction", c.clock_fraction},
                            {"kernel_gap_s", c.kernel_gap},
                            {"alltoall_efficiency", c.alltoall_efficiency},
                            {"moe_host_s", c.moe_host},
                            {"moe_host_overlap_s", c.moe_host_overlap}};
      }
    nlohmann::json j = {{"spansim", provenance()},
                        {"dataset", dataset.file},
                        {"fidelity", o.fidelity},
                        {"profiles", profiles},
                        {"rows", rows},
                        {"mape", {{"fit", report.mape_fit}, {"check", report.mape_check}}}};
    if (slurm) {
      j["slurm"] = nlohmann::json::array();
      for (const auto& p : slurm->phases())
        j["slurm"].push_back(p.to_json());
    }
    if (vo.leave_one_out)
      j["mape"]["leave_one_out"] = report.mape_loo;
    if (net)
      j["network"] = network_json(*network, *net);
    for (const auto& [key, part] : {std::pair{"dense", &report.dense}, std::pair{"moe", &report.moe},
                                    std::pair{"cross_site", &report.cross_site}}) {
      j["mape"][key] = {
          {"fit", part->fit}, {"fit_rows", part->fit_rows}, {"check", part->check}, {"check_rows", part->check_rows}};
      if (vo.leave_one_out)
        j["mape"][key]["leave_one_out"] = part->loo;
    }
    if (!o.report.empty()) {
      write_file_replacing(o.report, report::validate_page(j));
      j["report"] = o.report;
    }
    if (o.json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
  }
  if (steps)
    print_step_rows(o, report, vo.leave_one_out);
  if (net)
    print_network(*network, *net, steps);
  if (!o.report.empty())
    std::cout << "\nWrote " << escape_controls(o.report) << "\n";
}

void print_step_rows(const ValidateOptions& o, const calibration::ValidationReport& report, bool leave_one_out)
{
  Table t{"", {"run", "gpu", "role", "published", "simulated", "error", "left out", "FLOPs"}, {}};
  if (o.breakdown)
    for (const char* part : {"compute", "exposed", "bubble"})
      t.headers.push_back(part);
  std::vector<const calibration::ValidationRow*> excluded;
  for (const auto& r : report.rows) {
    if (r.role == calibration::Role::excluded) {
      excluded.push_back(&r);
      continue;
    }
    t.rows.push_back({r.name, r.gpu, std::string(name_of(r.role)), figure(r.metric, r.published),
                      figure(r.metric, r.simulated), percent(r.error, true),
                      r.loo_error ? percent(*r.loo_error, true) : "-",
                      r.flop_convention == "none" ? "-" : r.flop_convention});
    if (o.breakdown) {
      // Shares of the stages' mean step: compute, communication the compute waited for, pipeline bubble.
      double total = 0, exposed = 0;
      for (std::size_t k = 0; k < netsim::kParts.size(); ++k) {
        total += r.parts[k];
        if (netsim::kParts[k] != netsim::Part::compute && netsim::kParts[k] != netsim::Part::bubble &&
            netsim::kParts[k] != netsim::Part::idle)
          exposed += r.parts[k];
      }
      auto share = [&](double v) { return total > 0 ? fixed(100 * v / total, 0) + "%" : std::string("-"); };
      t.rows.back().push_back(share(r.parts[0]));
      t.rows.back().push_back(share(exposed));
      t.rows.back().push_back(share(r.parts[static_cast<std::size_t>(netsim::Part::bubble)]));
    }
  }
  print_table(std::cout, t);
  std::cout << "\nerror: simulated over published throughput, minus 1 (+: the simulation is faster); left out: the "
               "same with the profile fitted without the row; FLOPs: the formula of a TFLOP/s or MFU figure, which "
               "the simulated figure follows (the source's count per step over the simulated step time); other "
               "figures are step times and token rates\n";
  std::cout << "MAPE: fit rows " << mape(report.mape_fit, report.fit_rows) << ", check rows "
            << mape(report.mape_check, report.check_rows);
  if (leave_one_out)
    std::cout << ", fit rows left out one at a time "
              << (report.fit_rows > 0 ? fixed(100 * report.mape_loo, 1) + "%" : std::string("-"));
  std::cout << "\n";
  for (const auto& [name, part] :
       {std::pair{"dense", &report.dense}, std::pair{"MoE", &report.moe}, std::pair{"cross-site", &report.cross_site}})
    if (part->fit_rows + part->check_rows > 0) {
      std::cout << "  " << name << " rows: fit " << mape(part->fit, part->fit_rows) << ", check "
                << mape(part->check, part->check_rows);
      if (leave_one_out && part->loo_rows > 0)
        std::cout << ", left out " << fixed(100 * part->loo, 1) << "%";
      std::cout << "\n";
    }
  if (!excluded.empty()) {
    std::cout << "\nNot simulated (" << excluded.size() << "):\n";
    for (const auto* r : excluded)
      std::cout << "  " << r->name << ": " << r->excluded_because << "\n";
  }
}

} // namespace

void add_calibration_commands(CLI::App& app)
{
  auto co = std::make_shared<CalibrateOptions>();
  auto* c = app.add_subcommand("calibrate", "Fit the compute model's free parameters on published (or your own) runs");
  c->add_option("runs", co->runs, "Dataset of runs (default: validation/published-runs.json)");
  c->add_option("--gpu", co->gpus,
                "Fit the rows of this GPU (its name in the GPU file, e.g. h100); repeat it for GPU files of one chip");
  c->add_flag("--network", co->network,
              "Fit each fabric's NCCL efficiency and net latency on the network dataset's fit rows instead "
              "(topology/fabrics.json format)");
  c->add_option("--network-runs", co->network_runs,
                "With --network: the dataset (default validation/network-runs.json)");
  c->add_option("--name", co->name, "The profile's name (default: the first GPU's, \"-published\")");
  c->add_option("--out", co->out, "Write the profile here (validation/profiles/NAME.json format)");
  c->add_option("--fidelity", co->fidelity, "Engine of the simulations: " + allowed_names<netsim::Fidelity>());
  c->add_option("--workers", co->workers, "Worker processes (0: one per core)")->check(integer_in(0, 256));
  c->add_option("--moe-from", co->moe_from,
                "Profile (shipped name or path) whose NCCL all-to-all share and MoE host seconds to carry over where "
                "the GPUs have no MoE fit rows");
  c->add_flag("--json", co->json, "Print one JSON document (the profile)");
  c->callback([co] { calibrate(*co); });

  auto vo = std::make_shared<ValidateOptions>();
  auto* v = app.add_subcommand("validate", "Simulate every published run and compare with what was published");
  v->add_option("runs", vo->runs, "Dataset of runs (default: validation/published-runs.json)");
  v->add_option("--fidelity", vo->fidelity, "Engine of the simulations: " + allowed_names<netsim::Fidelity>());
  v->add_option("--workers", vo->workers, "Worker processes (0: one per core)")->check(integer_in(0, 256));
  v->add_flag("--no-loo", vo->no_loo, "Skip the leave-one-out refits");
  v->add_flag("--breakdown", vo->breakdown, "Add each row's compute, exposed communication and bubble shares");
  v->add_option("--only", vo->only, "Only the runs whose name contains this (repeatable; both sections)");
  v->add_option("--network-runs", vo->network_runs,
                "The network section's measured nccl-tests points (default validation/network-runs.json)");
  v->add_flag("--no-network", vo->no_network, "Leave the network section out");
  v->add_flag("--json", vo->json, "Print one JSON document");
  v->add_option("--report", vo->report, "Also write the result as a page (HTML) to this file");
  v->add_option("--out", vo->out, "With --slurm: the folder of its records, scripts and logs (default out/validate)");
  add_slurm_flags(v, vo->slurm, "The simulations");
  v->add_option("--slurm-task", vo->slurm_task)->group(""); // the roles the batch scripts run; not for people
  v->add_option("--slurm-merge", vo->slurm_merge)->group("");
  v->callback([vo] { validate(*vo); });
}

} // namespace spansim::cli
