#include "expect.h"

#include <algorithm>
#include <cctype>

namespace sonde::test {

bool contains_nocase(const std::string& text, const std::string& word) {
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
  };
  return lower(text).find(lower(word)) != std::string::npos;
}

::testing::AssertionResult one_line_error(const Outcome& o, const std::string& command,
                                          std::initializer_list<std::string> all,
                                          std::initializer_list<std::string> problem) {
  auto fail = [&](const std::string& why) { return ::testing::AssertionFailure() << why << "\n" << o.describe(); };
  if (o.timed_out) return fail("the program hung");
  if (o.signal) return fail("the program crashed");
  if (o.exit_code != 2) return fail("expected exit code 2");
  if (!o.out.empty()) return fail("expected nothing on stdout");
  const auto lines = lines_of(o.err);
  if (lines.size() != 1 || o.err.back() != '\n') return fail("expected exactly one line on stderr");
  const std::string& line = lines[0];
  const std::string prefix = "sonde " + command + ": error: ";
  if (line.rfind(prefix, 0) != 0) return fail("expected the line to start with '" + prefix + "'");
  for (const char* noise : {"HDF5-DIAG", "terminate called", "what():", "Aborted", "#0 "})
    if (line.find(noise) != std::string::npos) return fail(std::string("the line contains '") + noise + "'");
  for (const auto& s : all)
    if (line.find(s) == std::string::npos) return fail("expected the line to contain '" + s + "'");
  if (problem.size() && std::none_of(problem.begin(), problem.end(), [&](const std::string& w) { return contains_nocase(line, w); })) {
    std::string words;
    for (const auto& w : problem) words += " '" + w + "'";
    return fail("expected the line to name the problem with one of:" + words);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace sonde::test
