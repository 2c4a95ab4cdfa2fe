#include <sonde/backend.h>
#include <sonde/error.h>
#include <sonde/plugin.h>
#include <sonde/sink.h>

namespace sonde {

Error::Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind), detail_(message) {}
Error::Error(ErrorKind kind, const std::string& setting, const std::string& detail)
    : std::runtime_error(setting + ": " + detail), kind_(kind), setting_(setting), detail_(detail) {}
// Out of line: the key functions that pin these type_infos and vtables to libsonde_core.so.
Error::~Error() = default;
Plugin::~Plugin() = default;

void Sink::join(const std::vector<std::string>& parts, const std::string& path, const RunMetadata&) {
  runtime_error("this sink cannot join the {} parts of a data-parallel run into {}", parts.size(), path);
}

}  // namespace sonde
