// Scoring (score.h): exact autoregressive log-probabilities and the masked-diffusion estimate.
#include <sonde/error.h>
#include <sonde/sampling.h>
#include <sonde/score.h>

#include <cmath>

namespace sonde {

namespace {

// log_softmax(row)[id] in double.
double log_prob(const float* row, std::int64_t V, std::int32_t id) {
  double mx = row[0];
  for (std::int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
  double z = 0;
  for (std::int64_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
  return static_cast<double>(row[id]) - mx - std::log(z);
}

void check(const Session& s, const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& completion) {
  if (prompt.empty()) bad_input("score: the prompt is empty (the first token has nothing to be predicted from)");
  if (completion.empty()) bad_input("score: the completion is empty");
  s.check_ids(prompt);
  s.check_ids(completion);
}

}  // namespace

ArScore score_autoregressive(Session& s, const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& completion,
                             const std::set<std::string>& taps, const Executor::Tap& tap) {
  check(s, prompt, completion);
  ForwardInput in;
  in.ids = prompt;
  in.ids.insert(in.ids.end(), completion.begin(), completion.end());
  in.tokens = static_cast<std::int64_t>(in.ids.size());
  const Tensor logits = s.forward(in, true, taps, tap);
  const std::int64_t V = s.config().vocab_size, P = static_cast<std::int64_t>(prompt.size());
  ArScore r;
  for (std::size_t j = 0; j < completion.size(); ++j)  // the logits at slot i predict slot i + 1
    r.token_logprobs.push_back(log_prob(logits.data<float>() + (P + static_cast<std::int64_t>(j) - 1) * V, V, completion[j]));
  for (double lp : r.token_logprobs) r.logprob += lp;
  r.mean_logprob = r.logprob / static_cast<double>(completion.size());
  r.perplexity = std::exp(-r.mean_logprob);
  return r;
}

DiffusionScore score_diffusion(Session& s, const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& completion,
                               const DiffusionScoreOptions& o) {
  check(s, prompt, completion);
  if (o.samples < 1 || (o.coupled && o.samples % 2)) bad_input("samples: {} (coupled needs an even number >= 2)", o.samples);
  if (s.info().mask_token_id < 0) bad_input("score: model {} has no mask token", s.info().arch);
  const auto C = static_cast<std::int64_t>(completion.size()), P = static_cast<std::int64_t>(prompt.size()), T = P + C;
  const std::int64_t V = s.config().vocab_size, shift = s.info().prediction_shift;
  DiffusionScore r;
  for (std::int64_t k = 0; k < o.samples; ++k) {  // the masks, by the seed contract
    const std::int64_t draw = o.coupled ? k / 2 : k;
    const bool complement = o.coupled && k % 2 == 1;
    DiffusionSample smp;
    smp.t = 1.0 - counter_uniform(o.seed, static_cast<std::uint64_t>(draw), 0, RngStream::ScoreRatio);
    smp.weight = complement ? (smp.t < 1 ? 1.0 / (1.0 - smp.t) : 0.0) : 1.0 / smp.t;
    for (std::int64_t j = 0; j < C; ++j) {
      const bool under = counter_uniform(o.seed, static_cast<std::uint64_t>(draw), static_cast<std::uint64_t>(j), RngStream::ScoreMask) < smp.t;
      if (under != complement) smp.masked.push_back(j);
    }
    r.samples.push_back(std::move(smp));
  }
  for (std::int64_t from = 0; from < o.samples; from += o.batch) {
    const std::int64_t B = std::min(o.batch, o.samples - from);
    ForwardInput in;
    in.batch = B;
    in.tokens = T;
    for (std::int64_t b = 0; b < B; ++b) {
      std::vector<std::int32_t> row = prompt;
      row.insert(row.end(), completion.begin(), completion.end());
      for (auto j : r.samples[static_cast<std::size_t>(from + b)].masked) row[static_cast<std::size_t>(P + j)] = static_cast<std::int32_t>(s.info().mask_token_id);
      in.ids.insert(in.ids.end(), row.begin(), row.end());
    }
    const Tensor logits = s.forward(in, true, {}, {});
    for (std::int64_t b = 0; b < B; ++b) {
      auto& smp = r.samples[static_cast<std::size_t>(from + b)];
      double nll = 0;
      for (auto j : smp.masked)
        nll -= log_prob(logits.data<float>() + (b * T + P + j - shift) * V, V, completion[static_cast<std::size_t>(j)]);
      smp.loss = smp.masked.empty() ? 0.0 : smp.weight * nll;
    }
  }
  std::vector<double> est;  // one estimate of the bound per sample, or per pair
  for (std::size_t k = 0; k < r.samples.size(); k += o.coupled ? 2 : 1)
    est.push_back(o.coupled ? -(r.samples[k].loss + r.samples[k + 1].loss) / 2 : -r.samples[k].loss);
  double mean = 0;
  for (double e : est) mean += e;
  mean /= static_cast<double>(est.size());
  double var = 0;
  for (double e : est) var += (e - mean) * (e - mean);
  r.logprob = mean;
  r.stderr_ = est.size() > 1 ? std::sqrt(var / static_cast<double>(est.size() - 1) / static_cast<double>(est.size())) : 0.0;
  return r;
}

}  // namespace sonde
