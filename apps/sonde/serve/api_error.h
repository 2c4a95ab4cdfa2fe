#pragma once
// A request the server refuses: its HTTP status and the OpenAI error object's fields
// ({"error": {"message", "type", "param", "code"}}). Thrown while a request is parsed or
// prepared; the handler turns it into the response. Nothing else about the server changes.
#include <stdexcept>
#include <string>

namespace sonde::serve {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string param, const std::string& message, std::string type = "invalid_request_error")
      : std::runtime_error(message), status(status), param(std::move(param)), type(std::move(type)) {}
  int status;
  std::string param;  // the request field at fault ("" for none)
  std::string type;   // invalid_request_error, authentication_error, rate_limit_error, server_error
};

// 400 naming `field`: the message reads "field: what".
[[noreturn]] inline void bad_field(const std::string& field, const std::string& what) {
  throw ApiError(400, field, field + ": " + what);
}

}  // namespace sonde::serve
