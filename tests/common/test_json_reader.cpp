#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/paths.hpp"

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

TEST_CASE("duplicate keys and deep nesting are refused with their JSON path", "[json]")
{
  CHECK_THROWS_WITH(spec::parse_json_text(R"({"a": {"b": 1, "b": 2}})", "f.json"),
                    Catch::Contains("f.json: at $.a.b: duplicate key \"b\""));
  CHECK_THROWS_WITH(spec::parse_json_text(R"({"l": [{"x": 1}, {"y": 1, "y": 1}]})", "f.json"),
                    Catch::Contains("at $.l[1].y: duplicate key"));
  // The same key in two objects is fine.
  CHECK_NOTHROW(spec::parse_json_text(R"({"a": {"k": 1}, "b": {"k": 1}, "l": [{"k": 1}, {"k": 2}]})", "f.json"));
  std::string deep(spec::kMaxJsonDepth, '[');
  deep += std::string(spec::kMaxJsonDepth, ']');
  CHECK_NOTHROW(spec::parse_json_text(deep, "f.json"));
  CHECK_THROWS_WITH(spec::parse_json_text("[" + deep + "]", "f.json"), Catch::Contains("nesting deeper than 64"));
}

TEST_CASE("integers written as whole floats are read, beyond range they are out of range, not fractional", "[json]")
{
  json j = json::parse(R"({"a": 3e3, "b": 1e20, "c": 2.5, "d": 18446744073709551615})");
  spec::ObjectReader r(j, spec::Location{"f.json"});
  CHECK(r.integer("a", 0, 10000) == 3000);
  CHECK_THROWS_WITH(r.integer("b", 0, 1000), Catch::Contains("value 1e+20 out of range (allowed: 0 to 1000)"));
  CHECK_THROWS_WITH(r.integer("c", 0, 1000), Catch::Contains("fractional number 2.5"));
  CHECK_THROWS_WITH(r.integer("d", 0, 1000), Catch::Contains("out of range"));
}

TEST_CASE("names that reach output paths are single safe components", "[json][paths]")
{
  for (const char* bad : {"../x", "a/b", "..", ".", "", "-rf", ".hidden", "a b", "x\ny"})
    CHECK_FALSE(is_safe_name(bad));
  for (const char* good : {"llama3-405b-two-buildings", "run_1.2", "a+b"})
    CHECK(is_safe_name(good));
  CHECK(sanitized_name("../etc/passwd") == "_.._etc_passwd");
  CHECK(is_safe_name(sanitized_name("../etc/passwd")));
  CHECK(path_in("out", "x") == "out/x");
  CHECK_THROWS_AS(path_in("out", "../x"), UsageError);
  json j = json::parse(R"({"name": "../../etc/x"})");
  spec::ObjectReader r(j, spec::Location{"f.json"});
  CHECK_THROWS_WITH(r.name("name"), Catch::Contains("f.json: at $.name: invalid name"));
}
