// Response bodies (respond.h).
#include "respond.h"

#include <sonde/error.h>
#include <sonde/request.h>
#include <sonde/tokenizer.h>

#include <fmt/format.h>

#include <chrono>
#include <cstring>

namespace sonde::serve {
namespace respond_impl {

using nlohmann::json;

const char* kind_name(RowKind k) {
  switch (k) {
    case RowKind::Prompt: return "prompt";
    case RowKind::Generated: return "generated";
    case RowKind::Special: return "special";
    case RowKind::Masked: return "masked";
    case RowKind::Committed: return "committed";
  }
  return "?";
}

// OpenAI's legacy completions logprobs: tokens, token_logprobs, top_logprobs, text_offset.
json completion_logprobs(Service& svc, const std::vector<std::int32_t>& prompt, const Outcome& out, bool echo) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  std::size_t offset = 0;
  const auto add = [&](std::int32_t id, const std::optional<Scored>& s) {
    const std::string t = token_text(svc, id);
    tokens.push_back(t);
    offsets.push_back(offset);
    offset += t.size();
    lps.push_back(s ? json(s->logprob) : json(nullptr));
    if (!s) {
      tops.push_back(nullptr);
      return;
    }
    json top = json::object();
    for (const auto& [tid, lp] : s->top) top[token_text(svc, tid)] = lp;
    tops.push_back(top);
  };
  if (echo)
    for (std::size_t i = 0; i < prompt.size(); ++i) add(prompt[i], i < out.prompt_scores.size() ? out.prompt_scores[i] : std::nullopt);
  for (std::size_t i = 0; i < out.scores.size(); ++i) add(out.scores[i].token, out.scores[i]);
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

std::optional<std::string> completion_of(Service& svc, const Submitted& s, const Outcome& out) {
  return completion_text(svc.session.tokenizer(), svc.session.info(), out.tokens, s.stops);
}

json text_or_null(const std::optional<std::string>& t) { return t ? json(*t) : json(nullptr); }

}  // namespace respond_impl

using nlohmann::json;

json error_body(const ApiError& e) {
  return {{"error", {{"message", e.what()}, {"type", e.type}, {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                     {"code", e.status == 429 ? json("rate_limit_exceeded") : json(nullptr)}}}};
}

std::string base64(const void* data, std::size_t n) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (std::size_t i = 0; i < n; i += 3) {
    const std::uint32_t a = p[i], b = i + 1 < n ? p[i + 1] : 0, c = i + 2 < n ? p[i + 2] : 0;
    const std::uint32_t v = (a << 16) | (b << 8) | c;
    out += abc[(v >> 18) & 63];
    out += abc[(v >> 12) & 63];
    out += i + 1 < n ? abc[(v >> 6) & 63] : '=';
    out += i + 2 < n ? abc[v & 63] : '=';
  }
  return out;
}

void check_outcomes(const Submitted& s) {
  for (const auto& j : s.jobs) {
    const EngineResult r = j->handle->wait();
    if (r.finish_reason == "error")
      throw ApiError(r.error_kind == 2 ? 400 : 500, "", r.error, r.error_kind == 2 ? "invalid_request_error" : "server_error");
    if (r.finish_reason == "cancelled") throw ApiError(503, "", "the request was cancelled (the server is stopping)", "server_error");
  }
}

std::string token_text(Service& svc, std::int32_t id) {
  const Tokenizer* tok = svc.session.tokenizer();
  return tok ? tok->decode(std::vector<std::int32_t>{id}, false) : std::to_string(id);
}

json logprobs_entry(Service& svc, const Scored& s, bool chat) {
  if (!chat) {
    json top = json::object();
    for (const auto& [tid, lp] : s.top) top[token_text(svc, tid)] = lp;
    return {{"tokens", {token_text(svc, s.token)}}, {"token_logprobs", {s.logprob}}, {"top_logprobs", {top}}};
  }
  const auto entry = [&](std::int32_t id, double lp) {
    const std::string t = token_text(svc, id);
    return json{{"token", t}, {"logprob", lp}, {"bytes", std::vector<unsigned char>(t.begin(), t.end())}};
  };
  json e = entry(s.token, s.logprob);
  e["top_logprobs"] = json::array();
  for (const auto& [tid, lp] : s.top) e["top_logprobs"].push_back(entry(tid, lp));
  return e;
}

std::string finish_reason_name(const std::string& r) { return r == "eos" ? "stop" : r; }

json usage_json(const Submitted& s) {
  std::size_t prompt = 0, done = 0;
  for (std::size_t i = 0; i < s.jobs.size(); ++i) {
    prompt += s.prompt_ids[i].size();
    done += s.jobs[i]->out.tokens.size();
  }
  return {{"prompt_tokens", prompt}, {"completion_tokens", done}, {"total_tokens", prompt + done}};
}

std::string response_id(Service& svc, const char* prefix) { return fmt::format("{}-{}", prefix, svc.counter.fetch_add(1)); }

std::int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json activations_json(const CapturedPrompt& cap, const CaptureSpec& spec) {
  json rows{{"position", json::array()}, {"token", json::array()}, {"step", json::array()}, {"kind", json::array()}};
  for (const auto& r : cap.rows) {
    rows["position"].push_back(r.pos);
    rows["token"].push_back(r.token_id);
    rows["step"].push_back(r.step);
    rows["kind"].push_back(respond_impl::kind_name(r.kind));
  }
  json out = json::object();
  for (const auto& h : spec.hooks) {
    auto it = cap.acts.find(h.name);
    const std::vector<float> none;
    const std::vector<float>& v = it == cap.acts.end() ? none : it->second;
    std::vector<std::int64_t> shape{static_cast<std::int64_t>(cap.rows.size())};
    shape.insert(shape.end(), h.row_shape.begin(), h.row_shape.end());
    out[h.name] = {{"shape", shape}, {"dtype", "f32"}, {"rows", rows}, {"data", base64(v.data(), v.size() * sizeof(float))}};
  }
  return out;
}

json completion_body(Service& svc, const ParsedRequest& req, const Submitted& s) {
  using namespace respond_impl;
  json choices = json::array();
  for (std::size_t i = 0; i < s.jobs.size(); ++i) {
    const Outcome& out = s.jobs[i]->out;
    std::optional<std::string> text = completion_of(svc, s, out);
    if (req.echo && text) {
      const Tokenizer* tok = svc.session.tokenizer();
      text = (s.prompt_texts[i].empty() ? tok->decode(s.prompt_ids[i], false) : s.prompt_texts[i]) + *text;
    }
    json c{{"index", i}, {"text", text_or_null(text)}, {"token_ids", out.tokens},
           {"logprobs", req.logprobs >= 0 ? completion_logprobs(svc, s.prompt_ids[i], out, req.echo) : json(nullptr)},
           {"finish_reason", finish_reason_name(out.finish_reason)}};
    if (req.echo) c["prompt_token_ids"] = s.prompt_ids[i];
    if (!s.capture.hooks.empty() && req.activations_file.empty()) c["activations"] = activations_json(out.captured, s.capture);
    choices.push_back(std::move(c));
  }
  json body{{"id", response_id(svc, "cmpl")}, {"object", "text_completion"}, {"created", unix_time()}, {"model", svc.model_id},
            {"choices", choices}, {"usage", usage_json(s)}};
  if (!req.activations_file.empty()) body["activations_file"] = req.activations_file;
  return body;
}

json chat_body(Service& svc, const ParsedRequest& req, const Submitted& s) {
  using namespace respond_impl;
  const Outcome& out = s.jobs.at(0)->out;
  json c{{"index", 0}, {"message", {{"role", "assistant"}, {"content", text_or_null(completion_of(svc, s, out))}}},
         {"token_ids", out.tokens}, {"finish_reason", finish_reason_name(out.finish_reason)}, {"logprobs", nullptr}};
  if (req.logprobs >= 0) {
    json content = json::array();
    for (const auto& sc : out.scores) content.push_back(logprobs_entry(svc, sc, true));
    c["logprobs"] = {{"content", content}};
  }
  if (!s.capture.hooks.empty() && req.activations_file.empty()) c["activations"] = activations_json(out.captured, s.capture);
  json body{{"id", response_id(svc, "chatcmpl")}, {"object", "chat.completion"}, {"created", unix_time()},
            {"model", svc.model_id}, {"choices", json::array({c})}, {"usage", usage_json(s)}};
  if (!req.activations_file.empty()) body["activations_file"] = req.activations_file;
  return body;
}

json activations_body(Service& svc, const ParsedRequest& req, const Submitted& s) {
  const Outcome& out = s.jobs.at(0)->out;
  json body{{"object", "activations"}, {"model", svc.model_id}, {"prompt_token_ids", s.prompt_ids.at(0)}};
  if (req.activations_file.empty()) body["activations"] = activations_json(out.captured, s.capture);
  else body["activations_file"] = req.activations_file;
  if (req.logits) {
    const Tensor& l = out.logits;
    const auto T = static_cast<std::int64_t>(s.prompt_ids[0].size()), V = svc.session.config().vocab_size;
    body["logits"] = {{"shape", {T, V}}, {"dtype", "f32"}, {"data", base64(l.data<float>(), static_cast<std::size_t>(T * V) * sizeof(float))}};
  }
  return body;
}

}  // namespace sonde::serve
