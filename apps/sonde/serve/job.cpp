// The server's decode loop for one prompt (job.h): decode.h's loops, or capture.h's when hooks
// are captured (rows bit-identical to `sonde generate --hooks`), with each token scored and
// streamed; or one forward pass whose taps come back as `sonde forward` writes them.
#include "job.h"

#include <sonde/tensor.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

namespace sonde::serve {
namespace job_impl {

// log_softmax(row)[id] in double: sonde score's arithmetic (core/src/score.cpp), so that echo's
// log-probabilities equal `sonde score`'s to the bit.
struct LogSoftmax {
  double mx = 0, log_z = 0;
  LogSoftmax(const float* row, std::int64_t V) {
    mx = row[0];
    for (std::int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
    double z = 0;
    for (std::int64_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
    log_z = std::log(z);
  }
  double operator()(const float* row, std::int32_t id) const { return static_cast<double>(row[id]) - mx - log_z; }
};

Scored score_row(const float* row, std::int64_t V, std::int32_t token, int k) {
  const LogSoftmax lsm(row, V);
  Scored s{token, lsm(row, token), {}};
  if (k > 0) {
    std::vector<std::int32_t> idx(static_cast<std::size_t>(V));
    std::iota(idx.begin(), idx.end(), 0);
    const auto kk = std::min<std::int64_t>(k, V);
    std::partial_sort(idx.begin(), idx.begin() + kk, idx.end(), [&](std::int32_t a, std::int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    for (std::int64_t i = 0; i < kk; ++i) s.top.emplace_back(idx[static_cast<std::size_t>(i)], lsm(row, idx[static_cast<std::size_t>(i)]));
  }
  return s;
}

StepInput whole_sequence(const std::vector<std::int32_t>& ids, bool need_logits) {
  StepInput in;
  in.batch = 1;
  in.tokens = static_cast<std::int64_t>(ids.size());
  in.ids = ids;
  in.positions.resize(ids.size());
  std::iota(in.positions.begin(), in.positions.end(), 0);
  in.need_logits = need_logits;
  return in;
}

// Echo + logprobs: one forward over the prompt; slot i's logits score token i + 1.
void score_prompt(const LoopSpec& spec, EngineForward& fwd, Outcome& out) {
  const Tensor logits = fwd.forward(whole_sequence(spec.prompt, true));
  const std::int64_t V = spec.vocab;
  out.prompt_scores.assign(spec.prompt.size(), std::nullopt);
  for (std::size_t i = 1; i < spec.prompt.size(); ++i)
    out.prompt_scores[i] = score_row(logits.data<float>() + static_cast<std::int64_t>(i - 1) * V, V, spec.prompt[i], spec.logprobs);
}

// /v1/activations: every hook at every position, rows as `sonde forward` writes them.
void forward_pass(const LoopSpec& spec, EngineForward& fwd, Outcome& out) {
  std::vector<std::string> hooks;
  for (const auto& h : spec.capture.hooks) hooks.push_back(h.name);
  auto& acts = out.captured.acts;
  fwd.set_taps(hooks, [&acts](const std::string& hook, const TensorView& v) {
    const Tensor f = to_f32(v);
    const float* p = f.data<float>();
    acts[hook].assign(p, p + f.shape().numel());
  });
  Tensor logits = fwd.forward(whole_sequence(spec.prompt, spec.logits));
  fwd.set_taps({}, {});
  const auto T = static_cast<std::int64_t>(spec.prompt.size());
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int32_t id = spec.prompt[static_cast<std::size_t>(t)];
    out.captured.rows.push_back({0, static_cast<std::int32_t>(t), id, -1, spec.forward_kind(id)});
  }
  if (spec.logits) out.logits = std::move(logits);
}

void autoregressive(const LoopSpec& spec, EngineForward& fwd, Outcome& out, Job& job) {
  const ArCallback on_step = [&](const ArStep& st) {
    const std::int32_t t = st.new_tokens.at(0);
    if (t < 0) return;
    Piece p{st.step, Scored{t, 0, {}}, {}};
    if (spec.logprobs >= 0) {
      p.token = score_row(st.logits.data<float>(), spec.vocab, t, spec.logprobs);
      out.scores.push_back(p.token);
    }
    if (spec.stream) job.push(std::move(p));
    else job.touch();
  };
  if (!spec.capture.hooks.empty()) {
    auto res = generate_autoregressive_captured(fwd, {spec.prompt}, spec.ar, spec.capture, {0}, on_step);
    out.tokens = res.completions.at(0).tokens;
    out.finish_reason = res.completions.at(0).finish_reason;
    out.captured = std::move(res.captured.at(0));
  } else {
    const auto done = generate_autoregressive(fwd, {spec.prompt}, spec.ar, on_step);
    out.tokens = done.at(0).tokens;
    out.finish_reason = done.at(0).finish_reason;
  }
}

void diffusion(const LoopSpec& spec, EngineForward& fwd, Outcome& out, Job& job) {
  const auto P = static_cast<std::ptrdiff_t>(spec.prompt.size());
  const DiffusionCallback on_step = [&](const DiffusionStep& st) {  // batch 1: no left padding
    if (!spec.stream) return job.touch();
    job.push(Piece{st.step, Scored{}, std::vector<std::int32_t>(st.canvas.begin() + P, st.canvas.begin() + st.length)});
  };
  if (!spec.capture.hooks.empty()) {
    auto res = diffusion_generate_captured(fwd, {spec.prompt}, spec.diff, spec.capture, {0}, on_step);
    out.tokens = res.result.completions.at(0);
    out.captured = std::move(res.captured.at(0));
  } else {
    out.tokens = diffusion_generate(fwd, {spec.prompt}, spec.diff, on_step).completions.at(0);
  }
  out.finish_reason = "length";
}

}  // namespace job_impl

double steady_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void Job::push(Piece p) {
  {
    std::lock_guard lk(mu_);
    if (first_ < 0) first_ = steady_now();
    unread_.push_back(std::move(p));
  }
  cv_.notify_all();
}

void Job::touch() {
  std::lock_guard lk(mu_);
  if (first_ < 0) first_ = steady_now();
}

void Job::end() {
  {
    std::lock_guard lk(mu_);
    ended_ = true;
  }
  cv_.notify_all();
}

std::vector<Piece> Job::take(double seconds, bool& ended) {
  std::unique_lock lk(mu_);
  if (seconds > 0) cv_.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return ended_ || !unread_.empty(); });
  std::vector<Piece> out(std::make_move_iterator(unread_.begin()), std::make_move_iterator(unread_.end()));
  unread_.clear();
  ended = ended_;
  return out;
}

bool Job::ended() const {
  std::lock_guard lk(mu_);
  return ended_;
}

bool Job::wait_ended(double seconds) {
  std::unique_lock lk(mu_);
  return cv_.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return ended_; });
}

double Job::first_piece_at() const {
  std::lock_guard lk(mu_);
  return first_;
}

EngineResult run_job_loop(const LoopSpec& spec, EngineForward& fwd) {
  struct Ender {
    Job& job;
    ~Ender() { job.end(); }
  } ender{*spec.job};
  Outcome& out = spec.job->out;
  if (spec.forward_only) {
    job_impl::forward_pass(spec, fwd, out);
  } else {
    if (spec.score_prompt) job_impl::score_prompt(spec, fwd, out);
    if (spec.max_tokens > 0) {
      if (spec.diffusion) job_impl::diffusion(spec, fwd, out, *spec.job);
      else job_impl::autoregressive(spec, fwd, out, *spec.job);
    } else {
      out.finish_reason = "length";
    }
  }
  EngineResult r;
  r.prompt = spec.prompt;
  r.tokens = out.tokens;
  r.finish_reason = out.finish_reason;
  return r;
}

}  // namespace sonde::serve
