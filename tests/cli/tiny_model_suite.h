#pragma once
// A test suite that shares one tiny make-model checkpoint: ctest runs each test in its own
// process, two at a time, so the model lives in a directory of this process's own.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "checkpoint.h"
#include "test_paths.h"

namespace sonde::test {

class TinyModelSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string suite = ::testing::UnitTest::GetInstance()->current_test_suite()->name();
    root_ = std::filesystem::temp_directory_path() / "sonde-tests" / (suite + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(root_);
    model_ = root_ / "model";
    make_tiny_model(model_);
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(root_); }
  void SetUp() override {
    dir_ = temp_dir();
    // make-model ran once for the suite; without its output every test here must fail, not skip.
    ASSERT_TRUE(std::filesystem::exists(model_ / "model.safetensors")) << "sonde make-model failed in SetUpTestSuite";
  }
  static inline std::filesystem::path root_, model_;
  std::filesystem::path dir_;
};

// The same with a tiny Qwen2 and a tiny Dream checkpoint (qwen_, dream_), for commands that take
// either family (bench).
class TwoFamilySuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string suite = ::testing::UnitTest::GetInstance()->current_test_suite()->name();
    root_ = std::filesystem::temp_directory_path() / "sonde-tests" / (suite + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(root_);
    qwen_ = root_ / "qwen2";
    dream_ = root_ / "dream";
    make_tiny_model(qwen_, "qwen2");
    make_tiny_model(dream_, "dream");
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(root_); }
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(qwen_ / "model.safetensors")) << "sonde make-model (qwen2) failed in SetUpTestSuite";
    ASSERT_TRUE(std::filesystem::exists(dream_ / "model.safetensors")) << "sonde make-model (dream) failed in SetUpTestSuite";
  }
  static inline std::filesystem::path root_, qwen_, dream_;
};

}  // namespace sonde::test
