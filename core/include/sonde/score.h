#pragma once
// Scoring a completion given a prompt. Autoregressive models: the exact log-probability of each
// completion token, log_softmax(logits at the slot before it). Masked diffusion (Dream): a Monte
// Carlo estimate of the log-likelihood bound under the masked forward process: per sample a mask
// ratio t ~ U(0, 1], each completion token masked with probability t, and
//   loss = sum over masked tokens of -log p(token | the partly masked sequence) / t,
// the estimate being -mean(loss) with its standard error. `coupled` draws complementary pairs (the
// tokens masked at ratio t, then exactly the others, weighted 1 / (1 - t)): each token is scored
// once per pair (DiffuCoder's coupled-GRPO estimator), which lowers the variance.
//
// Seed contract: sample (or pair) k draws u = counter_uniform(seed, k, 0, ScoreRatio), t = 1 - u,
// and token j of the completion is masked when counter_uniform(seed, k, j, ScoreMask) < t (its
// complement: >= t). The masks are a pure function of (seed, k, j).
#include <sonde/session.h>

#include <cstdint>
#include <vector>

namespace sonde {

struct ArScore {
  std::vector<double> token_logprobs;
  double logprob = 0, mean_logprob = 0, perplexity = 0;
};

// BadInput for an empty prompt or completion. Hooks named in `taps` go to `tap` as [1, T, *row]
// for the whole sequence (prompt + completion).
ArScore score_autoregressive(Session& s, const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& completion,
                             const std::set<std::string>& taps = {}, const Executor::Tap& tap = {});

struct DiffusionScoreOptions {
  std::int64_t samples = 32;  // forward passes (coupled: pairs of two, so an even number)
  bool coupled = false;
  std::uint64_t seed = 0;
  std::int64_t batch = 8;     // samples per forward batch
};

struct DiffusionSample {
  double t = 0, weight = 0;           // ratio and loss weight (1/t, or 1/(1-t) for a complement)
  std::vector<std::int64_t> masked;   // completion indices masked
  double loss = 0;                    // weight * sum over masked of -log p
};

struct DiffusionScore {
  double logprob = 0, stderr_ = 0;    // the estimate -mean(loss) (per pair when coupled) and its standard error
  std::vector<DiffusionSample> samples;
};

DiffusionScore score_diffusion(Session& s, const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& completion,
                               const DiffusionScoreOptions& o);

}  // namespace sonde
