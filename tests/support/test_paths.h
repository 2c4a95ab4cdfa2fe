#pragma once
// Where tests find ../shared, tests/data and the build tree. A test that needs ../shared has a
// suite name ending in "Shared" (registered only when ../shared is present, tests/CMakeLists.txt).
// A test that needs an optional package calls SONDE_REQUIRE_PACKAGE: the skip says "missing
// package", which tests/skip_report.py lists and CI counts as a failure.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

namespace sonde::test {

inline std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("SONDE_SHARED_DIR")) return env;
  return SONDE_SHARED_DIR;
}
inline std::filesystem::path data_dir() { return SONDE_TEST_DATA_DIR; }
inline std::filesystem::path bin_dir() { return SONDE_BIN_DIR; }
inline std::filesystem::path plugin_root() { return SONDE_PLUGIN_ROOT_DIR; }
inline std::filesystem::path fixture_plugin_dir() { return SONDE_FIXTURE_PLUGIN_DIR; }
inline std::filesystem::path sonde_exe() { return bin_dir() / "sonde"; }

namespace detail {

// Removes the directories temp_dir() handed to a test when it ends, except a failed test's,
// whose place is printed. SONDE_KEEP_TEST_FILES=1 keeps them all.
struct TempDirCleaner : ::testing::EmptyTestEventListener {
  std::vector<std::filesystem::path> dirs;
  void OnTestEnd(const ::testing::TestInfo& info) override {
    const bool failed = info.result() != nullptr && info.result()->Failed();
    const bool keep = failed || std::getenv("SONDE_KEEP_TEST_FILES") != nullptr;
    for (const auto& d : dirs) {
      std::error_code ec;
      if (failed && std::filesystem::exists(d, ec))
        std::cerr << "[   KEPT   ] the files of the failed test are in " << d.string() << "\n";
      if (!keep) std::filesystem::remove_all(d, ec);
    }
    dirs.clear();
  }
};

inline TempDirCleaner& temp_dir_cleaner() {
  static TempDirCleaner* cleaner = [] {
    auto* c = new TempDirCleaner;  // owned by gtest's listener list from here on
    ::testing::UnitTest::GetInstance()->listeners().Append(c);
    return c;
  }();
  return *cleaner;
}

}  // namespace detail

// A fresh empty directory under the system temp dir, named after the running test; removed when
// the test passes, kept (and named on stderr) when it fails.
inline std::filesystem::path temp_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  for (char& c : name)
    if (c == '/') c = '_';
  auto dir = std::filesystem::temp_directory_path() / "sonde-tests" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto& dirs = detail::temp_dir_cleaner().dirs;
  if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
  return dir;
}

// A directory for inputs shared by the tests of one process (models, references), removed when
// the process exits.
inline const std::filesystem::path& process_temp_dir() {
  struct Root {
    std::filesystem::path path;
    ~Root() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Root root{[] {
    auto p = std::filesystem::temp_directory_path() / "sonde-tests" / ("process-" + std::to_string(::getpid()));
    std::filesystem::remove_all(p);
    std::filesystem::create_directories(p);
    return p;
  }()};
  return root.path;
}

}  // namespace sonde::test

#define SONDE_REQUIRE_PACKAGE(present, package)                                                       \
  do {                                                                                                \
    if (!(present)) GTEST_SKIP() << "skipped: missing package " << (package);                         \
  } while (0)

#define SONDE_REQUIRE_SHARED(rel)                                                           \
  do {                                                                                      \
    if (!std::filesystem::exists(::sonde::test::shared_dir() / (rel)))                      \
      GTEST_SKIP() << "skipped: " << (::sonde::test::shared_dir() / (rel)).string()         \
                   << " is absent (../shared is not beside the checkout)";                  \
  } while (0)
