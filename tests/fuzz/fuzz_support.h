#pragma once
// What the fuzz targets share: how a broken invariant is reported (a message and abort(), which
// libFuzzer and the replay driver both treat as a finding) and a scratch file for targets whose
// code under test reads a path, removed when the process exits.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace sonde::fuzz {

[[noreturn]] inline void broken(const char* target, const char* what) {
  std::fprintf(stderr, "%s invariant broken: %s\n", target, what);
  std::abort();
}

// One file per process (fuzzers may run several in one folder), named after the target.
class ScratchFile {
 public:
  ScratchFile(const std::string& target, const std::string& extension) {
    std::string name = "sonde-fuzz-";  // appended piecewise: GCC 12 warns wrongly (-Wrestrict) on a + chain
    name.append(target).append("-").append(std::to_string(::getpid())).append(extension);
    path_ = std::filesystem::temp_directory_path() / name;
  }
  ~ScratchFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace sonde::fuzz
