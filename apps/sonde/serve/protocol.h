#pragma once
// The request bodies of sonde serve (docs/serve.md) parsed into the run layer's types: OpenAI's
// fields for /v1/completions and /v1/chat/completions, Dream's diffusion fields, and sonde's
// extensions (hooks, edits, steer) for those and for /v1/activations. Pure: no Session, no engine
// (the fuzz target runs it alone). Every refusal is an ApiError 400 naming the field.
#include "api_error.h"

#include <sonde/edit_spec.h>
#include <sonde/request.h>
#include <sonde/run.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace sonde::serve {

enum class Endpoint { Completions, Chat, Activations };

// What the parser needs to know of the served model and the server's limits.
struct ModelTraits {
  bool diffusion = false;
  bool tokenizer = false;
  bool chat_template = false;
  std::int64_t vocab_size = 0;
  std::int64_t max_tokens_cap = 4096;      // --max-tokens-cap
  std::int64_t default_max_tokens = 16;    // when a request gives none (OpenAI's default)
  std::int64_t max_prompts = 64;           // prompts of one /v1/completions request
  std::filesystem::path files_dir;         // --files-dir (canonical); empty: no files at all
};

// A vector given inline in a request ("vector": [0.1, ...]) for edit number `edit`.
struct InlineVector {
  std::size_t edit = 0;
  std::vector<float> values;
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::vector<Request> prompts;      // one per choice
  bool stream = false, include_usage = false, echo = false;
  int logprobs = -1;                 // -1: none; k >= 0: each token's log-probability and the top k
  std::int64_t max_tokens = 16;      // 0: no generation (with echo and logprobs: the prompt's scores)
  CaptureSettings capture;           // hooks "" captures nothing
  std::string activations_file;      // absolute, under files_dir: the rows go there, not into the response
  std::vector<EditSpec> edits;       // edits then steer; file sources made absolute under files_dir
  std::vector<InlineVector> inline_vectors;
  bool logits = false;               // /v1/activations: the logits too
};

ParsedRequest parse_request(Endpoint endpoint, const nlohmann::json& body, const ModelTraits& model);

// `path` (relative paths are taken from files_dir) if it lies under files_dir once symbolic
// links are resolved; else 400 naming `field`.
std::filesystem::path file_under(const std::filesystem::path& files_dir, const std::string& path, const std::string& field);

}  // namespace sonde::serve
