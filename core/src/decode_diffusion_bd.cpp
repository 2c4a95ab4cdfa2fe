// Fast-dLLM v2's block diffusion (DiffusionLoop::BlockDiffusion; NVlabs' generation_functions.py
// batch_sample, arXiv 2509.26328), greedy or sampled, one prompt as its own sequence.
// docs/models.md states it:
// * blocks of block_size slots in order, autoregressive across blocks: the K/V of the completed
//   blocks are cached; the prompt's whole blocks are forwarded first (the token after a prompt that
//   ends on a block boundary is the argmax of its last logits);
// * inside a block, sub-blocks of small_block_size in order; while a sub-block has masks, one
//   forward of the block over the cache (logits shifted right by one slot inside the block, the
//   block's first slot reading its own), and every masked slot of the sub-block whose p exceeds the
//   threshold takes its token x, always the most confident one (the first of equal); greedy: x the
//   argmax, p = softmax max; sampled: modeling.py's sample_with_top_p (below);
// * a full block is forwarded once more over the cache, keeping its K/V, and the argmax of its last
//   logits opens the next block, unless a stop token was committed: then the slots after the first
//   stop (from the prompt's end) become pad and the generation ends.
// The K/V cache is the slot cache of the cached Dream modes (StepInput::fill_cache, slots): one
// fill forward sizes it for the whole canvas, and each block forward is a range forward over the
// block whose key mask shows only the slots the published cache holds, so the values the fill left
// behind are never read.
#include <sonde/error.h>
#include <sonde/sampling.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "decode_diffusion_internal.h"

namespace sonde::diffusion_detail {
namespace {

constexpr float kNoTimeBd = std::numeric_limits<float>::quiet_NaN();

struct BdPick {
  std::int32_t token = 0;
  double p = 0;  // softmax(logits)[token], in double over the f32 logits
};

BdPick bd_argmax_softmax(std::span<const float> row) {
  const auto best = std::max_element(row.begin(), row.end());  // the first of equal maxima, as torch
  double sum = 0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - static_cast<double>(*best));
  return {static_cast<std::int32_t>(best - row.begin()), 1.0 / sum};
}

struct BdLoop {
  DecodeForward& model;
  const DiffusionOptions& o;
  const std::vector<std::int32_t>& prompt;
  const DiffusionCallback& on_step;
  std::uint64_t seed = 0;
  std::int64_t L = 0, N = 0, bs = 0, V = 0;
  // The published cache starts at slot base: 0 but for a prompt of exactly one block, which
  // batch_sample never forwards (its `min_len > block_size` test); positions count from base.
  std::int64_t base = 0;
  std::vector<std::int32_t> x;  // the canvas [N]
  std::int64_t step = 0;
  bool finished = false;

  bool masked(std::int64_t j) const { return x[static_cast<std::size_t>(j)] == o.mask_id; }

  // Masked slot j's token and confidence from its (shifted) logits row. Sampled (temperature > 0):
  // the published sample_with_top_p, probs = softmax(logits / T) with its top-p filter (descending,
  // drop what follows a cumulative mass > top_p, the first always kept; Dream's, which top_k then
  // follows as in Dream), renormalised; x drawn by the inverse CDF at the counter draw of (seed,
  // step, slot j, Token) instead of torch.multinomial, and p = that renormalised probability of x,
  // the x1_p batch_sample compares with the threshold. The draw depends on nothing but the
  // prompt's own seed and place in its loop, so a batch does not change it.
  BdPick pick(std::span<const float> row, std::int64_t j) const {
    if (o.sampling.temperature <= 0) return bd_argmax_softmax(row);  // top_p plays no part, as published
    const double u = counter_uniform(seed, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(j),
                                     RngStream::Token);
    const DreamSampling sp{o.sampling.temperature, o.sampling.top_p, o.sampling.top_k, DiffusionAlg::MaskgitPlus};
    const TokenChoice c = dream_sample_token(row, sp, u);
    return {c.token, c.confidence};
  }

  // The block [lo, lo + bs) over the cached slots: logits [1, bs, V] (or none).
  Tensor forward_block(std::int64_t lo, bool need_logits) {
    StepInput in;
    in.tokens = bs;
    in.slots = N;
    in.first_slot = lo;
    in.need_logits = need_logits;
    in.ids.assign(x.begin() + lo, x.begin() + lo + bs);
    for (std::int64_t j = lo; j < lo + bs; ++j) in.positions.push_back(static_cast<std::int32_t>(j - base));
    in.key_mask.assign(static_cast<std::size_t>(N), 0);
    std::fill(in.key_mask.begin() + base, in.key_mask.begin() + lo + bs, std::uint8_t{1});
    return model.forward(in);
  }

  // Sizes the slot cache for the canvas; no value of this forward is used.
  void fill() {
    StepInput in;
    in.tokens = N;
    in.fill_cache = true;
    in.need_logits = false;
    in.ids = x;
    for (std::int64_t j = 0; j < N; ++j) in.positions.push_back(static_cast<std::int32_t>(j));
    model.forward(in);
  }

  void report(std::int64_t blk, const std::vector<double>& conf, const std::vector<std::int64_t>& transfer, bool last) {
    if (on_step)
      on_step(DiffusionStep{step, static_cast<std::int64_t>(transfer.size()), kNoTimeBd, kNoTimeBd, 1, N, x, conf,
                            {transfer}, {blk}, {bs}, last});
    ++step;
  }

  // The prompt's whole blocks into the cache, block by block (each sees the blocks before it, as
  // the published prefill's block-causal mask at block_size does).
  void prefill() {
    if (L <= bs) {
      base = L == bs ? bs : 0;
      return;
    }
    const std::int64_t whole = L / bs * bs;
    for (std::int64_t lo = 0; lo < whole; lo += bs) {
      const bool next = lo + bs == L;  // the prompt ends on a block boundary: its next token
      const Tensor logits = forward_block(lo, next);
      if (next) x[static_cast<std::size_t>(L)] = bd_argmax_softmax(shifted_row(logits, 0, bs, bs, V)).token;
    }
  }

  // One sub-block iteration: commits at least one masked slot of [s0, s0 + sbs).
  void sub_step(std::int64_t blk, std::int64_t lo, std::int64_t s0) {
    const Tensor logits = forward_block(lo, true);
    std::vector<double> conf(static_cast<std::size_t>(N), kNaN);
    std::vector<std::int64_t> transfer;
    std::vector<BdPick> picks(static_cast<std::size_t>(o.small_block_size));
    std::int64_t best = -1;
    for (std::int64_t j = s0; j < s0 + o.small_block_size; ++j) {
      if (!masked(j)) continue;
      const BdPick pk = pick(shifted_row(logits, 0, j - lo, bs, V), j);
      picks[static_cast<std::size_t>(j - s0)] = pk;
      conf[static_cast<std::size_t>(j)] = pk.p;
      if (best < 0 || pk.p > picks[static_cast<std::size_t>(best - s0)].p) best = j;
    }
    for (std::int64_t j = s0; j < s0 + o.small_block_size; ++j)
      if (masked(j) && (j == best || conf[static_cast<std::size_t>(j)] > o.threshold)) transfer.push_back(j);
    for (auto j : transfer) {
      x[static_cast<std::size_t>(j)] = picks[static_cast<std::size_t>(j - s0)].token;
      finished = finished || x[static_cast<std::size_t>(j)] == o.stop_id;
    }
    const bool block_full = std::none_of(x.begin() + lo, x.begin() + lo + bs, [&](std::int32_t t) { return t == o.mask_id; });
    report(blk, conf, transfer, block_full && finished);
  }

  // The full block's K/V into the cache and the next block's first token: its argmax at any
  // temperature, as batch_sample takes it (logits[:, -1:].argmax, no sampling there).
  void close_block(std::int64_t blk, std::int64_t lo, bool last_block) {
    const Tensor logits = forward_block(lo, true);
    const BdPick pk = bd_argmax_softmax(shifted_row(logits, 0, bs, bs, V));
    x[static_cast<std::size_t>(lo + bs)] = pk.token;
    std::vector<double> conf(static_cast<std::size_t>(N), kNaN);
    conf[static_cast<std::size_t>(lo + bs)] = pk.p;
    report(blk, conf, {lo + bs}, last_block);
  }

  // The published result: prompt + generated slots, cut after the first stop token from the
  // prompt's end (the pad batch_sample writes after it is not part of a completion).
  std::vector<std::int32_t> completion(std::int64_t end) {
    std::vector<std::int32_t> out(x.begin() + L, x.begin() + end);
    const auto stop = std::find(out.begin(), out.end(), o.stop_id);
    if (stop != out.end()) out.erase(stop + 1, out.end());
    std::fill(x.begin() + L + static_cast<std::int64_t>(out.size()), x.end(), o.pad_id);
    return out;
  }

  std::vector<std::int32_t> run() {
    const std::int64_t blocks = L / bs + o.max_new_tokens / bs;
    fill();
    prefill();
    for (std::int64_t blk = L / bs; blk < blocks; ++blk) {
      const std::int64_t lo = blk * bs;
      for (std::int64_t s0 = lo; s0 < lo + bs; s0 += o.small_block_size)
        while (std::any_of(x.begin() + s0, x.begin() + s0 + o.small_block_size, [&](std::int32_t t) { return t == o.mask_id; }))
          sub_step(blk, lo, s0);
      if (finished) return completion(lo + bs);
      close_block(blk, lo, blk + 1 == blocks);
    }
    return completion(blocks * bs + 1);
  }
};

}  // namespace

DiffusionResult block_diffusion_generate(DecodeForward& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                         const DiffusionOptions& o, const DiffusionCallback& on_step) {
  if (!model.has_slot_cache())
    bad_input("block diffusion needs the model's K/V cache (batch_sample caches the completed blocks), which this run "
              "turned off");
  if (prompts.size() != 1 && on_step)
    runtime_error("block diffusion: {} prompts in one call with a step callback; each prompt runs as its own sequence",
                  prompts.size());
  DiffusionResult res;
  res.batch = static_cast<std::int64_t>(prompts.size());
  for (std::size_t r = 0; r < prompts.size(); ++r) {
    const auto& p = prompts[r];
    const auto L = static_cast<std::int64_t>(p.size());
    if (L < 1) bad_input("block diffusion: the prompt has no tokens");
    std::vector<std::int32_t> canvas = p;  // the prompt, then masks to the canvas width
    canvas.resize(static_cast<std::size_t>(diffusion_canvas_width(o, L)), o.mask_id);
    const std::uint64_t seed = o.seeds.empty() ? 0 : o.seeds.at(r);
    BdLoop loop{model, o, p, on_step, seed, L, static_cast<std::int64_t>(canvas.size()), o.block_size, model.vocab_size(),
                0, std::move(canvas), 0, false};
    auto completion = loop.run();
    res.length = std::max(res.length, loop.N);
    std::vector<std::int32_t> seq = p;
    seq.insert(seq.end(), completion.begin(), completion.end());
    res.sequences.push_back(std::move(seq));
    res.completions.push_back(std::move(completion));
  }
  return res;
}

}  // namespace sonde::diffusion_detail
