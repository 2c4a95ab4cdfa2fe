#pragma once
// One run of the engine on a worker thread, so that Python keeps the GIL free and its main
// thread can notice Ctrl-C: the caller waits in short slices (wait(), GIL released), drains the
// events the run's callbacks queued (tokens, diffusion steps, progress) and on KeyboardInterrupt
// raises the cancel flag, which the run sees between micro-batches and the callbacks at the next
// token or step.
#include <sonde/run.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sonde::py {

struct Event {
  enum class Kind { Token, Step, Progress } kind = Kind::Token;
  std::int64_t request = 0, step = 0;
  std::int32_t token = 0;
  std::vector<std::int32_t> canvas;
  RunProgress progress;
};

// Thrown from a callback to stop a run mid micro-batch; never leaves the worker. A
// std::exception: the callbacks run on the engine's request threads (run() is its client),
// which end a request with the error of a std::exception and let nothing else out.
struct Cancelled : std::exception {
  const char* what() const noexcept override { return "cancelled"; }
};

class Job {
 public:
  // `work` runs on the worker thread; it may call push() and check cancelled().
  explicit Job(std::function<void(Job&)> work);
  ~Job();  // cancels and joins
  // Waits up to `seconds` for events or the end; returns the events queued so far.
  std::vector<Event> wait(double seconds);
  bool done() const { return done_.load(); }
  void cancel() { cancel_.store(true); }
  const std::atomic<bool>* cancel_flag() const { return &cancel_; }
  bool cancelled() const { return cancel_.load(); }
  // Joins; rethrows the run's exception (Cancelled included).
  void join();
  void push(Event e);

 private:
  std::atomic<bool> cancel_{false}, done_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Event> events_;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace sonde::py
