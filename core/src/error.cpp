#include <sonde/backend.h>
#include <sonde/error.h>
#include <sonde/plugin.h>

namespace sonde {

Error::Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
// Out of line: the key functions that pin these type_infos and vtables to libsonde_core.so.
Error::~Error() = default;
Plugin::~Plugin() = default;
ProcessGroup::~ProcessGroup() = default;

}  // namespace sonde
