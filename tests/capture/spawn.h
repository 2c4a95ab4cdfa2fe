#pragma once
// Starts bin/sonde as a child process (output to a log file) so that a test can signal it at a
// chosen moment: SIGINT for a graceful stop, SIGKILL for a crash.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace sonde::test {

struct Child {
  int pid = -1;
  std::filesystem::path log;
};

Child spawn_sonde(const std::vector<std::string>& args, const std::filesystem::path& log);
void send_signal(const Child& c, int sig);
// Waits for the child: its exit code, or 128 + signal when a signal ended it.
int wait_child(const Child& c);
// The same if the child has ended, without waiting; nullopt while it runs.
std::optional<int> poll_child(const Child& c);
std::string read_text(const std::filesystem::path& file);
// Runs sonde with `args` and SIGKILLs it once `results` has `lines` lines; a failure (and why)
// if it ended first or otherwise.
::testing::AssertionResult kill_at_lines(const std::vector<std::string>& args, const std::filesystem::path& results,
                                         std::int64_t lines, const std::filesystem::path& log);

}  // namespace sonde::test
