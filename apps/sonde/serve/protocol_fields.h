#pragma once
// The request parser's shared pieces (protocol.cpp, protocol_extensions.cpp): typed reads of a
// body's fields, each refusing a bad value with a 400 naming the field.
#include "protocol.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace sonde::serve::protocol_impl {

std::string shown(const nlohmann::json& v);  // a value for a message, cut at 60 characters
bool present(const nlohmann::json& body, const char* key);  // there and not null
std::int64_t whole(const nlohmann::json& body, const char* key, std::int64_t lo, std::int64_t hi);
double number(const nlohmann::json& body, const char* key);  // finite
bool flag(const nlohmann::json& body, const char* key);      // absent: false
std::string text(const nlohmann::json& body, const char* key);

// protocol_extensions.cpp: hooks, positions, diffusion_capture, storage, activations_file; edits
// and steer.
void capture_of(const nlohmann::json& body, ParsedRequest& out, const ModelTraits& m);
void edits_of(const nlohmann::json& body, ParsedRequest& out, const ModelTraits& m);

}  // namespace sonde::serve::protocol_impl
