#pragma once
// The backend's only threads (design §8.10): size()-1 std::thread workers plus the calling
// thread. run() hands tasks out in order through an atomic counter; each task must write its own
// outputs (no reduction across tasks), so results never depend on which thread ran which task.
//
// run() returns when every task is finished, not when every worker has looked: a worker that is
// asleep or descheduled when a run starts (a shared machine) costs nothing, the others take its
// tasks. Waiting: a forward pass runs hundreds of short parallel regions a few microseconds apart, and a
// futex wake costs tens of microseconds, so an idle worker first polls with pause for kSpin, then
// sleeps on the generation counter (std::atomic::wait, a futex on Linux). It never calls
// sched_yield, so a worker with nothing to do does not take a shared core away for long.
//
// The caller waits for the tasks, not for the workers: on a shared machine a worker may not be
// scheduled for milliseconds, and the caller then runs every task itself instead of waiting for
// that worker to check in. A worker that wakes late claims nothing: each claim carries the run's
// number, and a claim from an earlier run is dropped.
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sonde::threaded {

class ThreadPool {
 public:
  using Task = std::function<void(std::int64_t task, int worker)>;

  explicit ThreadPool(int threads);  // threads >= 1
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs fn(t, worker) for every t in [0, tasks), worker in [0, size()); returns when all are
  // done and rethrows the first exception a task threw.
  void run(std::int64_t tasks, const Task& fn);

  // Hands `job` to a worker that is polling for work and returns at once: work that may run
  // while the caller does something serial (the backend prefetches the next weight). At most
  // one job is pending; a newer one replaces it. A sleeping worker does not wake for it, and a
  // job whose run has been overtaken by a run() is dropped. The job must return soon after
  // preempted() turns true, so the next run() has its threads. No-op without workers.
  void post(std::function<void()> job);
  bool preempted() const { return (claim_.load() >> 32) != job_generation_.load(); }
  bool job_busy() const { return has_job_.load() || job_running_.load(); }
  // Drops a pending job and returns once none is running (what a job reads may go away after).
  void cancel_job();

 private:
  void worker_loop(int worker);
  void drain(int worker, std::uint64_t generation);
  void run_job();

  std::vector<std::thread> workers_;
  // (generation << 32) | index of the next unclaimed task. A task is claimed by a compare-exchange
  // on this word, so a worker that wakes late (after its run ended) can never claim a task of a
  // newer run with the old run's fn_/tasks_: run() closes the word (index kClosed) at its end.
  std::atomic<std::uint64_t> claim_{0};
  std::atomic<std::uint32_t> generation_{0};  // low 32 bits of the current generation: the futex word
  std::atomic<std::int64_t> tasks_{0};
  std::atomic<const Task*> fn_{nullptr};
  std::atomic<std::int64_t> done_{0};  // tasks of the current run finished; run() returns at tasks_
  std::atomic<bool> stop_{false};
  std::mutex err_mu_;
  std::exception_ptr error_;
  std::mutex job_mu_;
  std::function<void()> job_;
  std::atomic<bool> has_job_{false}, job_running_{false};
  // The run generation current when job_ was posted; kNoJob after cancel_job() (never current).
  std::atomic<std::uint64_t> job_generation_{0};
};

}  // namespace sonde::threaded
