// The engine's scheduling (engine.h): the waiting queue, admission into slots, the request
// threads and their rendezvous with the step, retirement. Serving the posts is engine_serve.cpp.
#include <sonde/engine.h>
#include <sonde/error.h>
#include <sonde/log.h>

#include "engine_internal.h"
#include "engine_kv.h"

#include <algorithm>
#include <chrono>

namespace sonde {
namespace {

EngineResult cancelled(const std::vector<std::int32_t>& prompt) {
  EngineResult r;
  r.prompt = prompt;
  r.finish_reason = "cancelled";
  return r;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// ---- the request's side ------------------------------------------------------------------------

bool EngineHandle::done() const {
  std::lock_guard lk(mu_);
  return result_.has_value();
}

EngineResult EngineHandle::wait() const {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return result_.has_value(); });
  return *result_;
}

std::optional<EngineEvent> EngineHandle::next() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return !events_.empty(); });
  EngineEvent e = std::move(events_.front());
  events_.pop_front();
  if (e.kind == EngineEvent::Kind::Done) {
    events_.push_front(e);  // every later call sees the end again
    return std::nullopt;
  }
  return e;
}

std::optional<EngineEvent> EngineHandle::try_next() {
  std::lock_guard lk(mu_);
  if (events_.empty() || events_.front().kind == EngineEvent::Kind::Done) return std::nullopt;
  EngineEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::vector<EngineEvent> EngineHandle::take(double seconds) {
  std::unique_lock lk(mu_);
  const auto ready = [&] { return !events_.empty(); };
  if (seconds > 0) cv_.wait_for(lk, std::chrono::duration<double>(seconds), ready);
  std::vector<EngineEvent> out;
  while (!events_.empty() && events_.front().kind != EngineEvent::Kind::Done) {
    out.push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return out;
}

std::optional<EngineResult> EngineHandle::wait_for(double seconds) const {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, std::chrono::duration<double>(std::max(seconds, 0.0)), [&] { return result_.has_value(); });
  return result_;
}

double EngineHandle::submitted_at() const {
  std::lock_guard lk(mu_);
  return submitted_;
}
double EngineHandle::first_at() const {
  std::lock_guard lk(mu_);
  return first_;
}
double EngineHandle::ended_at() const {
  std::lock_guard lk(mu_);
  return ended_;
}

void EngineHandle::push(EngineEvent e, double at) {
  {
    std::lock_guard lk(mu_);
    if (first_ < 0) first_ = at;
    e.at = at;
    if (queue_events_) events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

void EngineHandle::finish(EngineResult r, double at) {
  {
    std::lock_guard lk(mu_);
    result_ = std::move(r);
    ended_ = at;
    EngineEvent done;
    done.at = at;
    events_.push_back(std::move(done));
  }
  cv_.notify_all();
}

// The forward a request's loop calls: posts the call to the engine and parks until a step serves it.
class EngineSeqForward : public EngineForward {
 public:
  EngineSeqForward(Engine& e, EngineSeq& s) : EngineForward(s.id), e_(e), s_(s) {}
  std::int64_t vocab_size() const override { return e_.model_.vocab_size(); }
  bool has_kv_cache() const override { return e_.model_.has_kv_cache(); }
  bool has_slot_cache() const override { return e_.model_.has_slot_cache(); }
  void reset_cache(std::int64_t batch, std::int64_t capacity) override {
    if (batch != 1) runtime_error("engine: a request's loop runs one sequence, not {}", batch);
    if (capacity > e_.options_.max_context)
      bad_input("request '{}': {} KV slots exceed the engine's max_context of {}", s_.req.id, capacity, e_.options_.max_context);
    s_.capacity = capacity;
  }
  void set_taps(const std::vector<std::string>& hooks, HookTap tap) override {
    s_.taps = std::set<std::string>(hooks.begin(), hooks.end());
    s_.tap = s_.taps.empty() ? HookTap() : std::move(tap);
  }
  Tensor forward(const StepInput& in) override {
    std::unique_lock lk(e_.mu_);
    if (s_.cancel) throw EngineCancelled{};
    s_.post = in;
    s_.served = false;
    s_.phase = EngineSeq::Phase::Parked;
    e_.cv_.notify_all();
    s_.cv.wait(lk, [&] { return s_.served; });
    s_.phase = EngineSeq::Phase::Computing;
    s_.post = StepInput{};
    if (s_.fail) std::rethrow_exception(std::exchange(s_.fail, nullptr));
    return std::move(s_.result);
  }

 private:
  Engine& e_;
  EngineSeq& s_;
};

// decode.h's loops for one request, streaming its tokens or steps.
EngineResult Engine::default_loop(EngineForward& fwd, EngineSeq& s) {
  const DecodingKind kind = options_.decoding;
  const EngineRequest& q = s.req;
  if (!q.hooks.empty()) fwd.set_taps(q.hooks, q.tap);
  EngineResult r;
  r.prompt = q.prompt;
  if (kind == DecodingKind::Autoregressive) {
    const auto on_step = [&](const ArStep& st) {
      const std::int32_t t = st.new_tokens.at(0);
      if (t < 0) return;
      if (q.on_token) q.on_token(st.step, t, st.logits);
      s.handle->push(EngineEvent{EngineEvent::Kind::Token, t, st.step, {}}, now());
    };
    auto done = generate_autoregressive_captured(fwd, {q.prompt}, q.ar, q.capture, {0}, on_step);
    r.tokens = done.completions.at(0).tokens;
    r.finish_reason = done.completions.at(0).finish_reason;
    if (!done.captured.empty()) r.captured = std::move(done.captured[0]);
  } else {
    const auto on_step = [&](const DiffusionStep& st) {
      if (q.on_step) q.on_step(st);
      s.handle->push(EngineEvent{EngineEvent::Kind::Step, -1, st.step, st.canvas}, now());
    };
    auto done = diffusion_generate_captured(fwd, {q.prompt}, q.diffusion, q.capture, {0}, on_step);
    r.tokens = done.result.completions.at(0);
    r.finish_reason = "length";
    if (!done.captured.empty()) r.captured = std::move(done.captured[0]);
  }
  return r;
}

// ---- the engine ----------------------------------------------------------------------------------

Engine::Engine(EngineModel& model, EngineOptions options) : model_(model), options_(options), t0_(steady_seconds()) {
  if (options_.slots < 1) bad_input("engine: slots must be at least 1, got {}", options_.slots);
  if (options_.max_waiting < 0) bad_input("engine: max_waiting must not be negative, got {}", options_.max_waiting);
  if (options_.max_context < 2) bad_input("engine: max_context must be at least 2, got {}", options_.max_context);
  if (options_.prefill_chunk < 1) bad_input("engine: prefill_chunk must be at least 1, got {}", options_.prefill_chunk);
  if (options_.decoding == DecodingKind::Autoregressive && model_.has_kv_cache()) {
    const std::int64_t slack = options_.max_context / 4 + 16;
    kv_ = std::make_unique<KvRows>(model_.new_cache(options_.slots, options_.max_context + slack), slack);
  }
  // The clock starts when the engine can take requests: zeroing the shared cache (258 MB for 16
  // slots of qwen2.5-0.5b at a context of 512, 0.14 s on a loaded host) is not a request's wait.
  t0_ = steady_seconds();
}

Engine::~Engine() {
  stop();
  {
    std::lock_guard lk(mu_);
    for (auto& s : running_) s->cancel = true;
  }
  while (true) {
    std::deque<std::unique_ptr<EngineSeq>> dropped;
    bool idle = false;
    {
      std::lock_guard lk(mu_);
      dropped.swap(waiting_);
      for (auto& w : dropped) w->handle->finish(cancelled(w->req.prompt), now());
      idle = running_.empty();
    }
    for (auto& w : dropped)
      if (w->req.on_end) w->req.on_end();
    if (idle) break;
    step();
  }
}

double Engine::now() const { return steady_seconds() - t0_; }

std::shared_ptr<EngineHandle> Engine::submit(EngineRequest request) {
  if (request.prompt.empty()) bad_input("request '{}': the prompt has no tokens", request.id);
  if (!request.hooks.empty() && request.capture.active())
    bad_input("request '{}': give its hooks either as raw taps or as a capture, not both", request.id);
  const bool ar = options_.decoding == DecodingKind::Autoregressive;
  const std::int64_t P = static_cast<std::int64_t>(request.prompt.size());
  const std::int64_t context = P + (ar ? request.ar.max_new_tokens + (request.ar.feed_last ? 1 : 0)
                                       : request.diffusion.max_new_tokens);
  if (!request.loop && context > options_.max_context)
    bad_input("request '{}': {} prompt + new tokens exceed the engine's max_context of {}", request.id, context,
              options_.max_context);
  std::unique_lock lk(mu_);
  if (static_cast<std::int64_t>(waiting_.size()) >= options_.max_waiting)
    bad_input("engine: {} requests are waiting (max_waiting {}); request '{}' refused, try again later",
              waiting_.size(), options_.max_waiting, request.id);
  auto s = std::make_unique<EngineSeq>();
  s->id = next_id_++;
  if (request.id.empty()) request.id = std::to_string(s->id);
  s->prompt_len = P;
  s->handle = std::shared_ptr<EngineHandle>(new EngineHandle(s->id));
  s->handle->queue_events_ = request.events;
  s->handle->submitted_ = now();
  s->req = std::move(request);
  auto handle = s->handle;
  waiting_.push_back(std::move(s));
  ++counts_.submitted;
  lk.unlock();
  cv_.notify_all();
  return handle;
}

bool Engine::cancel(std::int64_t id) {
  std::unique_lock lk(mu_);
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if ((*it)->id == id) {
      auto s = std::move(*it);
      waiting_.erase(it);
      ++counts_.finished;
      s->handle->finish(cancelled(s->req.prompt), now());
      lk.unlock();
      if (s->req.on_end) s->req.on_end();
      return true;
    }
  for (auto& s : running_)
    if (s->id == id && s->phase != EngineSeq::Phase::Ended && !s->cancel) {
      s->cancel = true;
      lk.unlock();
      cv_.notify_all();
      return true;
    }
  return false;
}

void Engine::admit_locked(std::vector<EngineSeq*>& started) {
  while (static_cast<std::int64_t>(running_.size()) < options_.slots && !waiting_.empty()) {
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    EngineSeq* s = running_.back().get();
    s->phase = EngineSeq::Phase::Computing;
    started.push_back(s);
  }
}

// A request's thread: its loop, then its result.
void Engine::start_thread(EngineSeq* s) {
  s->thread = std::thread([this, s] {
    EngineSeqForward fwd(*this, *s);
    EngineResult r;
    try {
      r = s->req.loop ? s->req.loop(fwd) : default_loop(fwd, *s);
    } catch (const EngineCancelled&) {
      r.finish_reason = "cancelled";
    } catch (const Error& e) {
      r.finish_reason = "error";
      r.error = e.what();
      r.error_kind = e.exit_code();
    } catch (const std::exception& e) {
      r.finish_reason = "error";
      r.error = e.what();
      r.error_kind = 1;
    } catch (...) {  // a front end's own exception type: the request fails, the process goes on
      r.finish_reason = "error";
      r.error = "the request's loop threw an exception that is not a std::exception";
      r.error_kind = 1;
    }
    if (r.prompt.empty()) r.prompt = s->req.prompt;
    std::unique_lock lk(mu_);
    r.forwards = s->forwards;
    s->phase = EngineSeq::Phase::Ended;
    s->handle->finish(std::move(r), now());
    lk.unlock();
    cv_.notify_all();
    // Still before retire() can join this thread, so the request is alive.
    if (s->req.on_end) s->req.on_end();
  });
}

bool Engine::step() {
  std::lock_guard step_lk(step_mu_);
  std::vector<EngineSeq*> parked;
  std::unique_lock lk(mu_);
  const auto settled = [&] {
    return std::all_of(running_.begin(), running_.end(), [](const auto& s) {
      return s->phase == EngineSeq::Phase::Parked || s->phase == EngineSeq::Phase::Ended;
    });
  };
  // Admit, wait for every loop to post or end, retire the ended; again while that freed a slot
  // someone waits for, so a finished or cancelled sequence's slot is taken in the same step.
  const double began = now();
  while (true) {
    std::vector<EngineSeq*> started;
    admit_locked(started);
    for (EngineSeq* s : started) {
      start_thread(s);
      // --log-level trace: a per-step trace of the engine (what each step served, and when).
      spdlog::trace("engine step {}: admits request {} ({} prompt tokens), submitted at {:.3f} s, now {:.3f} s",
                   counts_.steps, s->req.id, s->prompt_len, s->handle->submitted_, now());
    }
    // A cancelled loop is answered at its parked forward and runs to its end before anything is
    // served, so that its KV row is free before the next decode forward.
    while (true) {
      const double t = now();
      cv_.wait(lk, settled);
      counts_.wait_s += now() - t;
      bool any = false;
      for (auto& s : running_)
        if (s->cancel && s->phase == EngineSeq::Phase::Parked) {
          s->fail = std::make_exception_ptr(EngineCancelled{});
          s->served = true;
          s->phase = EngineSeq::Phase::Computing;
          s->cv.notify_all();
          any = true;
        }
      if (!any) break;
    }
    auto gone = take_ended_locked();
    if (gone.empty()) break;
    lk.unlock();
    retire(gone);
    lk.lock();
    if (waiting_.empty()) break;
  }
  for (auto& s : running_) parked.push_back(s.get());
  spdlog::trace("engine step {}: {} running, {} waiting; began {:.3f} s, all posted {:.3f} s", counts_.steps, running_.size(),
               waiting_.size(), began, now());
  lk.unlock();
  update_edits();
  if (!parked.empty()) serve(parked);
  lk.lock();
  if (!parked.empty()) ++counts_.steps;
  if (kv_) {
    counts_.kv_rows = kv_->rows();
    counts_.kv_filled = kv_->filled();
    counts_.kv_capacity = kv_->capacity();
    counts_.kv_compactions = kv_->compactions();
  }
  return !running_.empty() || !waiting_.empty();
}

std::vector<std::unique_ptr<EngineSeq>> Engine::take_ended_locked() {
  std::vector<std::unique_ptr<EngineSeq>> gone;
  for (auto it = running_.begin(); it != running_.end();)
    if ((*it)->phase == EngineSeq::Phase::Ended) {
      gone.push_back(std::move(*it));
      it = running_.erase(it);
    } else {
      ++it;
    }
  return gone;
}

void Engine::retire(std::vector<std::unique_ptr<EngineSeq>>& gone) {
  for (auto& s : gone) {
    if (s->thread.joinable()) s->thread.join();
    if (s->row < 0) continue;
    const std::int64_t moved = kv_->remove(s->row);
    if (moved < 0) continue;
    std::lock_guard lk(mu_);  // the last row took the freed one's place, whoever holds it
    for (auto* list : {&running_, &gone})
      for (auto& r : *list)
        if (r->row == moved) r->row = s->row;
    s->row = -1;
  }
  std::lock_guard lk(mu_);
  counts_.finished += static_cast<std::int64_t>(gone.size());
  gone.clear();
}

// The edits of the running requests, each tagged with its request: one set for the model, changed
// only when a request with edits joins or leaves (the model replans then).
void Engine::update_edits() {
  std::vector<std::int64_t> owners;
  std::vector<Edit> all;
  {
    std::lock_guard lk(mu_);
    for (const auto& s : running_)
      if (!s->req.edits.empty()) {
        owners.push_back(s->id);
        for (Edit e : s->req.edits) {
          e.owner = s->id;
          all.push_back(std::move(e));
        }
      }
  }
  if (owners == edit_owners_) return;
  model_.set_edits(std::move(all));
  edit_owners_ = std::move(owners);
}

void Engine::run_until_idle() {
  while (step()) {
  }
}

void Engine::start() {
  std::lock_guard lk(mu_);
  if (started_) return;
  started_ = true;
  stopping_ = false;
  loop_ = std::thread([this] {
    while (true) {
      {
        std::unique_lock lk2(mu_);
        const double t = now();
        cv_.wait(lk2, [&] { return stopping_ || !waiting_.empty() || !running_.empty(); });
        counts_.idle_s += now() - t;
        if (stopping_) return;
      }
      step();
    }
  });
}

void Engine::stop() {
  {
    std::lock_guard lk(mu_);
    if (!started_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  loop_.join();
  // Requests that ended after the loop's last step leave now, not at a step that may never come.
  std::lock_guard step_lk(step_mu_);
  std::vector<std::unique_ptr<EngineSeq>> gone;
  {
    std::lock_guard lk(mu_);
    started_ = false;
    stopping_ = false;
    gone = take_ended_locked();
  }
  retire(gone);
  std::lock_guard lk(mu_);
  if (kv_) counts_.kv_rows = kv_->rows();
}

EngineStats Engine::stats() const {
  std::lock_guard lk(mu_);
  EngineStats st = counts_;
  st.waiting = static_cast<std::int64_t>(waiting_.size());
  st.running = static_cast<std::int64_t>(running_.size());
  for (const auto& s : running_) st.threads += s->thread.joinable() ? 1 : 0;
  return st;
}

}  // namespace sonde
