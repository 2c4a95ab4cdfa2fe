// The threaded backend's AlignedFloats (backends/threaded/aligned_floats.h; the GEMM's panels):
// data starts on a 64-byte boundary at every size, including the sizes malloc serves from mmap;
// a smaller request reuses the buffer, a larger one replaces it; a move hands the buffer over.
#include "aligned_floats.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

namespace sonde::threaded {
namespace {

bool on_64_bytes(const float* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }

TEST(AlignedFloats, EveryBufferStartsOnA64ByteBoundary) {
  const AlignedFloats none;
  EXPECT_EQ(none.data(), nullptr);
  EXPECT_EQ(none.size(), 0u);
  for (const std::int64_t n : {1, 15, 16, 17, 100, 1000, 4099, 1 << 20, (3 << 20) + 5}) {
    AlignedFloats a;
    float* p = a.get(n);
    ASSERT_NE(p, nullptr) << n;
    EXPECT_TRUE(on_64_bytes(p)) << n << " floats at " << p;
    EXPECT_EQ(a.data(), p) << n;
    EXPECT_EQ(a.size(), static_cast<std::size_t>(n));
    p[n - 1] = 2.0f;  // the whole range is the caller's (ASan would flag a short buffer)
    EXPECT_EQ(p[n - 1], 2.0f);
  }
}

TEST(AlignedFloats, GrowsOnlyForALargerRequestAndMovesItsBuffer) {
  AlignedFloats a;
  float* p = a.get(1000);
  EXPECT_EQ(a.get(10), p) << "a smaller request reuses the buffer";
  EXPECT_EQ(a.get(1000), p);
  EXPECT_EQ(a.size(), 1000u);
  float* q = a.get(100000);
  EXPECT_TRUE(on_64_bytes(q));
  EXPECT_EQ(a.size(), 100000u);
  AlignedFloats b = std::move(a);
  EXPECT_EQ(b.data(), q);
  EXPECT_EQ(b.size(), 100000u);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is checked
  EXPECT_EQ(a.size(), 0u);
  const float* r = a.get(10);  // the moved-from one serves again
  EXPECT_TRUE(r != nullptr && on_64_bytes(r));
  EXPECT_EQ(a.size(), 10u);
}

}  // namespace
}  // namespace sonde::threaded
