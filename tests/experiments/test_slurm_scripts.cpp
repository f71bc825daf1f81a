// Slurm batch scripts written from hostile paths: every #SBATCH value reaches sbatch as one argument (read by the
// rules of sbatch's own directive parser), and bash hands every argument of the exec line to spansim whole, with
// nothing in a path run as a command.
#include "common/error.hpp"
#include "common/process.hpp"
#include "experiments/campaign.hpp"
#include "experiments/slurm.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace fs = std::filesystem;
namespace ex = spansim::experiments;

namespace {

// One argument of a #SBATCH line as sbatch reads it (src/sbatch/opt.c, _get_argument): white space ends it
// outside double quotes, a backslash escapes the next character, an unescaped '#' starts a comment.
std::string sbatch_argument(const std::string& line, std::size_t& pos)
{
  while (pos < line.size() && std::isspace(static_cast<unsigned char>(line[pos])))
    ++pos;
  std::string arg;
  bool escaped = false, quoted = false;
  for (; pos < line.size() && (quoted || !std::isspace(static_cast<unsigned char>(line[pos]))); ++pos) {
    const char c = line[pos];
    if (escaped) {
      arg += c;
      escaped = false;
    } else if (c == '\\') {
      escaped = true;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == '#') {
      pos = line.size();
      break;
    } else {
      arg += c;
    }
  }
  return arg;
}

// The options of a batch script's "#SBATCH --key=value" lines, as sbatch would read them.
std::map<std::string, std::string> directives(const std::string& script)
{
  std::ifstream in(script);
  std::map<std::string, std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("#SBATCH", 0) != 0)
      continue;
    std::size_t pos        = 7;
    const std::string arg  = sbatch_argument(line, pos);
    const auto eq          = arg.find('=');
    out[arg.substr(0, eq)] = eq == std::string::npos ? "" : arg.substr(eq + 1);
    INFO("line: " << line);
    CHECK(sbatch_argument(line, pos).empty()); // one argument per line: nothing left over
  }
  return out;
}

std::vector<std::string> split_nul(const std::string& s)
{
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == '\0') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

std::string read_file(const fs::path& p)
{
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace

TEST_CASE("Slurm scripts carry hostile paths through sbatch directives and bash intact", "[slurm]")
{
  const fs::path root = fs::temp_directory_path() / ("spansim-slurm-quote-" + std::to_string(::getpid()));
  fs::remove_all(root);
  const fs::path dir = root / "a dir; $(touch pwned) `touch pwned2` 'single' \"double\" #hash %a 100% end";
  fs::create_directories(dir);
  const fs::path campaign_file = dir / "camp $HOME 'x'.json";
  fs::copy_file(std::string(SPANSIM_SOURCE_DIR) + "/tests/experiments/data/tiny-campaign.json", campaign_file);
  // A stand-in for the spansim binary: records the arguments it was given, NUL-separated.
  const fs::path stub = dir / "spansim stub";
  const fs::path got  = root / "arguments";
  {
    std::ofstream f(stub);
    f << "#!/bin/bash\nprintf '%s\\0' \"$@\" > \"$STUB_OUT\"\n";
  }
  fs::permissions(stub, fs::perms::owner_all);

  const auto campaign = ex::load_campaign(campaign_file.string());
  ex::SlurmOptions o;
  o.output     = (dir / "results 'q' $x.h5").string();
  o.spansim    = stub.string();
  o.submit     = false;
  o.tasks      = 3;
  o.partition  = "debug #1";
  o.time_limit = "30:00";
  const auto s = ex::submit_slurm(campaign, o);

  const std::string slurm_dir = fs::path(s.array_script).parent_path().string();
  std::string literal_dir;
  for (char c : slurm_dir)
    literal_dir += c == '%' ? std::string("%%") : std::string(1, c);
  for (const auto& [script, log] : {std::pair{s.array_script, "task-%a.log"}, std::pair{s.merge_script, "merge.log"}}) {
    const auto d = directives(script);
    INFO(script);
    CHECK(d.at("--output") == literal_dir + "/" + log);
    CHECK(d.at("--partition") == "debug #1");
    CHECK(d.at("--time") == "30:00");
    CHECK(d.at("--job-name").rfind("spansim-tiny-sweep", 0) == 0);
  }

  auto run = [&](const std::string& script, const std::string& task) {
    fs::remove(got);
    const auto r = spansim::process::run_program(
        {"/usr/bin/env", "STUB_OUT=" + got.string(), "SLURM_ARRAY_TASK_ID=" + task, "/bin/bash", script},
        spansim::process::Capture::output_and_errors);
    INFO(r.captured);
    REQUIRE(r.exit_code == 0);
    return split_nul(read_file(got));
  };
  CHECK(run(s.array_script, "2") ==
        std::vector<std::string>{"campaign", "run", campaign.file, "--out", s.hdf5, "--shard", "2/3", "--jobs", "1"});
  CHECK(run(s.merge_script, "0") == std::vector<std::string>{"campaign", "merge", campaign.file, "--out", s.hdf5});
  for (const char* p : {"pwned", "pwned2"}) {
    CHECK_FALSE(fs::exists(root / p));
    CHECK_FALSE(fs::exists(dir / p));
    CHECK_FALSE(fs::exists(fs::path(SPANSIM_SOURCE_DIR) / p));
  }
  fs::remove_all(root);
}

namespace {

// What submit_slurm says when it refuses `o` (scripts only, for the tiny campaign, results under a fresh folder).
std::string refusal(ex::SlurmOptions o, const std::string& results)
{
  const auto campaign =
      ex::load_campaign(std::string(SPANSIM_SOURCE_DIR) + "/tests/experiments/data/tiny-campaign.json");
  const fs::path root = fs::temp_directory_path() / ("spansim-slurm-refused-" + std::to_string(::getpid()));
  fs::remove_all(root);
  o.output         = (root / results).string();
  o.submit         = false;
  std::string what = "(not refused)";
  try {
    ex::submit_slurm(campaign, o);
  } catch (const spansim::UsageError& e) {
    what = e.what();
  }
  fs::remove_all(root);
  return what;
}

} // namespace

TEST_CASE("a results folder with a backslash is refused: Slurm would not expand the log's %a", "[slurm]")
{
  CHECK_THAT(refusal({}, "a\\b/r.h5"), Catch::Contains("holds a backslash"));
}

TEST_CASE("a #SBATCH value with a line break is refused", "[slurm]")
{
  ex::SlurmOptions o;
  o.partition = "debug\n#SBATCH --uid=0";
  CHECK_THAT(refusal(o, "r.h5"), Catch::Contains("--partition must not contain control characters"));
}
