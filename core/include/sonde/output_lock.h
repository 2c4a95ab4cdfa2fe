#pragma once
// An exclusive lock on an output path, held while a run writes it: a second run on the same
// outputs is refused instead of interleaving its writes with the first's. The lock is flock(2) on
// "<path>.lock" (which records the holder's pid for the message), so the kernel releases it when
// the holder dies, however it dies: a stale lock file of a dead process is simply taken over.
#include <string>

namespace sonde {

class OutputLock {
 public:
  // BadInput naming the path and the holder's pid if another process holds it.
  explicit OutputLock(const std::string& path);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  std::string lock_path_;
  int fd_ = -1;
};

}  // namespace sonde
