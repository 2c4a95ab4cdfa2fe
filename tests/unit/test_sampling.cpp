// Samplers against hand-computed cases (model-spec §3.3, §4) and chi-square tests that sampled
// tokens follow the filtered distribution. Expected distributions are computed here from the
// formulas, independently of the code under test.
#include <sonde/error.h>
#include <sonde/sampling.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

namespace sonde {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> log_probs(std::vector<double> p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

TEST(Sampling, ArgmaxTakesTheFirstMaximum) {
  const std::vector<float> l{1, 3, 3, 2};
  EXPECT_EQ(argmax_first(l), 1);
}

// argmax_first is vectorised; its definition is this loop: the first strict maximum, NaNs
// never winning unless at index 0.
std::int32_t first_max_by_loop(const std::vector<float>& l) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < l.size(); ++i)
    if (l[i] > l[best]) best = i;
  return static_cast<std::int32_t>(best);
}

TEST(Sampling, ArgmaxMatchesItsDefinitionWithTiesNansAndInfinities) {
  std::mt19937 gen(7);
  const float specials[] = {std::nanf(""), kInf, -kInf, 0.0f, -0.0f, 3.0f};
  for (std::size_t n : {1u, 2u, 3u, 15u, 16u, 17u, 33u, 64u, 151936u}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> l(n);
      // Few distinct values, so ties are common; some specials at random places.
      for (auto& x : l) x = static_cast<float>(static_cast<int>(gen() % 7)) - 3.0f;
      for (int k = 0; k < trial % 5; ++k) l[gen() % n] = specials[gen() % 6];
      EXPECT_EQ(argmax_first(l), first_max_by_loop(l)) << "n " << n << " trial " << trial;
    }
  }
  const std::vector<float> nan_first{std::nanf(""), 5, 9};
  EXPECT_EQ(argmax_first(nan_first), 0);
  const std::vector<float> zeros{-1, -0.0f, 0.0f, -2};
  EXPECT_EQ(argmax_first(zeros), 1);
}

TEST(Sampling, CounterUniformIsAPureFunctionOfItsCounters) {
  EXPECT_EQ(counter_uniform(42, 3, 7, RngStream::Token), counter_uniform(42, 3, 7, RngStream::Token));
  EXPECT_NE(counter_uniform(42, 3, 7, RngStream::Token), counter_uniform(43, 3, 7, RngStream::Token));
  EXPECT_NE(counter_uniform(42, 3, 7, RngStream::Token), counter_uniform(42, 4, 7, RngStream::Token));
  EXPECT_NE(counter_uniform(42, 3, 7, RngStream::Token), counter_uniform(42, 3, 7, RngStream::Reveal));
  // Uniform on [0,1): 10 equal bins, chi-square with 9 dof below 27.88 (p = 0.001).
  std::vector<int> bins(10, 0);
  const int n = 50000;
  for (int i = 0; i < n; ++i) {
    const double u = counter_uniform(5, static_cast<std::uint64_t>(i), 0, RngStream::Token);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    bins[static_cast<std::size_t>(u * 10)]++;
  }
  double chi2 = 0;
  for (int b : bins) chi2 += (b - n / 10.0) * (b - n / 10.0) / (n / 10.0);
  EXPECT_LT(chi2, 27.88);
}

TEST(Sampling, HfTopKKeepsTiesAtTheKthValue) {
  std::vector<float> l{1, 3, 3, 2};
  top_k_filter(l, 2);
  EXPECT_EQ(l, (std::vector<float>{-kInf, 3, 3, -kInf}));
  std::vector<float> m{1, 3, 3, 2};
  top_k_filter(m, 3);
  EXPECT_EQ(m, (std::vector<float>{-kInf, 3, 3, 2}));
}

TEST(Sampling, HfTopPRemovesTheLowTailOfMassAtMostOneMinusP) {
  // probs .5 .3 .15 .05; ascending cumsum .05 .20 .50 1.0; top_p .75 removes cum <= .25.
  auto l = log_probs({0.5, 0.3, 0.15, 0.05});
  const auto orig = l;
  top_p_filter_hf(l, 0.75);
  EXPECT_EQ(l[0], orig[0]);
  EXPECT_EQ(l[1], orig[1]);
  EXPECT_EQ(l[2], -kInf);
  EXPECT_EQ(l[3], -kInf);
  // A tiny top_p still keeps the most likely token (min_tokens_to_keep = 1).
  auto m = log_probs({0.5, 0.3, 0.15, 0.05});
  top_p_filter_hf(m, 0.01);
  EXPECT_EQ(m[0], orig[0]);
  EXPECT_EQ(std::count(m.begin(), m.end(), -kInf), 3);
}

TEST(Sampling, RepetitionPenaltyDividesPositiveAndMultipliesNegativeOncePerId) {
  std::vector<float> l{2.0f, -1.0f, 0.5f};
  const std::vector<std::int32_t> history{0, 1, 0, 0};
  apply_repetition_penalty(l, history, 2.0);
  EXPECT_FLOAT_EQ(l[0], 1.0f);
  EXPECT_FLOAT_EQ(l[1], -2.0f);
  EXPECT_FLOAT_EQ(l[2], 0.5f);
}

TEST(Sampling, GreedyIsArgmaxAfterRepetitionPenalty) {
  std::vector<float> l{2.0f, 1.5f, 0.5f};
  SamplingParams p;
  p.repetition_penalty = 2.0;  // 2.0 -> 1.0, so token 1 wins
  const std::vector<std::int32_t> history{0};
  EXPECT_EQ(choose_next_token(l, p, history, 0.99), 1);
}

TEST(Sampling, DreamTopPIsDescendingShiftedAndFillsFinfoMin) {
  // desc probs .5 .3 .15 .05, cum .5 .8 .95 1; remove = cum > .4 -> TTTT, shifted -> FTTT.
  auto l = log_probs({0.5, 0.3, 0.15, 0.05});
  top_p_filter_dream(l, 0.4);
  EXPECT_EQ(l[1], std::numeric_limits<float>::lowest());
  EXPECT_EQ(l[2], std::numeric_limits<float>::lowest());
  EXPECT_EQ(l[3], std::numeric_limits<float>::lowest());
  // top_p .75: cum > .75 -> FTTT, shifted -> FFTT: two tokens stay.
  auto m = log_probs({0.5, 0.3, 0.15, 0.05});
  top_p_filter_dream(m, 0.75);
  EXPECT_GT(m[1], -10.0f);
  EXPECT_EQ(m[2], std::numeric_limits<float>::lowest());
}

TEST(Sampling, DreamTopKKeepsTies) {
  std::vector<float> l{1, 3, 3, 2};
  top_k_filter_dream(l, 1);
  EXPECT_EQ(l, (std::vector<float>{std::numeric_limits<float>::lowest(), 3, 3, std::numeric_limits<float>::lowest()}));
}

TEST(Sampling, DreamConfidencePerAlg) {
  const auto l = log_probs({0.5, 0.3, 0.15, 0.05});
  DreamSampling p;
  p.alg = DiffusionAlg::MaskgitPlus;
  auto c = dream_sample_token(l, p, 0.5);
  EXPECT_EQ(c.token, 0);
  EXPECT_NEAR(c.confidence, 0.5, 1e-6);
  p.alg = DiffusionAlg::TopkMargin;
  EXPECT_NEAR(dream_sample_token(l, p, 0.5).confidence, 0.2, 1e-6);
  p.alg = DiffusionAlg::Entropy;
  double neg_h = 0;
  for (double q : {0.5, 0.3, 0.15, 0.05}) neg_h += q * std::log(q + 1e-10);  // -1.14212...
  EXPECT_NEAR(dream_sample_token(l, p, 0.5).confidence, neg_h, 1e-6);
  EXPECT_LT(neg_h, -1.14);
}

TEST(Sampling, DreamAppliesTemperatureBeforeTopP) {
  // T = 0.5: logits {4, 2, 0, -2}; probs .865 .117 .016 .002; top_p .9 keeps two tokens, so
  // maskgit confidence = e^4 / (e^4 + e^2) = 1 / (1 + e^-2). (top_p first would keep three.)
  const std::vector<float> l{2, 1, 0, -1};
  DreamSampling p;
  p.temperature = 0.5;
  p.top_p = 0.9;
  p.alg = DiffusionAlg::MaskgitPlus;
  // u = 0 picks the first token of the CDF: token 0.
  const auto c = dream_sample_token(l, p, 0.0);
  EXPECT_EQ(c.token, 0);
  EXPECT_NEAR(c.confidence, 1.0 / (1.0 + std::exp(-2.0)), 1e-6);
}

TEST(Sampling, DreamTopPChangesConfidenceEvenAtTemperatureZero) {
  const auto l = log_probs({0.5, 0.3, 0.15, 0.05});
  DreamSampling p;
  p.alg = DiffusionAlg::MaskgitPlus;
  p.top_p = 0.75;  // keeps .5 and .3 -> renormalised .625
  EXPECT_NEAR(dream_sample_token(l, p, 0.5).confidence, 0.625, 1e-6);
}

TEST(Sampling, UnknownAlgIsBadInput) {
  try {
    parse_diffusion_alg("greedy");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("greedy"), std::string::npos);
  }
}

// ---- chi-square: sampled frequencies against the filtered distribution ----

// HF order written out from model-spec §4: s/T; keep s >= k-th largest; ascending cumsum of the
// softmax, drop cum <= 1 - p (the largest always stays).
std::vector<double> expected_hf(std::vector<double> s, double T, int k, double top_p) {
  for (double& x : s) x /= T;
  std::vector<bool> keep(s.size(), true);
  if (k > 0) {
    std::vector<double> sorted = s;
    std::sort(sorted.rbegin(), sorted.rend());
    for (std::size_t i = 0; i < s.size(); ++i) keep[i] = s[i] >= sorted[static_cast<std::size_t>(k - 1)];
  }
  auto normalised = [&] {
    std::vector<double> p(s.size(), 0.0);
    double z = 0;
    for (std::size_t i = 0; i < s.size(); ++i)
      if (keep[i]) z += p[i] = std::exp(s[i]);
    for (double& x : p) x /= z;
    return p;
  };
  if (top_p < 1) {
    const auto p = normalised();
    std::vector<std::size_t> asc(s.size());
    for (std::size_t i = 0; i < asc.size(); ++i) asc[i] = i;
    std::sort(asc.begin(), asc.end(), [&](auto a, auto b) { return s[a] < s[b]; });
    double cum = 0;
    for (std::size_t j = 0; j + 1 < asc.size(); ++j) {
      cum += p[asc[j]];
      if (cum <= 1 - top_p) keep[asc[j]] = false;
    }
  }
  return normalised();
}

// Critical chi-square values at p = 0.001 for 1..7 degrees of freedom.
constexpr double kChi2Crit[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32};

void check_sampling(double T, int k, double top_p, std::uint64_t seed) {
  const std::vector<double> s{1.0, 0.5, 0.2, -0.3, 0.0, 2.0, -1.0, 0.8};
  const auto expected = expected_hf(s, T, k, top_p);
  SamplingParams p;
  p.do_sample = true;
  p.temperature = T;
  p.top_k = k;
  p.top_p = top_p;
  const int n = 40000;
  std::vector<int> counts(s.size(), 0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> l(s.begin(), s.end());
    counts[static_cast<std::size_t>(choose_next_token(l, p, {}, counter_uniform(seed, static_cast<std::uint64_t>(i), 0, RngStream::Token)))]++;
  }
  double chi2 = 0;
  int kept = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " was filtered out but drawn";
      continue;
    }
    ++kept;
    const double e = expected[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  ASSERT_GE(kept, 2);
  EXPECT_LT(chi2, kChi2Crit[kept - 1]) << "T=" << T << " k=" << k << " p=" << top_p;
}

TEST(SamplingChiSquare, TemperatureOnly) { check_sampling(0.7, 0, 1.0, 11); }
TEST(SamplingChiSquare, TopKOnly) { check_sampling(1.0, 4, 1.0, 12); }
TEST(SamplingChiSquare, TopPOnly) { check_sampling(1.0, 0, 0.8, 13); }
TEST(SamplingChiSquare, TemperatureTopKTopPInHfOrder) { check_sampling(1.5, 5, 0.7, 14); }

// A deliberately wrong expectation must fail the same statistic: the test has power.
TEST(SamplingChiSquare, DetectsAWrongDistribution) {
  const std::vector<double> s{1.0, 0.5, 0.2, -0.3, 0.0, 2.0, -1.0, 0.8};
  const auto wrong = expected_hf(s, 1.0, 0, 1.0);  // untempered, while sampling at T = 0.7
  SamplingParams p;
  p.do_sample = true;
  p.temperature = 0.7;
  const int n = 40000;
  std::vector<int> counts(s.size(), 0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> l(s.begin(), s.end());
    counts[static_cast<std::size_t>(choose_next_token(l, p, {}, counter_uniform(3, static_cast<std::uint64_t>(i), 0, RngStream::Token)))]++;
  }
  double chi2 = 0;
  for (std::size_t i = 0; i < s.size(); ++i) chi2 += (counts[i] - wrong[i] * n) * (counts[i] - wrong[i] * n) / (wrong[i] * n);
  EXPECT_GT(chi2, kChi2Crit[7]);
}

}  // namespace
}  // namespace sonde
