#pragma once
// The engine's per-request state (engine.h), shared by engine.cpp (scheduling, threads) and
// engine_serve.cpp (merging the posted forwards into model forwards).
#include <sonde/engine.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace sonde {

// Thrown into a cancelled request's loop at its next forward; not a sonde::Error, so nothing on
// the way out mistakes it for a failure of the model.
struct EngineCancelled {};

struct EngineSeq {
  std::int64_t id = 0;
  EngineRequest req;
  std::shared_ptr<EngineHandle> handle;
  std::thread thread;
  enum class Phase { Waiting, Computing, Parked, Ended } phase = Phase::Waiting;
  bool cancel = false;
  std::condition_variable cv;  // served (with the engine's mutex)

  // The posted forward and what serving it gives back (under the engine's mutex, or owned by the
  // engine while the loop is parked).
  StepInput post;
  bool served = false;
  Tensor result;
  std::exception_ptr fail;
  std::int64_t forwards = 0;   // forwards served: the edits' step of the next one

  // Set by the loop (DecodeForward::set_taps, reset_cache) before it posts.
  std::set<std::string> taps;
  HookTap tap;
  std::int64_t capacity = 0;

  // Owned by the engine.
  std::int64_t prompt_len = 0;
  std::int64_t row = -1;       // row of the shared KV cache once its prompt is in
  KvCache staged;              // the prompt's own cache while it is prefilled in chunks
  std::int64_t prompt_step = -1;  // the engine step its prompt was first posted at (prefill order)
  std::map<std::string, std::vector<Tensor>> chunk_taps;  // the prompt's taps, chunk by chunk
  KvCache own, scratch;        // a diffusion slot cache (block-cache, dual-cache)
};

}  // namespace sonde
