#pragma once
// Runs bin/sonde as a user would: its own process, stdout and stderr kept apart, and a time
// limit so that a hang fails the test instead of stalling the suite.
#include <string>
#include <vector>

namespace sonde::test {

struct Outcome {
  int exit_code = -1;      // the exit status, or -1 when the process did not exit normally
  int signal = 0;          // the signal that ended it (a crash), 0 if none
  bool timed_out = false;  // killed after the time limit
  std::string out, err;
  std::string describe() const;  // for failure messages: code, signal, both streams
};

Outcome run(const std::vector<std::string>& args, int timeout_seconds = 120);

// The lines of `text` (a final newline does not start another line).
std::vector<std::string> lines_of(const std::string& text);

}  // namespace sonde::test
