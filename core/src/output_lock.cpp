#include <sonde/error.h>
#include <sonde/output_lock.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sonde {
namespace {

std::string holder_of(int fd) {
  char buf[32] = {};
  const auto n = ::pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("unknown");
}

}  // namespace

OutputLock::OutputLock(const std::string& path) : lock_path_(path + ".lock") {
  // A holder unlinks the lock file when it lets go; a waiter that opened the old file would then
  // hold a lock nobody else sees. So after locking, the path must still name the file locked.
  for (int attempt = 0; attempt < 100; ++attempt) {
    fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      // The lock is the first thing a run creates beside its output: a missing or read-only
      // directory is the user's path, named as such (exit 2), not a failure of the program.
      const int err = errno;
      if (err == ENOENT || err == ENOTDIR || err == EACCES || err == EPERM || err == EROFS)
        bad_input("cannot write {}: {} ({})", path, std::strerror(err),
                  err == ENOENT || err == ENOTDIR ? "its directory does not exist" : "its directory is not writable");
      runtime_error("cannot create the lock file {}: {}", lock_path_, std::strerror(err));
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string pid = holder_of(fd_);
      ::close(fd_);
      fd_ = -1;
      if (err == EWOULDBLOCK)
        bad_input("{} is being written by another run (process {}); wait for it to end or stop it", path, pid);
      runtime_error("cannot lock {}: {}", lock_path_, std::strerror(err));
    }
    struct stat held {}, named {};
    if (::fstat(fd_, &held) == 0 && ::stat(lock_path_.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev) {
      const std::string pid = std::to_string(::getpid());
      if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0)
        runtime_error("cannot write the lock file {}: {}", lock_path_, std::strerror(errno));
      return;
    }
    ::close(fd_);  // unlinked under us by a holder that just let go: lock the new file
    fd_ = -1;
  }
  runtime_error("cannot lock {}: the lock file keeps being replaced", lock_path_);
}

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  ::unlink(lock_path_.c_str());  // while still holding it, so no one locks the file being removed
  ::close(fd_);
}

}  // namespace sonde
