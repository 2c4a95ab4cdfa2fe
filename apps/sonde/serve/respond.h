#pragma once
// Response bodies of sonde serve: OpenAI's completion, chat completion and error objects, their
// streamed chunks, and sonde's activations (docs/serve.md).
#include "service.h"

#include <nlohmann/json.hpp>

#include <string>

namespace sonde::serve {

nlohmann::json error_body(const ApiError& e);
std::string base64(const void* data, std::size_t bytes);

// ApiError when a job ended without its result: 400 (the loop refused the request), 503
// (cancelled: the server is stopping), 500 (a failure).
void check_outcomes(const Submitted& s);

// Once every job has ended.
nlohmann::json completion_body(Service& svc, const ParsedRequest& req, const Submitted& s);
nlohmann::json chat_body(Service& svc, const ParsedRequest& req, const Submitted& s);
nlohmann::json activations_body(Service& svc, const ParsedRequest& req, const Submitted& s);

// Per hook: shape [rows, *row], dtype, the rows table and the values (base64 of little-endian f32).
nlohmann::json activations_json(const CapturedPrompt& cap, const CaptureSpec& spec);

// Streaming: one chunk's text for a token (the stop-string filter applied by the caller), and
// the chunk objects.
std::string token_text(Service& svc, std::int32_t id);
nlohmann::json logprobs_entry(Service& svc, const Scored& s, bool chat);
std::string finish_reason_name(const std::string& loop_reason);
nlohmann::json usage_json(const Submitted& s);
std::string response_id(Service& svc, const char* prefix);
std::int64_t unix_time();

}  // namespace sonde::serve
