#include "write_queue.h"

#include <algorithm>

namespace sonde::hdf5 {

WriteQueue::WriteQueue(std::size_t max_bytes, Job on_start)
    : max_bytes_(max_bytes), thread_([this, on_start = std::move(on_start)] { run(on_start); }) {}

WriteQueue::~WriteQueue() { stop(); }

void WriteQueue::push(std::size_t bytes, Job job) {
  std::unique_lock lock(mu_);
  rethrow_locked();
  ++waiting_;
  has_room_.wait(lock, [&] { return failed_ || stopping_ || (items_.empty() && !busy_) || bytes_ + bytes <= max_bytes_; });
  --waiting_;
  rethrow_locked();
  if (stopping_) throw Error(ErrorKind::Runtime, "HDF5 sink: the writer thread has stopped");
  items_.push_back({bytes, std::move(job)});
  bytes_ += bytes;
  high_water_ = std::max(high_water_, bytes_);
  has_work_.notify_one();
}

void WriteQueue::drain() {
  std::unique_lock lock(mu_);
  idle_.wait(lock, [&] { return failed_ || stopping_ || (items_.empty() && !busy_); });
  rethrow_locked();
}

void WriteQueue::stop() noexcept {
  {
    std::lock_guard lock(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
    items_.clear();
    has_work_.notify_all();
    has_room_.notify_all();
    idle_.notify_all();
  }
  thread_.join();
}

void WriteQueue::rethrow_if_failed() const {
  std::lock_guard lock(mu_);
  rethrow_locked();
}

std::size_t WriteQueue::queued_bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

std::size_t WriteQueue::high_water_bytes() const {
  std::lock_guard lock(mu_);
  return high_water_;
}

int WriteQueue::waiting_producers() const {
  std::lock_guard lock(mu_);
  return waiting_;
}

void WriteQueue::rethrow_locked() const {
  if (failed_) throw Error(error_kind_, error_);
}

void WriteQueue::fail_locked(ErrorKind kind, std::string message) {
  failed_ = true;
  error_kind_ = kind;
  error_ = std::move(message);
  items_.clear();
  bytes_ = 0;
}

void WriteQueue::run(const Job& on_start) {
  if (on_start) on_start();
  std::unique_lock lock(mu_);
  for (;;) {
    has_work_.wait(lock, [&] { return stopping_ || !items_.empty(); });
    if (stopping_) break;
    Item item = std::move(items_.front());
    items_.pop_front();
    busy_ = true;
    lock.unlock();
    // The job's bytes stay counted while it runs: its data is still in memory.
    ErrorKind kind = ErrorKind::Runtime;
    std::string error;
    try {
      item.job();
    } catch (const Error& e) {
      kind = e.kind();
      error = e.what();
    } catch (const std::exception& e) {
      error = std::string("HDF5 sink writer thread: ") + e.what();
    } catch (...) {
      error = "HDF5 sink writer thread: unknown exception";
    }
    item.job = nullptr;  // frees the data before its bytes are released
    lock.lock();
    busy_ = false;
    if (error.empty()) {
      bytes_ -= item.bytes;
    } else if (!failed_) {
      fail_locked(kind, std::move(error));
    }
    has_room_.notify_all();
    if (items_.empty()) idle_.notify_all();
  }
}

}  // namespace sonde::hdf5
