// The block-wise diffusion loop (docs/generation.md, "Block mode"): the generation is filled
// block by block, left to right; a step gives confidences to the masked slots of each row's
// current block only and commits some of them. How many: block mode's linear schedule
// (block_unmask_count), a fixed tokens_per_step, or every slot whose p[token] reaches the
// threshold and at least the most confident one (Fast-dLLM's parallel decoding, arXiv 2505.22618).
// With a schedule every row is in the same block at every step; without one each row moves to
// its next block as soon as its current one is full, so a row does alone exactly what it does in
// a batch (its draws use the global step and its own unpadded slot, as in the exact loop).
// The cached modes (block-cache, dual-cache) run the same loop over cheaper forwards: a block's
// first step is a full forward that refreshes every slot's K/V, later steps compute a range of
// slots over the cache (decode.h, DiffusionMode). The cache's block boundary is the batch's, so
// without a schedule rows move in lockstep: a row whose block is full waits (commits nothing)
// until every row's is, and its draws count its own working steps, not the global ones, so it
// still does alone what it does in a batch.
#include <sonde/error.h>

#include <algorithm>
#include <cmath>

#include "decode_diffusion_internal.h"

namespace sonde::diffusion_detail {
namespace {

constexpr float kNoTime = std::numeric_limits<float>::quiet_NaN();

struct Window {
  std::int64_t lo = 0, length = 0;
  std::vector<std::int64_t> masked;  // slots of the row (0..N) still masked, ascending
};

// A step's logits [B, width, V] over canvas slots [first, first + width).
struct StepLogits {
  Tensor logits;
  std::int64_t first = 0, width = 0;
};

struct BlockLoop {
  DecodeForward& model;
  const DiffusionOptions& o;
  Canvas c;
  std::vector<DiffusionBlock> blocks;
  std::vector<std::int64_t> first_step;  // scheduled: the first global step of each block
  std::int64_t V = 0;
  bool sched = false;
  bool cached = false;                   // block-cache or dual-cache
  std::int64_t cache_block = -1;         // the block whose start refreshed the cache
  std::vector<std::int64_t> row_steps{};  // cached without a schedule: each row's working steps
  std::int64_t in_block = 0;             // cached: steps since the batch's block started

  std::uint64_t seed(std::int64_t r) const { return o.seeds.empty() ? 0 : o.seeds.at(static_cast<std::size_t>(r)); }
  std::uint64_t slot(std::int64_t r, std::int64_t j) const {
    return static_cast<std::uint64_t>(j - c.pad[static_cast<std::size_t>(r)]);
  }

  Window window(std::int64_t r, std::int64_t b) const {
    const auto& blk = blocks[static_cast<std::size_t>(b)];
    Window w{c.T + blk.start, blk.length, {}};
    for (std::int64_t j = w.lo; j < w.lo + w.length; ++j)
      if (c.x[static_cast<std::size_t>(r * c.N + j)] == o.mask_id) w.masked.push_back(j);
    return w;
  }

  std::int64_t scheduled_block(std::int64_t i) const {
    const auto it = std::upper_bound(first_step.begin(), first_step.end(), i);
    return static_cast<std::int64_t>(it - first_step.begin()) - 1;
  }

  // How many of the window's masked slots step i commits (not for origin).
  std::int64_t count(const Window& w, std::int64_t b, std::int64_t i, const std::vector<double>& wconf) const {
    const auto n = static_cast<std::int64_t>(w.masked.size());
    if (o.sampling.alg == DiffusionAlg::ConfidenceThreshold) {
      const auto above = std::count_if(wconf.begin(), wconf.end(), [&](double v) { return v >= o.threshold; });
      return std::max<std::int64_t>(1, above);
    }
    if (o.tokens_per_step > 0) return std::min(o.tokens_per_step, n);
    const auto& blk = blocks[static_cast<std::size_t>(b)];
    return std::min(n, block_unmask_count(blk.length, blk.steps, i - first_step[static_cast<std::size_t>(b)]));
  }

  // Origin inside a block: each masked slot is revealed with probability k / n (all of them on
  // the block's last step), so a block commits k slots per step on average.
  void origin_step(std::int64_t r, std::int64_t b, std::int64_t i, const Window& w, const StepLogits& lg,
                   std::vector<double>& conf, std::vector<std::int64_t>& transfer) {
    const auto& blk = blocks[static_cast<std::size_t>(b)];
    const std::int64_t jb = i - first_step[static_cast<std::size_t>(b)];
    const auto k = block_unmask_count(blk.length, blk.steps, jb);
    const double p = jb == blk.steps - 1 ? 1.0 : std::min(1.0, static_cast<double>(k) / static_cast<double>(w.masked.size()));
    for (auto j : w.masked) {
      if (!(counter_uniform(seed(r), static_cast<std::uint64_t>(i), slot(r, j), RngStream::Reveal) < p)) continue;
      const auto u = counter_uniform(seed(r), static_cast<std::uint64_t>(i), slot(r, j), RngStream::Token);
      const auto ch = dream_sample_token(shifted_row(lg.logits, r, j, lg.width, V, lg.first), o.sampling, u);
      const auto at = static_cast<std::size_t>(r * c.N + j);
      conf[at] = ch.confidence;
      c.x[at] = ch.token;
      transfer.push_back(j);
    }
  }

  // The other algorithms: every masked slot of the window gets a token and a confidence; the k
  // most confident (ties to the lower slot), or k drawn from softmax(conf / alg_temp), commit.
  // `draw`: the step counter of the row's draws (the global step but for cached lockstep).
  std::int64_t ranked_step(std::int64_t r, std::int64_t b, std::int64_t i, std::int64_t draw, const Window& w,
                           const StepLogits& lg, std::vector<double>& conf, std::vector<std::int64_t>& transfer) {
    std::vector<double> wconf(static_cast<std::size_t>(w.length), kNegInf);
    std::vector<std::int32_t> x0(static_cast<std::size_t>(w.length), o.mask_id);
    for (auto j : w.masked) {
      const auto u = counter_uniform(seed(r), static_cast<std::uint64_t>(draw), slot(r, j), RngStream::Token);
      const auto ch = dream_sample_token(shifted_row(lg.logits, r, j, lg.width, V, lg.first), o.sampling, u);
      conf[static_cast<std::size_t>(r * c.N + j)] = wconf[static_cast<std::size_t>(j - w.lo)] = ch.confidence;
      x0[static_cast<std::size_t>(j - w.lo)] = ch.token;
    }
    const auto k = count(w, b, i, wconf);
    const bool by_sampling =
        o.alg_temp && *o.alg_temp > 0 && o.sampling.alg != DiffusionAlg::ConfidenceThreshold;
    const auto picked = by_sampling ? sample_slots(wconf.data(), w.length, k, *o.alg_temp, seed(r), draw)
                                    : top_slots(wconf.data(), w.length, k);
    for (auto q : picked) {
      c.x[static_cast<std::size_t>(r * c.N + w.lo + q)] = x0[static_cast<std::size_t>(q)];
      transfer.push_back(w.lo + q);
    }
    return static_cast<std::int64_t>(picked.size());
  }

  bool full(std::int64_t r, std::int64_t b) const { return window(r, b).masked.empty(); }

  // The step's forward over the canvas working on block b: the whole canvas, or with a cache a
  // refresh at the block's first step (and, with refresh_every N, at its steps N, 2N, ...:
  // dKV-Cache's periodic refresh) and a range of slots after it. `recomputed` gets the slots
  // each row's forward computed. A whole-canvas forward runs the LM head on the slots the step
  // reads (`reads`, the working windows' masked slots) alone.
  StepLogits step_forward(std::int64_t b, std::vector<std::int64_t>& recomputed, const std::vector<bool>& reads) {
    c.input.ids = c.x;
    recomputed.clear();
    in_block = b != cache_block ? 0 : in_block + 1;
    const bool periodic = o.refresh_every > 0 && in_block % o.refresh_every == 0;
    if (!cached || b != cache_block || periodic) {
      for (auto p : c.pad) recomputed.push_back(c.N - p);  // every real slot
      c.input.fill_cache = cached;
      cache_block = b;
      set_head_slots(c.input, reads, c.B, c.N, 1);
      Tensor logits = model.forward(c.input);
      const std::int64_t first = head_first(logits, c.input), width = logits.shape()[1];
      return {std::move(logits), first, width};
    }
    const auto& blk = blocks[static_cast<std::size_t>(b)];
    const std::int64_t lo = c.T + blk.start, first = lo - 1;  // slot lo's logits are slot lo - 1's
    const std::int64_t end = o.mode == DiffusionMode::DualCache ? lo + blk.length : c.N, W = end - first;
    StepInput in;
    in.batch = c.B;
    in.tokens = W;
    in.key_mask = c.input.key_mask;
    in.slots = c.N;
    in.first_slot = first;
    for (std::int64_t r = 0; r < c.B; ++r) {
      const auto row = static_cast<std::ptrdiff_t>(r * c.N);
      in.ids.insert(in.ids.end(), c.x.begin() + row + first, c.x.begin() + row + end);
      in.positions.insert(in.positions.end(), c.input.positions.begin() + row + first, c.input.positions.begin() + row + end);
      recomputed.push_back(W);
    }
    return {model.forward(in), first, W};
  }

  void run(const DiffusionCallback& on_step) {
    const std::int64_t B = c.B, nb = static_cast<std::int64_t>(blocks.size());
    std::vector<std::int64_t> cur(static_cast<std::size_t>(B), 0), recomputed;
    if (!sched)
      for (std::int64_t r = 0; r < B; ++r)
        while (cur[static_cast<std::size_t>(r)] < nb && full(r, cur[static_cast<std::size_t>(r)])) ++cur[static_cast<std::size_t>(r)];
    for (std::int64_t i = 0;; ++i) {
      if (sched) {
        if (i == o.steps) break;
        std::fill(cur.begin(), cur.end(), scheduled_block(i));
      } else if (std::all_of(cur.begin(), cur.end(), [&](std::int64_t b) { return b >= nb; })) {
        break;
      }
      // With a cache the batch works on one block: the lowest any row is in (lockstep).
      const std::int64_t batch_block = *std::min_element(cur.begin(), cur.end());
      std::vector<bool> reads(static_cast<std::size_t>(B * c.N), false);
      for (std::int64_t r = 0; r < B; ++r)
        if (cur[static_cast<std::size_t>(r)] < nb)
          for (auto j : window(r, cached ? batch_block : cur[static_cast<std::size_t>(r)]).masked)
            reads[static_cast<std::size_t>(r * c.N + j)] = true;
      const StepLogits lg = step_forward(batch_block, recomputed, reads);
      std::vector<double> conf(static_cast<std::size_t>(B * c.N), kNaN);
      std::vector<std::vector<std::int64_t>> transfer(static_cast<std::size_t>(B));
      std::vector<std::int64_t> block(static_cast<std::size_t>(B), -1);
      std::int64_t k = 0;
      for (std::int64_t r = 0; r < B; ++r) {
        const auto b = cached ? batch_block : cur[static_cast<std::size_t>(r)];
        if (cur[static_cast<std::size_t>(r)] >= nb) continue;
        block[static_cast<std::size_t>(r)] = b;
        const Window w = window(r, b);
        if (w.masked.empty()) continue;  // cached lockstep: this row waits for the others
        auto& tr = transfer[static_cast<std::size_t>(r)];
        const std::int64_t draw = cached && !sched ? row_steps[static_cast<std::size_t>(r)]++ : i;
        if (o.sampling.alg == DiffusionAlg::Origin) origin_step(r, b, i, w, lg, conf, tr);
        else k = std::max(k, ranked_step(r, b, i, draw, w, lg, conf, tr));
      }
      bool last = sched && i == o.steps - 1;
      if (!sched) {
        for (std::int64_t r = 0; r < B; ++r)
          while (cur[static_cast<std::size_t>(r)] < nb && full(r, cur[static_cast<std::size_t>(r)])) ++cur[static_cast<std::size_t>(r)];
        last = std::all_of(cur.begin(), cur.end(), [&](std::int64_t b) { return b >= nb; });
      }
      if (on_step) on_step(DiffusionStep{i, k, kNoTime, kNoTime, B, c.N, c.x, conf, transfer, block, recomputed, last});
    }
  }
};

}  // namespace

DiffusionResult blockwise_generate(DecodeForward& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                   const DiffusionOptions& o, const DiffusionCallback& on_step) {
  BlockLoop loop{model, o, make_canvas(left_pad(prompts, o.pad_id), o), diffusion_blocks(o), {0}, model.vocab_size(), false};
  loop.sched = loop.blocks.front().steps > 0;
  loop.cached = diffusion_mode_cached(o.mode);
  loop.row_steps.assign(static_cast<std::size_t>(loop.c.B), 0);
  if (loop.cached && !model.has_slot_cache())
    bad_input("diffusion_mode: {} needs a model whose forward keeps a K/V cache of bidirectional slots; this one has none",
              diffusion_mode_name(o.mode));
  for (const auto& blk : loop.blocks) loop.first_step.push_back(loop.first_step.back() + blk.steps);
  loop.first_step.pop_back();
  loop.run(on_step);
  return make_result(loop.c, prompts, o);
}

}  // namespace sonde::diffusion_detail
