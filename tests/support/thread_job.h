#pragma once
// N ranks as N threads of one process: the ProcessGroup contract (process_group.h) without MPI,
// for unit tests of multi-process logic. Every collective is an allgather at a shared exchange;
// abort() wakes every waiting rank with ThreadJobAborted instead of ending the process.
#include <sonde/process_group.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace sonde::test {

struct ThreadJobAborted : std::runtime_error {
  explicit ThreadJobAborted(int code) : std::runtime_error("job aborted with exit code " + std::to_string(code)), code(code) {}
  int code;
};

class ThreadExchange {
 public:
  explicit ThreadExchange(int size) : slots_(static_cast<std::size_t>(size)) {}
  int size() const { return static_cast<int>(slots_.size()); }

  std::vector<std::vector<std::byte>> allgather(int rank, std::span<const std::byte> mine) {
    std::unique_lock lock(mu_);
    if (aborted_) throw ThreadJobAborted(code_);
    slots_[static_cast<std::size_t>(rank)].assign(mine.begin(), mine.end());
    const auto gen = generation_;
    if (++arrived_ == size()) {
      last_ = slots_;
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
      if (generation_ == gen) throw ThreadJobAborted(code_);
    }
    return last_;  // stable until every rank, this one included, arrives at the next call
  }

  // The exchange of the members of split number `n` with this color (made by the first to ask).
  std::shared_ptr<ThreadExchange> sub(int n, int color, int members) {
    std::lock_guard lock(mu_);
    auto& e = subs_[{n, color}];
    if (!e) e = std::make_shared<ThreadExchange>(members);
    return e;
  }

  void abort(int code) {
    std::lock_guard lock(mu_);
    aborted_ = true;
    code_ = code;
    cv_.notify_all();
    for (auto& [k, e] : subs_) e->abort(code);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<std::byte>> slots_, last_;
  int arrived_ = 0;
  unsigned long generation_ = 0;
  bool aborted_ = false;
  int code_ = 0;
  std::map<std::pair<int, int>, std::shared_ptr<ThreadExchange>> subs_;
};

class ThreadGroup final : public ProcessGroup {
 public:
  ThreadGroup(std::shared_ptr<ThreadExchange> ex, int rank, std::shared_ptr<ThreadExchange> root)
      : ex_(std::move(ex)), root_(root ? std::move(root) : ex_), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return ex_->size(); }
  void allreduce_sum(std::span<float> data) override {
    const auto all = ex_->allgather(rank_, std::as_bytes(data));
    std::fill(data.begin(), data.end(), 0.0f);
    for (const auto& part : all) {
      std::vector<float> v(data.size());
      std::memcpy(v.data(), part.data(), part.size());
      for (std::size_t i = 0; i < v.size(); ++i) data[i] += v[i];
    }
  }
  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> mine) override {
    return ex_->allgather(rank_, mine);
  }
  void broadcast(std::span<std::byte> data, int root) override {
    const auto all = ex_->allgather(rank_, data);
    std::memcpy(data.data(), all[static_cast<std::size_t>(root)].data(), data.size());
  }
  void barrier() override { ex_->allgather(rank_, {}); }
  std::unique_ptr<ProcessGroup> split(int color, int key) override {
    const int mine[3] = {color, key, rank_};
    const auto all = ex_->allgather(rank_, std::as_bytes(std::span(mine)));
    std::vector<std::tuple<int, int>> members;  // (key, rank) of this color
    for (const auto& b : all) {
      int v[3];
      std::memcpy(v, b.data(), sizeof v);
      if (v[0] == color) members.emplace_back(v[1], v[2]);
    }
    std::sort(members.begin(), members.end());
    const int me = static_cast<int>(std::find(members.begin(), members.end(), std::tuple{key, rank_}) - members.begin());
    return std::make_unique<ThreadGroup>(ex_->sub(splits_++, color, static_cast<int>(members.size())), me, root_);
  }
  [[noreturn]] void abort(int exit_code) override {
    root_->abort(exit_code);
    throw ThreadJobAborted(exit_code);
  }

 private:
  std::shared_ptr<ThreadExchange> ex_, root_;
  int rank_;
  int splits_ = 0;
};

// Runs fn(group) on `size` threads, one rank each; returns each rank's exception message ("" if
// it returned normally).
template <typename Fn>
std::vector<std::string> run_ranks(int size, Fn fn) {
  auto ex = std::make_shared<ThreadExchange>(size);
  std::vector<std::string> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      ThreadGroup g(ex, r, nullptr);
      try {
        fn(g);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
        ex->abort(1);  // as the CLI does: one rank's failure ends the job
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace sonde::test
