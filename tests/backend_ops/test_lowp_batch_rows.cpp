// The --compute bf16/int8 Linear at a batch's row counts (4 to 64 x rows: lowp_tiles.h's batch
// tiles, W streamed in groups of rows against every tile of x rows) with K in the thousands, as
// the decode step's Linears have (896, 4864): each row on 3 threads bit for bit the scalar
// kernel's on one thread, which computes every row alone (lowp.h: an output's sum depends on K
// alone). compute_modes_test.cpp covers every row count at K = 200 and 300; here rows are longer
// than a tile's prefetch distance and, for 6 W rows at K = 4864 (58 KB), than a 48 KB L1.
#include "op_harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>

namespace sonde::test::lowp_batch_rows {
namespace {

struct BatchMode {
  const char* compute;
  const char* weights;
};
const BatchMode kBatchBf16{"bf16", "native"}, kBatchInt8{"int8", "q8"};

// The threaded backend with `kernels` forced (SONDE_THREADED_LOWP), or null when this CPU lacks them.
std::shared_ptr<Backend> batch_backend(const BatchMode& mode, const char* kernels, int threads, std::string& why) {
  setenv("SONDE_THREADED_LOWP", kernels, 1);
  std::shared_ptr<Backend> b = try_make_backend("threaded", threads, mode.weights, mode.compute, why);
  unsetenv("SONDE_THREADED_LOWP");
  return b;
}

// K = 2500: a partial last step and an odd number of int8 blocks; K = 4864: the MLP's down
// projection. N odd: W rows left over from the groups in every task. Rows: one x tile, partial
// tiles, 16 and 64 (the batch path's end).
void check_batch_rows(const BatchMode& mode, const char* kernels) {
  std::string why;
  auto b = batch_backend(mode, kernels, 3, why);
  if (!b) GTEST_SKIP() << why;
  auto scalar = batch_backend(mode, "scalar", 1, why);
  ASSERT_TRUE(scalar) << why;
  struct Dims {
    std::int64_t K, N;
  };
  for (const Dims d : {Dims{2500, 37}, Dims{4864, 19}}) {
    const std::int64_t M = 64;
    const std::vector<Arg> args{{random_tensor(DType::f32, Shape{M, d.K}, 51, -2, 2)},
                                {random_tensor(DType::bf16, Shape{d.N, d.K}, 52), true},
                                {random_tensor(DType::f32, Shape{d.N}, 53), true}};
    const auto want = values(run_on(*scalar, make_node(OpKind::Linear, Shape{M, d.N}), args));
    expect_lowp_took_effect(make_node(OpKind::Linear, Shape{M, d.N}), args, want, std::string("the scalar ") + mode.compute + " kernel");
    const auto xs = values(args[0].t);
    for (const std::int64_t rows : {4, 5, 11, 16, 17, 33, 64}) {
      std::vector<Arg> a = args;
      a[0] = {floats(DType::f32, Shape{rows, d.K}, std::vector<float>(xs.begin(), xs.begin() + rows * d.K))};
      const auto got = values(run_on(*b, make_node(OpKind::Linear, Shape{rows, d.N}), a));
      for (std::int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(std::memcmp(got.data() + r * d.N, want.data() + r * d.N, std::size_t(d.N) * sizeof(float)), 0)
            << kernels << " K=" << d.K << " N=" << d.N << ": row " << r << " of " << rows
            << " differs from the scalar kernel's";
    }
  }
}

// x rows of the values whose rounding to bf16 has a rule of its own (ties to even both ways, a
// tie's sign, subnormals to a zero of their sign, -0, the smallest normal, a carry into the
// exponent), 5 rows of K = 100 (ragged: a masked last element of 16): the vector rounding of the
// AVX-512 tables (lowp_tiles.h) against the scalar table's compute_bf16_bits, through the outputs' bits.
void check_rounding_rules(const char* kernels) {
  std::string why;
  auto b = batch_backend(kBatchBf16, kernels, 2, why);
  if (!b) GTEST_SKIP() << why;
  auto scalar = batch_backend(kBatchBf16, "scalar", 1, why);
  ASSERT_TRUE(scalar) << why;
  const float tie_down = 1.00390625f, tie_up = 1.01171875f;  // 1 + 2^-8 -> 1, 1 + 3 * 2^-8 -> 1 + 2^-6
  const float special[] = {tie_down, tie_up, -tie_down, -tie_up, 1e-39f, -1e-39f, -0.0f, 1.17549435e-38f,
                           1.99999988f /* carries into 2 */, 0.33333334f, -7.5f, 3.0e-5f};
  const std::int64_t M = 5, K = 100, N = 23;
  std::vector<float> x(M * K);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = special[(i * 7 + i / K) % std::size(special)];
  // The last row all subnormal: flushed, its outputs are 0; kept, W of 1e30 makes them visible
  // (except to VDPBF16PS, which flushes subnormal inputs itself).
  std::fill(x.begin() + (M - 1) * K, x.end(), 1e-39f);
  const std::vector<Arg> args{{floats(DType::f32, Shape{M, K}, x)},
                              {random_tensor(DType::bf16, Shape{N, K}, 61, -1e30f, 1e30f), true}};
  const Node node = make_node(OpKind::Linear, Shape{M, N});
  const auto got = values(run_on(*b, node, args)), want = values(run_on(*scalar, node, args));
  ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << kernels;
}

TEST(LowpBatchRows, Bf16Avx512Bf16RoundsXAsTheScalarKernel) { check_rounding_rules("avx512bf16"); }
TEST(LowpBatchRows, Bf16Avx512EmulationRoundsXAsTheScalarKernel) { check_rounding_rules("avx512"); }

TEST(LowpBatchRows, Bf16Avx512Bf16LongRowsAreTheScalarKernel) { check_batch_rows(kBatchBf16, "avx512bf16"); }
TEST(LowpBatchRows, Bf16Avx512EmulationLongRowsAreTheScalarKernel) { check_batch_rows(kBatchBf16, "avx512"); }
TEST(LowpBatchRows, Int8VnniLongRowsAreTheScalarKernel) { check_batch_rows(kBatchInt8, "avx512vnni"); }
TEST(LowpBatchRows, Int8Avx512EmulationLongRowsAreTheScalarKernel) { check_batch_rows(kBatchInt8, "avx512"); }

}  // namespace
}  // namespace sonde::test::lowp_batch_rows
