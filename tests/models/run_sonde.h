#pragma once
// Runs the sonde program as a user would and captures its exit code and output.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace sonde::test {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

RunResult run_sonde(const std::vector<std::string>& args);
// `sonde generate ARGS --json`-style runs: the JSON object lines of a run that must succeed
// (a failing exit code is a test failure that shows the output).
std::vector<nlohmann::json> generate_json(std::vector<std::string> args);
std::string join_ids(const std::vector<std::int64_t>& ids);
// Backends built in this tree (reference, cpu-blas, ...), from `sonde plugins --json`.
std::vector<std::string> built_backends();

}  // namespace sonde::test
