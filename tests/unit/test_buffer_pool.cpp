// The executor's buffer pool: what it hands out is aligned with zero padding past the data and
// is not refilled (every op writes its whole output), a buffer comes back only when its last
// user lets go, what a round does not take again is let go at the next, and the pool never keeps
// more than its capacity.
#include <sonde/buffer_pool.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace {

using sonde::BufferPool;
using sonde::DType;
using sonde::Shape;
using sonde::Tensor;

TEST(BufferPool, ReusedBufferIsAlignedNotRefilledAndZeroPadded) {
  BufferPool pool(1 << 20);
  const void* first = nullptr;
  {
    Tensor t = pool.take(DType::f32, Shape{3, 100});
    first = t.view().data;
    // The whole block, padding included, as a kernel's stray write past the end would leave it.
    std::memset(t.view().data, 0x5A, Tensor::storage_bytes(DType::f32, Shape{3, 100}));
    for (int i = 0; i < 300; ++i) t.data<float>()[i] = 7.0f;
  }
  EXPECT_GT(pool.free_bytes(), 300u * 4u);
  Tensor again = pool.take(DType::f32, Shape{290});
  EXPECT_EQ(again.view().data, first) << "the freed block was not reused";
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(again.view().data) % 64, 0u);
  for (int i = 0; i < 290; ++i) ASSERT_EQ(again.data<float>()[i], 7.0f) << i << ": the block was written over";
  const auto* pad = static_cast<const unsigned char*>(again.view().data);
  for (std::size_t i = 290 * 4; i < Tensor::storage_bytes(DType::f32, Shape{290}); ++i) ASSERT_EQ(pad[i], 0) << i;
  EXPECT_EQ(again.shape(), (Shape{290}));
  EXPECT_EQ(pool.free_bytes(), 0u);
}

TEST(BufferPool, WhatARoundDoesNotTakeAgainGoesAtTheNext) {
  BufferPool pool(1 << 20);
  pool.next_round();
  const void* a = nullptr;
  { a = pool.take(DType::f32, Shape{1000}).view().data; }  // back in round 1
  { Tensor t = pool.take(DType::f32, Shape{50}); }  // another size, back in round 1 too
  const std::size_t both = pool.free_bytes();
  pool.next_round();  // round 2: both stay, one round old
  EXPECT_EQ(pool.free_bytes(), both);
  {
    Tensor t = pool.take(DType::f32, Shape{1000});  // round 2 takes the large one again
    EXPECT_EQ(t.view().data, a);
  }
  pool.next_round();  // round 3: the small one, untouched through round 2, goes
  EXPECT_EQ(pool.free_bytes(), Tensor::storage_bytes(DType::f32, Shape{1000}));
  pool.next_round();  // round 4: the large one, untouched through round 3, goes
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
  { Tensor large = pool.take(DType::f32, Shape{8192}); }  // 32 KB: half the capacity, kept
  EXPECT_EQ(pool.free_bytes(), Tensor::storage_bytes(DType::f32, Shape{8192}));
  { Tensor huge = pool.take(DType::f32, Shape{20000}); }  // 80 KB: over the capacity alone
  EXPECT_EQ(pool.free_bytes(), Tensor::storage_bytes(DType::f32, Shape{8192}));
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
