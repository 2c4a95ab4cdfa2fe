#pragma once
// Helpers shared by the safetensors reader and the weight source: one-line, safe quoting of
// user-supplied names and values for error messages.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace sonde::safetensors_detail {

constexpr std::size_t kMaxShown = 80;

// Quotes a user-supplied string for a one-line message: control bytes escaped, long values cut.
inline std::string shown(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, kMaxShown)) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) out += fmt::format("\\x{:02x}", u);
    else out += c;
  }
  if (s.size() > kMaxShown) out += "...";
  return out;
}

inline std::string shown_json(const nlohmann::json& v) {
  return shown(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace sonde::safetensors_detail
