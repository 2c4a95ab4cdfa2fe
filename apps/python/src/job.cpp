#include "job.h"

#include <chrono>

namespace sonde::py {

Job::Job(std::function<void(Job&)> work) {
  thread_ = std::thread([this, work = std::move(work)] {
    try {
      work(*this);
    } catch (...) {
      error_ = std::current_exception();
    }
    {
      std::lock_guard lock(mu_);
      done_.store(true);
    }
    cv_.notify_all();
  });
}

Job::~Job() {
  cancel();
  if (thread_.joinable()) thread_.join();
}

std::vector<Event> Job::wait(double seconds) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done_.load() || !events_.empty(); });
  std::vector<Event> out;
  out.swap(events_);
  return out;
}

void Job::push(Event e) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

void Job::join() {
  if (thread_.joinable()) thread_.join();
  if (error_) std::rethrow_exception(error_);
}

}  // namespace sonde::py
