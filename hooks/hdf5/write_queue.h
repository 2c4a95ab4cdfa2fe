#pragma once
// One writer thread behind a queue bounded in bytes. Producers (the forward pass) hand over jobs
// that own copies of their data and return at once; only when the queued bytes would exceed the
// bound do they wait, so memory stays bounded and nothing is dropped. The writer thread is the
// only thread that runs jobs, which is how the sink keeps HDF5 (one global lock) on one thread.
//
// A job that throws stops the writer: later jobs are discarded, and push() and drain() rethrow
// the failure as a sonde::Error on the caller's thread, every time, so it is never lost.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <sonde/error.h>

namespace sonde::hdf5 {

class WriteQueue {
 public:
  using Job = std::function<void()>;

  // `on_start` runs first on the writer thread (per-thread library settings).
  WriteQueue(std::size_t max_bytes, Job on_start);
  ~WriteQueue();  // stop()
  WriteQueue(const WriteQueue&) = delete;
  WriteQueue& operator=(const WriteQueue&) = delete;

  // Queues `job`, accounted as `bytes`. Waits while the queue is not empty and the bytes would
  // exceed the bound, so a single job larger than the bound still passes, alone.
  void push(std::size_t bytes, Job job);
  // Waits until every job pushed so far has run.
  void drain();
  // Discards the jobs not yet started, lets the running one finish and joins the thread.
  void stop() noexcept;
  void rethrow_if_failed() const;

  // For tests of the bound: bytes queued (including the job running), their maximum so far, and
  // how many producers are waiting for room.
  std::size_t queued_bytes() const;
  std::size_t high_water_bytes() const;
  int waiting_producers() const;

 private:
  struct Item {
    std::size_t bytes;
    Job job;
  };
  void run(const Job& on_start);
  void rethrow_locked() const;
  void fail_locked(ErrorKind kind, std::string message);

  const std::size_t max_bytes_;
  mutable std::mutex mu_;
  std::condition_variable has_work_, has_room_, idle_;
  std::deque<Item> items_;
  std::size_t bytes_ = 0, high_water_ = 0;
  int waiting_ = 0;
  bool busy_ = false, stopping_ = false, failed_ = false;
  ErrorKind error_kind_ = ErrorKind::Runtime;
  std::string error_;
  std::thread thread_;
};

}  // namespace sonde::hdf5
