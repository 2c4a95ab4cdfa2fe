#include "h5clear.h"

#include <sonde/error.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <vector>
#include <cerrno>
#include <cstring>
#include <fstream>

extern char** environ;

namespace sonde::hdf5 {
namespace {

struct Spawned {
  int status = 0;
  int spawn_errno = 0;
  std::string output;
};

Spawned run_capturing(std::vector<std::string> args) {
  Spawned r;
  int fds[2];
  if (::pipe(fds) != 0) {
    r.spawn_errno = errno;
    return r;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  r.spawn_errno = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  std::array<char, 4096> buf;
  for (ssize_t n; (n = ::read(fds[0], buf.data(), buf.size())) > 0;) r.output.append(buf.data(), static_cast<std::size_t>(n));
  ::close(fds[0]);
  if (r.spawn_errno == 0) ::waitpid(pid, &r.status, 0);
  return r;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s.empty() ? "no output" : s;
}

}  // namespace

void clear_status_flags(const std::string& path) {
  const Spawned r = run_capturing({"h5clear", "-s", "--increment", path});
  if (r.spawn_errno == ENOENT)
    runtime_error("cannot resume {}: its writer was killed and the file must be repaired with `h5clear -s --increment`, "
                  "but h5clear is not installed (Debian/Ubuntu package hdf5-tools)", path);
  if (r.spawn_errno != 0)
    runtime_error("cannot resume {}: cannot run h5clear ({})", path, std::strerror(r.spawn_errno));
  if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0)
    runtime_error("cannot resume {}: `h5clear -s --increment {}` failed (status {}): {}", path, path, r.status,
                  one_line(r.output));
}

bool looks_like_hdf5(const std::string& path) {
  static const char signature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  char head[8] = {};
  std::ifstream in(path, std::ios::binary);
  return in.read(head, sizeof head) && std::memcmp(head, signature, sizeof head) == 0;
}

}  // namespace sonde::hdf5
