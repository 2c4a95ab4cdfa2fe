#pragma once
// One logger for the whole process: core owns spdlog's default logger, and every plugin links
// the same shared spdlog, so plugin messages share the host's level and pattern (toolchain §3).
#include <spdlog/spdlog.h>

#include <string_view>

namespace sonde {
// level: trace, debug, info, warn, error, off. Messages go to stderr.
void init_logging(std::string_view level);
}  // namespace sonde
