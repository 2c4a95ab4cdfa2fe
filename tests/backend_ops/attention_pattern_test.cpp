// AttentionPattern (the probabilities behind Attention, tapped as attn.hook_pattern) on the
// reference backend, the only one that runs it: values worked out from the softmax formula, and
// pattern . V equal to Attention's own output.
#include "op_harness.h"
#include "test_paths.h"

#include <gtest/gtest.h>

#include <cmath>

namespace sonde::test {
namespace {

Node pattern_node(std::int64_t B, std::int64_t T, std::int64_t nh, std::int64_t S, bool causal) {
  Node n = make_node(OpKind::AttentionPattern, Shape{B, T, nh, S});
  n.params.causal = causal;
  return n;
}

// q = [1, 0], keys [1, 0] and [0, 1], d = 2: scores 1/sqrt(2) and 0, so
// p = [e^(1/sqrt2), 1] / (e^(1/sqrt2) + 1).
TEST(AttentionPattern, TwoKeysFollowTheSoftmax) {
  auto ref = make_backend("reference");
  const Shape q{1, 1, 1, 2}, kv{1, 2, 1, 2};
  const auto p = values(run_on(*ref, pattern_node(1, 1, 1, 2, false),
                               {{floats(DType::f32, q, {1, 0})}, {floats(DType::f32, kv, {1, 0, 0, 1})},
                                {floats(DType::f32, kv, {0, 0, 0, 0})}}));
  const double e = std::exp(1 / std::sqrt(2.0));
  EXPECT_NEAR(p[0], e / (e + 1), 1e-7);
  EXPECT_NEAR(p[1], 1 / (e + 1), 1e-7);
}

TEST(AttentionPattern, CausalRowsSumToOneOverVisibleKeysAndMaskedSlotsAreZero) {
  auto ref = make_backend("reference");
  const std::int64_t T = 5, nh = 4, nkv = 2, d = 6;
  const Shape qs{1, T, nh, d}, ks{1, T, nkv, d};
  std::vector<Arg> args{{random_tensor(DType::f32, qs, 1)}, {random_tensor(DType::f32, ks, 2)},
                        {random_tensor(DType::f32, ks, 3)}, {Tensor(DType::u8, Shape{1, T})}};
  const std::vector<std::uint8_t> mask{0, 1, 1, 1, 1};  // one left-padding slot
  std::copy(mask.begin(), mask.end(), args[3].t.data<std::uint8_t>());
  const auto p = values(run_on(*ref, pattern_node(1, T, nh, T, true), args));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < nh; ++h) {
      double sum = 0;
      for (std::int64_t u = 0; u < T; ++u) {
        const float x = p[static_cast<std::size_t>((t * nh + h) * T + u)];
        if (u > t || !mask[static_cast<std::size_t>(u)] || !mask[static_cast<std::size_t>(t)]) {
          EXPECT_EQ(x, 0.0f);
        }
        sum += x;
      }
      EXPECT_NEAR(sum, t == 0 ? 0.0 : 1.0, 1e-6) << "row " << t << " head " << h;  // row 0 is padding
    }
}

// Attention's output is the pattern applied to V: y[t,h] = sum_u p[t,h,u] v[u, h / (nh/nkv)].
TEST(AttentionPattern, PatternTimesValuesIsTheAttentionOutput) {
  auto ref = make_backend("reference");
  const std::int64_t B = 2, T = 3, S = 7, nh = 6, nkv = 3, d = 4;
  const Shape qs{B, T, nh, d}, ks{B, S, nkv, d};
  std::vector<Arg> args{{random_tensor(DType::f32, qs, 4)}, {random_tensor(DType::f32, ks, 5)},
                        {random_tensor(DType::f32, ks, 6)}};
  const auto p = values(run_on(*ref, pattern_node(B, T, nh, S, true), args));
  Node att = make_node(OpKind::Attention, qs);
  att.params.causal = true;
  const auto y = values(run_on(*ref, att, args));
  const auto v = values(args[2].t);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t h = 0; h < nh; ++h)
        for (std::int64_t j = 0; j < d; ++j) {
          double acc = 0;
          for (std::int64_t u = 0; u < S; ++u)
            acc += p[static_cast<std::size_t>(((b * T + t) * nh + h) * S + u)] *
                   v[static_cast<std::size_t>(((b * S + u) * nkv + h / (nh / nkv)) * d + j)];
          EXPECT_NEAR(acc, y[static_cast<std::size_t>(((b * T + t) * nh + h) * d + j)], 1e-5);
        }
}

TEST(AttentionPattern, OnlyTheReferenceRunsIt) {
  sonde::PluginRegistry r;
  r.scan({sonde::test::plugin_root()});
  const DType f = DType::f32;
  for (const auto& e : r.plugins()) {
    if (e.kind != "backend") continue;
    const bool ok = r.backend(e.name)->supports(pattern_node(1, 1, 1, 1, false), std::vector<DType>{f, f, f});
    EXPECT_EQ(ok, e.name == "reference") << e.name;
  }
}

}  // namespace
}  // namespace sonde::test
