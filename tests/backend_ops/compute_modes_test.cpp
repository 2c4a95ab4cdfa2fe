// --compute bf16 and int8 (<sonde/compute.h>, issue 28): the reference backend's emulation
// against values worked out by hand; the threaded backend's kernels of each mode (lowp.h), forced
// one by one through SONDE_THREADED_LOWP, against the reference and bit for bit against the
// portable scalar kernel (the mode's result must not depend on the instruction set; AMX, whose
// order is its own, is held to the reference only); each mode's
// batch invariance; and the option's errors. A kernel whose instruction this CPU lacks is skipped
// with the reason.
#include "op_harness.h"

#include <sonde/error.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace sonde::test::compute_modes {
namespace {

std::shared_ptr<Backend> backend_in(const std::string& name, const std::string& compute, const std::string& weights,
                                    int threads = 2) {
  return make_backend(name, threads, weights, compute);
}

// SONDE_THREADED_LOWP for one scope.
struct LowpScope {
  explicit LowpScope(const std::string& k) { setenv("SONDE_THREADED_LOWP", k.c_str(), 1); }
  ~LowpScope() { unsetenv("SONDE_THREADED_LOWP"); }
};

Node linear(std::int64_t M, std::int64_t N) { return make_node(OpKind::Linear, Shape{M, N}); }

// y = x W^T on the reference backend in `compute`, x [1, K], W [N, K] f32.
std::vector<float> reference_linear(const std::string& compute, const std::vector<float>& x, const std::vector<float>& w,
                                    std::int64_t N) {
  const auto K = static_cast<std::int64_t>(x.size());
  auto ref = backend_in("reference", compute, compute == "int8" ? "q8" : "native");
  return values(run_on(*ref, linear(1, N), {{floats(DType::f32, Shape{1, K}, x)}, {floats(DType::f32, Shape{N, K}, w), true}}));
}

// bf16 keeps 8 significant bits. 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties to even
// give 1. 2 + 3 * 2^-8 is 3/4 of the way from 2 to 2 + 2^-6: 2.015625. A subnormal becomes 0.
TEST(ReferenceCompute, Bf16RoundsActivationsAndWeightsToNearestEven) {
  const float sub = 1e-39f;  // subnormal in f32
  ASSERT_EQ(std::fpclassify(sub), FP_SUBNORMAL);
  const std::vector<float> x{1.00390625f, -2.01171875f, sub};
  const std::vector<float> w{1.0f, 1.0f, std::ldexp(1.0f, 100),  // row 0
                             1.00390625f, 0.0f, 0.0f};            // row 1: W rounded too
  const auto f32 = reference_linear("f32", x, w, 2), bf16 = reference_linear("bf16", x, w, 2);
  EXPECT_EQ(f32[0], static_cast<float>(1.00390625 - 2.01171875 + static_cast<double>(sub) * std::ldexp(1.0, 100)));
  EXPECT_EQ(bf16[0], 1.0f - 2.015625f);  // the subnormal's product flushed with it
  EXPECT_EQ(f32[1], static_cast<float>(1.00390625 * 1.00390625));
  EXPECT_EQ(bf16[1], 1.0f);
}

// int8: a block's scale is max|v| / 127 and q = round_even(v * 127 / max|v|). Block 0 of x:
// [254, 1, 3, 5, 0...] -> scale 2, q = [127, 0 (0.5), 2 (1.5), 2 (2.5)]; W row [1, 127, 127, 127]
// -> scale 1, q = itself. Block 0 gives (127 + 0 + 254 + 254) * 2 = 1270 where f32 gives 1397.
// Block 1 (element 32 alone): x 3 -> q 127, scale 3/127; W 2 -> q 127, scale 2/127: 6.
TEST(ReferenceCompute, Int8QuantisesEachBlockOf32WithItsOwnScale) {
  std::vector<float> x(33, 0.0f), w(33, 0.0f);
  x[0] = 254, x[1] = 1, x[2] = 3, x[3] = 5, x[32] = 3;
  w[0] = 1, w[1] = 127, w[2] = 127, w[3] = 127, w[32] = 2;
  const auto f32 = reference_linear("f32", x, w, 1), int8 = reference_linear("int8", x, w, 1);
  EXPECT_EQ(f32[0], 1397.0f + 6.0f);
  EXPECT_NEAR(int8[0], 1270.0 + 6.0, 1e-4);
}

struct Shape3 {
  std::int64_t M, K, N;
};
// K: one step, a tail of 3 over 2 steps, 9 steps and an odd block count, 34+ steps; N with
// tiles' leftovers; M with x tiles' leftovers.
// M <= 3 takes the kernels' streaming (decode) path, more rows the tiles; {2, 1000, 90}: rows
// longer than the prefetch distance, 4 streams of 22 rows and 2 rows left over.
const Shape3 kShapes[] = {{1, 32, 7}, {5, 67, 37}, {3, 300, 203}, {2, 1000, 90}, {9, 1100, 40}, {40, 96, 13}};

std::vector<Arg> linear_args(const Shape3& s, DType wt, bool bias, unsigned seed) {
  std::vector<Arg> a{{random_tensor(DType::f32, Shape{s.M, s.K}, seed, -2, 2)},
                     {random_tensor(wt, Shape{s.N, s.K}, seed + 1), true}};
  if (bias) a.push_back({random_tensor(DType::f32, Shape{s.N}, seed + 2), true});
  return a;
}

struct Mode {
  std::string compute, weights;
  std::vector<DType> wts;
};
const Mode kBf16{"bf16", "native", {DType::bf16, DType::f32, DType::f16}};
const Mode kInt8{"int8", "q8", {DType::bf16, DType::f32}};

// The threaded backend with one mode's kernels forced, or null (and why) when this CPU lacks them.
std::shared_ptr<Backend> threaded_with(const Mode& mode, const std::string& kernels, std::string& why, int threads = 2) {
  LowpScope scope(kernels);
  try {
    return backend_in("threaded", mode.compute, mode.weights, threads);
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
}

// Every shape and weight dtype: within 1e-5 (normalised) of the reference's emulation, and not
// the exact f32 result (the mode is in effect).
void check_against_reference(const Mode& mode, const std::string& kernels) {
  std::string why;
  auto b = threaded_with(mode, kernels, why);
  if (!b) GTEST_SKIP() << why;
  EXPECT_NE(b->info().description.find(kernels), std::string::npos) << b->info().description;
  auto ref = backend_in("reference", mode.compute, mode.weights), exact = backend_in("reference", "f32", "native");
  for (DType wt : mode.wts)
    for (const Shape3& s : kShapes) {
      SCOPED_TRACE(fmt::format("{} {} M={} K={} N={}", kernels, dtype_name(wt), s.M, s.K, s.N));
      const auto args = linear_args(s, wt, s.N % 2 == 1, 11);
      const Tensor want = run_on(*ref, linear(s.M, s.N), args), got = run_on(*b, linear(s.M, s.N), args);
      EXPECT_TRUE(all_finite(got));
      EXPECT_LE(normalised_error(got, want), 1e-5);
      EXPECT_GT(normalised_error(got, run_on(*exact, linear(s.M, s.N), args)), 1e-4);
    }
}

// The outputs of `kernels` bit for bit those of the scalar kernels, every shape and dtype.
void check_bits_against_scalar(const Mode& mode, const std::string& kernels) {
  std::string why;
  auto b = threaded_with(mode, kernels, why);
  if (!b) GTEST_SKIP() << why;
  auto scalar = threaded_with(mode, "scalar", why);
  ASSERT_TRUE(scalar) << why;
  for (DType wt : mode.wts)
    for (const Shape3& s : kShapes) {
      const auto args = linear_args(s, wt, true, 23);
      const auto got = values(run_on(*b, linear(s.M, s.N), args)), want = values(run_on(*scalar, linear(s.M, s.N), args));
      ASSERT_EQ(got.size(), want.size());
      std::size_t diff = 0, first = 0;
      for (std::size_t i = got.size(); i-- > 0;)
        if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) ++diff, first = i;
      EXPECT_EQ(diff, 0u) << kernels << " " << dtype_name(wt) << " M=" << s.M << " K=" << s.K << " N=" << s.N << ": "
                          << diff << " outputs differ from the scalar kernel's, first " << first << ": "
                          << (diff ? fmt::format("{:a} vs {:a}", got[first], want[first]) : "");
    }
}

TEST(ThreadedCompute, Bf16ScalarKernelMatchesReference) { check_against_reference(kBf16, "scalar"); }
TEST(ThreadedCompute, Bf16Avx512EmulationMatchesReference) { check_against_reference(kBf16, "avx512"); }
TEST(ThreadedCompute, Bf16Avx512Bf16KernelMatchesReference) { check_against_reference(kBf16, "avx512bf16"); }
// AMX sums each output in TDPBF16PS's own order: held to the reference, not to the scalar bits.
TEST(ThreadedCompute, Bf16AmxKernelMatchesReference) { check_against_reference(kBf16, "amx"); }
TEST(ThreadedCompute, Int8ScalarKernelMatchesReference) { check_against_reference(kInt8, "scalar"); }
TEST(ThreadedCompute, Int8Avx512EmulationMatchesReference) { check_against_reference(kInt8, "avx512"); }
TEST(ThreadedCompute, Int8VnniKernelMatchesReference) { check_against_reference(kInt8, "avx512vnni"); }

TEST(ThreadedCompute, Bf16Avx512EmulationIsTheScalarKernelBitForBit) { check_bits_against_scalar(kBf16, "avx512"); }
TEST(ThreadedCompute, Bf16Avx512Bf16KernelIsTheScalarKernelBitForBit) { check_bits_against_scalar(kBf16, "avx512bf16"); }
TEST(ThreadedCompute, Int8Avx512EmulationIsTheScalarKernelBitForBit) { check_bits_against_scalar(kInt8, "avx512"); }
TEST(ThreadedCompute, Int8VnniKernelIsTheScalarKernelBitForBit) { check_bits_against_scalar(kInt8, "avx512vnni"); }

// Batch invariance within each mode (the best kernels here, AMX for bf16 where the CPU has it):
// every row of M rows, on 1 to 3 threads, bit-identical to the row alone on one thread.
TEST(ThreadedCompute, EachModeIsBatchInvariant) {
  const std::int64_t row_counts[] = {1, 2, 3, 4, 5, 7, 9, 40}, Mmax = 40;
  const Shape3 shapes[] = {{Mmax, 300, 203}, {Mmax, 64, 2048}};
  std::size_t checked = 0;
  for (const Mode& mode : {kBf16, kInt8}) {
    auto alone = backend_in("threaded", mode.compute, mode.weights, 1);
    std::vector<std::shared_ptr<Backend>> runs;
    for (int t : {1, 2, 3}) runs.push_back(backend_in("threaded", mode.compute, mode.weights, t));
    for (const Shape3& s : shapes) {
      const auto args = linear_args(s, mode.wts.front(), true, 31);
      const auto xs = values(args[0].t);
      const auto rows = [&](std::int64_t m0, std::int64_t M) {
        std::vector<Arg> a = args;
        a[0] = {floats(DType::f32, Shape{M, s.K}, std::vector<float>(xs.begin() + m0 * s.K, xs.begin() + (m0 + M) * s.K))};
        return a;
      };
      std::vector<std::vector<float>> want;
      for (std::int64_t r = 0; r < Mmax; ++r) want.push_back(values(run_on(*alone, linear(1, s.N), rows(r, 1))));
      for (std::size_t t = 0; t < runs.size(); ++t)
        for (std::int64_t M : row_counts) {
          const auto got = values(run_on(*runs[t], linear(M, s.N), rows(0, M)));
          for (std::int64_t r = 0; r < M; ++r, ++checked)
            ASSERT_EQ(std::memcmp(got.data() + r * s.N, want[std::size_t(r)].data(), std::size_t(s.N) * sizeof(float)), 0)
                << mode.compute << " K=" << s.K << " N=" << s.N << ": row " << r << " of " << M << " on " << t + 1
                << " threads differs from the row alone";
        }
    }
  }
  EXPECT_GT(checked, 0u);
}

// A batch's decode (4 to 64 x rows: lowp_drive's batch tiles, W streamed in groups of rows
// against every tile of x rows) at every row count 1..64, on 3 threads: each row bit for bit the
// scalar kernel's on one thread, which computes each row alone. K = 300 ends in a partial step;
// K = 200 has an odd number of int8 blocks; N = 203 leaves W rows over from the groups in every
// task, and 64 x rows leave a partial tile of x rows at most row counts.
// Each of `rows` x rows of every shape (M of the shape: the most rows) on 3 threads, bit for bit
// the scalar kernel's on one thread; the scalar kernel's outputs within 1e-5 of reference's.
void check_rows(const Mode& mode, const std::string& kernels, std::initializer_list<Shape3> shapes,
                const std::vector<std::int64_t>& rows, unsigned seed) {
  std::string why;
  auto b = threaded_with(mode, kernels, why, 3);
  if (!b) GTEST_SKIP() << why;
  auto scalar = threaded_with(mode, "scalar", why, 1);
  ASSERT_TRUE(scalar) << why;
  auto ref = backend_in("reference", mode.compute, mode.weights);
  for (const Shape3& s : shapes) {
    const auto args = linear_args(s, mode.wts.front(), true, seed);
    const Tensor all = run_on(*scalar, linear(s.M, s.N), args);
    EXPECT_LE(normalised_error(all, run_on(*ref, linear(s.M, s.N), args)), 1e-5);
    const auto want = values(all), xs = values(args[0].t);
    for (std::int64_t M : rows) {
      std::vector<Arg> a = args;
      a[0] = {floats(DType::f32, Shape{M, s.K}, std::vector<float>(xs.begin(), xs.begin() + M * s.K))};
      const auto got = values(run_on(*b, linear(M, s.N), a));
      for (std::int64_t r = 0; r < M; ++r)
        ASSERT_EQ(std::memcmp(got.data() + r * s.N, want.data() + r * s.N, std::size_t(s.N) * sizeof(float)), 0)
            << kernels << " K=" << s.K << " N=" << s.N << ": row " << r << " of " << M
            << " differs from the scalar kernel's";
    }
  }
}

std::vector<std::int64_t> one_to(std::int64_t n) {
  std::vector<std::int64_t> v;
  for (std::int64_t m = 1; m <= n; ++m) v.push_back(m);
  return v;
}

void check_every_row_count(const Mode& mode, const std::string& kernels) {
  check_rows(mode, kernels, {Shape3{64, 300, 203}, Shape3{64, 200, 70}}, one_to(64), 41);
}

TEST(ThreadedCompute, Bf16Avx512EmulationEveryRowCountIsTheScalarKernel) { check_every_row_count(kBf16, "avx512"); }
TEST(ThreadedCompute, Bf16Avx512Bf16EveryRowCountIsTheScalarKernel) { check_every_row_count(kBf16, "avx512bf16"); }
TEST(ThreadedCompute, Int8Avx512EmulationEveryRowCountIsTheScalarKernel) { check_every_row_count(kInt8, "avx512"); }
TEST(ThreadedCompute, Int8VnniEveryRowCountIsTheScalarKernel) { check_every_row_count(kInt8, "avx512vnni"); }

void expect_error(const std::string& backend, const std::string& compute, const std::string& weights,
                  const std::string& needle) {
  try {
    backend_in(backend, compute, weights);
    ADD_FAILURE() << backend << " accepted compute " << compute << " with weights " << weights;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ThreadedCompute, ModeAndWeightsThatDoNotGoTogetherAreErrors) {
  expect_error("threaded", "int8", "native", "q8");
  expect_error("threaded", "bf16", "q8", "q8");
  expect_error("threaded", "fp8", "native", "fp8");
  expect_error("reference", "fp8", "native", "fp8");
  LowpScope scope("avx1024");
  expect_error("threaded", "bf16", "native", "avx1024");
}


// A prefill's tiles (more than 64 x rows: lowp_drive's chunks of W rows in L2) at row counts that
// leave partial tiles of x rows, on 3 threads: each row bit for bit the scalar kernel's. K = 300
// puts a tile's 6 W rows in L1 (the W rows stay while the x rows pass); K = 4200 (6 bf16 rows of
// 8.4 KB, past a 48 KB L1) takes the other loop order, x rows staying while W rows pass.
void check_prefill_rows(const Mode& mode, const std::string& kernels) {
  check_rows(mode, kernels, {Shape3{130, 300, 203}, Shape3{130, 4200, 37}}, {65, 97, 130}, 43);
}

TEST(ThreadedCompute, Bf16Avx512EmulationPrefillTilesAreTheScalarKernel) { check_prefill_rows(kBf16, "avx512"); }
TEST(ThreadedCompute, Bf16Avx512Bf16PrefillTilesAreTheScalarKernel) { check_prefill_rows(kBf16, "avx512bf16"); }
TEST(ThreadedCompute, Int8Avx512EmulationPrefillTilesAreTheScalarKernel) { check_prefill_rows(kInt8, "avx512"); }
TEST(ThreadedCompute, Int8VnniPrefillTilesAreTheScalarKernel) { check_prefill_rows(kInt8, "avx512vnni"); }

}  // namespace
}  // namespace sonde::test::compute_modes
