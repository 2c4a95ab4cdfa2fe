// Streaming and deferred responses (stream.h).
#include "stream.h"

#include "acts_file.h"

#include <sonde/error.h>
#include <sonde/stop_strings.h>
#include <sonde/tokenizer.h>

#include <optional>

namespace sonde::serve {
namespace stream_impl {

using nlohmann::json;

constexpr double kPoll = 0.2, kHeartbeat = 1.0;  // seconds
// A deferred answer's newlines, more often: a client that hung up is noticed only at the second
// write after it closed (the first draws its reset), so this bounds how long a request nobody waits
// for keeps its slot: 0.5 s, where the 1 s beat gave 2 s and the test's 7,900-token request on the
// tiny preset (about 2.5 s here) sometimes finished first (serve_safety, Deferred, under load).
constexpr double kDeferredBeat = 0.25;  // seconds

struct StreamState {
  Service& svc;
  std::shared_ptr<const ParsedRequest> req;
  std::shared_ptr<Submitted> sub;
  std::string id;
  std::int64_t created = 0;
  bool chat = false, sent_role = false, finished = false;
  std::optional<StreamDecoder> decoder;
  StopStringFilter filter;
  double last_write = 0;
};

json chunk(const StreamState& st, json choice) {
  choice["index"] = 0;
  return {{"id", st.id}, {"object", st.chat ? "chat.completion.chunk" : "text_completion"}, {"created", st.created},
          {"model", st.svc.model_id}, {"choices", json::array({choice})}};
}

json text_choice(const StreamState& st, const std::string& text, const json& token_ids, const json& finish) {
  if (st.chat) return {{"delta", text.empty() && finish.is_null() ? json{{"content", ""}} : json{{"content", text}}},
                       {"token_ids", token_ids}, {"logprobs", nullptr}, {"finish_reason", finish}};
  return {{"text", text}, {"token_ids", token_ids}, {"logprobs", nullptr}, {"finish_reason", finish}};
}

bool send(StreamState& st, httplib::DataSink& sink, const std::string& text) {
  st.last_write = steady_now();
  return sink.write(text.data(), text.size());
}

bool send_json(StreamState& st, httplib::DataSink& sink, const json& j) {
  return send(st, sink, "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n");
}

json piece_choice(StreamState& st, const Piece& p) {
  if (p.token.token < 0) {  // a denoising step: the canvas (sonde's field) replaces the last one
    json c = text_choice(st, "", json::array(), nullptr);
    c["step"] = p.step;
    c["canvas"] = p.canvas;
    return c;
  }
  std::string text;
  if (st.decoder) text = st.filter.push(st.decoder->push(p.token.token));
  json c = text_choice(st, text, json::array({p.token.token}), nullptr);
  if (st.req->logprobs >= 0)
    c["logprobs"] = st.chat ? json{{"content", json::array({logprobs_entry(st.svc, p.token, true)})}}
                            : logprobs_entry(st.svc, p.token, false);
  return c;
}

// The last chunks: the text held back, the finish reason, usage if asked, [DONE].
bool finish(StreamState& st, httplib::DataSink& sink) {
  st.finished = true;
  try {
    check_outcomes(*st.sub);
  } catch (const ApiError& e) {
    return send_json(st, sink, error_body(e)) && send(st, sink, "data: [DONE]\n\n");
  }
  if (!st.req->activations_file.empty()) {
    try {
      write_activations_file(st.svc, *st.req, *st.sub);
    } catch (const ApiError& e) {
      return send_json(st, sink, error_body(e)) && send(st, sink, "data: [DONE]\n\n");
    }
  }
  const Outcome& out = st.sub->jobs[0]->out;
  std::string tail;
  json ids = json::array();
  if (st.svc.traits.diffusion) {  // the final completion, as the non-streamed response has it
    tail = completion_text(st.svc.session.tokenizer(), st.svc.session.info(), out.tokens, {}).value_or("");
    ids = out.tokens;
  } else if (st.decoder) {
    tail = st.filter.push(st.decoder->finish());
    tail += st.filter.finish();
  }
  if (!send_json(st, sink, chunk(st, text_choice(st, tail, ids, finish_reason_name(out.finish_reason))))) return false;
  if (st.req->include_usage) {
    json u = chunk(st, {});
    u["choices"] = json::array();
    u["usage"] = usage_json(*st.sub);
    if (!send_json(st, sink, u)) return false;
  }
  record_finished(st.svc, *st.sub);
  return send(st, sink, "data: [DONE]\n\n");
}

bool provide(StreamState& st, httplib::DataSink& sink) {
  if (st.finished) {
    sink.done();
    return true;
  }
  if (st.chat && !st.sent_role) {
    st.sent_role = true;
    json c{{"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (!send_json(st, sink, chunk(st, c))) return false;
  }
  Job& job = *st.sub->jobs[0];
  bool ended = false;
  const auto pieces = job.take(kPoll, ended);
  ended = ended || job.handle->done();
  for (const auto& p : pieces)
    if (!send_json(st, sink, chunk(st, piece_choice(st, p)))) return false;
  if (ended) {
    bool more = false;
    for (const auto& p : job.take(0, more))  // pieces pushed between the take and the end
      if (!send_json(st, sink, chunk(st, piece_choice(st, p)))) return false;
    if (!finish(st, sink)) return false;
    sink.done();
    return true;
  }
  if (pieces.empty() && steady_now() - st.last_write > kHeartbeat) return send(st, sink, ": keep-alive\n\n");
  return true;
}

}  // namespace stream_impl

using nlohmann::json;

void record_finished(Service& svc, const Submitted& sub) {
  const double now = steady_now();
  for (std::size_t i = 0; i < sub.jobs.size(); ++i) {
    const Job& j = *sub.jobs[i];
    const auto n = static_cast<std::int64_t>(j.out.tokens.size());
    svc.metrics.tokens(static_cast<std::int64_t>(sub.prompt_ids[i].size()), n);
    svc.metrics.duration(now - sub.submitted_at);
    const double first = j.first_piece_at();
    if (first < 0) continue;
    svc.metrics.first_token(first - sub.submitted_at);
    if (n > 1) svc.metrics.per_token((now - first) / static_cast<double>(n - 1));
  }
}

json finished_body(Service& svc, const ParsedRequest& req, const Submitted& sub) {
  check_outcomes(sub);
  record_finished(svc, sub);
  if (!req.activations_file.empty()) write_activations_file(svc, req, sub);
  if (req.endpoint == Endpoint::Chat) return chat_body(svc, req, sub);
  if (req.endpoint == Endpoint::Activations) return activations_body(svc, req, sub);
  return completion_body(svc, req, sub);
}

void stream_response(Service& svc, std::shared_ptr<const ParsedRequest> req, std::shared_ptr<Submitted> sub,
                     httplib::Response& res) {
  using namespace stream_impl;
  const bool chat = req->endpoint == Endpoint::Chat;
  auto st = std::make_shared<StreamState>(StreamState{svc, req, sub, response_id(svc, chat ? "chatcmpl" : "cmpl"), unix_time(), chat,
                                                      false, false, std::nullopt, StopStringFilter(sub->stops), steady_now()});
  if (const Tokenizer* tok = svc.session.tokenizer(); tok && !svc.traits.diffusion) st->decoder.emplace(*tok, false);
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [st](std::size_t, httplib::DataSink& sink) { return provide(*st, sink); },
      [st](bool success) {
        if (!success || !st->finished) cancel_all(st->svc, *st->sub);
      });
}

void deferred_response(Service& svc, std::shared_ptr<const ParsedRequest> req, std::shared_ptr<Submitted> sub,
                       httplib::Response& res) {
  auto sent = std::make_shared<bool>(false);
  Service* const sv = &svc;  // the provider runs after this function has returned
  res.status = 200;
  res.set_chunked_content_provider(
      "application/json",
      [sv, req, sub, sent](std::size_t, httplib::DataSink& sink) {
        if (*sent) {
          sink.done();
          return true;
        }
        if (!wait_all(*sub, stream_impl::kDeferredBeat)) {
          return sink.write("\n", 1);  // a failed write: the client has gone
        }
        std::string body;
        try {
          body = finished_body(*sv, *req, *sub).dump(-1, ' ', false, json::error_handler_t::replace);
        } catch (const ApiError& e) {
          body = error_body(e).dump();
        }
        *sent = true;
        if (!sink.write(body.data(), body.size())) return false;
        sink.done();
        return true;
      },
      [sv, sub](bool success) {
        if (!success) cancel_all(*sv, *sub);
      });
}

}  // namespace sonde::serve
