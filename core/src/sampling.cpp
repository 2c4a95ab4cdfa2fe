// Samplers of model-spec §3.3 (Dream) and §4 (Hugging Face), in their exact orders.
#include <sonde/error.h>
#include <sonde/sampling.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_set>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace sonde {
namespace {

constexpr float kNegInfF = -std::numeric_limits<float>::infinity();
constexpr float kFinfoMin = std::numeric_limits<float>::lowest();  // torch.finfo(float32).min

// splitmix64's finaliser: a bijection on 64 bits with full avalanche.
std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Indices sorted by value, descending; equal values keep index order (stable).
std::vector<std::size_t> order_desc(std::span<const float> v) {
  std::vector<std::size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return v[a] > v[b]; });
  return idx;
}

float kth_largest(std::span<const float> v, std::int64_t k) {
  std::vector<float> c(v.begin(), v.end());
  std::nth_element(c.begin(), c.begin() + (k - 1), c.end(), std::greater<float>());
  return c[static_cast<std::size_t>(k - 1)];
}

}  // namespace

double counter_uniform(std::uint64_t seed, std::uint64_t step, std::uint64_t slot, RngStream stream) {
  std::uint64_t h = mix64(seed);
  h = mix64(h ^ static_cast<std::uint64_t>(stream));
  h = mix64(h ^ step);
  h = mix64(h ^ slot);
  return static_cast<double>(h >> 11) * 0x1.0p-53;  // 53 random bits -> [0, 1)
}

// The first index of the maximum, NaNs never winning (a NaN at index 0 wins by default): what
// `if (l[i] > l[best]) best = i` gives. Greedy decoding runs it over the whole vocabulary every
// step (152k logits: 100-140 us that way), so it is two passes that vectorise: the maximum, with
// four SSE accumulators (maxps(v, m) keeps m when v is NaN), then the first index holding it.
std::int32_t argmax_first(std::span<const float> logits) {
  if (logits.empty()) runtime_error("argmax over an empty row");
  const std::size_t n = logits.size();
  if (std::isnan(logits[0])) return 0;
  float m = logits[0];
  std::size_t i = 1;
#if defined(__SSE2__)
  __m128 m0 = _mm_set1_ps(m), m1 = m0, m2 = m0, m3 = m0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm_max_ps(_mm_loadu_ps(&logits[i]), m0);
    m1 = _mm_max_ps(_mm_loadu_ps(&logits[i + 4]), m1);
    m2 = _mm_max_ps(_mm_loadu_ps(&logits[i + 8]), m2);
    m3 = _mm_max_ps(_mm_loadu_ps(&logits[i + 12]), m3);
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3)));
  for (float x : lanes) m = x > m ? x : m;
#endif
  for (; i < n; ++i) m = logits[i] > m ? logits[i] : m;
  for (std::size_t j = 0; j < n; ++j)
    if (logits[j] == m) return static_cast<std::int32_t>(j);
  return 0;  // not reached: m is one of the values
}

std::vector<double> softmax(std::span<const float> logits) {
  const double m = logits[static_cast<std::size_t>(argmax_first(logits))];
  std::vector<double> p(logits.size());
  double sum = 0;
  for (std::size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp(static_cast<double>(logits[i]) - m);
  for (double& x : p) x /= sum;
  return p;
}

std::int32_t sample_index(std::span<const double> probs, double u) {
  double cum = 0;
  std::int32_t last_nonzero = 0;
  for (std::size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    last_nonzero = static_cast<std::int32_t>(i);
    cum += probs[i];
    if (u < cum) return last_nonzero;
  }
  return last_nonzero;
}

// ---- Hugging Face ----

void apply_repetition_penalty(std::span<float> logits, std::span<const std::int32_t> history, double penalty) {
  if (penalty == 1.0) return;
  std::unordered_set<std::int32_t> seen(history.begin(), history.end());
  for (auto id : seen) {
    if (id < 0 || static_cast<std::size_t>(id) >= logits.size()) continue;
    float& s = logits[static_cast<std::size_t>(id)];
    s = s < 0 ? static_cast<float>(s * penalty) : static_cast<float>(s / penalty);
  }
}

void top_k_filter(std::span<float> logits, std::int64_t k) {
  if (k <= 0 || k >= static_cast<std::int64_t>(logits.size())) return;
  const float kth = kth_largest(logits, k);
  for (float& s : logits)
    if (s < kth) s = kNegInfF;
}

void top_p_filter_hf(std::span<float> logits, double top_p) {
  if (top_p >= 1.0) return;
  // Ascending order: the removed set is the low tail whose mass is <= 1 - top_p.
  auto idx = order_desc(logits);
  std::reverse(idx.begin(), idx.end());
  std::vector<float> sorted(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i) sorted[i] = logits[idx[i]];
  const auto p = softmax(sorted);
  double cum = 0;
  for (std::size_t i = 0; i + 1 < idx.size(); ++i) {  // the last (largest) always stays
    cum += p[i];
    if (cum <= 1.0 - top_p) logits[idx[i]] = kNegInfF;
  }
}

std::int32_t choose_next_token(std::span<float> logits, const SamplingParams& p,
                               std::span<const std::int32_t> history, double u) {
  apply_repetition_penalty(logits, history, p.repetition_penalty);
  if (!p.do_sample) return argmax_first(logits);
  if (p.temperature != 1.0)
    for (float& s : logits) s = static_cast<float>(s / p.temperature);
  top_k_filter(logits, p.top_k);
  top_p_filter_hf(logits, p.top_p);
  return sample_index(softmax(logits), u);
}

// ---- Dream ----

DiffusionAlg parse_diffusion_alg(std::string_view name) {
  if (name == "origin") return DiffusionAlg::Origin;
  if (name == "maskgit_plus") return DiffusionAlg::MaskgitPlus;
  if (name == "topk_margin") return DiffusionAlg::TopkMargin;
  if (name == "entropy") return DiffusionAlg::Entropy;
  if (name == "confidence_threshold") return DiffusionAlg::ConfidenceThreshold;
  bad_setting("alg", "unknown diffusion alg '{}' (expected origin, maskgit_plus, topk_margin, entropy or confidence_threshold)",
              name);
}

std::string_view diffusion_alg_name(DiffusionAlg alg) {
  switch (alg) {
    case DiffusionAlg::Origin: return "origin";
    case DiffusionAlg::MaskgitPlus: return "maskgit_plus";
    case DiffusionAlg::TopkMargin: return "topk_margin";
    case DiffusionAlg::Entropy: return "entropy";
    case DiffusionAlg::ConfidenceThreshold: return "confidence_threshold";
  }
  return "?";
}

void top_p_filter_dream(std::span<float> logits, double top_p) {
  if (top_p >= 1.0) return;
  const auto idx = order_desc(logits);
  std::vector<float> sorted(idx.size());
  for (std::size_t i = 0; i < idx.size(); ++i) sorted[i] = logits[idx[i]];
  const auto p = softmax(sorted);
  // remove[i] = cum[i-1] > top_p (shifted right by one), remove[0] = false.
  double cum = p[0];
  for (std::size_t i = 1; i < idx.size(); ++i) {
    if (cum > top_p) logits[idx[i]] = kFinfoMin;
    cum += p[i];
  }
}

void top_k_filter_dream(std::span<float> logits, std::int64_t k) {
  if (k <= 0) bad_input("top_k must be positive, got {}", k);
  if (k >= static_cast<std::int64_t>(logits.size())) return;
  const float kth = kth_largest(logits, k);
  for (float& s : logits)
    if (s < kth) s = kFinfoMin;
}

TokenChoice dream_sample_token(std::span<const float> logits_in, const DreamSampling& p, double u) {
  std::vector<float> logits(logits_in.begin(), logits_in.end());
  if (p.temperature > 0)
    for (float& s : logits) s = static_cast<float>(s / p.temperature);
  if (p.top_p) top_p_filter_dream(logits, *p.top_p);
  if (p.top_k) top_k_filter_dream(logits, *p.top_k);
  const auto probs = softmax(logits);

  TokenChoice c;
  c.token = p.temperature > 0 ? sample_index(probs, u) : argmax_first(logits);
  c.confidence = probs[static_cast<std::size_t>(c.token)];
  if (p.alg == DiffusionAlg::TopkMargin) {
    double p1 = 0, p2 = 0;  // the two largest probabilities
    for (double q : probs) {
      if (q > p1) {
        p2 = p1;
        p1 = q;
      } else if (q > p2) {
        p2 = q;
      }
    }
    c.confidence = p1 - p2;
  } else if (p.alg == DiffusionAlg::Entropy) {
    double s = 0;  // the negative entropy: larger = more confident
    for (double q : probs) s += q * std::log(q + 1e-10);
    c.confidence = s;
  }
  return c;
}

}  // namespace sonde
