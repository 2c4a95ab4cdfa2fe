#include "thread_pool.h"

#include <chrono>
#include <immintrin.h>

namespace sonde::threaded {

namespace {

// How long an idle thread polls before it sleeps. Decode runs a parallel region every few
// microseconds; a sleep costs a futex wake (tens of microseconds, more in a VM) on the next
// region, so the poll must outlast the usual gap between regions but not much more.
constexpr std::chrono::microseconds kSpin{100};

constexpr std::uint64_t kIndexMask = 0xFFFFFFFFu;
constexpr std::uint64_t kClosed = kIndexMask;  // the index of a finished run: above any task count
constexpr std::uint64_t kNoJob = ~std::uint64_t{0};  // a job generation no run ever has

// Polls until done() or kSpin has passed; true if done() became true. _mm_pause keeps the poll
// cheap for the other hyperthread and the memory bus; the clock is read every 64 polls.
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
  cancel_job();
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

// Claims and runs tasks of run `generation` until none is left or that run is over. fn_ and
// tasks_ are read before the claim; a successful compare-exchange proves they were still this
// run's (run() writes the next run's only after closing the claim word; all seq_cst).
void ThreadPool::drain(int worker, std::uint64_t generation) {
  for (std::uint64_t v = claim_.load();;) {
    if ((v >> 32) != generation) return;
    const auto task = static_cast<std::int64_t>(v & kIndexMask);
    const std::int64_t tasks = tasks_.load();
    const Task* fn = fn_.load();
    if (task >= tasks) return;
    if (!claim_.compare_exchange_weak(v, v + 1)) continue;  // v reloaded
    try {
      (*fn)(task, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(err_mu_);
      if (!error_) error_ = std::current_exception();
    }
    if (done_.fetch_add(1) + 1 == tasks) done_.notify_all();
    v = claim_.load();
  }
}

void ThreadPool::worker_loop(int worker) {
  std::uint64_t last = 0;  // the run this worker is done with (runs start at generation 1)
  for (;;) {
    // A posted job counts as work only while polling: the sleep below waits for a new run.
    const auto fresh = [&] { return (claim_.load() >> 32) != last || stop_.load(); };
    const auto work = [&] { return fresh() || has_job_.load(); };
    if (!spin_until(work))
      while (!fresh()) generation_.wait(static_cast<std::uint32_t>(last));
    if (stop_.load()) return;
    if (fresh()) {
      last = claim_.load() >> 32;
      drain(worker, last);
    } else {
      run_job();
    }
  }
}

void ThreadPool::run_job() {
  std::function<void()> job;
  {
    std::lock_guard<std::mutex> lock(job_mu_);
    if (!has_job_.load()) return;
    job = std::move(job_);
    job_ = nullptr;
    has_job_.store(false);
    job_running_.store(true);
  }
  if (!preempted()) {
    try {
      job();
    } catch (...) {  // a job is a hint (a prefetch): its failure must not take the worker down
    }
  }
  job_running_.store(false);
}

void ThreadPool::cancel_job() {
  {
    std::lock_guard<std::mutex> lock(job_mu_);
    job_ = nullptr;
    has_job_.store(false);
    job_generation_.store(kNoJob);
  }
  while (job_running_.load()) _mm_pause();
}

void ThreadPool::post(std::function<void()> job) {
  if (workers_.empty()) return;
  std::lock_guard<std::mutex> lock(job_mu_);
  job_ = std::move(job);
  job_generation_.store(claim_.load() >> 32);
  has_job_.store(true);
}

void ThreadPool::run(std::int64_t tasks, const Task& fn) {
  if (tasks <= 0) return;
  if (workers_.empty() || tasks == 1 || static_cast<std::uint64_t>(tasks) >= kClosed) {
    for (std::int64_t t = 0; t < tasks; ++t) fn(t, 0);
    return;
  }
  // The previous run is closed, so no late worker can claim while these are rewritten.
  const std::uint64_t generation = (claim_.load() >> 32) + 1;
  fn_.store(&fn);
  tasks_.store(tasks);
  done_.store(0);
  error_ = nullptr;
  claim_.store(generation << 32);
  generation_.store(static_cast<std::uint32_t>(generation));
  generation_.notify_all();
  drain(0, generation);
  const auto finished = [&] { return done_.load() == tasks; };
  if (!spin_until(finished))
    for (std::int64_t d = done_.load(); d != tasks; d = done_.load()) done_.wait(d);
  claim_.store((generation << 32) | kClosed);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace sonde::threaded
