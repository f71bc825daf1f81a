// Bad input as a new user or a hostile spec file would give it: every case of tests/data/bad/cases.json gives
// exactly one line on stderr, naming the file and JSON path where there is one, nothing on stdout, exit code 2.
#include "run_spansim.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sys/stat.h>

namespace fs = std::filesystem;
using cli_test::lines;
using cli_test::spansim;

namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to)
{
  for (std::size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
  return s;
}

// A scratch folder with inputs too large to keep in the repository: a FIFO that has no writer, a sparse file
// larger than the spec-file limit, a 10 GiB sparse Chakra trace and its job, a GraphML of a million vertices
// (7 MB, within the file limit), a GraphML of a million elements in one vertex and a JSON graph of 262,145
// vertices (one over the limit).
struct Scratch {
  fs::path dir;
  Scratch()
  {
    dir = fs::temp_directory_path() / ("spansim-bad-input-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    REQUIRE(::mkfifo((dir / "fifo.json").c_str(), 0600) == 0);
    fs::create_directories(dir / "a-directory.h5");
    // A Chakra rank file that is a FIFO, with its job: open() must not wait on it.
    REQUIRE(::mkfifo((dir / "fifo-trace.0.et").c_str(), 0600) == 0);
    std::ofstream(dir / "fifo-trace-job.json") << R"({"name": "fifo", "kind": "chakra", "trace": "fifo-trace"})";
    {
      // 30,000 nested elements in 211 KB: Boost's XML reader recurses once per level.
      std::ofstream g(dir / "deep.graphml");
      g << "<?xml version=\"1.0\"?>\n<graphml xmlns=\"http://graphml.graphdrawing.org/xmlns\">\n<graph>\n";
      for (int i = 0; i < 30'000; ++i)
        g << "<a>";
      for (int i = 0; i < 30'000; ++i)
        g << "</a>";
      g << "\n</graph>\n</graphml>\n";
    }
    std::ofstream(dir / "huge.json").close();
    fs::resize_file(dir / "huge.json", 70ULL * 1024 * 1024);
    std::ofstream(dir / "ten-gib.0.et").close();
    fs::resize_file(dir / "ten-gib.0.et", 10ULL << 30);
    std::ofstream(dir / "ten-gib-job.json") << R"({"name": "huge", "kind": "chakra", "trace": "ten-gib"})";
    {
      std::ofstream g(dir / "million.graphml");
      g << "<?xml version=\"1.0\"?>\n<graphml xmlns=\"http://graphml.graphdrawing.org/xmlns\">\n<graph "
           "edgedefault=\"undirected\">\n";
      for (int i = 0; i < 1'000'000; ++i)
        g << "<node id=\"" << i << "\"/>\n";
      g << "</graph>\n</graphml>\n";
    }
    {
      // Few vertices, but a million elements: Boost would hold them all.
      std::ofstream g(dir / "many-elements.graphml");
      g << "<?xml version=\"1.0\"?>\n<graphml xmlns=\"http://graphml.graphdrawing.org/xmlns\">\n<graph>\n<node "
           "id=\"a\">\n";
      for (int i = 0; i < 1'000'000; ++i)
        g << "<x/>";
      g << "</node>\n</graph>\n</graphml>\n";
    }
    {
      std::ofstream j(dir / "big-graph.json");
      j << R"({"name": "big", "regions": [{"name": "r", "buildings": ["b"]}], "graph": {"vertices": [)";
      for (int i = 0; i <= 262'144; ++i)
        j << (i ? "," : "") << R"({"id":"v)" << i << R"(","kind":"leaf"})";
      j << R"(], "links": []}})";
    }
    {
      // Values of 5,000 characters where a spec names a key, a choice and a quantity: a message echoes 200.
      const auto scenario = nlohmann::json::parse(
          std::ifstream(std::string(SPANSIM_SOURCE_DIR) + "/examples/scenarios/llama3-8b-two-regions-dp.json"));
      auto long_key                    = scenario;
      long_key[long_value()]           = 1;
      auto long_choice                 = scenario;
      long_choice["collectives"]["dp"] = long_value();
      auto long_name                   = scenario;
      long_name["name"]                = long_value() + "/";
      std::ofstream(dir / "long-key.json") << long_key.dump();
      std::ofstream(dir / "long-choice.json") << long_choice.dump();
      std::ofstream(dir / "long-name.json") << long_name.dump();
      auto topology = nlohmann::json::parse(
          std::ifstream(std::string(SPANSIM_SOURCE_DIR) + "/examples/topologies/three-building-campus.json"));
      topology["inter_building"]["bandwidth"] = "1" + long_value();
      std::ofstream(dir / "long-bandwidth.json") << topology.dump();
    }
  }
  ~Scratch() { fs::remove_all(dir); }
  /// The value that stands for any long input ({long} in the cases).
  static std::string long_value() { return std::string(5000, 'v'); }
};

std::set<std::string> files_under(const fs::path& root)
{
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file())
      out.insert(fs::relative(e.path(), root).string());
  return out;
}

} // namespace

TEST_CASE("every case of the bad-input corpus: one stderr line with file and JSON path, exit code 2", "[cli][bad]")
{
  const std::string bad = std::string(SPANSIM_SOURCE_DIR) + "/tests/data/bad";
  std::ifstream in(bad + "/cases.json");
  const auto doc = nlohmann::json::parse(in);
  Scratch scratch;
  int checked = 0;
  for (const auto& c : doc.at("cases")) {
    auto expand = [&](const std::string& s) {
      return replace_all(replace_all(replace_all(s, "{bad}", bad), "{tmp}", scratch.dir.string()), "{long}",
                         Scratch::long_value());
    };
    const auto args = expand(c.at("args").get<std::string>());
    // A bounded run: a FIFO without a writer must not hang the suite.
    auto r = cli_test::run_shell("timeout 20 " + std::string(SPANSIM_BINARY) + " " + args);
    INFO("spansim " << args << "\nexit code " << r.exit_code << "\nstderr: " << r.err << "\nstdout: " << r.out);
    CHECK(r.exit_code == c.at("exit").get<int>());
    CHECK(lines(r.err) == 1);
    // No control character from the input reaches the terminal (error messages escape them).
    CHECK(std::none_of(r.err.begin(), r.err.end() - (r.err.empty() ? 0 : 1), [](char ch) {
      const auto u = static_cast<unsigned char>(ch);
      return u < 0x20 || u == 0x7f;
    }));
    CHECK(r.err.rfind("spansim: error: ", 0) == 0);
    // No value is echoed past 200 characters: the longest run of one character stays within that.
    std::size_t run = 0, longest = 0;
    for (std::size_t i = 0; i < r.err.size(); ++i) {
      run     = i > 0 && r.err[i] == r.err[i - 1] ? run + 1 : 1;
      longest = std::max(longest, run);
    }
    CHECK(longest <= 200);
    CHECK(r.out.empty());
    for (const auto& says : c.at("says")) {
      const auto text = expand(says.get<std::string>());
      INFO("expected to contain: " << text);
      CHECK(r.err.find(text) != std::string::npos);
    }
    ++checked;
  }
  std::cout << checked << " bad-input cases checked\n";
  // A refused command leaves no temporary behind (a results file over a directory failed after its points ran).
  for (const auto& e : fs::recursive_directory_iterator(scratch.dir)) {
    INFO(e.path());
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
  }
  // The corpus the hardening issue asks for: at least 100 bad files over every format spansim reads.
  std::size_t files = 0;
  std::set<std::string> formats;
  for (const auto& e : fs::directory_iterator(bad))
    if (e.path().filename() != "cases.json") {
      ++files;
      formats.insert(e.path().extension().string());
    }
  std::cout << files << " bad input files (" << formats.size() << " file types)\n";
  CHECK(checked >= 100);
  CHECK(files >= 100);
  CHECK(formats == std::set<std::string>{".json", ".graphml", ".et", ".gz"});
}

TEST_CASE("spansim run and optimize write only inside their output directory", "[cli][bad]")
{
  // A fresh working directory: whatever the commands write appears under it, and nowhere else is touched
  // (names with '/' or '..' are refused, as the corpus shows).
  const fs::path cwd = fs::temp_directory_path() / ("spansim-out-scan-" + std::to_string(::getpid()));
  fs::remove_all(cwd);
  fs::create_directories(cwd);
  const std::string src = SPANSIM_SOURCE_DIR;
  auto r =
      spansim("run " + src + "/examples/scenarios/llama3-8b-two-regions-dp.json --fidelity analytical", cwd.string());
  REQUIRE(r.exit_code == 0);
  const auto written = files_under(cwd);
  CHECK(written == std::set<std::string>{"out/llama3-8b-two-regions-dp/summary.json",
                                         "out/llama3-8b-two-regions-dp/layers.csv",
                                         "out/llama3-8b-two-regions-dp/trace.json"});

  // The optimizer names its scenario files after the spec's name and each point: all under out/optimize/NAME.
  auto spec    = nlohmann::json::parse(std::ifstream(src + "/examples/optimize/llama3-8b-two-buildings.json"));
  spec["name"] = "tiny-search";
  spec["refine_fidelity"] = "analytical";
  spec["top_k"]           = 2;
  std::ofstream(cwd / "spec.json") << spec.dump();
  r = spansim("optimize spec.json", cwd.string());
  REQUIRE(r.exit_code == 0);
  std::size_t scenarios = 0;
  for (const auto& f : files_under(cwd)) {
    INFO(f);
    const bool expected = f == "spec.json" || f.rfind("out/llama3-8b-two-regions-dp/", 0) == 0 ||
                          f.rfind("out/optimize/tiny-search/", 0) == 0;
    CHECK(expected);
    scenarios += f.rfind("out/optimize/tiny-search/", 0) == 0;
  }
  CHECK(scenarios > 0);
  fs::remove_all(cwd);
}
