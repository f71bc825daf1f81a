#include "common/error.hpp"
#include "common/units.hpp"

#include <catch2/catch.hpp>

using namespace spansim;

TEST_CASE("bandwidths convert to bytes per second", "[units]")
{
  CHECK(units::parse_bandwidth("400Gbps") == Approx(50e9));
  CHECK(units::parse_bandwidth("3.2Tbps") == Approx(400e9));
  CHECK(units::parse_bandwidth("450GBps") == Approx(450e9));
  CHECK(units::parse_bandwidth("450GB/s") == Approx(450e9));
  CHECK(units::parse_bandwidth("1GiB/s") == Approx(1073741824.0));
  CHECK(units::parse_bandwidth("1 Pbps") == Approx(1.25e14));
}

TEST_CASE("times, sizes and distances convert to seconds, bytes and meters", "[units]")
{
  CHECK(units::parse_time("5us") == Approx(5e-6));
  CHECK(units::parse_time("1.5ms") == Approx(1.5e-3));
  CHECK(units::parse_time("100ns") == Approx(1e-7));
  CHECK(units::parse_time("2s") == Approx(2.0));
  CHECK(units::parse_size("80GiB") == Approx(80.0 * 1024 * 1024 * 1024));
  CHECK(units::parse_size("1MB") == Approx(1e6));
  CHECK(units::parse_size("4096B") == Approx(4096));
  CHECK(units::parse_distance("120km") == Approx(120e3));
  CHECK(units::parse_distance("300m") == Approx(300));
  // 5 us per km of fiber: 1,000 km is 5 ms one way.
  CHECK(units::parse_distance("1000km") * units::kFiberSecondsPerMeter == Approx(5e-3));
}

TEST_CASE("quantities without a known unit are refused with the allowed units", "[units]")
{
  CHECK_THROWS_AS(units::parse_bandwidth("400"), UsageError);
  CHECK_THROWS_AS(units::parse_bandwidth("400Gbit"), UsageError);
  CHECK_THROWS_AS(units::parse_time("5 parsecs"), UsageError);
  CHECK_THROWS_AS(units::parse_size("-1GiB"), UsageError);
  CHECK_THROWS_AS(units::parse_size("GiB"), UsageError);
  CHECK_THROWS_WITH(units::parse_time("5uss"), Catch::Contains("unknown unit \"uss\"") &&
                                                   Catch::Contains("units: ns, us, \u00b5s, \u03bcs, ms, s"));
  CHECK_THROWS_WITH(units::parse_size("1XiB"), Catch::Contains("unknown unit \"XiB\""));
  // Microseconds as tools print them (the micro sign and Greek mu), and sizes up to the cap's own unit.
  CHECK(units::parse_time("5\u00b5s") == units::parse_time("5us"));
  CHECK(units::parse_time("5\u03bcs") == units::parse_time("5us"));
  CHECK(units::parse_size("1EiB") == units::kMaxSize);
  CHECK(units::parse_size("2PiB") == 2 * 1125899906842624.0);
  CHECK(units::parse_size("3PB") == 3e15);
}

TEST_CASE("formatting picks a readable unit", "[units]")
{
  CHECK(units::format_bandwidth(50e9) == "400 Gbps");
  CHECK(units::format_time(12.5e-6) == "12.5 us");
  CHECK(units::format_size(1073741824.0) == "1 GiB");
  CHECK(units::format_distance(120e3) == "120 km");
}

TEST_CASE("quantities beyond the documented physical range are refused with the limit named", "[units]")
{
  CHECK_THROWS_WITH(units::parse_time("1e308s"), Catch::Contains("out of range (at most 1e10 s"));
  CHECK_THROWS_WITH(units::parse_bandwidth("1e308Gbps"), Catch::Contains("at most 1 Ebps"));
  CHECK_THROWS_WITH(units::parse_bandwidth("1e400Gbps"), Catch::Contains("out of range"));
  CHECK_THROWS_WITH(units::parse_size("2EiB"), Catch::Contains("out of range (at most 1 EiB)"));
  CHECK_THROWS_WITH(units::parse_size("2000000TiB"), Catch::Contains("at most 1 EiB"));
  CHECK_THROWS_WITH(units::parse_distance("40076km"), Catch::Contains("circumference"));
  CHECK_THROWS_WITH(units::parse_bandwidth("infTbps"), Catch::Contains("finite"));
  CHECK_THROWS_WITH(units::parse_time("nanms"), Catch::Contains("finite"));
  // The limits themselves are accepted.
  CHECK(units::parse_bandwidth("1000Pbps") == Approx(units::kMaxBandwidth));
  CHECK(units::parse_distance("40075km") == Approx(units::kMaxDistance));
  CHECK(units::parse_time("54d") == Approx(54 * 86400.0));
  CHECK(units::parse_time("12h") == Approx(43200.0));
}
