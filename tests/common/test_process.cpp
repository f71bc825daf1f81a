#include "common/error.hpp"
#include "common/process.hpp"

#include "tests/support_process.hpp"

#include <catch2/catch.hpp>

#include <csignal>
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

using namespace spansim;

namespace {

// A JSON path with a NUL, a newline and an escape sequence: what the error's fields must carry across untouched.
const std::string kPath = std::string("$.a\0b", 5) + "[\"x\ny\x1b[31m\"]";

// A detail with a newline, an escape sequence and a backslash: escaped once, and not again when it travels.
const std::string kDetail = "tp 3 must divide heads 32\n\x1b[31m C:\\x";

// Throws the error named by `kind` (the kinds a worker may throw).
std::string throw_kind(int kind)
{
  switch (kind) {
  case 0:
    throw SpecError("spec.json", kPath, kDetail);
  case 1:
    throw InfeasibleError("memory", "job.json", "$.parallelism", "needs 91.2 GiB of 80 GiB");
  case 2:
    throw UsageError("--task \"3/2\": allowed K/N with 0 <= K < N");
  case 3:
    throw TraceError("rank.0.et", "node 12", "a send of -5 bytes");
  case 4:
    throw SimulationError("SimGrid refused the platform");
  default:
    throw std::runtime_error("vector::at");
  }
}

} // namespace

TEST_CASE("an error thrown in a child process comes back as its own type with its own message", "[process]")
{
  for (int kind = 0; kind < 6; ++kind) {
    std::string in_process;
    try {
      throw_kind(kind);
    } catch (const std::exception& e) {
      in_process = e.what();
    }
    for (const bool pool : {false, true}) {
      INFO("kind " << kind << (pool ? " through parallel_map" : " through run_in_child"));
      std::cout << "expected: " << in_process << "\n";
      try {
        if (pool)
          process::parallel_map(5, 2, [&](std::size_t i) { return i == 3 ? throw_kind(kind) : std::to_string(i); });
        else
          process::run_in_child([&] { return throw_kind(kind); });
        FAIL("nothing thrown");
      } catch (const SpecError& e) {
        // A SpecError, InfeasibleError or TraceError keeps its type, file, place and detail.
        const auto* infeasible = dynamic_cast<const InfeasibleError*>(&e);
        const bool trace       = dynamic_cast<const TraceError*>(&e) != nullptr;
        std::cout << "actual:   "
                  << (infeasible ? "InfeasibleError"
                      : trace    ? "TraceError"
                                 : "SpecError")
                  << ": " << e.what() << "\n";
        const std::string file[]   = {"spec.json", "job.json", "", "rank.0.et"};
        const std::string place[]  = {kPath, "$.parallelism", "", "node 12"};
        const std::string detail[] = {escape_controls(kDetail), "needs 91.2 GiB of 80 GiB", "", "a send of -5 bytes"};
        REQUIRE((kind == 0 || kind == 1 || kind == 3));
        CHECK((kind == 1) == (infeasible != nullptr));
        CHECK((kind == 3) == trace);
        CHECK((!infeasible || infeasible->reason() == "memory"));
        CHECK(e.file() == file[kind]);
        CHECK(e.json_path() == place[kind]);
        CHECK(e.detail() == detail[kind]);
        CHECK(std::string(e.what()) == in_process);
      } catch (const UsageError& e) {
        std::cout << "actual:   UsageError: " << e.what() << "\n";
        CHECK(kind == 2);
        CHECK(std::string(e.what()) == in_process);
      } catch (const SimulationError& e) {
        std::cout << "actual:   SimulationError: " << e.what() << "\n";
        // Errors of other types keep their message, after the item that threw (parallel_map).
        CHECK(kind >= 4);
        CHECK(std::string(e.what()) == (pool ? "item 3: " : "") + in_process);
      }
    }
  }
}

TEST_CASE("parallel_map returns results in index order whatever the workers", "[process]")
{
  for (const int workers : {1, 3, 8}) {
    const auto out = process::parallel_map(7, workers, [](std::size_t i) { return std::to_string(i * i); });
    REQUIRE(out.size() == 7);
    for (std::size_t i = 0; i < out.size(); ++i)
      CHECK(out[i] == std::to_string(i * i));
  }
}

TEST_CASE("an error text that is not what encode_error writes is a SimulationError", "[process]")
{
  for (const std::string text : {"", "S", "S3:abc", "Sx:abc", "S99:abc", "U3:abc4:more", "I1:a1:b"}) {
    INFO("encoded \"" << text << "\"");
    CHECK_THROWS_AS(rethrow_error(text), SimulationError);
  }
  CHECK_THROWS_WITH(rethrow_error("U5:--out"), "--out");
}

TEST_CASE("a worker that dies loses only its item when parallel_map is told what a lost item gives", "[process]")
{
  // Worker 1 of 2 takes items 1, 3, 5, 7 and dies on 3 (SIGKILL, as the OOM killer sends): 3 gets on_lost's
  // result, a new worker does 5 and 7, and worker 0's items are untouched.
  auto fn = [](std::size_t i) {
    if (i == 3)
      ::raise(SIGKILL);
    return std::to_string(i * i);
  };
  process::MapOptions options;
  std::vector<std::size_t> lost;
  options.on_lost = [&](std::size_t i, const std::string& why) {
    lost.push_back(i);
    return "lost: " + why;
  };
  const auto out = process::parallel_map(9, 2, fn, {}, options);
  REQUIRE(out.size() == 9);
  CHECK(lost == std::vector<std::size_t>{3});
  std::cout << "expected: lost: its worker process died with signal 9 (...)\nactual:   " << out[3] << "\n";
  CHECK(out[3].rfind("lost: its worker process died with signal 9", 0) == 0);
  for (std::size_t i = 0; i < out.size(); ++i)
    if (i != 3)
      CHECK(out[i] == std::to_string(i * i));
  // Without on_lost a death still throws, naming the item.
  try {
    process::parallel_map(9, 2, fn);
    FAIL("nothing thrown");
  } catch (const SimulationError& e) {
    std::cout << "thrown: " << e.what() << "\n";
    CHECK(std::string(e.what()).find("item 3: its worker process died with signal 9") != std::string::npos);
  }
}

TEST_CASE("a worker's memory limit makes an allocation past it throw in that worker only", "[process]")
{
  // 1 GiB more than the worker holds at the start cannot fit under a limit of 256 MiB over it; 1 MiB can.
  process::MapOptions options;
  options.memory_limit = test::data_segment_bytes() + 256.0 * 1024 * 1024;
  const auto out       = process::parallel_map(
            2, 2,
            [](std::size_t i) {
        try {
          std::vector<char> block(i == 0 ? std::size_t{1} << 20 : std::size_t{1} << 30, 1);
          return std::string("held ") + std::to_string(block.size());
        } catch (const std::bad_alloc&) {
          return std::string("out of memory");
        }
      },
            {}, options);
  std::cout << "expected: held 1048576 | out of memory\nactual:   " << out[0] << " | " << out[1] << "\n";
  CHECK(out[0] == "held 1048576");
  CHECK(out[1] == "out of memory");
}
