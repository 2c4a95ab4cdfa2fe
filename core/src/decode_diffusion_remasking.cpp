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
// Fast-dLLM (Wu et al. 2025, arXiv 2505.22618; its llada/generate.py) runs the same blocks with
// K/V caches and parallel decoding (fast_block): a block's first step is a full forward that
// refreshes the slot cache; each later step computes slots [lo, N) (prefix cache) or [lo, hi)
// (dual cache) over it, and only the block's masked slots are candidates. With a threshold every
// candidate whose confidence reaches it commits (the most confident always) and a block ends when
// it has no mask left. The published cached loops do the forward before the "block full" check,
// so each block has at least one cached step even when its first step filled it; that step
// commits nothing, and sonde skips its forward but consumes its draws, as it does the prefix
// loop's second add_gumbel_noise, whose result the published code never uses.
#include <sonde/error.h>

#include "decode_diffusion_internal.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sonde::diffusion_detail {
namespace {

constexpr float kNoTimeRemask = std::numeric_limits<float>::quiet_NaN();

// A step's logits: rows [B, width, V] over canvas slots [first, first + width).
struct Rows {
  const float* data = nullptr;
  std::int64_t first = 0, width = 0;
};

struct RemaskLoop {
  DecodeForward& model;
  const DiffusionOptions& o;
  Canvas c;
  std::int64_t V = 0;
  std::vector<TorchCpuRandom> rng;     // per row
  std::vector<std::int32_t> unconditional;  // cfg: the canvas with the prompt's slots masked, ids only

  // The step's logits over the whole canvas: the model's, or classifier-free guidance's combination
  // in float32 (as torch computes it on float32 logits). The unconditional forward runs first, so
  // the taps a capture keeps are the conditional forward's. The head runs on the slots the step
  // reads alone: the masked slots up to the block's end `end` (no logit shift).
  Rows step_logits(Tensor& cond, std::vector<float>& guided, std::int64_t end) {
    std::vector<bool> reads(c.x.size(), false);
    for (std::int64_t r = 0; r < c.B; ++r)
      for (std::int64_t j = c.pad[static_cast<std::size_t>(r)]; j < end; ++j)
        reads[static_cast<std::size_t>(r * c.N + j)] = c.x[static_cast<std::size_t>(r * c.N + j)] == o.mask_id;
    c.input.ids = c.x;
    set_head_slots(c.input, reads, c.B, c.N, 0);
    if (o.cfg_scale <= 0) {
      cond = model.forward(c.input);
      return {cond.data<float>(), head_first(cond, c.input), cond.shape()[1]};
    }
    StepInput un = c.input;
    for (std::size_t a = 0; a < un.ids.size(); ++a)
      if (unconditional[a] == o.mask_id) un.ids[a] = o.mask_id;
    const Tensor ul = model.forward(un);
    cond = model.forward(c.input);
    if (ul.shape() != cond.shape())  // the same range asked of both; the head's taps are the same too
      runtime_error("diffusion: cfg's forwards returned logits of shapes {} and {}", ul.shape().str(), cond.shape().str());
    const float* pc = cond.data<float>();
    const float* pu = ul.data<float>();
    const auto scale = static_cast<float>(o.cfg_scale + 1.0);
    guided.resize(static_cast<std::size_t>(cond.shape().numel()));
    for (std::size_t a = 0; a < guided.size(); ++a) guided[a] = pu[a] + scale * (pc[a] - pu[a]);
    return {guided.data(), head_first(cond, c.input), cond.shape()[1]};
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

  // One row's step over a forward of `width` slots from `first`: a token and a confidence for each
  // candidate (a masked slot in [from, end)), drawn as the published code draws over the
  // forward's slots of this row; then the commits: the k most confident (ties to the lower slot),
  // or with a threshold (k < 0) every candidate ranked after the first whose confidence reaches
  // it, the first always. Returns the committed slots. `lg` holds every candidate's logits row
  // (its data may be null without candidates).
  std::vector<std::int64_t> row_step(std::int64_t r, std::int64_t from, std::int64_t end, std::int64_t k,
                                     const Rows& lg, std::int64_t first, std::int64_t width,
                                     std::vector<double>& conf) {
    const std::int64_t begin = std::max(c.pad[static_cast<std::size_t>(r)], first), stop = first + width;
    TorchCpuRandom& g = rng[static_cast<std::size_t>(r)];
    const auto at = [&](std::int64_t j) { return static_cast<std::size_t>(r * c.N + j); };
    const auto candidate = [&](std::int64_t j) { return j >= from && j < end && c.x[at(j)] == o.mask_id; };
    const auto row = [&](std::int64_t j) { return lg.data + (r * lg.width + j - lg.first) * V; };
    std::vector<std::int32_t> x0(static_cast<std::size_t>(c.N), 0);
    for (std::int64_t j = begin; j < stop; ++j) {  // the row's own slots, in order: its draws
      if (o.sampling.temperature > 0) {
        if (candidate(j)) x0[static_cast<std::size_t>(j)] = gumbel_argmax(row(j), g);
        else g.skip_f64(static_cast<std::uint64_t>(V));
      } else if (candidate(j)) {
        x0[static_cast<std::size_t>(j)] = argmax_first({row(j), static_cast<std::size_t>(V)});
      }
    }
    std::vector<std::int64_t> cands;
    for (std::int64_t j = begin; j < stop; ++j) {
      const double u = o.remasking == Remasking::Random ? static_cast<double>(g.rand_f32()) : 0.0;
      if (!candidate(j)) continue;
      conf[at(j)] = o.remasking == Remasking::Random ? u : prob_of(row(j), V, x0[static_cast<std::size_t>(j)]);
      cands.push_back(j);
    }
    std::stable_sort(cands.begin(), cands.end(), [&](std::int64_t a, std::int64_t b) { return conf[at(a)] > conf[at(b)]; });
    if (k >= 0) {
      cands.resize(static_cast<std::size_t>(std::min<std::int64_t>(k, static_cast<std::int64_t>(cands.size()))));
    } else if (!cands.empty()) {  // get_transfer_index with a threshold
      const double thr = *o.remasking_threshold;
      cands.erase(std::remove_if(cands.begin() + 1, cands.end(), [&](std::int64_t j) { return conf[at(j)] < thr; }),
                  cands.end());
    }
    for (auto j : cands) c.x[at(j)] = x0[static_cast<std::size_t>(j)];
    return cands;
  }

  std::int64_t block_masks(std::int64_t r, std::int64_t lo, std::int64_t end) const {
    std::int64_t n = 0;
    for (std::int64_t j = lo; j < end; ++j) n += c.x[static_cast<std::size_t>(r * c.N + j)] == o.mask_id;
    return n;
  }

  // A cached step's forward: slots [lo, lo + W) over the slot cache the block's first step filled.
  Tensor range_forward(std::int64_t lo, std::int64_t W) {
    StepInput in;
    in.batch = c.B;
    in.tokens = W;
    in.key_mask = c.input.key_mask;
    in.slots = c.N;
    in.first_slot = lo;
    for (std::int64_t r = 0; r < c.B; ++r) {
      const auto row = static_cast<std::ptrdiff_t>(r * c.N);
      in.ids.insert(in.ids.end(), c.x.begin() + row + lo, c.x.begin() + row + lo + W);
      in.positions.insert(in.positions.end(), c.input.positions.begin() + row + lo, c.input.positions.begin() + row + lo + W);
    }
    return model.forward(in);
  }

  // Fast-dLLM's loops for block b (see the header): step 0 full (refreshing the cache), then cached
  // steps until the block has no mask; without a cache (threshold only) full steps until then.
  // Rows move in lockstep: a row whose block is full waits, drawing nothing, as it would alone.
  void fast_block(std::int64_t b, std::int64_t per_block, std::int64_t& step, std::int64_t blocks,
                  const DiffusionCallback& on_step) {
    const bool cached = diffusion_mode_cached(o.mode), prefix = o.mode == DiffusionMode::BlockCache;
    const std::int64_t L = o.block_length > 0 ? o.block_length : o.max_new_tokens;
    const std::int64_t lo = c.T + b * L, end = lo + L, W = prefix ? c.N - lo : L;
    std::vector<std::int64_t> masks0(static_cast<std::size_t>(c.B));
    for (std::int64_t r = 0; r < c.B; ++r) masks0[static_cast<std::size_t>(r)] = block_masks(r, lo, end);
    const auto any_masks = [&] {
      for (std::int64_t r = 0; r < c.B; ++r)
        if (block_masks(r, lo, end) > 0) return true;
      return false;
    };
    Tensor cond;
    std::vector<float> guided;
    for (std::int64_t i = 0;; ++i) {
      const bool full = !cached || i == 0;
      if (!any_masks()) {
        if (cached && i == 1)  // the published loop's step that commits nothing: its draws only
          for (std::int64_t r = 0; r < c.B; ++r) {
            std::vector<double> none(static_cast<std::size_t>(c.B * c.N), kNaN);
            if (prefix && o.sampling.temperature > 0) rng[static_cast<std::size_t>(r)].skip_f64(static_cast<std::uint64_t>(W * V));
            row_step(r, lo, end, 0, Rows{}, lo, W, none);
          }
        return;
      }
      std::vector<std::int64_t> recomputed;
      Rows logits;
      Tensor range;
      if (full) {
        c.input.fill_cache = cached;
        logits = step_logits(cond, guided, end);
        c.input.fill_cache = false;
        for (auto p : c.pad) recomputed.push_back(c.N - p);
      } else {
        range = range_forward(lo, W);
        logits = {range.data<float>(), lo, W};
        recomputed.assign(static_cast<std::size_t>(c.B), W);
      }
      std::vector<double> conf(static_cast<std::size_t>(c.B * c.N), kNaN);
      std::vector<std::vector<std::int64_t>> transfer(static_cast<std::size_t>(c.B));
      std::int64_t k = 0;
      for (std::int64_t r = 0; r < c.B; ++r) {
        const auto masks = masks0[static_cast<std::size_t>(r)];
        if (!(block_masks(r, lo, end) > 0 || (cached && i == 1))) continue;  // waits
        const std::int64_t kr = o.remasking_threshold ? -1 : i < per_block ? transfer_count(masks, per_block, i) : 0;
        if (!full && prefix && o.sampling.temperature > 0) rng[static_cast<std::size_t>(r)].skip_f64(static_cast<std::uint64_t>(W * V));
        auto& tr = transfer[static_cast<std::size_t>(r)];
        tr = full ? row_step(r, 0, end, kr, logits, 0, c.N, conf) : row_step(r, lo, end, kr, logits, lo, W, conf);
        k = std::max(k, static_cast<std::int64_t>(tr.size()));
      }
      const bool last = b == blocks - 1 && !any_masks();
      if (on_step)
        on_step(DiffusionStep{step, k, kNoTimeRemask, kNoTimeRemask, c.B, c.N, c.x, conf, transfer,
                              std::vector<std::int64_t>(static_cast<std::size_t>(c.B), b), recomputed, last});
      ++step;
    }
  }

  // get_num_transfer_tokens: n masks over s steps, base n / s, the first n % s steps one more.
  static std::int64_t transfer_count(std::int64_t masks, std::int64_t steps, std::int64_t i) {
    return masks / steps + (i < masks % steps ? 1 : 0);
  }

  void run(const DiffusionCallback& on_step) {
    const std::int64_t G = o.max_new_tokens, L = o.block_length > 0 ? o.block_length : G;
    const std::int64_t blocks = G / L, per_block = o.steps / blocks;
    if (diffusion_mode_cached(o.mode) || o.remasking_threshold) {
      std::int64_t step = 0;
      for (std::int64_t b = 0; b < blocks; ++b) fast_block(b, per_block, step, blocks, on_step);
      return;
    }
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
        const Rows logits = step_logits(cond, guided, end);
        std::vector<double> conf(static_cast<std::size_t>(c.B * c.N), kNaN);
        std::vector<std::vector<std::int64_t>> transfer(static_cast<std::size_t>(c.B));
        const std::vector<std::int64_t> block(static_cast<std::size_t>(c.B), b);
        std::int64_t k = 0;
        for (std::int64_t r = 0; r < c.B; ++r) {
          const auto kr = transfer_count(masks[static_cast<std::size_t>(r)], per_block, i);
          transfer[static_cast<std::size_t>(r)] = row_step(r, 0, end, kr, logits, 0, c.N, conf);
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
  if (diffusion_mode_cached(o.mode) && !model.has_slot_cache())
    bad_input("diffusion_mode: {} needs a model whose forward keeps a K/V cache of bidirectional slots; this one has none",
              diffusion_mode_name(o.mode));
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
