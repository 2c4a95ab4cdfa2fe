#pragma once
// One prompt of a request as the server follows it: the decode loop the engine runs for it (the
// request's own EngineRequest::loop, so that taps, scores and streaming are its own), and the
// channel from that loop to the HTTP handler that waits for it or streams it.
#include <sonde/capture.h>
#include <sonde/decode.h>
#include <sonde/engine.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sonde::serve {

// A token with its log-probability under the model (log_softmax of the raw logits, in double as
// sonde score computes it) and the k most likely tokens with theirs.
struct Scored {
  std::int32_t token = -1;
  double logprob = 0;
  std::vector<std::pair<std::int32_t, double>> top;
};

// What the loop leaves behind; read by the handler once the job has ended.
struct Outcome {
  std::vector<std::int32_t> tokens;     // generated (AR, eos included) or the completion (diffusion)
  std::string finish_reason;            // eos, stop, length (the loop's)
  std::vector<Scored> scores;           // logprobs: one per generated token
  std::vector<std::optional<Scored>> prompt_scores;  // echo + logprobs: per prompt slot (the first has none)
  CapturedPrompt captured;              // hooks: rows and values
  Tensor logits;                        // /v1/activations with logits: [T, V]
};

// One streamed event: a token (AR) or the canvas after a denoising step (diffusion).
struct Piece {
  std::int64_t step = 0;
  Scored token;                         // token.token < 0 for a canvas
  std::vector<std::int32_t> canvas;     // the completion's slots after the step
};

class Job {
 public:
  void push(Piece p);
  void touch();  // a token or step came that is not streamed (time to first token)
  void end();    // the loop is over, however it ended
  // Waits up to `seconds` for pieces; returns those not yet taken. `ended`: nothing more comes.
  std::vector<Piece> take(double seconds, bool& ended);
  double first_piece_at() const;
  bool ended() const;
  bool wait_ended(double seconds);  // true once ended  // steady seconds of the first piece, -1 before it

  Outcome out;                          // the loop's, complete once ended
  std::shared_ptr<EngineHandle> handle;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Piece> unread_;
  bool ended_ = false;
  double first_ = -1;
};

// The loop's settings: a generation (max_tokens > 0), optionally preceded by a forward that
// scores the prompt (echo + logprobs), or one forward pass (/v1/activations).
struct LoopSpec {
  std::shared_ptr<Job> job;
  bool diffusion = false;
  std::vector<std::int32_t> prompt;
  ArOptions ar;
  DiffusionOptions diff;
  std::int64_t max_tokens = 0;
  int logprobs = -1;          // -1: no scores; k: top k too
  bool score_prompt = false;
  bool stream = false;
  CaptureSpec capture;        // no hooks: nothing captured
  bool forward_only = false, logits = false;
  std::int64_t vocab = 0;
  std::function<RowKind(std::int32_t)> forward_kind;  // a forward's row kinds (sonde forward's)
};

EngineResult run_job_loop(const LoopSpec& spec, EngineForward& fwd);

double steady_now();

}  // namespace sonde::serve
