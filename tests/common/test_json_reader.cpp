#include "common/error.hpp"
#include "common/json_reader.hpp"

#include <catch2/catch.hpp>

using namespace spansim;
using nlohmann::json;

TEST_CASE("the reader converts units and reports JSON paths", "[json]")
{
  json j = json::parse(R"({"link": {"bandwidth": "400Gbps", "latency": "2us", "count": 3}})");
  spec::ObjectReader root(j, spec::Location{"f.json"});
  auto link = root.object("link");
  CHECK(link.bandwidth("bandwidth") == Approx(50e9));
  CHECK(link.time("latency") == Approx(2e-6));
  CHECK(link.integer("count", 1, 10) == 3);
  CHECK_NOTHROW(link.finish());
  CHECK_NOTHROW(root.finish());
}

TEST_CASE("unknown keys are errors that list the allowed keys", "[json]")
{
  json j = json::parse(R"({"bandwidth": "1Gbps", "latnecy": "2us"})");
  spec::ObjectReader r(j, spec::Location{"f.json", "$.link"});
  r.bandwidth("bandwidth");
  r.optional_time("latency");
  try {
    r.finish();
    FAIL("finish() accepted an unknown key");
  } catch (const SpecError& e) {
    std::string what = e.what();
    INFO(what);
    CHECK(what.find("f.json: at $.link") == 0);
    CHECK(what.find("unknown key \"latnecy\"") != std::string::npos);
    CHECK(what.find("bandwidth, latency") != std::string::npos);
  }
}

TEST_CASE("wrong types and out-of-range values name the member", "[json]")
{
  json j = json::parse(R"({"n": 1.5, "m": 99, "s": 3, "c": "x", "q": 400})");
  spec::ObjectReader r(j, spec::Location{"f.json"});
  CHECK_THROWS_WITH(r.integer("n", 0, 10), Catch::Contains("$.n") && Catch::Contains("expected an integer"));
  CHECK_THROWS_WITH(r.integer("m", 0, 10), Catch::Contains("$.m") && Catch::Contains("allowed: 0 to 10"));
  CHECK_THROWS_WITH(r.string("s"), Catch::Contains("expected a string"));
  CHECK_THROWS_WITH(r.choice("c", {"a", "b"}), Catch::Contains("allowed: \"a\", \"b\""));
  CHECK_THROWS_WITH(r.bandwidth("q"), Catch::Contains("with a unit"));
  CHECK_THROWS_WITH(r.string("absent"), Catch::Contains("missing required key \"absent\""));
}
