// A weight hinted WeightHint::KeepPacked (backend.h; an SAE's encoder) on the threaded backend:
// its rows are packed once at the hint and the GEMM path reads those panels instead of packing
// per call. The outputs must be the bits of the per-call path and of the documented f32 sum
// (linear_order_ref.h, written from gemv_avx512.cpp's header, not from either kernel), at shapes
// with edges: M not a multiple of the 8-row x block, N not a multiple of the 48-row W block, K
// tails, several tasks, 1 and 2 threads. A weight without the hint keeps nothing beside its view.
#include "linear_order_ref.h"
#include "op_harness.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>

namespace sonde::test {
namespace {

std::shared_ptr<Backend> threaded_backend(int threads, const std::string& weights = "native",
                                          const std::string& compute = "f32") {
  return make_backend("threaded", threads, weights, compute);
}

// The packed GEMM's layout size, from kernels.h's description: whole 48-row blocks, K in steps
// of 32 (zero padded).
std::size_t packed_bytes(std::int64_t N, std::int64_t K) {
  return static_cast<std::size_t>((N + 47) / 48 * 48 * ((K + 31) / 32 * 32)) * sizeof(float);
}

std::size_t storage_parts(const Backend& b, const std::string& name) { return b.weight_storage(name).size(); }

Tensor run_linear(Backend& b, const Tensor& x, const TensorView& w, const Tensor* bias, std::int64_t M, std::int64_t N) {
  std::vector<TensorView> in{x.view(), w};
  if (bias) in.push_back(b.upload("bias", bias->view(), Split::None));
  const Node n = make_node(OpKind::Linear, Shape{M, N});
  Tensor out(DType::f32, Shape{M, N});
  std::memset(out.view().data, 0xFF, out.view().nbytes());  // NaN bits: an unwritten output shows
  b.run(n, in, out.view());
  b.sync();
  return out;
}

TEST(ThreadedPackedWeight, SameBitsAsPerCallPackingAndTheDocumentedSum) {
  LinearEnvScope isa("SONDE_THREADED_ISA", "avx512");
  LinearEnvScope linear("SONDE_THREADED_LINEAR", "gemm");
  std::shared_ptr<Backend> plain[2], hinted[2];
  std::string why;
  for (int t = 0; t < 2; ++t) {
    plain[t] = try_make_backend("threaded", t + 1, "native", "f32", why);
    if (!plain[t]) GTEST_SKIP() << "AVX-512 not available on this CPU: " << why;
    hinted[t] = threaded_backend(t + 1);
  }
  // N: under one block, 16- and 40-row edges, several 48-row blocks and tasks; M: 1, an 8-row
  // block and one, over a chunk of 64 rows; K: tails of 1 and 31, the SAE's 896, a long chain.
  for (const auto [M, K, N] : {std::array<std::int64_t, 3>{1, 32, 16}, {9, 95, 100}, {71, 1024, 34},
                               {130, 896, 250}, {64, 33, 49}, {17, 4100, 50}})
    for (const DType wt : {DType::f32, DType::bf16}) {
      const Tensor x = random_tensor(DType::f32, Shape{M, K}, 21), w = random_tensor(wt, Shape{N, K}, 22);
      const Tensor bias = random_tensor(DType::f32, Shape{N}, 23);
      const auto xs = values(x), ws = values(w), bs = values(bias);
      std::vector<float> sums(static_cast<std::size_t>(M * N));
      for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t n = 0; n < N; ++n)
          sums[static_cast<std::size_t>(m * N + n)] = linear_documented_dot(xs.data() + m * K, ws.data() + n * K, K);
      for (int t = 0; t < 2; ++t)
        for (const bool with_bias : {false, true}) {
          const std::string what = std::to_string(t + 1) + " threads, " + std::to_string(M) + "x" + std::to_string(K) +
                                   "x" + std::to_string(N) + " " + std::string(dtype_name(wt)) + (with_bias ? ", bias" : "");
          const TensorView wp = plain[t]->upload("enc", w.view(), Split::None);
          const TensorView wh = hinted[t]->upload("enc", w.view(), Split::None);
          hinted[t]->hint("enc", WeightHint::KeepPacked);
          const auto a = values(run_linear(*plain[t], x, wp, with_bias ? &bias : nullptr, M, N));
          const auto h = values(run_linear(*hinted[t], x, wh, with_bias ? &bias : nullptr, M, N));
          // Kept for the hinted weight only, and only its panels.
          ASSERT_EQ(storage_parts(*plain[t], "enc"), 1u) << what << ": packed without the hint";
          const auto parts = hinted[t]->weight_storage("enc");
          ASSERT_EQ(parts.size(), 2u) << what << ": the hint kept no panels";
          EXPECT_EQ(parts[1].size(), packed_bytes(N, K)) << what;
          for (std::int64_t m = 0; m < M; ++m)
            for (std::int64_t n = 0; n < N; ++n) {
              const std::size_t at = static_cast<std::size_t>(m * N + n);
              const float want = with_bias ? sums[at] + bs[static_cast<std::size_t>(n)] : sums[at];
              ASSERT_EQ(std::memcmp(&a[at], &want, 4), 0) << what << ", per call, at (" << m << ", " << n << ")";
              ASSERT_EQ(std::memcmp(&h[at], &want, 4), 0)
                  << what << ", packed once, at (" << m << ", " << n << "): " << std::hexfloat << h[at] << " vs " << want;
            }
        }
    }
}

// The GEMM reads the kept panels, not the view: zeroing the panels (the test's doing; nothing
// else writes them) turns every output into its bias alone, while the view is unchanged.
TEST(ThreadedPackedWeight, TheGemmReadsTheKeptPanels) {
  LinearEnvScope isa("SONDE_THREADED_ISA", "avx512");
  LinearEnvScope linear("SONDE_THREADED_LINEAR", "gemm");
  std::string why;
  const std::shared_ptr<Backend> b = try_make_backend("threaded", 2, "native", "f32", why);
  if (!b) GTEST_SKIP() << "AVX-512 not available on this CPU: " << why;
  const std::int64_t M = 20, K = 70, N = 100;
  const Tensor x = random_tensor(DType::f32, Shape{M, K}, 31), w = random_tensor(DType::f32, Shape{N, K}, 32);
  const Tensor bias = random_tensor(DType::f32, Shape{N}, 33);
  const TensorView wv = b->upload("enc", w.view(), Split::None);
  b->hint("enc", WeightHint::KeepPacked);
  const auto parts = b->weight_storage("enc");
  ASSERT_EQ(parts.size(), 2u);
  std::memset(const_cast<std::byte*>(parts[1].data()), 0, parts[1].size());
  const auto got = values(run_linear(*b, x, wv, &bias, M, N));
  const auto bs = values(bias);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) ASSERT_EQ(got[static_cast<std::size_t>(m * N + n)], 0.0f + bs[static_cast<std::size_t>(n)]);
}

// Where the hint does not apply, nothing is kept: under q8 weights and --compute bf16 (those
// Linears read their own copies), for a 1-D weight, and after the name is uploaded again. The
// other backends accept the hint and keep nothing either.
TEST(ThreadedPackedWeight, NothingKeptWhereTheHintDoesNotApply) {
  const Tensor w = random_tensor(DType::f32, Shape{50, 40}, 41), v = random_tensor(DType::f32, Shape{50}, 42);
  std::string why;
  const std::shared_ptr<Backend> native = try_make_backend("threaded", 1, "native", "f32", why);
  if (!native) GTEST_SKIP() << why;
  native->upload("enc", w.view(), Split::None);
  native->hint("enc", WeightHint::KeepPacked);
  const bool packs = storage_parts(*native, "enc") == 2;  // kernels without a packed GEMM keep nothing
  native->upload("enc", w.view(), Split::None);
  EXPECT_EQ(storage_parts(*native, "enc"), 1u) << "a new upload drops the panels";
  native->upload("bias", v.view(), Split::None);
  native->hint("bias", WeightHint::KeepPacked);
  EXPECT_EQ(storage_parts(*native, "bias"), 1u);
  for (const auto& [weights, compute] : {std::pair<std::string, std::string>{"q8", "f32"}, {"native", "bf16"}}) {
    auto b = threaded_backend(1, weights, compute);
    b->upload("enc", w.view(), Split::None);
    b->hint("enc", WeightHint::KeepPacked);
    EXPECT_EQ(storage_parts(*b, "enc"), 1u) << weights << " / " << compute;
  }
  for (const std::string name : {"reference", "cpu-blas"}) {
    auto b = make_backend(name);
    b->upload("enc", w.view(), Split::None);
    b->hint("enc", WeightHint::KeepPacked);
    EXPECT_EQ(storage_parts(*b, "enc"), 1u) << name;
  }
  if (!packs) GTEST_SKIP() << "this CPU's kernels have no packed GEMM: the hint was ignored";
}

}  // namespace
}  // namespace sonde::test
