#include "thread_pool.h"

namespace sonde::threaded {

namespace {
// Workers spin this many polls on the generation counter before sleeping: a forward pass runs
// hundreds of short parallel regions, and a condition-variable wake costs tens of microseconds.
constexpr int kSpinPolls = 20000;
}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int w = 1; w < threads; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
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
  std::uint64_t seen = 0;
  for (;;) {
    int polls = 0;
    while (generation_.load(std::memory_order_acquire) == seen && polls < kSpinPolls) {
      ++polls;
      std::this_thread::yield();
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      seen = generation_.load();
      if (stop_) return;
    }
    drain(worker);
    busy_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(std::int64_t tasks, const Task& fn) {
  if (tasks <= 0) return;
  if (workers_.empty() || tasks == 1) {
    for (std::int64_t t = 0; t < tasks; ++t) fn(t, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    tasks_ = tasks;
    next_.store(0);
    error_ = nullptr;
    busy_.store(static_cast<int>(workers_.size()));
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  drain(0);
  while (busy_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  if (error_) std::rethrow_exception(error_);
}

}  // namespace sonde::threaded
