// Fuzz target: the JSONL request reader (read_dataset) on arbitrary file contents. Strict reading
// either succeeds or fails with a BadInput error naming a line; lenient reading (--skip-bad-lines)
// never fails except for a file with no request, and when strict reading succeeds both agree.
#include <sonde/dataset.h>
#include <sonde/error.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_hooks.h"
#include "fuzz_support.h"

namespace {

[[noreturn]] void broken(const char* what) { sonde::fuzz::broken("dataset", what); }

const std::filesystem::path& scratch() {
  static const sonde::fuzz::ScratchFile file("dataset", ".jsonl");  // removed at exit
  return file.path();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    std::ofstream out(scratch(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  std::optional<sonde::Dataset> strict, lenient;
  try {
    strict = sonde::read_dataset(scratch(), false);
  } catch (const sonde::Error& e) {
    if (e.kind() != sonde::ErrorKind::BadInput) broken("strict: a runtime error, not bad input");
    if (std::string(e.what()).find(scratch().string()) == std::string::npos) broken("strict: the error does not name the file");
  }
  try {
    lenient = sonde::read_dataset(scratch(), true);
  } catch (const sonde::Error& e) {
    if (e.kind() != sonde::ErrorKind::BadInput) broken("lenient: a runtime error, not bad input");
    if (strict) broken("lenient reading failed where strict reading succeeded");
  }
  if (strict) {
    if (strict->requests.empty()) broken("strict: no request but no error");
    if (!strict->skipped.empty()) broken("strict: lines skipped");
    if (!lenient || lenient->requests.size() != strict->requests.size() || !lenient->skipped.empty())
      broken("lenient and strict readings differ on a good file");
    for (std::size_t i = 0; i < strict->requests.size(); ++i)
      if (strict->requests[i].id != lenient->requests[i].id) broken("ids differ between readings");
  }
  return 0;
}

std::vector<std::string> sonde_fuzz_seeds() {
  return {"{\"id\": \"a\", \"prompt\": \"Hello\"}\n{\"id\": 2, \"ids\": [1, 2, 3], \"max_new_tokens\": 4}\n",
          "{\"id\": \"c\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"temperature\": 0.7, \"top_p\": 0.9}\n",
          "{\"id\": \"d\", \"ids\": [5], \"alg\": \"entropy\", \"steps\": 8, \"seed\": 3}\n\n{not json\n",
          "{\"id\": \"e\", \"prompt\": \"x\", \"colour\": 3}\n{\"id\": \"e\", \"prompt\": \"y\"}\n"};
}
