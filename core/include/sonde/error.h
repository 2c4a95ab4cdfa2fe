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
  ~Error() override;
  ErrorKind kind() const noexcept { return kind_; }
  int exit_code() const noexcept { return static_cast<int>(kind_); }

 private:
  ErrorKind kind_;
};

// bad_input("{}: field '{}' is {}", path, field, value): one line naming file, field and value.
template <typename... Args>
[[noreturn]] void bad_input(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ErrorKind::BadInput, fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void runtime_error(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(ErrorKind::Runtime, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace sonde
