#include "thread_pool.h"

#include <chrono>
#include <immintrin.h>

namespace sonde::threaded {

namespace {

// How long an idle thread polls before it sleeps. Decode runs a parallel region every few
// microseconds; a sleep costs a futex wake (tens of microseconds) on the next region, so the
// poll must outlast the usual gap between regions but not much more.
constexpr std::chrono::microseconds kSpin{200};

// Polls until done() or kSpin has passed; true if done() became true. _mm_pause lets the other
// hyperthread run and keeps the poll off the memory bus; the clock is read every 64 polls.
template <typename Done> bool spin_until(const Done& done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      _mm_pause();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int w = 1; w < threads; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::drain(int worker) {
  for (std::int64_t t = next_.fetch_add(1); t < tasks_; t = next_.fetch_add(1)) {
    try {
      (*fn_)(t, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(err_mu_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop(int worker) {
  std::uint32_t seen = 0;
  for (;;) {
    const auto moved = [&] { return generation_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(moved))
      while (!moved()) generation_.wait(seen, std::memory_order_acquire);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    drain(worker);
    // The last worker out wakes the caller if it went to sleep (notify is free without waiters).
    if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) busy_.notify_one();
  }
}

void ThreadPool::run(std::int64_t tasks, const Task& fn) {
  if (tasks <= 0) return;
  if (workers_.empty() || tasks == 1) {
    for (std::int64_t t = 0; t < tasks; ++t) fn(t, 0);
    return;
  }
  fn_ = &fn;
  tasks_ = tasks;
  next_.store(0, std::memory_order_relaxed);
  error_ = nullptr;
  busy_.store(static_cast<std::uint32_t>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);  // publishes the fields above
  generation_.notify_all();
  drain(0);
  const auto idle = [&] { return busy_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(idle))
    for (std::uint32_t b = busy_.load(std::memory_order_acquire); b != 0; b = busy_.load(std::memory_order_acquire))
      busy_.wait(b, std::memory_order_acquire);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace sonde::threaded
