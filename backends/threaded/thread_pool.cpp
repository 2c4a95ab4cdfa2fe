#include "thread_pool.h"

#include <chrono>
#include <immintrin.h>
#include <stdexcept>

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
  for (;;) {
    const std::uint64_t claim = next_.fetch_add(1, std::memory_order_acq_rel);
    const std::uint64_t job = job_.load(std::memory_order_acquire);
    // A claim from another run (a worker that woke late) is dropped. A claim of this run that is
    // in range holds the run open (done_ cannot reach the count), so job_ and fn_ stay put.
    if ((claim >> 32) != (job >> 32)) return;
    const auto t = static_cast<std::int64_t>(claim & 0xffffffffu), tasks = static_cast<std::int64_t>(job & 0xffffffffu);
    if (t >= tasks) return;
    try {
      (*fn_.load(std::memory_order_acquire))(t, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(err_mu_);
      if (!error_) error_ = std::current_exception();
    }
    // The last task wakes the caller if it went to sleep (notify is free without waiters).
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<std::uint32_t>(tasks)) done_.notify_one();
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
  }
}

void ThreadPool::run(std::int64_t tasks, const Task& fn) {
  if (tasks <= 0) return;
  if (workers_.empty() || tasks == 1) {
    for (std::int64_t t = 0; t < tasks; ++t) fn(t, 0);
    return;
  }
  if (tasks > 0xffffffffLL) throw std::length_error("thread pool: too many tasks in one run");
  const std::uint64_t run_no = (job_.load(std::memory_order_relaxed) >> 32) + 1;
  error_ = nullptr;
  fn_.store(&fn, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  job_.store((run_no << 32) | static_cast<std::uint64_t>(tasks), std::memory_order_release);
  next_.store(run_no << 32, std::memory_order_release);  // claims from now on belong to this run
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  drain(0);
  const auto n = static_cast<std::uint32_t>(tasks);
  const auto finished = [&] { return done_.load(std::memory_order_acquire) == n; };
  if (!spin_until(finished))
    for (std::uint32_t d = done_.load(std::memory_order_acquire); d != n; d = done_.load(std::memory_order_acquire))
      done_.wait(d, std::memory_order_acquire);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace sonde::threaded
