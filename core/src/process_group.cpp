#include <sonde/error.h>
#include <sonde/process_group.h>

#include <cstring>

namespace sonde {

// Out of line: the key function that pins ProcessGroup's type_info and vtable to libsonde_core.so.
ProcessGroup::~ProcessGroup() = default;

std::vector<std::size_t> ProcessGroup::allgather_into(std::span<const std::byte> mine, std::span<std::byte> all) {
  const auto parts = allgather(mine);
  std::vector<std::size_t> sizes;
  std::size_t total = 0;
  for (const auto& part : parts) {
    sizes.push_back(part.size());
    total += part.size();
  }
  if (total != all.size())
    runtime_error("allgather_into: the {} ranks gave {} bytes in all, the caller expected {}", parts.size(), total,
                  all.size());
  std::size_t at = 0;
  for (const auto& part : parts) {
    if (!part.empty()) std::memcpy(all.data() + at, part.data(), part.size());
    at += part.size();
  }
  return sizes;
}

}  // namespace sonde
