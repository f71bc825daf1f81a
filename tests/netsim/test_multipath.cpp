// ECMP over parallel links: flows that hash onto one link share it, flows on different links each run at full
// rate, and the load of k flows over n links follows the balls-into-bins figure.
#include "netsim/netsim.hpp"
#include "topology/topology.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <vector>

using nlohmann::json;
namespace tp = spansim::topology;
namespace ns = spansim::netsim;

namespace {

// k GPUs in each of two buildings, each GPU on its building's switch, the switches joined by n parallel links.
tp::Topology parallel_links(int k, int n, std::uint64_t seed, bool ecmp = true, int qps = 1)
{
  json vertices = json::array(), links = json::array();
  for (const char* b : {"w", "e"}) {
    vertices.push_back({{"id", std::string(b) + "/sw"}, {"kind", "leaf"}, {"building", b}});
    for (int g = 0; g < k; ++g) {
      const std::string id = std::string(b) + "/g" + std::to_string(g);
      vertices.push_back({{"id", id}, {"kind", "gpu"}, {"building", b}, {"node", id}});
      links.push_back({{"a", id}, {"b", std::string(b) + "/sw"}, {"bandwidth", "1000Gbps"}, {"latency", "1us"}});
    }
  }
  for (int l = 0; l < n; ++l)
    links.push_back({{"a", "w/sw"}, {"b", "e/sw"}, {"bandwidth", "100Gbps"}, {"latency", "10us"}});
  json doc            = {{"name", "parallel"},
                         {"regions", json::array({{{"name", "r"}, {"buildings", {"w", "e"}}}})},
                         {"graph", {{"vertices", vertices}, {"links", links}}}};
  auto spec           = tp::parse_topology_spec(doc, "parallel.json");
  spec.multipath.ecmp = ecmp;
  spec.multipath.seed = seed;
  spec.multipath.qps  = qps;
  return tp::Topology(spec);
}

int middle_link(const tp::Topology& t, int src, int dst, int qp = 0)
{
  const auto r = t.route(src, dst, qp);
  REQUIRE(r.size() == 3);
  return r[1].link;
}

// E[max load] of k balls thrown uniformly into n bins: sum over m of P(max >= m), with P(max < m) counted by the
// exponential generating function k! [x^k] (sum_{j<m} x^j / j!)^n.
double expected_max_load(int k, int n)
{
  double expected = 0;
  for (int m = 1; m <= k; ++m) {
    std::vector<double> poly(k + 1, 0), term(k + 1, 0);
    poly[0] = 1;
    for (int j = 0; j < m && j <= k; ++j)
      term[j] = 1 / std::tgamma(j + 1.0);
    for (int b = 0; b < n; ++b) {
      std::vector<double> next(k + 1, 0);
      for (int i = 0; i <= k; ++i)
        for (int j = 0; i + j <= k; ++j)
          next[i + j] += poly[i] * term[j];
      poly = next;
    }
    const double below = poly[k] * std::tgamma(k + 1.0) / std::pow(double(n), k);
    expected += 1 - below;
  }
  return expected;
}

} // namespace

TEST_CASE("ecmp: two flows on one of two parallel links share it, on different links each runs at full rate",
          "[multipath]")
{
  const double bytes = 1e9, rate = 100e9 / 8;
  int shared_seen = 0, apart_seen = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    const auto t = parallel_links(2, 2, seed);
    // GPUs: w/g0 = 0, w/g1 = 1, e/g0 = 2, e/g1 = 3.
    const bool share = middle_link(t, 0, 2) == middle_link(t, 1, 3);
    ns::FlowGraph g;
    g.add_transfer(0, 2, bytes);
    g.add_transfer(1, 3, bytes);
    const double latency  = t.route_latency(t.route(0, 2));
    const double expected = latency + (share ? 2 : 1) * bytes / rate;
    for (auto fidelity : {ns::Fidelity::analytical, ns::Fidelity::flow}) {
      if (fidelity == ns::Fidelity::flow && seed > 4)
        continue; // SimGrid on a few seeds is enough
      const auto r = ns::run(t, g, fidelity, ns::EngineOptions{});
      INFO("seed " << seed << (share ? ", one link" : ", two links") << ", " << spansim::name_of(fidelity));
      CHECK(r.makespan == Approx(expected).epsilon(1e-6));
    }
    (share ? shared_seen : apart_seen) += 1;
  }
  std::cout << "12 seeds: both flows on one link " << shared_seen << " times, on two links " << apart_seen << "\n";
  CHECK(shared_seen > 0);
  CHECK(apart_seen > 0);
  // "ideal" keeps one path: every flow on the lowest link.
  const auto ideal = parallel_links(2, 2, 1, false);
  CHECK(middle_link(ideal, 0, 2) == middle_link(ideal, 1, 3));
}

TEST_CASE("ecmp: the busiest of n parallel links carries the balls-into-bins expected maximum", "[multipath]")
{
  for (auto [k, n] : {std::pair{8, 8}, {16, 4}, {4, 16}}) {
    const int seeds = 1500;
    double sum      = 0;
    for (int seed = 1; seed <= seeds; ++seed) {
      const auto t = parallel_links(k, n, static_cast<std::uint64_t>(seed));
      std::vector<int> load(t.links().size(), 0);
      for (int f = 0; f < k; ++f)
        ++load[middle_link(t, f, k + f)]; // w/gf -> e/gf
      sum += *std::max_element(load.begin(), load.end());
    }
    const double mean = sum / seeds, expected = expected_max_load(k, n);
    std::cout << k << " flows over " << n << " links: mean busiest " << mean << " flows, balls-into-bins " << expected
              << "\n";
    CHECK(mean == Approx(expected).margin(0.08)); // about 4 standard errors over 1,500 seeds
  }
}

TEST_CASE("ecmp: more queue pairs per GPU pair spread the bytes, as balls-into-bins predicts", "[multipath]")
{
  // k transfers over n links, each split into q queue pairs of 1/q: the busiest link carries the expected maximum of
  // k q balls into n bins, over q, of a transfer's bytes.
  const int k = 8, n = 8, seeds = 1000;
  double previous = 1e9;
  for (int q : {1, 2, 4, 16}) {
    double sum = 0;
    for (int seed = 1; seed <= seeds; ++seed) {
      const auto t = parallel_links(k, n, static_cast<std::uint64_t>(seed), true, q);
      std::vector<double> load(t.links().size(), 0);
      for (int f = 0; f < k; ++f)
        for (int qp = 0; qp < q; ++qp)
          load[middle_link(t, f, k + f, qp)] += 1.0 / q;
      sum += *std::max_element(load.begin(), load.end());
    }
    const double mean = sum / seeds, expected = expected_max_load(k * q, n) / q;
    std::cout << q << " queue pairs: busiest link " << mean << " transfers' bytes, balls-into-bins " << expected
              << "\n";
    CHECK(mean == Approx(expected).margin(0.1 / std::sqrt(double(q))));
    CHECK(mean < previous);
    previous = mean;
  }
  // The flow graph splits each transfer into its queue pairs; the engines time them apart (4 over 4 links here).
  const auto t = parallel_links(1, 4, 3, true, 4);
  ns::FlowGraph g(4);
  g.add_transfer(0, 1, 4e9);
  CHECK(g.transfer_count() == 4);
  std::vector<int> per_link(t.links().size(), 0);
  for (int qp = 0; qp < 4; ++qp)
    ++per_link[middle_link(t, 0, 1, qp)];
  const int busiest     = *std::max_element(per_link.begin(), per_link.end());
  const double expected = t.route_latency(t.route(0, 1)) + busiest * 1e9 / (100e9 / 8);
  for (auto fidelity : {ns::Fidelity::analytical, ns::Fidelity::flow}) {
    const auto r = ns::run(t, g, fidelity, ns::EngineOptions{});
    INFO(spansim::name_of(fidelity) << ": " << busiest << " queue pairs on the busiest link");
    CHECK(r.makespan == Approx(expected).epsilon(1e-6));
  }
}
