// Output files are written under unpredictable temporary names and renamed into place: a symlink planted at an
// output's name is replaced, never written through; a failed write leaves the old file.
#include "common/error.hpp"
#include "common/paths.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p)
{
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Scratch {
  fs::path dir;
  Scratch() : dir(fs::temp_directory_path() / ("spansim-paths-" + std::to_string(::getpid())))
  {
    fs::remove_all(dir);
    fs::create_directories(dir / "out");
  }
  ~Scratch() { fs::remove_all(dir); }
};

} // namespace

TEST_CASE("a symlink planted at an output's name is replaced, not written through", "[paths]")
{
  Scratch s;
  const auto victim = s.dir / "victim.txt";
  std::ofstream(victim) << "keep me\n";
  const auto out = s.dir / "out" / "summary.json";
  fs::create_symlink(victim, out);
  // The temporary name an earlier version used (PATH.tmp-PID): planted too, it must not be followed.
  fs::create_symlink(victim, out.string() + ".tmp-" + std::to_string(::getpid()));
  spansim::write_file_replacing(out.string(), "{}\n");
  CHECK(slurp(victim) == "keep me\n");
  CHECK(fs::is_regular_file(fs::symlink_status(out)));
  CHECK(slurp(out) == "{}\n");
}

TEST_CASE("an executable output gets its mode on a file of its own, never on a planted target", "[paths]")
{
  Scratch s;
  const auto victim = s.dir / "victim.sh";
  std::ofstream(victim) << "echo keep\n";
  fs::permissions(victim, fs::perms::owner_read | fs::perms::owner_write);
  const auto script = s.dir / "out" / "array.sh";
  fs::create_symlink(victim, script);
  spansim::write_file_replacing(script.string(), "#!/bin/sh\n", 0755);
  CHECK(slurp(victim) == "echo keep\n");
  CHECK((fs::status(victim).permissions() & fs::perms::owner_exec) == fs::perms::none);
  CHECK(fs::is_regular_file(fs::symlink_status(script)));
  CHECK((fs::status(script).permissions() & fs::perms::owner_exec) != fs::perms::none);
}

TEST_CASE("an output left uncommitted leaves the old file and no temporary", "[paths]")
{
  Scratch s;
  const auto out = s.dir / "out" / "layers.csv";
  std::ofstream(out) << "old\n";
  {
    spansim::ReplacingFile f(out.string());
    f.stream() << "new, half written";
  }
  CHECK(slurp(out) == "old\n");
  int entries = 0;
  for (const auto& e : fs::directory_iterator(s.dir / "out")) {
    INFO(e.path());
    ++entries;
  }
  CHECK(entries == 1);
  // Two temporaries of one process for one path never share a name.
  const auto a = spansim::create_temporary(out.string());
  const auto b = spansim::create_temporary(out.string());
  CHECK(a.name != b.name);
  CHECK(a.name.find(".tmp-" + std::to_string(::getpid()) + "-") != std::string::npos);
  ::close(a.fd);
  ::close(b.fd);
  // A directory that cannot be written: one clear error.
  CHECK_THROWS_AS(spansim::write_file_replacing((s.dir / "missing" / "x.json").string(), "{}"), spansim::UsageError);
}
