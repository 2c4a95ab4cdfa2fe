// Request bodies -> ParsedRequest (protocol.h). Types first, then meaning: a field of the wrong
// type, out of range or unknown is refused with its name; the generation settings' own checks
// (request.h) are the run layer's, so a request means here what a dataset line means to `batch`.
#include "protocol.h"
#include "protocol_fields.h"

#include <sonde/error.h>
#include <sonde/run_schema.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace sonde::serve {
namespace protocol_impl {  // named, not anonymous: unity builds join this file with others

using nlohmann::json;

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

bool present(const json& body, const char* key) { return body.contains(key) && !body.at(key).is_null(); }

std::int64_t whole(const json& body, const char* key, std::int64_t lo, std::int64_t hi) {
  const json& v = body.at(key);
  if (!v.is_number_integer() && !v.is_number_unsigned()) bad_field(key, "expected a whole number, got " + shown(v));
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
    bad_field(key, fmt::format("{} is above {}", shown(v), hi));
  const auto x = v.get<std::int64_t>();
  if (x < lo || x > hi) bad_field(key, fmt::format("{} is outside [{}, {}]", x, lo, hi));
  return x;
}

double number(const json& body, const char* key) {
  const json& v = body.at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>())) bad_field(key, "expected a number, got " + shown(v));
  return v.get<double>();
}

bool flag(const json& body, const char* key) {
  if (!present(body, key)) return false;
  if (!body.at(key).is_boolean()) bad_field(key, "expected true or false, got " + shown(body.at(key)));
  return body.at(key).get<bool>();
}

std::string text(const json& body, const char* key) {
  if (!body.at(key).is_string()) bad_field(key, "expected a string, got " + shown(body.at(key)));
  return body.at(key).get<std::string>();
}

// ---- prompts ------------------------------------------------------------------------------------

std::vector<std::int32_t> token_ids(const json& list, const std::string& field, const ModelTraits& m) {
  if (list.empty()) bad_field(field, "the list of token ids is empty");
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json& v = list[i];
    if (!v.is_number_integer() && !v.is_number_unsigned()) bad_field(field, fmt::format("entry {} is not a token id: {}", i, shown(v)));
    const bool in = v.is_number_unsigned() ? v.get<std::uint64_t>() < static_cast<std::uint64_t>(m.vocab_size)
                                           : v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() < m.vocab_size;
    if (!in) bad_field(field, fmt::format("token id {} at position {} is outside the vocabulary [0, {})", shown(v), i, m.vocab_size));
    ids.push_back(static_cast<std::int32_t>(v.get<std::int64_t>()));
  }
  return ids;
}

Request text_prompt(const std::string& s, const std::string& field, const ModelTraits& m) {
  if (!m.tokenizer) bad_field(field, "the model has no tokenizer; give token ids (a list of integers)");
  if (s.empty()) bad_field(field, "the prompt is empty");
  Request r;
  r.text = s;
  return r;
}

// OpenAI's four forms: a string, a list of strings, a list of token ids, a list of such lists.
std::vector<Request> completion_prompts(const json& body, const ModelTraits& m) {
  if (!present(body, "prompt")) bad_field("prompt", "missing");
  const json& p = body.at("prompt");
  std::vector<Request> out;
  if (p.is_string()) {
    out.push_back(text_prompt(p.get<std::string>(), "prompt", m));
  } else if (p.is_array() && !p.empty() && (p[0].is_number() || p[0].is_boolean())) {
    Request r;
    r.ids = token_ids(p, "prompt", m);
    out.push_back(std::move(r));
  } else if (p.is_array() && !p.empty()) {
    if (static_cast<std::int64_t>(p.size()) > m.max_prompts)
      bad_field("prompt", fmt::format("{} prompts; this server takes at most {} a request", p.size(), m.max_prompts));
    for (std::size_t i = 0; i < p.size(); ++i) {
      const std::string field = fmt::format("prompt[{}]", i);
      if (p[i].is_string()) out.push_back(text_prompt(p[i].get<std::string>(), field, m));
      else if (p[i].is_array()) out.push_back(Request{});
      else bad_field(field, "expected a string or a list of token ids, got " + shown(p[i]));
      if (p[i].is_array()) out.back().ids = token_ids(p[i], field, m);
    }
  } else {
    bad_field("prompt", "expected a string, a list of token ids or a list of those, got " + shown(p));
  }
  for (std::size_t i = 0; i < out.size(); ++i) out[i].where = out.size() == 1 ? "prompt" : fmt::format("prompt[{}]", i);
  return out;
}

std::string message_content(const json& c, const std::string& field) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null()) return "";
  if (!c.is_array()) bad_field(field, "expected a string or a list of text parts, got " + shown(c));
  std::string all;
  for (const auto& part : c) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") || !part["text"].is_string())
      bad_field(field, "only text parts ({\"type\": \"text\", \"text\": ...}) are taken, got " + shown(part));
    all += part["text"].get<std::string>();
  }
  return all;
}

Request chat_prompt(const json& body, const ModelTraits& m) {
  if (!present(body, "messages")) bad_field("messages", "missing");
  const json& msgs = body.at("messages");
  if (!msgs.is_array() || msgs.empty()) bad_field("messages", "expected a non-empty list of messages");
  if (!m.tokenizer) bad_field("messages", "the model has no tokenizer; use /v1/completions with token ids");
  if (!m.chat_template) bad_field("messages", "the model ships no chat template (tokenizer_config.json chat_template)");
  Request r;
  r.where = "messages";
  static const std::set<std::string> roles{"system", "user", "assistant", "tool", "developer"};
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    const std::string field = fmt::format("messages[{}]", i);
    const json& msg = msgs[i];
    if (!msg.is_object()) bad_field(field, "expected an object with role and content");
    if (!msg.contains("role") || !msg["role"].is_string() || !roles.count(msg["role"].get<std::string>()))
      bad_field(field + ".role", "expected system, user, assistant or tool");
    if (!msg.contains("content")) bad_field(field + ".content", "missing");
    std::string role = msg["role"].get<std::string>();
    r.messages.push_back({role == "developer" ? "system" : role, message_content(msg["content"], field + ".content")});
  }
  return r;
}

// ---- generation settings ------------------------------------------------------------------------

const std::vector<std::string>& diffusion_keys() {
  static const std::vector<std::string> k{"steps",      "alg",       "eps",          "alg_temp",       "diffusion_mode",
                                          "block_size", "threshold", "tokens_per_step", "refresh_every",
                                          "eos_penalty",          "small_block_size"};
  return k;
}

// The field of an error message from GenerationSettings ("top_p: ..." or "field \"top_p\": ...").
std::string field_of(const std::string& message) {
  for (const auto& k : GenerationSettings::keys())
    if (message.rfind(k + ":", 0) == 0 || message.find("\"" + k + "\"") != std::string::npos)
      return k == "max_new_tokens" ? "max_tokens" : k;
  return "";
}

GenerationSettings settings_of(const json& body, const ModelTraits& m, ParsedRequest& out) {
  json g = json::object();
  for (const char* key : {"temperature", "top_p", "repetition_penalty"})
    if (present(body, key)) g[key] = number(body, key);
  if (present(body, "top_k")) g["top_k"] = whole(body, "top_k", 0, m.vocab_size);
  if (present(body, "seed")) g["seed"] = whole(body, "seed", 0, INT64_MAX);
  if (present(body, "stop")) {
    const json& s = body.at("stop");
    std::vector<std::string> stops;
    if (s.is_string()) stops.push_back(s.get<std::string>());
    else if (s.is_array() && s.size() <= 16 && std::all_of(s.begin(), s.end(), [](const json& e) { return e.is_string(); }))
      stops = s.get<std::vector<std::string>>();
    else bad_field("stop", "expected a string or a list of at most 16 strings, got " + shown(s));
    if (std::any_of(stops.begin(), stops.end(), [](const std::string& x) { return x.empty(); })) bad_field("stop", "an empty stop string");
    if (!stops.empty() && m.diffusion) bad_field("stop", "a diffusion model's completion has no stop strings");
    if (!stops.empty() && !m.tokenizer) bad_field("stop", "the model has no tokenizer to turn tokens into text");
    if (!stops.empty()) g["stop"] = stops;
  }
  for (const auto& k : diffusion_keys()) {
    if (!present(body, k.c_str())) continue;
    if (!m.diffusion) bad_field(k, "only a diffusion model (Dream) takes it");
    if (k == "alg" || k == "diffusion_mode") g[k] = text(body, k.c_str());
    else if (k == "eps" || k == "alg_temp" || k == "threshold" || k == "eos_penalty") g[k] = number(body, k.c_str());
    else g[k] = whole(body, k.c_str(), 1, 1 << 20);
  }
  if (out.max_tokens > 0) g["max_new_tokens"] = out.max_tokens;
  try {
    GenerationSettings s = GenerationSettings::from_json(g);
    s.check();
    return s;
  } catch (const Error& e) {
    throw ApiError(400, field_of(e.what()), e.what());
  }
}

// ---- the endpoints' fields ----------------------------------------------------------------------

// The body's fields that are run options, by the name the run options' table (run_schema.h) gives
// them: the one place serve's names meet the schema's, so that an unknown field or one that does
// not apply to the endpoint's run kind is refused with the same table and the same close names as
// Python's options.
const std::vector<OptionAlias>& run_option_fields() {
  static const std::vector<OptionAlias> a{
      {"seed", "seed"},
      {"max_tokens", "defaults.max_new_tokens"},
      {"temperature", "defaults.temperature"},
      {"top_p", "defaults.top_p"},
      {"top_k", "defaults.top_k"},
      {"repetition_penalty", "defaults.repetition_penalty"},
      {"stop", "defaults.stop"},
      {"steps", "defaults.steps"},
      {"alg", "defaults.alg"},
      {"eps", "defaults.eps"},
      {"alg_temp", "defaults.alg_temp"},
      {"eos_penalty", "defaults.eos_penalty"},
      {"diffusion_mode", "defaults.diffusion_mode"},
      {"block_size", "defaults.block_size"},
      {"threshold", "defaults.threshold"},
      {"tokens_per_step", "defaults.tokens_per_step"},
      {"refresh_every", "defaults.refresh_every"},
      {"small_block_size", "defaults.small_block_size"},
      {"hooks", "capture.hooks"},
      {"positions", "capture.positions"},
      {"diffusion_capture", "capture.diffusion_capture"},
      {"storage", "capture.storage"},
      {"edits", "edits"},
      {"steer", "edits"},
  };
  return a;
}

// The endpoints' own fields, outside the run options: OpenAI's (those sonde does not implement are
// taken at their neutral value only, neutral_only), and where the rows and logits go.
const std::vector<std::string>& own_fields(Endpoint e) {
  static const std::vector<std::string> completions{"model", "user", "prompt", "stream", "stream_options", "n", "best_of",
                                                    "presence_penalty", "frequency_penalty", "logit_bias", "suffix",
                                                    "echo", "logprobs", "activations_file"};
  static const std::vector<std::string> chat{"model", "user", "messages", "stream", "stream_options", "n",
                                             "presence_penalty", "frequency_penalty", "logit_bias", "logprobs",
                                             "top_logprobs", "max_completion_tokens", "activations_file"};
  static const std::vector<std::string> activations{"model", "prompt", "messages", "activations_file", "logits"};
  return e == Endpoint::Completions ? completions : e == Endpoint::Chat ? chat : activations;
}

void check_fields(Endpoint e, const json& body) {
  try {
    check_flat_options(body, e == Endpoint::Activations ? RunKind::Forward : RunKind::Generate, own_fields(e),
                       run_option_fields());
  } catch (const Error& err) {
    if (err.kind() != ErrorKind::BadInput) throw;
    throw ApiError(400, err.setting(), err.what());
  }
}

// Fields of OpenAI's that sonde does not implement: accepted at their neutral value only.
void neutral_only(const json& body) {
  if (present(body, "n") && whole(body, "n", 1, 1) != 1) bad_field("n", "only 1");
  if (present(body, "best_of") && whole(body, "best_of", 1, 1) != 1) bad_field("best_of", "only 1");
  for (const char* key : {"presence_penalty", "frequency_penalty"})
    if (present(body, key) && number(body, key) != 0) bad_field(key, "not supported (only 0); use repetition_penalty");
  if (present(body, "logit_bias") && !(body["logit_bias"].is_object() && body["logit_bias"].empty()))
    bad_field("logit_bias", "not supported");
  if (present(body, "suffix")) bad_field("suffix", "not supported");
  if (present(body, "model") && !body["model"].is_string()) bad_field("model", "expected a string");
  if (present(body, "user") && !body["user"].is_string()) bad_field("user", "expected a string");
}

void output_options(const json& body, ParsedRequest& out, const ModelTraits& m) {
  out.stream = flag(body, "stream");
  if (present(body, "stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object()) bad_field("stream_options", "expected an object");
    if (!out.stream) bad_field("stream_options", "needs stream: true");
    if (so.contains("include_usage")) out.include_usage = flag(so, "include_usage");
  }
  const char* max_key = present(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  out.max_tokens = std::min(m.default_max_tokens, m.max_tokens_cap);
  if (present(body, max_key)) {
    const json& v = body.at(max_key);
    const bool above = v.is_number_unsigned() ? v.get<std::uint64_t>() > static_cast<std::uint64_t>(m.max_tokens_cap)
                                              : v.is_number_integer() && v.get<std::int64_t>() > m.max_tokens_cap;
    if (above)
      bad_field(max_key, fmt::format("{} is above this server's cap of {} (--max-tokens-cap)", shown(v), m.max_tokens_cap));
    out.max_tokens = whole(body, max_key, 0, m.max_tokens_cap);
  }
  if (out.endpoint == Endpoint::Completions) {
    out.echo = flag(body, "echo");
    if (present(body, "logprobs")) out.logprobs = static_cast<int>(whole(body, "logprobs", 0, 20));
  } else if (flag(body, "logprobs")) {
    out.logprobs = present(body, "top_logprobs") ? static_cast<int>(whole(body, "top_logprobs", 0, 20)) : 0;
  } else if (present(body, "top_logprobs")) {
    bad_field("top_logprobs", "needs logprobs: true");
  }
  if (m.diffusion && out.logprobs >= 0) bad_field("logprobs", "a diffusion model's tokens have no autoregressive log-probabilities (use sonde score)");
  if (m.diffusion && out.echo) bad_field("echo", "not for a diffusion model");
  if (out.max_tokens == 0 && m.diffusion) bad_field("max_tokens", "a diffusion model needs at least 1");
  if (out.max_tokens == 0 && out.stream) bad_field("max_tokens", "0 generates nothing to stream");
  if (out.max_tokens == 0 && !out.capture.hooks.empty()) bad_field("max_tokens", "0 with hooks: use /v1/activations");
  if (out.stream && out.prompts.size() > 1) bad_field("prompt", "stream takes one prompt");
  if (out.stream && out.echo) bad_field("echo", "not with stream (the prompt's scores come in one response)");
}

}  // namespace protocol_impl

ParsedRequest parse_request(Endpoint endpoint, const nlohmann::json& body, const ModelTraits& m) {
  using namespace protocol_impl;
  if (!body.is_object()) throw ApiError(400, "", "the request body must be a JSON object");
  check_fields(endpoint, body);
  ParsedRequest out;
  out.endpoint = endpoint;
  neutral_only(body);
  if (endpoint == Endpoint::Chat) {
    out.prompts.push_back(chat_prompt(body, m));
  } else if (endpoint == Endpoint::Activations) {
    if (present(body, "prompt") == present(body, "messages")) bad_field("prompt", "give prompt or messages (one of them)");
    if (present(body, "messages")) out.prompts.push_back(chat_prompt(body, m));
    else out.prompts = completion_prompts(body, m);
    if (out.prompts.size() != 1) bad_field("prompt", "a forward pass takes one prompt");
    out.logits = flag(body, "logits");
  } else {
    out.prompts = completion_prompts(body, m);
  }
  capture_of(body, out, m);
  if (endpoint != Endpoint::Activations) {
    output_options(body, out, m);
    const GenerationSettings s = settings_of(body, m, out);
    for (auto& r : out.prompts) r.settings = s;
  }
  edits_of(body, out, m);
  return out;
}

}  // namespace sonde::serve
