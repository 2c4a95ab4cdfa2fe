#pragma once
// A checkpoint as the Python model holds it: the Session, the lock that keeps one run() at a time,
// and the step-level engine (engine.h) of Model.submit, made on first use. run() and the engine
// share the Session: the engine's forwards take the same lock, so a generate() call pauses the
// submitted requests for its duration instead of racing them, and the engine's edits are put
// back on the Session after each run() (which sets its own).
#include <sonde/engine.h>
#include <sonde/session.h>

#include <cstdint>
#include <memory>
#include <mutex>

namespace sonde::py {

struct Loaded {
  std::unique_ptr<Session> session;
  std::mutex mu;           // one run() or engine forward at a time
  std::uint64_t runs = 0;  // run() calls begun (under mu): the Session's edits are theirs since

  Loaded() = default;
  Loaded(const Loaded&) = delete;
  Loaded& operator=(const Loaded&) = delete;
  // Stops the engine (running and waiting requests end as cancelled) before the Session goes; the
  // GIL is released meanwhile, as a request's thread may be waiting for it.
  ~Loaded();

  // Any thread, GIL released. The engine is made and started with the options on first use.
  // `generation` says which engine a handle's id belongs to (configure() replaces it).
  std::shared_ptr<EngineHandle> submit(EngineRequest request, std::uint64_t& generation);
  bool cancel(std::uint64_t generation, std::int64_t id);
  EngineStats stats();
  EngineOptions options();
  // Makes and starts an engine with `o` (decoding is the model's), replacing an idle one.
  // BadInput for bad options or while requests run or wait.
  void configure(EngineOptions o);

 private:
  Engine& engine_locked();
  // Declared after the Session: the engine is stopped before it goes.
  std::mutex engine_mu_;
  EngineOptions options_;
  std::uint64_t generation_ = 0;
  std::unique_ptr<EngineModel> engine_model_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace sonde::py
