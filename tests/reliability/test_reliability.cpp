// Reliability: order statistics, the exponential-failure closed forms, the Monte Carlo against them, replica
// recovery's loss of 1/R, Llama 3's interruption count, and step sampling against a per-rank replay.
#include "reliability/reliability.hpp"
#include "scenario/scenario.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <unistd.h>

namespace rel = spansim::reliability;
using nlohmann::json;

namespace {

void expect_near(const std::string& what, double expected, double actual, double tolerance)
{
  std::cout << what << ": expected " << expected << ", actual " << actual << " (tolerance " << tolerance << ")\n";
  CHECK(std::fabs(actual - expected) <= tolerance);
}

rel::ReliabilitySpec spec_with(std::vector<rel::Component> components, rel::Recovery recovery)
{
  rel::ReliabilitySpec s;
  s.components = std::move(components);
  s.recovery   = recovery;
  return s;
}

} // namespace

TEST_CASE("normal quantiles invert the normal CDF", "[reliability]")
{
  for (double p : {1e-12, 1e-6, 0.001, 0.02, 0.2, 0.5, 0.7, 0.975, 0.999999}) {
    const double x = rel::normal_quantile(p);
    CHECK(0.5 * std::erfc(-x / std::sqrt(2.0)) == Approx(p).epsilon(1e-9));
  }
  CHECK(rel::normal_upper_quantile(1e-15) == Approx(7.941345326170997).epsilon(1e-9));
}

TEST_CASE("expected maximum of n standard normals matches the tabulated values", "[reliability]")
{
  // Exact values (Harter's tables; reproduced by numerical integration in the research notes).
  const std::vector<std::pair<double, double>> table = {
      {8, 1.4236}, {64, 2.3437}, {1024, 3.2482}, {16384, 3.9714}, {131072, 4.4430}};
  for (auto [n, e] : table)
    expect_near("E[max of " + std::to_string(static_cast<int>(n)) + " normals]", e, rel::expected_max_normal(n), 1e-3);
}

TEST_CASE("one draw of the largest of n has the extreme-value distribution of n draws", "[reliability]")
{
  rel::Jitter j;
  j.kind  = rel::Jitter::Kind::lognormal;
  j.sigma = 0.05;
  rel::Random random(3);
  for (double n : {8.0, 1024.0}) {
    const int k = 40000;
    double sum = 0, sum2 = 0;
    for (int i = 0; i < k; ++i) {
      const double z = (std::log(j.max_of(n, random.uniform())) + j.sigma * j.sigma / 2) / j.sigma;
      sum += z;
      sum2 += z * z;
    }
    const double mean = sum / k, se = std::sqrt((sum2 / k - mean * mean) / k);
    // log of the max of lognormals = the max of normals, exactly: its mean is E[max of n normals].
    expect_near("mean of sampled max (n = " + std::to_string(static_cast<int>(n)) + ")", rel::expected_max_normal(n),
                mean, 4 * se);
  }
}

TEST_CASE("the Monte Carlo's ETTR matches the exponential closed form", "[reliability]")
{
  // One job-scoped component; tau 10 min, delta 0.5 min, R 3 min, M 18 min: exact 0.5938 (research notes).
  const double minute = 60;
  auto s = spec_with({{"all", rel::Component::Per::job, 18 * minute, false, true, "test"}}, rel::Recovery::synchronous);
  s.interval = 10 * minute;
  rel::RunShape shape;
  shape.step_time = 1, shape.tokens_per_step = 1, shape.gpus = 1, shape.nodes = 1;
  rel::Costs c;
  c.failure_rate     = 1 / (18 * minute);
  c.checkpoint_write = 0.5 * minute;
  c.restart          = 3 * minute;
  c.interval         = 10 * minute;
  expect_near("closed form", 0.5938, rel::ettr_exact(c.interval, c.checkpoint_write, c.restart, 18 * minute), 1e-4);
  rel::Horizon h;
  h.days       = 30;
  h.trials     = 40;
  const auto o = rel::simulate_run(s, shape, c, h);
  expect_near("Monte Carlo ETTR", o.ettr_closed_form, o.ettr, 0.005);
  expect_near("interruptions per day", 86400 / (18 * minute), o.interruptions / 30, 0.02 * 86400 / (18 * minute));
}

TEST_CASE("the goodput-optimal interval agrees with Young/Daly within 2%", "[reliability]")
{
  // Daly's paper, Fig. 3-5 captions: R 10 min, delta 5 min; M 24 h -> 117 min, 6 h -> 57 min, 15 min -> 9.1 min.
  const double minute = 60;
  expect_near("Daly at M = 24 h", 117, rel::daly_interval(5 * minute, 24 * 60 * minute) / minute, 0.5);
  expect_near("Daly at M = 6 h", 57, rel::daly_interval(5 * minute, 6 * 60 * minute) / minute, 0.5);
  expect_near("Daly at M = 15 min", 9.1, rel::daly_interval(5 * minute, 15 * minute) / minute, 0.05);
  for (double m : {24.0 * 60, 6.0 * 60, 60.0}) {
    const double best  = rel::optimal_interval(5 * minute, 10 * minute, m * minute);
    const double daly  = rel::daly_interval(5 * minute, m * minute);
    const double young = std::sqrt(2 * 5 * minute * m * minute);
    expect_near("optimum / Daly at M = " + std::to_string(static_cast<int>(m)) + " min", 1, best / daly, 0.02);
    // Young's first-order form is within 2% too while delta << M.
    if (m >= 24 * 60)
      expect_near("optimum / Young", 1, best / young, 0.05);
  }
}

TEST_CASE("replica recovery loses 1/R of the throughput per replica out", "[reliability]")
{
  const double hour = 3600;
  auto s   = spec_with({{"gpu", rel::Component::Per::gpu, 1000 * hour, true, true, "test"}}, rel::Recovery::replica);
  s.launch = 600, s.nccl_init = 0, s.data_loader = 0, s.replica_stall = 0;
  rel::RunShape shape;
  shape.step_time = 1, shape.tokens_per_step = 1, shape.gpus = 64, shape.nodes = 8, shape.replicas = 8;
  shape.parameters = 0;
  const auto c     = rel::costs(s, shape);
  rel::Horizon h;
  h.days       = 20;
  h.trials     = 20;
  const auto o = rel::simulate_run(s, shape, c, h);
  // Each failure takes one of 8 replicas out for 600 s: 75 s of full-job throughput lost per failure.
  const double per_failure = o.lost_degraded / o.replica_failures;
  expect_near("throughput lost per replica failure (s)", 600.0 / 8, per_failure, 0.02 * 600 / 8);
  expect_near("ETTR", 1 - 0.064 * 600 / 8 / 3600, o.ettr, 0.002); // 64 GPUs / 1000 h = 0.064 failures per hour
}

TEST_CASE("Llama 3's per-GPU rates at 16,384 GPUs for 54 days give its 466 interruptions", "[reliability]")
{
  spansim::spec::Location where{"test"};
  const json block = {{"seed", 5}, {"failures", "llama3-405b"}};
  const auto s     = rel::read_reliability(spansim::spec::ObjectReader(block, where));
  rel::RunShape shape;
  shape.step_time = 1, shape.tokens_per_step = 1, shape.gpus = 16384, shape.nodes = 2048;
  shape.parameters = 405e9;
  const auto c     = rel::costs(s, shape);
  expect_near("expected interruptions (rates x 54 days)", 466, c.failure_rate * 54 * 86400, 0.5);
  rel::Horizon h;
  h.days       = 54;
  h.trials     = 100;
  const auto o = rel::simulate_run(s, shape, c, h);
  // 100 trials of Poisson(466): standard error 2.2.
  expect_near("Monte Carlo interruptions in 54 days", 466, o.interruptions, 9);
}

namespace {

spansim::scenario::ScenarioRun small_run()
{
  const json sc = {{"name", "small"},
                   {"topology", "hgx-h100-pod"},
                   {"job",
                    {{"name", "small-job"},
                     {"model", "llama3-8b"},
                     {"gpu", "h100"},
                     {"gpus", 64},
                     {"parallelism", {{"tp", 2}, {"pp", 4}, {"dp", 8}, {"data_parallel", "fsdp"}}},
                     {"batch", {{"global_sequences", 64}, {"sequence_length", 2048}, {"micro_batch", 1}}},
                     {"schedule", {{"kind", "1f1b"}}}}},
                   {"fidelity", "analytical"}};
  return spansim::scenario::run_scenario(spansim::scenario::parse_scenario(sc, "test"));
}

} // namespace

TEST_CASE("replaying the simulated step's timeline gives the simulated step", "[reliability]")
{
  const auto run = small_run();
  expect_near("replayed step (s)", run.result.step_time, rel::replay_deterministic(run.placed->graph(), run.result),
              1e-9 * run.result.step_time);
}

TEST_CASE("per-stage representatives match a per-rank replay within 3% (mean and p99)", "[reliability]")
{
  const auto run = small_run();
  for (double sigma : {0.03, 0.1}) {
    rel::VariabilitySpec v;
    v.seed                = 11;
    v.slow_fraction       = 0.02;
    v.slowdown            = 1.15;
    v.compute.kind        = rel::Jitter::Kind::lognormal;
    v.compute.sigma       = sigma;
    v.communication.kind  = rel::Jitter::Kind::lognormal;
    v.communication.sigma = sigma;
    rel::SampleOptions o;
    o.steps         = 400;
    const auto fast = rel::sample_steps(run.placed->graph(), run.result, run.placed->placement(), v, o);
    const auto full = rel::sample_steps_per_rank(run.placed->graph(), run.result, run.placed->placement(), v, o);
    std::cout << "sigma " << sigma << ": deterministic " << fast.deterministic << " s\n";
    expect_near("  mean, representatives / per rank", 1, fast.mean / full.mean, 0.03);
    expect_near("  p99, representatives / per rank", 1, fast.p99 / full.p99, 0.03);
    CHECK(full.mean > fast.deterministic);
  }
}

TEST_CASE("the same seed gives the same samples", "[reliability]")
{
  const auto run = small_run();
  rel::VariabilitySpec v;
  v.compute.kind  = rel::Jitter::Kind::lognormal;
  v.compute.sigma = 0.05;
  rel::SampleOptions o;
  o.steps      = 50;
  const auto a = rel::sample_steps(run.placed->graph(), run.result, run.placed->placement(), v, o);
  const auto b = rel::sample_steps(run.placed->graph(), run.result, run.placed->placement(), v, o);
  CHECK(a.step_times == b.step_times);
  v.seed       = 2;
  const auto c = rel::sample_steps(run.placed->graph(), run.result, run.placed->placement(), v, o);
  CHECK(a.step_times != c.step_times);
}

TEST_CASE("degraded links: the step simulated again on them, every link when the fraction is 1", "[reliability]")
{
  const auto run = small_run();
  const auto& sc = run.scenario;
  rel::VariabilitySpec v;
  v.degraded_fraction  = 1;
  v.degraded_bandwidth = 0.25;
  rel::SampleOptions o;
  o.steps        = 10;
  const auto out = rel::sample_steps(
      {run.placed->topology(), run.placed->graph(), run.placed->placement(), sc.placement, sc.options, run.result}, v,
      o);
  int scale_out = 0;
  for (const auto& l : run.placed->topology().links())
    scale_out += l.tier != spansim::topology::Tier::nvlink;
  CHECK(out.degraded_links == scale_out);
  std::cout << "step " << out.deterministic << " s, on links at a quarter " << out.degraded_step << " s\n";
  CHECK(out.degraded_step > out.deterministic);
  // No other variability: every sample is the degraded step.
  CHECK(out.mean == Approx(out.degraded_step).epsilon(1e-12));
  v.degraded_fraction = 0;
  const auto healthy  = rel::sample_steps(
       {run.placed->topology(), run.placed->graph(), run.placed->placement(), sc.placement, sc.options, run.result}, v,
       o);
  CHECK(healthy.mean == Approx(run.result.step_time).epsilon(1e-12));
}

TEST_CASE("an empirical jitter table: its quantiles, and the largest of n draws tends to its largest factor",
          "[reliability]")
{
  const std::string path = "/tmp/spansim-jitter-" + std::to_string(::getpid()) + ".csv";
  std::ofstream(path) << "# measured over modelled\nfactor\n1.2\n1.0\n1.1\n1.0\n1.5\n";
  const json block = {{"seed", 1}, {"compute_jitter", {{"table", path}}}};
  const auto v     = rel::read_variability(spansim::spec::ObjectReader(block, spansim::spec::Location{"/tmp/x.json"}));
  std::remove(path.c_str());
  REQUIRE(v.compute.samples == std::vector<double>{1.0, 1.0, 1.1, 1.2, 1.5});
  // Linear between order statistics: q = 0.5 is the middle sample, 0.875 halfway from 1.2 to 1.5.
  CHECK(v.compute.quantile(0.5, 0.5) == Approx(1.1));
  CHECK(v.compute.quantile(0.875, 0.125) == Approx(1.35));
  rel::Random random(1);
  double sum = 0;
  for (int i = 0; i < 1000; ++i)
    sum += v.compute.max_of(1e6, random.uniform());
  expect_near("mean of the largest of 1e6 draws", 1.5, sum / 1000, 1e-3);
  const json bad = {{"seed", 1}, {"compute_jitter", {{"table", "/nonexistent/f.csv"}}}};
  CHECK_THROWS(rel::read_variability(spansim::spec::ObjectReader(bad, spansim::spec::Location{"/tmp/x.json"})));
}

TEST_CASE("checkpoints to another building cost its share over the link between them", "[reliability]")
{
  rel::ReliabilitySpec s;
  s.components        = {{"gpu", rel::Component::Per::gpu, 1e6 * 3600, true, true, "test"}};
  s.storage_bandwidth = 4e12;
  rel::RunShape shape;
  shape.step_time = 1, shape.tokens_per_step = 1, shape.gpus = 1024, shape.nodes = 128, shape.parameters = 1e12;
  auto local = rel::costs(s, shape);
  expect_near("local write (s)", 14e12 / 4e12, local.checkpoint_write, 1e-9);
  // Half the job in another building, 1 TB/s to the store: half of 14 TB over it takes 7 s, the store 3.5 s.
  shape.cross_building_seconds_per_byte = 0.5 / 1e12;
  auto remote                           = rel::costs(s, shape);
  expect_near("remote write (s)", 7, remote.checkpoint_write, 1e-9);
  expect_near("restart includes the read", s.launch + s.nccl_init * 1024 / s.nccl_init_gpus + s.data_loader + 7,
              remote.restart, 1e-9);
}

namespace {

struct SparePoolCase {
  rel::ReliabilitySpec spec;
  rel::RunShape shape;
  rel::Costs costs;
};

// One job-scoped component with hot spares modelled; tau 10 min, delta 0.5, R 3, M 18 min; a share p of the failures
// needs a node.
SparePoolCase spare_pool_case(double p)
{
  const double minute = 60;
  SparePoolCase k{
      spec_with({{"node", rel::Component::Per::job, 18 * minute, false, true, "test"}}, rel::Recovery::synchronous),
      {},
      {}};
  k.spec.interval        = 10 * minute;
  k.spec.spares_modelled = true;
  k.shape.step_time = 1, k.shape.tokens_per_step = 1, k.shape.gpus = 1, k.shape.nodes = 1;
  k.costs.failure_rate      = 1 / (18 * minute);
  k.costs.hardware_job_rate = p * k.costs.failure_rate;
  k.costs.checkpoint_write  = 0.5 * minute;
  k.costs.restart           = 3 * minute;
  k.costs.interval          = 10 * minute;
  return k;
}

} // namespace

TEST_CASE("hot spares: an empty pool adds the repair to every restart, an ample one nothing", "[reliability]")
{
  // One hardware component; tau 10 min, delta 0.5, R 3, M 18 min; repair 2 min.
  const double minute = 60;
  auto k              = spare_pool_case(1.0);
  auto& s             = k.spec;
  const auto& shape   = k.shape;
  const auto& c       = k.costs;
  s.repair            = 2 * minute;
  rel::Horizon h;
  h.days        = 30;
  h.trials      = 40;
  s.spare_nodes = 0;
  auto none     = rel::simulate_run(s, shape, c, h);
  expect_near("ETTR, no spares (closed form with R + repair)",
              rel::ettr_exact(c.interval, c.checkpoint_write, c.restart + s.repair, 18 * minute), none.ettr, 0.005);
  CHECK(none.spares_used == 0);
  s.spare_nodes = 1000;
  auto ample    = rel::simulate_run(s, shape, c, h);
  expect_near("ETTR, ample spares (closed form with R)",
              rel::ettr_exact(c.interval, c.checkpoint_write, c.restart, 18 * minute), ample.ettr, 0.005);
  CHECK(ample.lost_spare_wait == 0);
  CHECK(ample.spares_used == Approx(ample.interruptions));
}

TEST_CASE("hot spares: with an empty pool a repair wait holds through other failures, as the closed form says",
          "[reliability]")
{
  // A quarter of the failures need a node (hardware), the pool is empty and a repair takes an hour: after a hardware
  // failure the job waits W (started again by each hardware failure during it: (e^{l_h W} - 1) / l_h expected),
  // then restarts (R, exposed to every failure). Renewal: a segment of tau + delta completes after
  // (1/l + p Wexp) e^{l R} (e^{l (tau + delta)} - 1). A failure that needs no node used to end the wait.
  const double minute = 60;
  const double p      = 0.25;
  auto k              = spare_pool_case(p);
  auto& s             = k.spec;
  const auto& shape   = k.shape;
  const auto& c       = k.costs;
  s.spare_nodes       = 0;
  rel::Horizon h;
  h.days           = 60;
  h.trials         = 40;
  auto closed_form = [&](double wait) {
    const double l = c.failure_rate, lh = c.hardware_job_rate;
    const double expected_wait = std::expm1(lh * wait) / lh;
    return c.interval /
           ((1 / l + p * expected_wait) * std::exp(l * c.restart) * std::expm1(l * (c.interval + c.checkpoint_write)));
  };
  for (double wait : {10 * minute, 60 * minute}) {
    s.repair     = wait;
    const auto o = rel::simulate_run(s, shape, c, h);
    expect_near("ETTR, empty pool, repair " + std::to_string(static_cast<int>(wait / minute)) + " min",
                closed_form(wait), o.ettr, 0.005);
  }
  // A repair that outlasts the horizon: the first hardware failure ends the useful run (it was 98% and the same for
  // 240 h and 10^6 h repairs when other failures cut the wait short).
  s.repair     = 1e6 * 3600;
  const auto o = rel::simulate_run(s, shape, c, h);
  std::cout << "repair 10^6 h: ETTR " << o.ettr << "\n";
  CHECK(o.ettr < 0.05);
}

TEST_CASE("spare GPUs in the job's nodes replace a failed GPU inside its node: an empty node pool waits for nothing",
          "[reliability]")
{
  // NVL72 racks with 64 GPUs in the job and 8 standing by: GPU failures only (hardware), an empty pool of spare
  // nodes and a week's repair. Without the rack's spares every failure waits for a repair (the closed form with
  // R + repair, as the pool case above); with them, 8 per rack over 16 racks outlast the failures a repair window
  // sees (a GPU MTTF of 2 years over 1,024 GPUs: one failure in 17 h, about 10 a week over 16 racks), so the run
  // is the closed form with R alone and every failure is covered by a spare GPU of its rack.
  const double minute = 60, hour = 3600;
  const double gpus = 1024, mttf = 2 * 8760 * hour;
  auto s     = spec_with({{"gpu", rel::Component::Per::gpu, mttf, false, true, "test"}}, rel::Recovery::synchronous);
  s.interval = 60 * minute;
  s.spares_modelled = true;
  s.spare_nodes     = 0;
  s.repair          = 168 * hour;
  rel::RunShape shape;
  shape.step_time = 1, shape.tokens_per_step = 1, shape.gpus = gpus, shape.nodes = 16;
  rel::Costs c;
  c.failure_rate          = gpus / mttf;
  c.hardware_job_rate     = c.failure_rate;
  c.hardware_gpu_job_rate = c.failure_rate;
  c.checkpoint_write      = 0.5 * minute;
  c.restart               = 10 * minute;
  c.interval              = 60 * minute;
  rel::Horizon h;
  h.days                    = 30;
  h.trials                  = 40;
  shape.spare_gpus_per_node = 8;
  const auto spared         = rel::simulate_run(s, shape, c, h);
  std::cout << "8 spare GPUs a rack: " << spared.interruptions << " failures, " << spared.gpu_spares_used
            << " covered in the rack, ETTR " << spared.ettr << "\n";
  CHECK(spared.lost_spare_wait == 0);
  CHECK(spared.gpu_spares_used == Approx(spared.interruptions));
  expect_near("ETTR with the racks' spares (closed form with R)",
              rel::ettr_exact(c.interval, c.checkpoint_write, c.restart, 1 / c.failure_rate), spared.ettr, 0.005);
  // The same run with no spare GPUs: the first failure waits a week for its repair, the next for the next.
  shape.spare_gpus_per_node = 0;
  const auto bare           = rel::simulate_run(s, shape, c, h);
  CHECK(bare.gpu_spares_used == 0);
  CHECK(bare.lost_spare_wait > 0);
  CHECK(bare.ettr < spared.ettr - 0.1);
}

TEST_CASE("a token budget: each trial stops at it, wall time is the work over the closed-form ETTR, and every "
          "second of wall time is accounted for",
          "[reliability]")
{
  const double minute = 60;
  rel::RunShape shape;
  shape.step_time = 0.7, shape.tokens_per_step = 3, shape.gpus = 64, shape.nodes = 8, shape.replicas = 8;
  rel::Horizon h;
  h.tokens = 3e7; // 7e6 s of failure-free training
  h.trials = 100;
  auto sync =
      spec_with({{"all", rel::Component::Per::job, 18 * minute, false, false, "test"}}, rel::Recovery::synchronous);
  sync.interval = 10 * minute;
  rel::Costs c;
  c.failure_rate     = 1 / (18 * minute);
  c.checkpoint_write = 0.5 * minute;
  c.restart          = 3 * minute;
  c.interval         = 10 * minute;
  const auto o       = rel::simulate_run(sync, shape, c, h);
  expect_near("tokens trained", 3e7, o.tokens, 1e-6 * 3e7);
  expect_near("time to train (s)", 7e6 / rel::ettr_exact(c.interval, c.checkpoint_write, c.restart, 18 * minute),
              o.wall_seconds, 0.01 * 7e6 / 0.5938);
  // Replica recovery with a stall longer than a replica's restart: events fall due during stalls. Wall time is
  // work plus what each cause lost, to rounding.
  auto rep = spec_with({{"all", rel::Component::Per::job, 18 * minute, false, true, "test"}}, rel::Recovery::replica);
  rep.components.push_back({"gpu", rel::Component::Per::gpu, 50 * 60 * minute, true, true, "test"});
  rep.replica_stall = 4 * minute;
  rep.launch = 60, rep.nccl_init = 0, rep.data_loader = 0;
  rep.interval           = 3 * minute;
  shape.parameters       = 1e9;
  h.trials               = 1;
  const auto r           = rel::simulate_run(rep, shape, rel::costs(rep, shape), h);
  const double accounted = r.tokens / shape.tokens_per_step * shape.step_time + r.lost_recompute + r.lost_restart +
                           r.lost_checkpoint + r.lost_degraded + r.lost_stall;
  expect_near("wall time against work + losses (s)", r.wall_seconds, accounted, 1e-6 * r.wall_seconds);
  // Each replica failure pauses the others once; its replica is back (60 s) before the 4-minute pause ends.
  expect_near("stall (s)", r.replica_failures * 4 * minute, r.lost_stall, 1e-9 * r.lost_stall);
  CHECK(r.lost_degraded == 0);
}

TEST_CASE("a failure model under which no restart would finish is refused", "[reliability]")
{
  auto s  = spec_with({{"gpu", rel::Component::Per::gpu, 3600, true, true, "test"}}, rel::Recovery::synchronous);
  s.where = spansim::spec::Location{"s.json", "$.reliability"};
  rel::RunShape shape;
  shape.step_time = 1, shape.tokens_per_step = 1, shape.gpus = 100000, shape.nodes = 12500;
  CHECK_THROWS_WITH(rel::costs(s, shape),
                    Catch::Contains("$.reliability.failures") && Catch::Contains("no restart would ever finish"));
}
