#include "run_sonde.h"

#include <cstdlib>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <sys/wait.h>

#include "test_paths.h"

namespace sonde::test {

namespace {
std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

RunResult run_sonde(const std::vector<std::string>& args) {
  std::string cmd = quote(sonde_exe().string());
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("cannot run " + cmd);
  RunResult r;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::vector<nlohmann::json> generate_json(std::vector<std::string> args) {
  args.insert(args.begin(), "generate");
  const auto r = run_sonde(args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<nlohmann::json> out;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] == '{') out.push_back(nlohmann::json::parse(line));
  return out;
}

std::string join_ids(const std::vector<std::int64_t>& ids) {
  std::string s;
  for (auto id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

std::vector<std::string> built_backends() {
  // Asked once per process: every parameterised suite asks at test discovery, which has a time limit.
  static const std::vector<std::string> names = [] {
  const auto r = run_sonde({"plugins", "--json"});
  if (r.exit_code != 0) throw std::runtime_error("sonde plugins failed: " + r.output);
  // SONDE_TEST_BACKENDS=threaded,...: only these (CI's sanitizer builds run the model-level
  // tests on the default backend; every backend's kernels still run there op by op, in
  // backend_ops_tests, and every backend runs every model test in the plain build).
  std::string only;
  if (const char* e = std::getenv("SONDE_TEST_BACKENDS")) only = "," + std::string(e) + ",";
  std::vector<std::string> names;
  const auto listing = nlohmann::json::parse(r.output);
  for (const auto& p : listing["plugins"])
    if (p["kind"] == "backend" && (only.empty() || only.find("," + p["name"].get<std::string>() + ",") != std::string::npos))
      names.push_back(p["name"]);
  if (names.empty()) throw std::runtime_error("no backend built is in SONDE_TEST_BACKENDS=" + only);
  return names;
  }();
  return names;
}

}  // namespace sonde::test
