// The writer queue on its own: the byte bound holds against a writer that cannot keep up, and a
// failing job's error reaches the producer as the same sonde::Error.
#include "write_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace sonde::hdf5 {
namespace {

// Spins (yielding) until `ready`; what is measured afterwards is bytes, never time.
template <typename F>
void wait_until(F ready) {
  while (!ready()) std::this_thread::yield();
}

TEST(WriteQueue, ProducerBlocksAtTheBoundAndNothingIsDropped) {
  constexpr std::size_t kBound = 1000, kJob = 300;
  std::atomic<bool> open_gate{false};
  std::atomic<int> ran{0}, pushed{0};
  WriteQueue q(kBound, nullptr);
  // The first job holds the writer, as a slow disk would.
  q.push(kJob, [&] {
    wait_until([&] { return open_gate.load(); });
    ++ran;
  });
  std::thread producer([&] {
    for (int i = 0; i < 20; ++i) {
      q.push(kJob, [&] { ++ran; });
      ++pushed;
    }
  });
  wait_until([&] { return q.waiting_producers() == 1; });
  // 1000 / 300: three jobs fit (the running one counts), the fourth waits.
  EXPECT_EQ(pushed.load(), 2);
  EXPECT_EQ(q.queued_bytes(), 3 * kJob);
  open_gate = true;
  producer.join();
  q.drain();
  EXPECT_EQ(ran.load(), 21);
  EXPECT_EQ(q.queued_bytes(), 0u);
  EXPECT_LE(q.high_water_bytes(), kBound);
  EXPECT_EQ(q.high_water_bytes(), 3 * kJob);
}

TEST(WriteQueue, AJobLargerThanTheBoundPassesAlone) {
  WriteQueue q(100, nullptr);
  int ran = 0;
  q.push(50, [&] { ++ran; });
  q.push(500, [&] { ++ran; });
  q.drain();
  EXPECT_EQ(ran, 2);
  EXPECT_EQ(q.high_water_bytes(), 500u);
}

TEST(WriteQueue, AFailureIsRethrownOnEveryLaterCallAndLaterJobsAreDiscarded) {
  std::atomic<bool> open_gate{false};
  WriteQueue q(1 << 20, nullptr);
  int after = 0;
  q.push(1, [&] {
    wait_until([&] { return open_gate.load(); });
    throw Error(ErrorKind::Runtime, "HDF5: cannot write '/acts/x' in /tmp/f.h5: No space left on device");
  });
  q.push(1, [&] { ++after; });
  open_gate = true;
  for (int i = 0; i < 2; ++i) {
    try {
      q.drain();
      ADD_FAILURE() << "drain did not rethrow";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Runtime);
      EXPECT_STREQ(e.what(), "HDF5: cannot write '/acts/x' in /tmp/f.h5: No space left on device");
    }
  }
  EXPECT_THROW(q.push(1, [] {}), Error);
  EXPECT_EQ(after, 0);
  EXPECT_EQ(q.queued_bytes(), 0u);
}

}  // namespace
}  // namespace sonde::hdf5
