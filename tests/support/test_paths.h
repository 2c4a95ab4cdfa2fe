#pragma once
// Where tests find ../shared, tests/data and the build tree. A test that needs ../shared calls
// SONDE_REQUIRE_SHARED(path) and is skipped, with a message, when it is absent.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

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

// A fresh empty directory under the system temp dir, named after the running test.
inline std::filesystem::path temp_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  for (char& c : name)
    if (c == '/') c = '_';
  auto dir = std::filesystem::temp_directory_path() / "sonde-tests" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace sonde::test

#define SONDE_REQUIRE_SHARED(rel)                                                           \
  do {                                                                                      \
    if (!std::filesystem::exists(::sonde::test::shared_dir() / (rel)))                      \
      GTEST_SKIP() << "skipped: " << (::sonde::test::shared_dir() / (rel)).string()         \
                   << " is absent (../shared is not beside the checkout)";                  \
  } while (0)
