#pragma once
// Checkpoints made by `sonde make-model`, once per test process, in process_temp_dir() (removed at
// exit): the suite's own stand-ins for the tiny checkpoints of ../shared/golden (same shapes:
// hidden 64, 2 layers, 4 heads, 2 KV heads, vocabulary 2048).
#include <cstdlib>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_paths.h"

namespace sonde::test {

// The checkpoint of `sonde make-model <args>`, made on first use.
inline std::filesystem::path made_model_args(const std::vector<std::string>& args) {
  static std::map<std::vector<std::string>, std::filesystem::path> made;
  if (auto it = made.find(args); it != made.end()) return it->second;
  const auto dir = process_temp_dir() / ("model-" + std::to_string(made.size()));
  std::filesystem::remove_all(dir);
  std::string cmd = sonde_exe().string() + " make-model";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " --out '" + dir.string() + "' > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
  return made[args] = dir;
}

// A make-model checkpoint ("qwen2" or "dream").
inline std::filesystem::path made_model(const std::string& arch, const std::string& preset = "tiny", int seed = 1) {
  return made_model_args({"--arch", arch, "--preset", preset, "--seed", std::to_string(seed)});
}

}  // namespace sonde::test
