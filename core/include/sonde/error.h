#pragma once
// sonde::Error is the only exception type that crosses a plugin boundary. Its key function lives
// in libsonde_core.so so that every plugin shares one type_info.
#include <fmt/core.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace sonde {

enum class ErrorKind {
  Runtime = 1,   // the program failed: exit code 1
  BadInput = 2,  // the user's input or files are wrong: exit code 2
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message);
  // An error in one setting: what() is "setting: detail". A front end that names the setting its
  // own way (the CLI's --hooks, Python's hooks=) puts its name before detail() instead, so the
  // setting is named once.
  Error(ErrorKind kind, const std::string& setting, const std::string& detail);
  ~Error() override;
  ErrorKind kind() const noexcept { return kind_; }
  int exit_code() const noexcept { return static_cast<int>(kind_); }
  const std::string& setting() const noexcept { return setting_; }  // empty: not one setting's
  const std::string& detail() const noexcept { return detail_; }    // the message after "setting: "

 private:
  ErrorKind kind_;
  std::string setting_, detail_;
};

// bad_input("{}: field '{}' is {}", path, field, value): one line naming file, field and value.
template <typename... Args>
[[noreturn]] void bad_input(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ErrorKind::BadInput, fmt::format(f, std::forward<Args>(args)...));
}

// bad_setting("positions", "'{}' is not one of ...", text): "positions: 'x' is not one of ...".
template <typename... Args>
[[noreturn]] void bad_setting(const char* setting, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ErrorKind::BadInput, setting, fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void runtime_error(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ErrorKind::Runtime, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace sonde
