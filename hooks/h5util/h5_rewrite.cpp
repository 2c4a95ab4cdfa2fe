#include "h5_rewrite.h"

#include <sonde/error.h>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <system_error>

namespace sonde::h5 {
namespace {
void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}
}  // namespace

void replace_file(const std::string& tmp, const std::string& path, bool durable, const char* what) {
  if (durable) fsync_path(tmp);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) runtime_error("{}: cannot rename {} to {}: {}", what, tmp, path, ec.message());
  const auto dir = std::filesystem::path(path).parent_path();
  if (durable) fsync_path(dir.empty() ? "." : dir.string());
}

}  // namespace sonde::h5
