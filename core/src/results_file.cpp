#include <sonde/error.h>
#include <sonde/results_file.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <unistd.h>

namespace sonde {

ResultsFile::ResultsFile(const std::filesystem::path& path, bool resume, std::uint64_t keep_bytes, bool durable)
    : path_(path), durable_(durable) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) runtime_error("results file: cannot open {} for writing: {}", path.string(), std::strerror(errno));
  const auto have = static_cast<std::uint64_t>(std::filesystem::file_size(path));
  if (resume && have < keep_bytes)
    runtime_error("resume: {} holds {} bytes but the activation file committed {}; the results file was changed",
                  path.string(), have, keep_bytes);
  size_ = resume ? keep_bytes : 0;
  // Lines past the mark belong to prompts that were not committed: they are written again.
  if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0 || ::lseek(fd_, static_cast<off_t>(size_), SEEK_SET) < 0)
    runtime_error("results file: cannot truncate {} to {} bytes: {}", path.string(), size_, std::strerror(errno));
}

ResultsFile::~ResultsFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::uint64_t ResultsFile::commit() {
  std::size_t done = 0;
  while (done < pending_.size()) {
    const auto n = ::write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = std::strerror(errno);
      // Cut the partial write off: the file must end at a committed line boundary.
      if (::ftruncate(fd_, static_cast<off_t>(size_)) == 0) ::lseek(fd_, static_cast<off_t>(size_), SEEK_SET);
      runtime_error("results file: writing {} failed: {} (results up to byte {} are committed; resuming continues from there)", path_.string(), why, size_);
    }
    done += static_cast<std::size_t>(n);
  }
  if (durable_ && ::fsync(fd_) != 0) runtime_error("results file: fsync of {} failed: {}", path_.string(), std::strerror(errno));
  size_ += pending_.size();
  pending_.clear();
  return size_;
}

ResultsMark complete_lines(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  ResultsMark m;
  std::uint64_t at = 0;
  for (char c; in.get(c);) {
    ++at;
    if (c == '\n') {
      ++m.lines;
      m.bytes = at;
    }
  }
  return m;
}

}  // namespace sonde
