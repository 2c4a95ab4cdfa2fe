#pragma once
// Model.submit (docs/python.md): one request on the model's step-level engine (engine.h), beside
// the others it runs. The request's thread fills a Stream with its tokens (autoregressive) or
// canvases (diffusion) and the engine's taps its captured rows, without Python; Python reads the
// stream in timed waits with the GIL released (so Ctrl-C is noticed), or from asyncio through a
// pipe that gets a byte for every item and one at the end.
#include "loaded.h"

#include <sonde/tensor.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sonde::py {

struct StreamItem {
  std::int64_t step = 0;
  std::int32_t token = -1;            // autoregressive
  std::vector<std::int32_t> canvas;   // diffusion: after the step, prompt included
};

class Stream {
 public:
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  // The request's side.
  void token(std::int64_t step, std::int32_t t);
  void step(std::int64_t step, const std::vector<std::int32_t>& canvas);
  void tap(const std::string& hook, const TensorView& rows);
  void end();
  // Blocks until end() has been called: the engine's result is ready a moment before its on_end
  // runs, and a result read in that moment would have no end time.
  void wait_end();

  // The reader's: waits up to `seconds` for unread items or the end (0: does not wait); returns
  // them and whether the end has come after them.
  std::vector<StreamItem> take(double seconds, bool& ended);
  // The pipe's read end (non-blocking), made on first call; drain() empties it; close_pipe()
  // closes it, called by the reader once the request has ended (a later notify skips it).
  int fileno();
  void drain();
  void close_pipe();

  // Kept for the result: every token, every canvas, each hook's rows per forward.
  std::vector<std::int32_t> tokens() const;
  std::vector<std::vector<std::int32_t>> history() const;
  std::map<std::string, std::vector<Tensor>> take_acts();
  // Seconds from the stream's making (at submit) to its first item and to its end; -1 until then.
  double first_seconds() const, end_seconds() const;

 private:
  void notify_locked();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamItem> unread_;
  std::vector<std::int32_t> tokens_;
  std::vector<std::vector<std::int32_t>> history_;
  std::map<std::string, std::vector<Tensor>> acts_;
  bool ended_ = false;
  int pipe_[2] = {-1, -1};
  std::chrono::steady_clock::time_point made_ = std::chrono::steady_clock::now(), first_, end_;
  bool any_ = false;
};

// A submitted request: the engine's handle, its stream, and what its result needs.
struct Submitted {
  std::shared_ptr<Loaded> model;
  std::shared_ptr<EngineHandle> handle;
  std::shared_ptr<Stream> stream;
  std::uint64_t generation = 0;  // of the engine that has it (Loaded::cancel)
  std::string id;
  std::uint64_t seed = 0;
  bool diffusion = false;
  std::vector<std::string> stop;  // autoregressive stop strings, to cut the text
};

// The request (one request dict as generate's) with options {defaults, seed, edits, hooks,
// use_kv_cache}, made ready by the run layer (engine_request) and queued. BadInput for a request
// that cannot run or when too many wait. Call with the GIL released.
std::unique_ptr<Submitted> submit(std::shared_ptr<Loaded> model, const std::string& request_json,
                                  const std::string& options_json);

}  // namespace sonde::py
