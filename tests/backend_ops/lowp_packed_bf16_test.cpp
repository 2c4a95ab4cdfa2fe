// The --compute bf16 Linear on the packed outer-product GEMM (lowp_gemm_bf16.cpp, forced with
// SONDE_THREADED_LINEAR=gemm) bit for bit the scalar kernel's (lowp_scalar.cpp: lowp.h's order
// written lane by lane, every output alone) on 1 and 2 threads. The shapes reach every edge of the
// kernel: x rows of a partial 8-row block and an odd number of blocks (the x pack goes two blocks
// at a time), W rows of a partial 16-lane vector and of a 48-row tile, K of a partial 32-element
// step (31, 33) and an odd K (a pair half outside the row), and the Linears of Qwen2.5-0.5B (896,
// 4864) and Dream-7B (3584, 18944: W tiles past L1, and past half an L2 at 18,944, one tile per
// panel). And the automatic dispatch (tiles or the packed GEMM, the tuner's choice per call) gives
// the same bits as forcing either.
#include "op_harness.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace sonde::test::lowp_packed_bf16 {
namespace {

// The threaded backend in bf16 mode with `kernels` (SONDE_THREADED_LOWP) and the Linear path
// `linear` (SONDE_THREADED_LINEAR), or null (and why) when this CPU lacks the kernels.
std::shared_ptr<Backend> packed_bf16_backend(const char* kernels, const char* linear, int threads, std::string& why) {
  setenv("SONDE_THREADED_LOWP", kernels, 1);
  setenv("SONDE_THREADED_LINEAR", linear, 1);
  std::shared_ptr<Backend> b = try_make_backend("threaded", threads, "native", "bf16", why);
  unsetenv("SONDE_THREADED_LOWP");
  unsetenv("SONDE_THREADED_LINEAR");
  return b;
}

struct PackedShape {
  std::int64_t M, K, N;
};

void expect_packed_bits(const std::vector<PackedShape>& shapes, int threads) {
  std::string why;
  auto packed = packed_bf16_backend("avx512bf16", "gemm", threads, why);
  if (!packed) GTEST_SKIP() << why;
  auto scalar = packed_bf16_backend("scalar", "gemv", 1, why);
  ASSERT_TRUE(scalar) << why;
  unsigned seed = 700;
  for (const PackedShape& s : shapes) {
    const std::vector<Arg> args{{random_tensor(DType::f32, Shape{s.M, s.K}, ++seed, -2, 2)},
                                {random_tensor(DType::bf16, Shape{s.N, s.K}, ++seed), true},
                                {random_tensor(DType::f32, Shape{s.N}, ++seed), true}};
    const Node node = make_node(OpKind::Linear, Shape{s.M, s.N});
    const auto want = values(run_on(*scalar, node, args));
    expect_lowp_took_effect(node, args, want, "the scalar bf16 kernel");
    const auto got = values(run_on(*packed, node, args));
    ASSERT_EQ(got.size(), want.size());
    for (std::int64_t m = 0; m < s.M; ++m)
      for (std::int64_t n = 0; n < s.N; ++n) {
        const std::size_t at = static_cast<std::size_t>(m * s.N + n);
        ASSERT_EQ(std::memcmp(&got[at], &want[at], sizeof(float)), 0)
            << "M=" << s.M << " K=" << s.K << " N=" << s.N << " threads=" << threads << ": output (" << m << ", " << n
            << ") is " << got[at] << ", the scalar kernel's " << want[at];
      }
  }
}

// Short rows: every row count's edges at little cost (and a few rows, which only the forced path
// sends to this kernel).
const std::vector<PackedShape> kPackedShort{{65, 31, 47},  {72, 32, 48},  {127, 33, 97},  {1024, 33, 96},
                                            {200, 31, 145}, {129, 32, 17}, {1023, 32, 49}, {88, 33, 1},
                                            {1, 33, 47},    {5, 64, 50},   {8, 31, 48}};
// The models' K, few W rows at the longest to stay fast (seconds in all, with the scalar kernel).
const std::vector<PackedShape> kPackedLong{{65, 896, 97},  {256, 896, 144}, {129, 3584, 49},
                                           {72, 4864, 48}, {97, 18944, 17}, {64, 18944, 5}};

TEST(LowpPackedBf16, ShortRowsAreTheScalarKernelOnOneThread) { expect_packed_bits(kPackedShort, 1); }
TEST(LowpPackedBf16, ShortRowsAreTheScalarKernelOnTwoThreads) { expect_packed_bits(kPackedShort, 2); }
TEST(LowpPackedBf16, ModelRowsAreTheScalarKernelOnOneThread) { expect_packed_bits(kPackedLong, 1); }
TEST(LowpPackedBf16, ModelRowsAreTheScalarKernelOnTwoThreads) { expect_packed_bits(kPackedLong, 2); }

// The automatic dispatch times the tiles and the packed GEMM on a class's first calls, then keeps
// one: every call of a repeated shape (the tuner's trials and its settled choice) gives the bits
// of the tiles forced.
TEST(LowpPackedBf16, AutomaticDispatchGivesTheTilesBits) {
  std::string why;
  auto automatic = packed_bf16_backend("avx512bf16", "auto", 2, why);
  if (!automatic) GTEST_SKIP() << why;
  auto tiles = packed_bf16_backend("avx512bf16", "gemv", 2, why);
  ASSERT_TRUE(tiles) << why;
  const std::int64_t M = 160, K = 640, N = 200;
  const std::vector<Arg> args{{random_tensor(DType::f32, Shape{M, K}, 801, -2, 2)},
                              {random_tensor(DType::bf16, Shape{N, K}, 802), true}};
  const Node node = make_node(OpKind::Linear, Shape{M, N});
  const auto want = values(run_on(*tiles, node, args));
  for (int call = 0; call < 6; ++call) {
    const auto got = values(run_on(*automatic, node, args));
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << "call " << call;
  }
}

}  // namespace
}  // namespace sonde::test::lowp_packed_bf16
