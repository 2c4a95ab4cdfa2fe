#include "submit.h"

#include "options.h"

#include <sonde/error.h>
#include <sonde/run.h>
#include <sonde/session_view.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <utility>

namespace sonde::py {

// ---- the stream ----------------------------------------------------------------------------------

Stream::~Stream() {
  for (int fd : pipe_)
    if (fd >= 0) ::close(fd);
}

void Stream::notify_locked() {
  if (pipe_[1] >= 0) {
    const char b = 1;
    [[maybe_unused]] auto n = ::write(pipe_[1], &b, 1);  // a full pipe is already readable
  }
  cv_.notify_all();
}

void Stream::token(std::int64_t step, std::int32_t t) {
  std::lock_guard lock(mu_);
  if (!std::exchange(any_, true)) first_ = std::chrono::steady_clock::now();
  tokens_.push_back(t);
  unread_.push_back(StreamItem{step, t, {}});
  notify_locked();
}

void Stream::step(std::int64_t step, const std::vector<std::int32_t>& canvas) {
  std::lock_guard lock(mu_);
  if (!std::exchange(any_, true)) first_ = std::chrono::steady_clock::now();
  history_.push_back(canvas);
  unread_.push_back(StreamItem{step, -1, canvas});
  notify_locked();
}

void Stream::tap(const std::string& hook, const TensorView& rows) {
  Tensor copy = Tensor::copy_of(rows);  // the view dies with the forward
  std::lock_guard lock(mu_);
  acts_[hook].push_back(std::move(copy));
}

void Stream::end() {
  std::lock_guard lock(mu_);
  if (ended_) return;
  ended_ = true;
  end_ = std::chrono::steady_clock::now();
  notify_locked();
}

void Stream::wait_end() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return ended_; });
}

std::vector<StreamItem> Stream::take(double seconds, bool& ended) {
  std::unique_lock lock(mu_);
  if (seconds > 0)
    cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return ended_ || !unread_.empty(); });
  std::vector<StreamItem> out(std::make_move_iterator(unread_.begin()), std::make_move_iterator(unread_.end()));
  unread_.clear();
  ended = ended_;
  return out;
}

int Stream::fileno() {
  std::lock_guard lock(mu_);
  if (pipe_[0] < 0) {
    if (::pipe2(pipe_, O_NONBLOCK | O_CLOEXEC) != 0) runtime_error("submit: cannot make a pipe for asyncio");
    if (ended_ || !unread_.empty()) notify_locked();
  }
  return pipe_[0];
}

void Stream::drain() {
  int fd;
  {
    std::lock_guard lock(mu_);
    fd = pipe_[0];
  }
  char buf[256];
  while (fd >= 0 && ::read(fd, buf, sizeof buf) > 0) {
  }
}

// The reader calls this once it knows the request has ended, which poll() may learn from the handle
// (done) before the engine has ended this stream: closing then is safe, since a later notify_locked()
// finds no pipe. Waiting for ended_ here left that request's pipe open until its handle went (the
// asyncio test counted 2 file descriptors too many, now and then).
void Stream::close_pipe() {
  std::lock_guard lock(mu_);
  for (int& fd : pipe_)
    if (fd >= 0) ::close(std::exchange(fd, -1));
}

std::vector<std::int32_t> Stream::tokens() const {
  std::lock_guard lock(mu_);
  return tokens_;
}

std::vector<std::vector<std::int32_t>> Stream::history() const {
  std::lock_guard lock(mu_);
  return history_;
}

std::map<std::string, std::vector<Tensor>> Stream::take_acts() {
  std::lock_guard lock(mu_);
  return std::exchange(acts_, {});
}

double Stream::first_seconds() const {
  std::lock_guard lock(mu_);
  return any_ ? std::chrono::duration<double>(first_ - made_).count() : -1;
}

double Stream::end_seconds() const {
  std::lock_guard lock(mu_);
  return ended_ ? std::chrono::duration<double>(end_ - made_).count() : -1;
}

// ---- submitting ----------------------------------------------------------------------------------


std::unique_ptr<Submitted> submit(std::shared_ptr<Loaded> model, const std::string& request_json,
                                  const std::string& options_json) {
  CallSpec spec = parse_call("[" + request_json + "]", options_json);
  Request& req = spec.requests.at(0);
  req.where = req.id.empty() ? "submit" : "submit '" + req.id + "'";
  Session& s = *model->session;
  const auto view_ptr = session_request_view(s);
  RunModel& view = *view_ptr;
  EngineRequest q = engine_request(view, req, spec.options, 0);

  auto out = std::make_unique<Submitted>();
  out->model = model;
  out->id = q.id;
  out->diffusion = s.info().diffusion();
  const std::int64_t P = static_cast<std::int64_t>(q.prompt.size());
  const std::int64_t new_tokens = out->diffusion ? q.diffusion.max_new_tokens : q.ar.max_new_tokens;

  if (!spec.options.capture.hooks.empty()) {
    // As generate() resolves them; attention patterns are refused (their keys in a shared forward
    // would be the shared cache's).
    for (const auto& h : make_capture_spec(view, spec.options.capture).hooks) q.hooks.push_back(h.name);
    // Each generated token's rows too: one more forward over the last one, as generate's capture.
    q.ar.feed_last = !out->diffusion;
  }
  if (!spec.options.edits.empty()) {
    EditLimits lim;
    lim.diffusion = out->diffusion;
    lim.max_position = P + new_tokens;
    lim.steps = out->diffusion ? q.diffusion.steps : 0;
    lim.prompt_ids = {q.id};
    lim.prompt_tokens = {q.prompt};
    q.edits = resolve_edits(view, spec.options.edits, lim);
  }
  out->seed = out->diffusion ? q.diffusion.seeds.at(0) : q.ar.seeds.at(0);
  out->stop = q.ar.stop_strings;
  out->stream = std::make_shared<Stream>();
  // The engine's own loop runs the request (and checks its context against max_context); its
  // tokens, steps and taps go to the stream, which is told when the request ends however it ends.
  std::shared_ptr<Stream> st = out->stream;
  q.events = false;
  q.on_token = [st](std::int64_t step, std::int32_t t, const Tensor&) { st->token(step, t); };
  q.on_step = [st](const DiffusionStep& d) { st->step(d.step, d.canvas); };
  if (!q.hooks.empty()) q.tap = [st](const std::string& hook, const TensorView& rows) { st->tap(hook, rows); };
  q.on_end = [st] { st->end(); };
  out->handle = model->submit(std::move(q), out->generation);
  return out;
}

}  // namespace sonde::py
