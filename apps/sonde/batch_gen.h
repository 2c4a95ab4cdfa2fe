#pragma once
// One micro-batch of sonde batch: requests with equal generation options run as one batch of
// the decode loop, each with its own seed, so a result does not depend on its batch-mates.
#include "batch_input.h"

#include <sonde/capture.h>
#include <sonde/decode.h>
#include <sonde/session.h>
#include <sonde/tokenizer.h>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace sonde::cli {

struct PreparedRequest {
  std::int64_t prompt_idx = 0;     // index among the input's requests
  const BatchRequest* request = nullptr;
  std::vector<std::int32_t> ids;   // the prompt's tokens
  std::string text;                // the prompt text, or the rendered chat ("" for ids)
  nlohmann::json options;          // command-line defaults overridden by the line's options
  std::uint64_t seed = 0;          // the line's seed, else --seed + prompt_idx
  std::string key;                 // requests with equal keys may share a micro-batch
};

struct RequestResult {
  std::vector<std::int32_t> completion;
  std::string text, finish_reason;
  CapturedPrompt captured;
};

// Tokenizes (prompt / messages) and checks a request against the model; throws BadInput
// naming the line. `defaults` holds the options given on the command line.
PreparedRequest prepare_request(const BatchRequest& r, std::int64_t prompt_idx, const nlohmann::json& defaults,
                                std::uint64_t base_seed, Session& s, const std::optional<Tokenizer>& tok);

std::vector<RequestResult> run_micro_batch(Session& s, DecodeForward& fwd, const std::optional<Tokenizer>& tok,
                                           const std::vector<const PreparedRequest*>& batch, const CaptureSpec& spec);

}  // namespace sonde::cli
