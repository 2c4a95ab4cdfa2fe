// The threaded backend's pool (backends/threaded/thread_pool.cpp, compiled into this test):
// run() covers every task once and rethrows; a posted job runs on a worker while the caller
// goes on, gives way to the next run(), and is over when cancel_job() returns.
#include "thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace sonde::threaded {
namespace {

using namespace std::chrono_literals;

// A job reaches a worker only while it polls (about 100 us after its last run), so: wake it
// with a run, post, and give it 100 ms to start; a few tries cover a descheduled worker.
template <typename MakeJob, typename Started> bool post_until_started(ThreadPool& pool, const MakeJob& make, const Started& started) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    pool.run(2, [](std::int64_t, int) {});
    pool.post(make());
    const auto until = std::chrono::steady_clock::now() + 100ms;
    while (std::chrono::steady_clock::now() < until)
      if (started()) return true;
    pool.cancel_job();
  }
  return false;
}

TEST(ThreadPool, RunCoversEveryTaskOnceOnEveryPoolSize) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 50; ++round) {
      std::vector<std::atomic<int>> hits(97);
      pool.run(97, [&](std::int64_t t, int worker) {
        EXPECT_GE(worker, 0);
        EXPECT_LT(worker, threads);
        hits[static_cast<std::size_t>(t)].fetch_add(1);
      });
      for (std::size_t t = 0; t < hits.size(); ++t) ASSERT_EQ(hits[t].load(), 1) << "task " << t << ", " << threads << " threads";
    }
  }
}

TEST(ThreadPool, RunRethrowsATasksException) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run(8, [](std::int64_t t, int) { if (t == 5) throw std::runtime_error("task 5"); }), std::runtime_error);
  std::atomic<int> n{0};
  pool.run(8, [&](std::int64_t, int) { n.fetch_add(1); });  // the pool still works
  EXPECT_EQ(n.load(), 8);
}

TEST(ThreadPool, PostedJobRunsOnAWorkerWhileTheCallerGoesOn) {
  ThreadPool pool(2);
  std::atomic<bool> ran{false};
  std::thread::id where;
  const auto job = [&] {
    return [&] {
      where = std::this_thread::get_id();
      ran.store(true);
    };
  };
  ASSERT_TRUE(post_until_started(pool, job, [&] { return ran.load(); })) << "the job never ran";
  EXPECT_NE(where, std::this_thread::get_id());
  pool.cancel_job();
}

TEST(ThreadPool, AJobGivesWayToTheNextRunAndCancelWaitsForIt) {
  ThreadPool pool(2);
  std::atomic<bool> started{false}, finished{false};
  const auto job = [&] {
    return [&] {
      started.store(true);
      while (!pool.preempted()) std::this_thread::yield();
      finished.store(true);
    };
  };
  ASSERT_TRUE(post_until_started(pool, job, [&] { return started.load(); })) << "the job never ran";
  // The run completes (the caller takes the tasks the busy worker cannot), and preempts the job.
  std::atomic<int> n{0};
  pool.run(16, [&](std::int64_t, int) { n.fetch_add(1); });
  EXPECT_EQ(n.load(), 16);
  pool.cancel_job();
  EXPECT_TRUE(finished.load()) << "cancel_job returned while the job was still running";
  EXPECT_FALSE(pool.job_busy());
}

TEST(ThreadPool, CancelledJobNeverStarts) {
  ThreadPool pool(2);
  std::atomic<bool> ran{false};
  pool.cancel_job();  // nothing pending: returns at once
  // The worker may take the job before cancel_job; either way nothing runs after it returns.
  pool.post([&] { ran.store(true); });
  pool.cancel_job();
  const bool before = ran.load();
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(ran.load(), before);
}

TEST(ThreadPool, PostWithoutWorkersIsANoOp) {
  ThreadPool pool(1);
  std::atomic<bool> ran{false};
  pool.post([&] { ran.store(true); });
  pool.run(4, [](std::int64_t, int) {});
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(ran.load());
  EXPECT_FALSE(pool.job_busy());
}

}  // namespace
}  // namespace sonde::threaded
