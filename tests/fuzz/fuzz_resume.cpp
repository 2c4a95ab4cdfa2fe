// Fuzz target: the resume metadata of a results file. complete_lines() marks where a resumed run
// continues; on any content (torn last line, NULs, no newline) the mark must cover exactly the
// complete lines, and a ResultsFile reopened at that mark must keep exactly those bytes.
#include <sonde/error.h>
#include <sonde/results_file.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_hooks.h"
#include "fuzz_support.h"

namespace {

[[noreturn]] void broken(const char* what) { sonde::fuzz::broken("resume", what); }

const std::filesystem::path& scratch() {
  static const sonde::fuzz::ScratchFile file("resume", ".jsonl");  // removed at exit
  return file.path();
}

std::string slurp() {
  std::ifstream in(scratch(), std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  {
    std::ofstream out(scratch(), std::ios::binary | std::ios::trunc);
    out << input;
  }
  const auto m = sonde::complete_lines(scratch());
  const auto last_nl = input.rfind('\n');
  const std::uint64_t want_bytes = last_nl == std::string::npos ? 0 : last_nl + 1;
  if (m.bytes != want_bytes) broken("the mark does not end after the last newline");
  if (m.lines != std::count(input.begin(), input.begin() + static_cast<std::ptrdiff_t>(want_bytes), '\n'))
    broken("the mark's line count is not the number of complete lines");
  {
    sonde::ResultsFile f(scratch(), true, m.bytes, false);
  }
  if (slurp() != input.substr(0, want_bytes)) broken("a resumed results file does not hold exactly the committed lines");
  return 0;
}

std::vector<std::string> sonde_fuzz_seeds() {
  return {"{\"id\": \"a\", \"completion\": \"x\"}\n{\"id\": \"b\", \"compl",
          "{\"id\": \"a\"}\n{\"id\": \"b\"}\n",
          std::string("\x00\n\x00", 3),
          "no newline at all"};
}
