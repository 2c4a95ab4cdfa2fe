// The executor's buffer pool: what it hands out is what Tensor(dtype, shape) would be (zeroed,
// aligned), a buffer comes back only when its last user lets go, and the pool never keeps more
// than its capacity.
#include <sonde/buffer_pool.h>

#include <gtest/gtest.h>

#include <cstdint>

namespace {

using sonde::BufferPool;
using sonde::DType;
using sonde::Shape;
using sonde::Tensor;

TEST(BufferPool, ReusedBufferIsZeroedAndAligned) {
  BufferPool pool(1 << 20);
  const void* first = nullptr;
  {
    Tensor t = pool.take(DType::f32, Shape{3, 100});
    first = t.view().data;
    for (int i = 0; i < 300; ++i) t.data<float>()[i] = 7.0f;
  }
  EXPECT_GT(pool.free_bytes(), 300u * 4u);
  Tensor again = pool.take(DType::f32, Shape{300});
  EXPECT_EQ(again.view().data, first) << "the freed block was not reused";
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(again.view().data) % 64, 0u);
  for (int i = 0; i < 300; ++i) ASSERT_EQ(again.data<float>()[i], 0.0f) << i;
  EXPECT_EQ(again.shape(), (Shape{300}));
  EXPECT_EQ(pool.free_bytes(), 0u);
}

TEST(BufferPool, BufferComesBackOnlyWhenItsLastUserGoes) {
  BufferPool pool(1 << 20);
  Tensor keep;
  const void* p = nullptr;
  {
    Tensor t = pool.take(DType::f32, Shape{64});
    p = t.view().data;
    keep = t;
  }
  EXPECT_EQ(pool.free_bytes(), 0u);
  Tensor other = pool.take(DType::f32, Shape{64});
  EXPECT_NE(other.view().data, p);
  keep = Tensor();
  EXPECT_GT(pool.free_bytes(), 0u);
}

TEST(BufferPool, SmallRequestsDoNotTakeMuchLargerBlocks) {
  BufferPool pool(1 << 20);
  const void* big = pool.take(DType::f32, Shape{4096}).view().data;  // 16 KB, back on the shelf at once
  const Tensor small = pool.take(DType::f32, Shape{100});
  EXPECT_NE(small.view().data, big);
  const Tensor half = pool.take(DType::f32, Shape{2100});  // needs a little over 8 KB: takes the 16 KB block
  EXPECT_EQ(half.view().data, big);
}

TEST(BufferPool, KeepsNoMoreThanItsCapacity) {
  const std::size_t capacity = 64 << 10;
  BufferPool pool(capacity);
  { Tensor huge = pool.take(DType::f32, Shape{8192}); }  // 32 KB: over a quarter of the capacity
  EXPECT_EQ(pool.free_bytes(), 0u);
  std::vector<Tensor> held;
  for (int i = 0; i < 12; ++i) held.push_back(pool.take(DType::f32, Shape{1000 + 300 * i}));
  held.clear();
  EXPECT_GT(pool.free_bytes(), 0u);
  EXPECT_LE(pool.free_bytes(), capacity);
}

TEST(BufferPool, TensorsOutliveThePool) {
  Tensor t;
  {
    BufferPool pool(1 << 20);
    t = pool.take(DType::i32, Shape{10});
  }
  for (int i = 0; i < 10; ++i) t.data<std::int32_t>()[i] = i;
  EXPECT_EQ(t.data<std::int32_t>()[9], 9);
  t = Tensor();  // returns to the shelf the pool left behind (no leak under the sanitizers)
}

}  // namespace
