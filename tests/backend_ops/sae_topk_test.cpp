// The TopK SaeActivation bit for bit: every backend against the reference (value order, ties to
// the lower index), on rows wide enough for the threaded backend's AVX-512 passes (ops_topk.cpp:
// >= 1,024 values, k <= 64) and ragged tails; the threaded backend on every ISA this CPU has
// against the portable f32 kernel (sae_f32.h), for every batch split and thread count.
#include "op_harness.h"

#include <sonde/sae_f32.h>

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace sonde::test {
namespace {

Node topk_exact_node(const Shape& s, std::int64_t k) {
  Node n = make_node(OpKind::SaeActivation, s);
  n.params.sae_act = SaeAct::TopK;
  n.params.sae_k = k;
  return n;
}

// Rows of every kind the bar can meet: distinct values, values tied many times over at the k-th
// largest (quarters in [-1, 1]), all negative (relu zeroes the kept ones), +-0 with a few
// positives (fewer than k), and a row whose largest values all sit in one 256-group.
std::vector<float> topk_exact_rows(std::int64_t rows, std::int64_t N, unsigned seed) {
  std::vector<float> v = values(random_tensor(DType::f32, Shape{rows, N}, seed, -3, 3));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < N; ++j) {
      float& x = v[static_cast<std::size_t>(r * N + j)];
      switch (r % 5) {
        case 1: x = std::floor(x * 1.5f + 4.5f) / 4 - 1; break;
        case 2: x = -std::fabs(x) - 0.5f; break;
        case 3: x = j % 997 == 5 ? 1.0f + static_cast<float>(j) / static_cast<float>(N) : (j % 2 ? -0.0f : 0.0f); break;
        case 4: x = j % 256 == 3 ? 10.0f + static_cast<float>(j) / static_cast<float>(N) : x; break;
        default: break;
      }
    }
  return v;
}

const Shape kTopKExactShapes[] = {Shape{1, 5, 1024}, Shape{2, 5, 16384 + 7}, Shape{1, 5, 4096 + 255}};
const std::int64_t kTopKExactKs[] = {1, 7, 63, 64};

class SaeTopKExact : public ::testing::TestWithParam<std::string> {};

// Value for value (== : the reference may keep a -0 that relu gives as +0 here).
TEST_P(SaeTopKExact, SameValuesAsReference) {
  auto backend = make_backend(GetParam()), reference = make_backend("reference");
  for (const auto& s : kTopKExactShapes)
    for (const auto k : kTopKExactKs) {
      SCOPED_TRACE(s.str() + " k = " + std::to_string(k));
      const auto pre = floats(DType::f32, s, topk_exact_rows(s[0] * s[1], s.last(), 7));
      const auto want = values(run_on(*reference, topk_exact_node(s, k), {{pre}}));
      const auto got = values(run_on(*backend, topk_exact_node(s, k), {{pre}}));
      ASSERT_EQ(got.size(), want.size());
      std::size_t bad = 0, first = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        if (!(got[i] == want[i]) && bad++ == 0) first = i;
      EXPECT_EQ(bad, 0u) << "first at " << first << ": " << got[first] << " != " << want[first];
    }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, SaeTopKExact, ::testing::ValuesIn(backend_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// A fixed Linear path (no Linear runs here) spares the start-up's timing of the host.
std::shared_ptr<Backend> topk_threaded(const std::string& isa, int threads) {
  setenv("SONDE_THREADED_ISA", isa.c_str(), 1);
  setenv("SONDE_THREADED_LINEAR", "gemv", 1);
  auto b = make_backend("threaded", threads, "native", "f32");
  unsetenv("SONDE_THREADED_ISA");
  unsetenv("SONDE_THREADED_LINEAR");
  return b;
}

// The portable kernel's output (ops::top_k_indices, the threaded backend's before the AVX-512
// passes), and the threaded backend's on each ISA, thread count and batch split: the same bytes.
TEST(SaeTopKThreaded, EveryIsaAndSplitSameBitsAsPortableKernel) {
  bool found = false;
  for (const auto& name : backend_names()) found = found || name == "threaded";
  if (!found) GTEST_SKIP() << "no threaded backend in this build";
  const Shape s{1, 5, 16384 + 7};
  const std::int64_t N = s.last(), rows = s[1];
  const auto v = topk_exact_rows(rows, N, 11);
  const auto pre = floats(DType::f32, s, v);
  std::vector<std::vector<float>> want;
  for (const auto k : kTopKExactKs) {
    want.emplace_back(v.size());
    ops::run_sae_activation_f32(topk_exact_node(s, k), std::vector<TensorView>{pre.view()},
                                TensorView(want.back().data(), DType::f32, s));
  }
  for (const std::string isa : {"avx512", "avx2", "scalar"})
    for (const int threads : {1, 2}) {
      std::shared_ptr<Backend> b;
      try {
        b = topk_threaded(isa, threads);
      } catch (const Error&) {
        continue;  // this CPU lacks the ISA
      }
      for (std::size_t i = 0; i < want.size(); ++i) {
        const std::int64_t k = kTopKExactKs[i];
        SCOPED_TRACE(isa + " x" + std::to_string(threads) + " k = " + std::to_string(k));
        const auto all = run_on(*b, topk_exact_node(s, k), {{pre}});
        EXPECT_EQ(std::memcmp(all.data<float>(), want[i].data(), want[i].size() * 4), 0);
        for (std::int64_t r = 0; r < rows; ++r) {  // each row alone
          const Shape one{1, 1, N};
          const auto row = floats(DType::f32, one, std::vector<float>(v.begin() + r * N, v.begin() + (r + 1) * N));
          const auto got = run_on(*b, topk_exact_node(one, k), {{row}});
          EXPECT_EQ(std::memcmp(got.data<float>(), want[i].data() + r * N, static_cast<std::size_t>(N) * 4), 0) << "row " << r;
        }
      }
    }
}

}  // namespace
}  // namespace sonde::test
