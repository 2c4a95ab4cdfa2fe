#include <sonde/error.h>
#include <sonde/log.h>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace sonde {

void init_logging(std::string_view level) {
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off")
    bad_input("log level: unknown level '{}' (trace, debug, info, warn, error, off)", level);
  auto logger = spdlog::get("sonde");
  if (!logger) logger = spdlog::stderr_color_mt("sonde");
  logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(lvl);
}

}  // namespace sonde
