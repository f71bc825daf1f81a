/// @file
/// @brief Replays inputs through a fuzz target without libFuzzer: each argument is a file or a folder of files.
/// The normal build links every target with this driver so that the seeds and the regression inputs of
/// tests/data/fuzz run in the test suite with any compiler. Inputs before `--may-refuse` are seeds: they must
/// parse (a refused seed means the harness or the examples broke); inputs after it may be refused.

#include "fuzz/fuzz.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

int replay(const std::filesystem::path& file)
{
  std::ifstream in(file, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    std::fprintf(stderr, "cannot read %s\n", file.c_str());
    return 1;
  }
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return 0;
}

} // namespace

int main(int argc, char** argv)
{
  std::size_t inputs = 0;
  bool may_refuse    = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--may-refuse") {
      may_refuse = true;
      continue;
    }
    const std::filesystem::path arg(argv[i]);
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(arg)) {
      for (const auto& e : std::filesystem::directory_iterator(arg))
        if (e.is_regular_file())
          files.push_back(e.path());
    } else {
      files.push_back(arg);
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      const std::size_t refused = spansim::fuzz::refused_count();
      if (replay(f) != 0)
        return 1;
      if (!may_refuse && spansim::fuzz::refused_count() != refused) {
        std::fprintf(stderr, "seed %s was refused (run with SPANSIM_FUZZ_VERBOSE=1 to see why)\n", f.c_str());
        return 1;
      }
      ++inputs;
    }
  }
  std::printf("%zu inputs replayed without a finding (%zu refused as bad input)\n", inputs,
              spansim::fuzz::refused_count());
  return 0;
}
