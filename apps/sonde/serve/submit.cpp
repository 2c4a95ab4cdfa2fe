// A parsed request's prompts made into engine requests (service.h): each prepared as the run
// layer prepares a dataset line (engine_request), its capture and edits resolved against the
// model, and its own loop (job.h); then all submitted, or none.
#include "service.h"

#include <sonde/error.h>
#include <sonde/tokenizer.h>

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <fstream>

namespace sonde::serve {
namespace submit_impl {

// A run-layer refusal (BadInput naming the setting) as a 400.
template <typename F>
auto as_400(const std::string& param, F&& fn) {
  try {
    return fn();
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::BadInput) throw;
    throw ApiError(400, param, e.what());
  }
}

// numpy's .npy v1.0 of a float32 vector: how an inline vector reaches resolve_edits, which then
// checks it as it checks a --steer file.
void write_npy(const std::filesystem::path& file, const std::vector<float>& v) {
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({},), }}", v.size());
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::ofstream out(file, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const std::uint16_t n = static_cast<std::uint16_t>(header.size());
  const char len[2] = {static_cast<char>(n & 0xff), static_cast<char>(n >> 8)};
  out.write(len, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  if (!out) runtime_error("serve: cannot write {}", file.string());
}

std::vector<Edit> resolve_request_edits(Service& svc, const ParsedRequest& req, const EngineRequest& q, std::int64_t new_tokens) {
  std::vector<EditSpec> specs = req.edits;
  std::vector<std::filesystem::path> made;
  struct Remover {
    std::vector<std::filesystem::path>& files;
    ~Remover() {
      std::error_code ec;
      for (const auto& f : files) std::filesystem::remove(f, ec);
    }
  } remover{made};
  for (const auto& iv : req.inline_vectors) {
    made.push_back(svc.scratch / fmt::format("vector-{}.npy", svc.prepared.fetch_add(1)));
    write_npy(made.back(), iv.values);
    specs.at(iv.edit).source = made.back().string();
  }
  const bool diffusion = svc.traits.diffusion && req.endpoint != Endpoint::Activations;
  EditLimits lim;
  lim.diffusion = diffusion;
  lim.max_position = static_cast<std::int64_t>(q.prompt.size()) + new_tokens + 1;
  lim.steps = diffusion ? q.diffusion.steps + (req.capture.diffusion_capture == "final" ? 1 : 0) : 0;
  lim.prompt_ids = {q.id};
  lim.prompt_tokens = {q.prompt};
  return as_400(req.edits.front().where.rfind("steer", 0) == 0 ? "steer" : "edits",
                [&] { return resolve_edits(*svc.view, specs, lim); });
}

RowKind forward_kind(const Session& s, const CaptureSpec& spec, std::int32_t id) {  // run.cpp's forward rows
  if (s.config().mask_token_id && *s.config().mask_token_id == id) return RowKind::Masked;
  return spec.is_special(id) ? RowKind::Special : RowKind::Prompt;
}

}  // namespace submit_impl

Submitted submit_request(Service& svc, const ParsedRequest& req) {
  using namespace submit_impl;
  const bool forward = req.endpoint == Endpoint::Activations;
  const bool diffusion = svc.traits.diffusion && !forward;
  const bool scoring = req.echo && req.logprobs >= 0;
  Submitted sub;
  sub.submitted_at = steady_now();
  if (!req.capture.hooks.empty())
    sub.capture = as_400("hooks", [&] { return make_capture_spec(*svc.view, req.capture, false); });
  RunOptions o;
  o.kind = forward || req.max_tokens == 0 ? RunKind::Forward : RunKind::Generate;
  std::vector<EngineRequest> ready;
  for (std::size_t i = 0; i < req.prompts.size(); ++i) {
    const Request& r = req.prompts[i];
    EngineRequest q = as_400(req.endpoint == Endpoint::Chat ? "messages" : "prompt",
                             [&] { return engine_request(*svc.view, r, o, static_cast<std::int64_t>(i)); });
    q.id = fmt::format("{}-{}", svc.prepared.fetch_add(1), i);
    const auto P = static_cast<std::int64_t>(q.prompt.size());
    const std::int64_t new_tokens = forward ? 0 : req.max_tokens;
    if (P + new_tokens + 1 > svc.config.max_context)
      throw ApiError(400, "max_tokens",
                     fmt::format("max_tokens: {} prompt tokens + {} new tokens exceed this server's context of {} (--max-context)",
                                 P, new_tokens, svc.config.max_context));
    if (!req.edits.empty()) q.edits = resolve_request_edits(svc, req, q, new_tokens);
    auto job = std::make_shared<Job>();
    LoopSpec spec;
    spec.job = job;
    spec.diffusion = diffusion;
    spec.prompt = q.prompt;
    spec.ar = q.ar;
    spec.diff = q.diffusion;
    spec.max_tokens = new_tokens;
    spec.logprobs = req.logprobs;
    spec.score_prompt = scoring && !forward;
    spec.stream = req.stream;
    spec.capture = sub.capture;
    spec.forward_only = forward;
    spec.logits = req.logits;
    spec.vocab = svc.session.config().vocab_size;
    Session& s = svc.session;
    const CaptureSpec cap = sub.capture;
    spec.forward_kind = [&s, cap](std::int32_t id) { return forward_kind(s, cap, id); };
    q.events = false;
    q.loop = [spec](EngineForward& f) { return run_job_loop(spec, f); };
    sub.jobs.push_back(job);
    sub.prompt_ids.push_back(q.prompt);
    sub.stops = r.settings.stop.value_or(std::vector<std::string>{});
    sub.prompt_texts.push_back(r.text.empty() && !r.messages.empty() ? std::string() : r.text);
    ready.push_back(std::move(q));
  }
  for (std::size_t i = 0; i < ready.size(); ++i) {
    try {
      sub.jobs[i]->handle = svc.engine.submit(std::move(ready[i]));
    } catch (const Error& e) {
      for (std::size_t j = 0; j < i; ++j) svc.engine.cancel(sub.jobs[j]->handle->id());
      const std::string what = e.what();
      if (what.find("max_waiting") != std::string::npos)
        throw ApiError(429, "", "the server is busy: " + what, "rate_limit_error");
      throw ApiError(e.kind() == ErrorKind::BadInput ? 400 : 500, "", what, e.kind() == ErrorKind::BadInput ? "invalid_request_error" : "server_error");
    }
  }
  svc.track(sub.jobs);
  return sub;
}

void cancel_all(Service& svc, const Submitted& s) {
  for (const auto& j : s.jobs)
    if (j->handle && svc.cancel(*j->handle)) svc.metrics.cancelled();
}

bool all_ended(const Submitted& s) {
  for (const auto& j : s.jobs)
    if (!j->ended() && !(j->handle && j->handle->done())) return false;
  return true;
}

bool wait_all(const Submitted& s, double seconds) {
  const double until = steady_now() + seconds;
  for (const auto& j : s.jobs)
    while (!j->ended() && !(j->handle && j->handle->done())) {
      const double left = until - steady_now();
      if (left <= 0) return false;
      j->wait_ended(std::min(left, 0.05));  // a job cancelled while waiting never starts: poll its handle
    }
  return true;
}

}  // namespace sonde::serve
