#include "spawn.h"

#include "test_paths.h"

#include <algorithm>
#include <chrono>
#include <fcntl.h>
#include <thread>
#include <fstream>
#include <signal.h>
#include <sstream>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

namespace sonde::test {

Child spawn_sonde(const std::vector<std::string>& args, const std::filesystem::path& log) {
  const std::string exe = sonde_exe().string();
  std::vector<std::string> all{exe};
  all.insert(all.end(), args.begin(), args.end());
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  return Child{pid, log};
}

void send_signal(const Child& c, int sig) { ::kill(c.pid, sig); }

namespace {
int code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}
}  // namespace

int wait_child(const Child& c) {
  int status = 0;
  ::waitpid(c.pid, &status, 0);
  return code_of(status);
}

std::optional<int> poll_child(const Child& c) {
  int status = 0;
  if (::waitpid(c.pid, &status, WNOHANG) != c.pid) return std::nullopt;
  return code_of(status);
}

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {
std::int64_t committed_lines_in(const std::filesystem::path& f) {
  const auto t = read_text(f);
  return static_cast<std::int64_t>(std::count(t.begin(), t.end(), '\n'));
}
}  // namespace

::testing::AssertionResult kill_at_lines(const std::vector<std::string>& args, const std::filesystem::path& results,
                                         std::int64_t lines, const std::filesystem::path& log) {
  const Child c = spawn_sonde(args, log);
  for (;;) {
    if (poll_child(c)) return ::testing::AssertionFailure() << "the run finished before the kill; " << read_text(log);
    if (std::filesystem::exists(results) && committed_lines_in(results) >= lines) {
      send_signal(c, SIGKILL);
      if (wait_child(c) == 128 + SIGKILL) return ::testing::AssertionSuccess();
      return ::testing::AssertionFailure() << "the run ended otherwise; " << read_text(log);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

}  // namespace sonde::test
