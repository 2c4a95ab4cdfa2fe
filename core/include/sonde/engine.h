#pragma once
// The step-level engine: requests join and leave a running batch (iteration-level scheduling,
// Yu et al., "Orca", OSDI '22). A request is one decode loop of decode.h (autoregressive or
// diffusion, batch 1) run on a thread of its own against an EngineForward: each forward call the
// loop makes is posted to the engine and parked there. One engine step waits until every running
// loop has posted (or ended), then serves all posts with as few model forwards as it can:
//   - autoregressive decode steps of every running sequence: one forward over the rows of a
//     shared KV cache (engine_kv.h), one row per sequence;
//   - prompts: chunked prefill, at most `prefill_chunk` prompt tokens a step over all of them,
//     shortest remaining first (aged, so none starves), each into a cache of its own, moved into a
//     row of the shared cache when its last chunk is done;
//   - full forwards (diffusion without a cache, autoregressive without a cache): one left-padded
//     forward over all of them, whatever their lengths and steps;
//   - diffusion forwards with a slot cache (block-cache, dual-cache): one forward each, side by side.
// Finished or cancelled sequences free their row at once; waiting ones join at the next step. The
// decode loops are those of a solo run, and the kernels are batch-invariant, so a request's
// tokens, logits and taps are bit-identical alone or beside others (docs/engine.md).
#include <sonde/capture.h>
#include <sonde/decode.h>
#include <sonde/edits.h>
#include <sonde/session.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace sonde {

// One merged forward as the engine asks a model for it. `step` is a batch over rows of several
// requests: past > 0 with a cache reads the first step.batch rows of `cache` (filled == past);
// fill_cache / slots > 0 use `cache` and `scratch` as the diffusion loops do; neither: a full
// forward. `call` says which request owns each row (Edit::owner) and each row's step.
struct EngineBatch {
  const StepInput& step;
  KvCache* cache = nullptr;
  KvCache* scratch = nullptr;
  const EditCall& call;
  const std::set<std::string>& taps;
  const HookTap& tap;
};

// What the engine needs of a model: a Session (session_engine_model) or, in unit tests, a fake.
class EngineModel {
 public:
  virtual ~EngineModel() = default;
  virtual std::int64_t vocab_size() const = 0;
  virtual bool has_kv_cache() const = 0;    // autoregressive decoding through a KV cache
  virtual bool has_slot_cache() const = 0;  // diffusion's cached modes
  virtual KvCache new_cache(std::int64_t batch, std::int64_t capacity) const = 0;
  virtual Tensor forward(const EngineBatch& in) = 0;
  // The edits of every running request (each tagged with its owner); replaces the last set.
  virtual void set_edits(std::vector<Edit> edits) = 0;
  // Hooks a forward produces only when it computes logits (the LM head's): a row whose own
  // forward asked for none is not handed them when a shared forward computes logits for others,
  // so that it sees what its forward alone would have (decode.h's feed_last forward).
  virtual bool only_with_logits(const std::string& /*hook*/) const { return false; }
};

std::unique_ptr<EngineModel> session_engine_model(Session& session, bool use_kv_cache = true);

// An EngineModel that hands every call to another: wrappers that observe forwards (a profile, a
// count) override forward() alone.
class ForwardingEngineModel : public EngineModel {
 public:
  explicit ForwardingEngineModel(std::unique_ptr<EngineModel> inner) : inner_(std::move(inner)) {}
  std::int64_t vocab_size() const override { return inner_->vocab_size(); }
  bool has_kv_cache() const override { return inner_->has_kv_cache(); }
  bool has_slot_cache() const override { return inner_->has_slot_cache(); }
  KvCache new_cache(std::int64_t batch, std::int64_t capacity) const override { return inner_->new_cache(batch, capacity); }
  Tensor forward(const EngineBatch& in) override { return inner_->forward(in); }
  void set_edits(std::vector<Edit> edits) override { inner_->set_edits(std::move(edits)); }
  bool only_with_logits(const std::string& hook) const override { return inner_->only_with_logits(hook); }

 protected:
  std::unique_ptr<EngineModel> inner_;
};

struct EngineOptions {
  DecodingKind decoding = DecodingKind::Autoregressive;
  std::int64_t slots = 8;           // sequences running at once (rows of the shared KV cache)
  std::int64_t max_waiting = 256;   // submit() refuses a request beyond this many waiting
  std::int64_t max_context = 2048;  // KV slots per sequence: prompt + new tokens (+1 to capture the last)
  std::int64_t prefill_chunk = 256; // prompt tokens prefilled per step, over all prompts
};

// What a request's loop sees: the forward it posts to the engine.
class EngineForward : public DecodeForward {
 public:
  std::int64_t id() const { return id_; }

 protected:
  explicit EngineForward(std::int64_t id) : id_(id) {}

 private:
  std::int64_t id_;
};

struct EngineResult {
  std::vector<std::int32_t> prompt, tokens;  // tokens: generated ids (AR) or the completion (diffusion)
  std::string finish_reason;                 // eos, stop, length; cancelled; error
  std::string error;                         // finish_reason error: the loop's message
  int error_kind = 0;                        // ErrorKind of that error (2: bad input)
  std::int64_t forwards = 0;                 // forward calls the loop made
  CapturedPrompt captured;                   // EngineRequest::capture's rows (prompt index 0)
};

// A request's own streamed events, in order; a queue the submitter drains at its own pace.
struct EngineEvent {
  enum class Kind { Token, Step, Done } kind = Kind::Done;
  std::int32_t token = -1;            // Token
  std::int64_t step = 0;              // Token: its index; Step: the denoising step
  std::vector<std::int32_t> canvas;   // Step: the canvas after it (prompt included)
  double at = 0;                      // when it was delivered (Engine::now())
};

struct EngineRequest {
  std::string id;                       // names the request in errors and patch edits
  std::vector<std::int32_t> prompt;
  ArOptions ar;                         // autoregressive models (seeds: one, or none for 0)
  DiffusionOptions diffusion;           // diffusion models
  std::vector<Edit> edits;              // this request's rows only (owner is set by the engine)
  // Hooks delivered to `tap` as [1, T, *row] for each forward of this request (a prompt's chunks
  // arrive joined, as one forward).
  std::vector<std::string> hooks;
  HookTap tap;
  // Or this request's own capture (capture.h): its hooks' rows picked by its position and step
  // policies, returned in EngineResult::captured, as the run layer writes them for one prompt.
  // Not with `hooks`.
  CaptureSpec capture;
  bool events = true;                   // queue Token / Step events for EngineHandle::next()
  // Called on the request's thread as tokens and steps come (besides the event queue).
  std::function<void(std::int64_t step, std::int32_t token, const Tensor& logits)> on_token;
  std::function<void(const DiffusionStep&)> on_step;
  // Called once when the request has ended, however it ended (its result is ready), on whichever
  // thread ended it, never under the engine's lock: a front end's wake-up (a pipe for asyncio).
  std::function<void()> on_end;
  // A loop of one's own instead of decode.h's (the run layer's capture wraps them): it runs on the
  // request's thread and may call `forward` as a decode loop does; its result is the request's.
  std::function<EngineResult(EngineForward& forward)> loop;
};

class Engine;

// The submitter's side of a request: its events and result, safe from any thread.
class EngineHandle {
 public:
  std::int64_t id() const { return id_; }
  bool done() const;
  EngineResult wait() const;                        // blocks until the request ends
  std::optional<EngineEvent> next();                // blocks; nullopt after the Done event
  std::optional<EngineEvent> try_next();            // never blocks
  // The events queued within `seconds` (at least one unless it times out or has ended), without
  // the Done event; a front end polls with it to stay responsive (Ctrl-C, a closed connection).
  std::vector<EngineEvent> take(double seconds);
  std::optional<EngineResult> wait_for(double seconds) const;  // nullopt while still running
  // Time points (steady clock, seconds since the engine started): submitted, first token or step
  // delivered, ended; -1 until they happen.
  double submitted_at() const, first_at() const, ended_at() const;

 private:
  friend class Engine;
  friend struct EngineSeq;
  explicit EngineHandle(std::int64_t id) : id_(id) {}
  void push(EngineEvent e, double at);
  void finish(EngineResult r, double at);
  std::int64_t id_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<EngineEvent> events_;
  std::optional<EngineResult> result_;
  bool queue_events_ = true;
  double submitted_ = -1, first_ = -1, ended_ = -1;
};

struct EngineStats {
  std::int64_t waiting = 0, running = 0, kv_rows = 0;  // kv_rows: rows of the shared cache in use
  std::int64_t steps = 0, forwards = 0, submitted = 0, finished = 0;
  std::int64_t threads = 0;  // request threads alive
  std::int64_t kv_filled = 0, kv_capacity = 0;
  std::int64_t kv_compactions = 0;  // times the shared cache's rows moved back (engine_kv.h)
  // Where the step loop's wall time went, in seconds since the engine was made (two clock reads a
  // phase, so always on): model forwards over prompts (prefill_tokens real tokens, no padding),
  // over the decode rows (decode_rows, one per running sequence a step) and any other kind; the
  // copies around them (logits split per request, prompt caches moved into the shared one);
  // waiting for the request loops to post (thread wake-ups, sampling, event delivery); and, with
  // start(), idle with nothing running or waiting.
  double prefill_s = 0, decode_s = 0, other_forward_s = 0, copy_s = 0, wait_s = 0, idle_s = 0;
  std::int64_t prefill_forwards = 0, prefill_tokens = 0, decode_forwards = 0, decode_rows = 0;
};

struct EngineSeq;
class KvRows;

class Engine {
 public:
  Engine(EngineModel& model, EngineOptions options);
  ~Engine();  // stops the loop thread; every running or waiting request ends as cancelled
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. BadInput, nothing queued: an empty prompt, a context over max_context, or
  // max_waiting requests already waiting. Any thread, any time.
  std::shared_ptr<EngineHandle> submit(EngineRequest request);
  // Ends a request: a waiting one at once, a running one at the next step (its row is freed
  // then). False when it has ended already or is unknown.
  bool cancel(std::int64_t id);

  // One iteration: admit, wait for every running loop to post, serve the posts, retire the ended.
  // Returns whether anything is running or waiting after it. Not with start().
  bool step();
  // Steps until nothing is running or waiting.
  void run_until_idle();
  // A thread of its own that steps whenever there is work; stop() joins it.
  void start();
  void stop();

  EngineStats stats() const;
  const EngineOptions& options() const { return options_; }
  double now() const;  // seconds since the engine was made

 private:
  friend struct EngineSeq;
  friend class EngineSeqForward;
  void admit_locked(std::vector<EngineSeq*>& started);
  void start_thread(EngineSeq* s);
  std::vector<std::unique_ptr<EngineSeq>> take_ended_locked();  // under mu_
  void retire(std::vector<std::unique_ptr<EngineSeq>>& gone);
  void serve(std::vector<EngineSeq*>& parked);
  void serve_decode(std::vector<EngineSeq*>& seqs);
  // A prompt whose forward is done and whose cache row joins the shared cache later in the step.
  struct PendingRow {
    EngineSeq* seq;
    std::shared_ptr<KvCache> cache;
    std::int64_t row, pad, tokens;
  };
  void order_prompts(std::vector<EngineSeq*>& seqs);
  void serve_prefill(std::vector<EngineSeq*>& seqs, std::vector<EngineSeq*>& prompted, std::vector<PendingRow>& rows);
  void release(const std::vector<EngineSeq*>& seqs);
  void add_copy(double seconds);  // hands each loop its served forward
  void serve_full(std::vector<EngineSeq*>& seqs);
  void serve_alone(EngineSeq& s);
  StepInput padded(const std::vector<EngineSeq*>& seqs, std::vector<EngineSeq*>& rows, std::vector<std::int64_t>& pad,
                   std::vector<std::int64_t>& tokens);
  void split_logits(const Tensor& logits, const std::vector<EngineSeq*>& rows, const std::vector<std::int64_t>& pad,
                    std::int64_t T, std::int64_t first);
  void update_edits();
  EngineResult default_loop(EngineForward& fwd, EngineSeq& s);
  Tensor run_forward(const StepInput& in, KvCache* cache, KvCache* scratch, const std::vector<EngineSeq*>& rows,
                     const std::vector<std::int64_t>& pad, const std::vector<std::int64_t>& tokens, bool join_taps);

  EngineModel& model_;
  EngineOptions options_;
  std::unique_ptr<KvRows> kv_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // a loop parked or ended; work arrived (the loop thread)
  std::deque<std::unique_ptr<EngineSeq>> waiting_;
  std::vector<std::unique_ptr<EngineSeq>> running_;
  std::int64_t next_id_ = 1;
  EngineStats counts_;
  std::vector<std::int64_t> edit_owners_;  // owners whose edits the model holds, in order
  std::thread loop_;
  bool stopping_ = false, started_ = false;
  std::mutex step_mu_;  // one step at a time
  double t0_ = 0;
};

}  // namespace sonde
