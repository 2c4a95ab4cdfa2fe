#pragma once
// Token choice from one row of logits: the Hugging Face warper order for autoregressive decoding
// (model-spec §4) and Dream's sample_tokens (model-spec §3.3), plus a counter-based random
// generator. Pure functions on spans: no model, no state, unit-testable alone.
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <vector>

namespace sonde {

// ---- counter-based randomness -------------------------------------------------------------
// A uniform draw in [0, 1) that is a pure function of (seed, step, slot, stream): a request's
// draws depend only on its own seed and position in the loop, never on the batch it runs in,
// on the backend or on the order of calls. splitmix64 finalisers chained over the four words.
enum class RngStream : std::uint64_t { Token = 1, Reveal = 2, Position = 3, ScoreRatio = 4, ScoreMask = 5 };
double counter_uniform(std::uint64_t seed, std::uint64_t step, std::uint64_t slot, RngStream stream);

// torch's CPU generator, so that a seeded run reproduces the published PyTorch code's draws
// (LLaDA's generate: torch.manual_seed(seed), then torch.rand / rand_like): ATen's mt19937 is the
// standard one seeded with the seed's low 32 bits; a float32 draw is (w & (2^24 - 1)) * 2^-24 of
// one word w, a float64 draw (((hi << 32) | lo) & (2^53 - 1)) * 2^-53 of two words hi, lo
// (uniform_real_distribution over [0, 1), element by element in row-major order).
class TorchCpuRandom {
 public:
  explicit TorchCpuRandom(std::uint64_t seed) : mt_(static_cast<std::uint32_t>(seed & 0xffffffffu)) {}
  float rand_f32();
  double rand_f64();
  void skip_f64(std::uint64_t n) { mt_.discard(2 * n); }  // n float64 draws, unread

 private:
  std::mt19937 mt_;
};

// ---- shared helpers ----------------------------------------------------------------------
// First index of the maximum (torch.argmax returns the first occurrence, model-spec §0.15).
std::int32_t argmax_first(std::span<const float> logits);
// softmax in double; entries of -inf become exactly 0.
std::vector<double> softmax(std::span<const float> logits);
// Inverse CDF: the first i with u < p_0 + ... + p_i (u in [0,1)); the last nonzero index if
// rounding leaves u above the total.
std::int32_t sample_index(std::span<const double> probs, double u);

// ---- Hugging Face generate (autoregressive) -------------------------------------------------
struct SamplingParams {
  bool do_sample = false;            // false: greedy argmax after repetition_penalty
  double temperature = 1.0;          // s / T, skipped when T == 1
  std::int64_t top_k = 0;            // 0: off
  double top_p = 1.0;                // 1: off
  double repetition_penalty = 1.0;   // 1: off
};

// s < 0 ? s * pen : s / pen, once for every distinct id in `history`.
void apply_repetition_penalty(std::span<float> logits, std::span<const std::int32_t> history, double penalty);
// HF TopKLogitsWarper: keep s >= k-th largest (ties survive), the rest -> -inf.
void top_k_filter(std::span<float> logits, std::int64_t k);
// HF TopPLogitsWarper: ascending sort, cum = cumsum(softmax); remove cum <= 1 - p; the largest
// logit always stays (min_tokens_to_keep = 1). Removed entries -> -inf.
void top_p_filter_hf(std::span<float> logits, double top_p);
// Repetition penalty, temperature, top-k, top-p, then argmax (greedy) or the inverse CDF at u.
// `logits` is modified in place (the warped scores).
std::int32_t choose_next_token(std::span<float> logits, const SamplingParams& p,
                               std::span<const std::int32_t> history, double u);

// ---- Dream sample_tokens (masked diffusion) -------------------------------------------------
// ConfidenceThreshold (Fast-dLLM) ranks by p[token] as MaskgitPlus does, but commits every slot
// at or above a threshold instead of following the step schedule (decode.h).
enum class DiffusionAlg { Origin, MaskgitPlus, TopkMargin, Entropy, ConfidenceThreshold };

// The published generation of a masked-diffusion family (ModelInfo::diffusion_loop), which core's
// diffusion loops implement (decode.h): Dream's diffusion_generate (timestep schedule, alg, logits
// shifted by one slot), or LLaDA's generate() (semi-autoregressive blocks of block_length, steps
// split over them, low_confidence or random remasking, classifier-free guidance, Gumbel-max
// sampling at a temperature, no shift). BlockDiffusion: Fast-dLLM v2's batch_sample (blocks
// decoded in order over a KV cache of completed blocks, sub-blocks, a confidence threshold; greedy or
// sampled at a temperature with top-p).
enum class DiffusionLoop { DreamTimesteps, SemiArRemasking, BlockDiffusion };
// LLaDA's remasking: the committed slots are the most confident (p of the chosen token) or the
// ones with the highest uniform draw. "low_confidence", "random"; BadInput naming the value otherwise.
enum class Remasking { LowConfidence, Random };
Remasking parse_remasking(std::string_view name);
std::string_view remasking_name(Remasking r);
// "origin", "maskgit_plus", "topk_margin", "entropy", "confidence_threshold"; BadInput naming the
// value otherwise.
DiffusionAlg parse_diffusion_alg(std::string_view name);
std::string_view diffusion_alg_name(DiffusionAlg alg);

struct DreamSampling {
  double temperature = 0.0;            // > 0: logits / T and sample; 0: argmax
  std::optional<double> top_p;         // applied when < 1
  std::optional<std::int64_t> top_k;   // applied when set
  DiffusionAlg alg = DiffusionAlg::Entropy;
};

// Dream top_p_logits: descending sort, cum = cumsum(softmax); remove cum > p, shifted right by
// one (the first token always stays); removed entries -> float32 lowest (finfo.min).
void top_p_filter_dream(std::span<float> logits, double top_p);
// Dream top_k_logits: entries < k-th largest -> float32 lowest (ties survive).
void top_k_filter_dream(std::span<float> logits, std::int64_t k);

struct TokenChoice {
  std::int32_t token = 0;
  double confidence = 0;
};
// temperature, top_p, top_k; probs = softmax; token = sample at u (T > 0) or argmax; confidence:
// maskgit_plus / origin p[token], topk_margin p1 - p2, entropy sum p log(p + 1e-10).
TokenChoice dream_sample_token(std::span<const float> logits, const DreamSampling& p, double u);

}  // namespace sonde
