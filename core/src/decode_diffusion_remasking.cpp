// LLaDA's generate() (GSAI-ML/LLaDA generate.py; docs/models.md), the loop of
// DiffusionLoop::SemiArRemasking. The canvas is prompt + max_new_tokens mask ids; the generation is
// filled block by block (block_length slots, steps / blocks steps each). Per step, one forward
// over the whole canvas (no logit shift), then for every masked slot up to the current block's end:
//   x0 = argmax(logits)                                  temperature 0
//   x0 = argmax(exp(logits) / (-log u)^temperature)      u ~ U[0,1) in float64 per slot and token
//   confidence = softmax(logits)[x0] (low_confidence) or u' ~ U[0,1) in float32 (random)
// and the `k` most confident commit, k from get_num_transfer_tokens: the block's masks at its start
// split evenly over its steps, the first (masks % steps) steps one more. With cfg_scale > 0 the
// logits are un + (cfg_scale + 1) * (cond - un), un those of the canvas with the prompt masked.
// Draws: each row has torch's CPU generator seeded with its seed, and draws what the published
// code draws for that prompt alone (batch 1): per step the Gumbel noise over [L, V] first, then
// the random remasking's [L], L the row's own canvas length. So a seeded row equals
// torch.manual_seed(seed); generate(...) on CPU, alone or in a batch (rows are left-padded, pad
// keys masked, positions counted from the row's first real token).
#include <sonde/error.h>

#include "decode_diffusion_internal.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sonde::diffusion_detail {
namespace {

constexpr float kNoTimeRemask = std::numeric_limits<float>::quiet_NaN();

struct RemaskLoop {
  DecodeForward& model;
  const DiffusionOptions& o;
  Canvas c;
  std::int64_t V = 0;
  std::vector<TorchCpuRandom> rng;     // per row
  std::vector<std::int32_t> unconditional;  // cfg: the canvas with the prompt's slots masked, ids only

  // The step's logits [B, N, V]: the model's, or classifier-free guidance's combination in float32
  // (as torch computes it on float32 logits). The unconditional forward runs first, so the taps
  // a capture keeps are the conditional forward's.
  const float* step_logits(Tensor& cond, std::vector<float>& guided) {
    if (o.cfg_scale <= 0) {
      c.input.ids = c.x;
      cond = model.forward(c.input);
      return cond.data<float>();
    }
    StepInput un = c.input;
    un.ids = c.x;
    for (std::size_t a = 0; a < un.ids.size(); ++a)
      if (unconditional[a] == o.mask_id) un.ids[a] = o.mask_id;
    const Tensor ul = model.forward(un);
    c.input.ids = c.x;
    cond = model.forward(c.input);
    const float* pc = cond.data<float>();
    const float* pu = ul.data<float>();
    const auto scale = static_cast<float>(o.cfg_scale + 1.0);
    guided.resize(static_cast<std::size_t>(c.B * c.N * V));
    for (std::size_t a = 0; a < guided.size(); ++a) guided[a] = pu[a] + scale * (pc[a] - pu[a]);
    return guided.data();
  }

  // argmax(exp(l) / (-log u)^T) over the vocabulary with a fresh float64 u per token (float64,
  // as add_gumbel_noise computes it); the first maximum on ties, as torch.argmax.
  std::int32_t gumbel_argmax(const float* l, TorchCpuRandom& g) const {
    std::int32_t best = 0;
    double best_v = -1;
    for (std::int64_t v = 0; v < V; ++v) {
      const double noise = std::pow(-std::log(g.rand_f64()), o.sampling.temperature);
      const double s = std::exp(static_cast<double>(l[v])) / noise;
      if (s > best_v) best_v = s, best = static_cast<std::int32_t>(v);
    }
    return best;
  }

  static double prob_of(const float* l, std::int64_t V, std::int32_t token) {  // softmax in float64
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t v = 0; v < V; ++v) m = std::max(m, static_cast<double>(l[v]));
    double sum = 0;
    for (std::int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(l[v]) - m);
    return std::exp(static_cast<double>(l[token]) - m) / sum;
  }

  // One row's step: tokens and confidences of its masked slots before `end`, then the k most
  // confident (ties to the lower slot) commit. Returns the committed slots.
  std::vector<std::int64_t> row_step(std::int64_t r, std::int64_t end, std::int64_t k, const float* logits,
                                     std::vector<double>& conf) {
    const std::int64_t pad = c.pad[static_cast<std::size_t>(r)];
    TorchCpuRandom& g = rng[static_cast<std::size_t>(r)];
    const auto at = [&](std::int64_t j) { return static_cast<std::size_t>(r * c.N + j); };
    const auto candidate = [&](std::int64_t j) { return j < end && c.x[at(j)] == o.mask_id; };
    std::vector<std::int32_t> x0(static_cast<std::size_t>(c.N), 0);
    for (std::int64_t j = pad; j < c.N; ++j) {  // the row's own slots, in order: its draws
      const float* l = logits + (r * c.N + j) * V;
      if (o.sampling.temperature > 0) {
        if (candidate(j)) x0[static_cast<std::size_t>(j)] = gumbel_argmax(l, g);
        else g.skip_f64(static_cast<std::uint64_t>(V));
      } else if (candidate(j)) {
        x0[static_cast<std::size_t>(j)] = argmax_first({l, static_cast<std::size_t>(V)});
      }
    }
    std::vector<std::int64_t> cands;
    for (std::int64_t j = pad; j < c.N; ++j) {
      const double u = o.remasking == Remasking::Random ? static_cast<double>(g.rand_f32()) : 0.0;
      if (!candidate(j)) continue;
      const float* l = logits + (r * c.N + j) * V;
      conf[at(j)] = o.remasking == Remasking::Random ? u : prob_of(l, V, x0[static_cast<std::size_t>(j)]);
      cands.push_back(j);
    }
    std::stable_sort(cands.begin(), cands.end(), [&](std::int64_t a, std::int64_t b) { return conf[at(a)] > conf[at(b)]; });
    cands.resize(static_cast<std::size_t>(std::min<std::int64_t>(k, static_cast<std::int64_t>(cands.size()))));
    for (auto j : cands) c.x[at(j)] = x0[static_cast<std::size_t>(j)];
    return cands;
  }

  // get_num_transfer_tokens: n masks over s steps, base n / s, the first n % s steps one more.
  static std::int64_t transfer_count(std::int64_t masks, std::int64_t steps, std::int64_t i) {
    return masks / steps + (i < masks % steps ? 1 : 0);
  }

  void run(const DiffusionCallback& on_step) {
    const std::int64_t G = o.max_new_tokens, L = o.block_length > 0 ? o.block_length : G;
    const std::int64_t blocks = G / L, per_block = o.steps / blocks;
    std::vector<std::int64_t> recomputed;
    for (auto p : c.pad) recomputed.push_back(c.N - p);  // no cache: every real slot
    Tensor cond;
    std::vector<float> guided;
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t lo = c.T + b * L, end = lo + L;
      std::vector<std::int64_t> masks(static_cast<std::size_t>(c.B), 0);
      for (std::int64_t r = 0; r < c.B; ++r)
        for (std::int64_t j = lo; j < end; ++j) masks[static_cast<std::size_t>(r)] += c.x[static_cast<std::size_t>(r * c.N + j)] == o.mask_id;
      for (std::int64_t i = 0; i < per_block; ++i) {
        const float* logits = step_logits(cond, guided);
        std::vector<double> conf(static_cast<std::size_t>(c.B * c.N), kNaN);
        std::vector<std::vector<std::int64_t>> transfer(static_cast<std::size_t>(c.B));
        const std::vector<std::int64_t> block(static_cast<std::size_t>(c.B), b);
        std::int64_t k = 0;
        for (std::int64_t r = 0; r < c.B; ++r) {
          const auto kr = transfer_count(masks[static_cast<std::size_t>(r)], per_block, i);
          transfer[static_cast<std::size_t>(r)] = row_step(r, end, kr, logits, conf);
          k = std::max(k, kr);
        }
        const bool last = b == blocks - 1 && i == per_block - 1;
        if (on_step)
          on_step(DiffusionStep{b * per_block + i, k, kNoTimeRemask, kNoTimeRemask, c.B, c.N, c.x, conf, transfer, block,
                                recomputed, last});
      }
    }
  }
};

}  // namespace

DiffusionResult remasking_generate(DecodeForward& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                   const DiffusionOptions& o, const DiffusionCallback& on_step) {
  RemaskLoop loop{model, o, make_canvas(left_pad(prompts, o.pad_id), o), model.vocab_size(), {}, {}};
  for (std::int64_t r = 0; r < loop.c.B; ++r)
    loop.rng.emplace_back(o.seeds.empty() ? 0 : o.seeds.at(static_cast<std::size_t>(r)));
  if (o.cfg_scale > 0) {  // prompt_index: the real prompt slots that are not mask ids
    loop.unconditional.assign(loop.c.x.size(), -1);
    for (std::int64_t r = 0; r < loop.c.B; ++r)
      for (std::int64_t j = loop.c.pad[static_cast<std::size_t>(r)]; j < loop.c.T; ++j)
        if (loop.c.x[static_cast<std::size_t>(r * loop.c.N + j)] != o.mask_id)
          loop.unconditional[static_cast<std::size_t>(r * loop.c.N + j)] = o.mask_id;
  }
  loop.run(on_step);
  return make_result(loop.c, prompts, o);
}

}  // namespace sonde::diffusion_detail
