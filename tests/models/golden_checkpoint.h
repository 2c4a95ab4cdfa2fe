#pragma once
// The checkpoint a golden file was computed on: `sonde make-model` with the golden's
// make_model_args, made once per test process and checked against its model_sha256 (make-model
// giving other bytes makes every comparison meaningless, so it names the script to run again).
#include <nlohmann/json.hpp>
#include <sonde/model_dir.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {

inline std::filesystem::path make_golden_checkpoint(const nlohmann::json& golden, const std::string& dir_name,
                                                    const std::string& goldens, const std::string& script) {
  const auto d = process_temp_dir() / dir_name;
  std::filesystem::remove_all(d);
  std::vector<std::string> mm{"make-model"};
  for (const auto& a : golden["make_model_args"]) mm.push_back(a.get<std::string>());
  mm.insert(mm.end(), {"--out", d.string()});
  const auto r = run_sonde(mm);
  if (r.exit_code != 0) throw std::runtime_error("make-model failed: " + r.output);
  if (sonde::sha256_file(d / "model.safetensors") != golden["model_sha256"].get<std::string>())
    throw std::runtime_error("make-model no longer gives the checkpoint of the " + goldens + "; regenerate with " +
                             "/usr/bin/python3 tests/reference/" + script);
  return d;
}

// A golden's number as a flag's value, every digit kept.
inline std::string golden_number(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

// The reference scripts' summary of a logits row: columns 0, 128, ..., the max and the logsumexp.
inline std::vector<double> logits_row_summary(const float* row, std::int64_t V) {
  std::vector<double> out;
  for (std::int64_t v = 0; v < V; v += 128) out.push_back(row[v]);
  double mx = -INFINITY, sum = 0;
  for (std::int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
  for (std::int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
  out.push_back(mx);
  out.push_back(mx + std::log(sum));
  return out;
}

}  // namespace sonde::test
