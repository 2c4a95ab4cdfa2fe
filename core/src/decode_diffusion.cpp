// Dream's diffusion_generate (model-spec §3.2): a canvas of prompt + max_new_tokens mask ids,
// one full forward per step (no cache), logits shifted by one slot, then either random reveals
// (origin) or the k most confident masked slots. Nothing stops at EOS. Block mode and the
// unscheduled algorithms run the block-wise loop of decode_diffusion_block.cpp instead.
#include <sonde/decode.h>
#include <sonde/error.h>

#include "decode_diffusion_internal.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace sonde {

std::vector<float> diffusion_timesteps(std::int64_t steps, double eps) {
  // torch.linspace(1, eps, steps + 1) in float32: start + i*step for the first half,
  // end - (steps - i)*step for the second (model-spec §3.4 found all formulas agree).
  const float start = 1.0f, end = static_cast<float>(eps);
  const float step = (end - start) / static_cast<float>(steps);
  std::vector<float> t(static_cast<std::size_t>(steps + 1));
  const std::int64_t half = (steps + 1) / 2;
  for (std::int64_t i = 0; i <= steps; ++i)
    t[static_cast<std::size_t>(i)] = i < half ? start + step * static_cast<float>(i)
                                              : end - step * static_cast<float>(steps - i);
  return t;
}

std::int64_t diffusion_unmask_count(float n, float t, float s, bool last_step) {
  if (last_step) return static_cast<std::int64_t>(n);
  const float ratio = 1.0f - s / t;          // float32, as torch does on 0-d float tensors
  return static_cast<std::int64_t>(n * ratio);  // int(): truncation
}

DiffusionMode parse_diffusion_mode(std::string_view name) {
  if (name == "exact") return DiffusionMode::Exact;
  if (name == "block") return DiffusionMode::Block;
  if (name == "block-cache") return DiffusionMode::BlockCache;
  if (name == "dual-cache") return DiffusionMode::DualCache;
  bad_input("unknown diffusion mode '{}' (expected exact, block, block-cache or dual-cache)", name);
}

std::string_view diffusion_mode_name(DiffusionMode mode) {
  switch (mode) {
    case DiffusionMode::Block: return "block";
    case DiffusionMode::BlockCache: return "block-cache";
    case DiffusionMode::DualCache: return "dual-cache";
    default: return "exact";
  }
}

bool diffusion_mode_cached(DiffusionMode mode) {
  return mode == DiffusionMode::BlockCache || mode == DiffusionMode::DualCache;
}

std::string_view diffusion_cache_name(DiffusionMode mode) {
  return mode == DiffusionMode::BlockCache ? "prefix" : mode == DiffusionMode::DualCache ? "dual" : "none";
}

namespace {

bool scheduled(const DiffusionOptions& o) {
  return o.sampling.alg != DiffusionAlg::ConfidenceThreshold && o.tokens_per_step == 0;
}

std::int64_t block_count(const DiffusionOptions& o) {
  if (o.mode == DiffusionMode::Exact) return 1;
  return (o.max_new_tokens + o.block_size - 1) / o.block_size;
}

}  // namespace

std::int64_t diffusion_canvas_width(const DiffusionOptions& o, std::int64_t T) {
  if (o.loop != DiffusionLoop::BlockDiffusion) return T + o.max_new_tokens;
  return (T / o.block_size + o.max_new_tokens / o.block_size + 1) * o.block_size;
}

namespace {

// batch_sample's settings as errors: what it asserts, and what sonde does not run of it.
void check_block_diffusion(const DiffusionOptions& o) {
  if (o.block_size < 1) bad_input("block_size must be at least 1, got {}", o.block_size);
  if (o.small_block_size < 1 || o.block_size % o.small_block_size != 0)
    bad_input("small_block_size: {} does not divide block_size {} (a block is decoded in whole sub-blocks)",
              o.small_block_size, o.block_size);
  if (o.attention_block > 0 && o.attention_block % o.block_size != 0)
    bad_input("block_size: {} does not divide the model's bd_size {} (a generation block must lie inside one block of "
              "the block-causal attention)",
              o.block_size, o.attention_block);
  if (!(o.threshold > 0 && o.threshold <= 1)) bad_input("threshold: {} is outside (0, 1]", o.threshold);
  if (o.max_new_tokens < o.block_size)
    bad_input("max_new_tokens: {} is less than block_size {} (batch_sample decodes max_new_tokens / block_size whole "
              "blocks, so it would generate nothing)",
              o.max_new_tokens, o.block_size);
  if (!(std::isfinite(o.sampling.temperature) && o.sampling.temperature >= 0))
    bad_input("temperature: {} is not a finite number >= 0 (0 decodes greedily)", o.sampling.temperature);
  if (o.sampling.top_p && !(*o.sampling.top_p > 0 && *o.sampling.top_p <= 1))
    bad_input("top_p: {} is outside (0, 1]", *o.sampling.top_p);
  if (o.sampling.top_k && *o.sampling.top_k < 1)
    bad_input("top_k: {} is less than 1 (leave it unset to keep every token)", *o.sampling.top_k);
}

}  // namespace

void check_diffusion_options(const DiffusionOptions& o) {
  if (o.loop == DiffusionLoop::BlockDiffusion) return check_block_diffusion(o);
  if (o.steps < 1) bad_input("steps must be at least 1, got {}", o.steps);
  if (o.max_new_tokens < 1) bad_input("max_new_tokens must be at least 1, got {}", o.max_new_tokens);
  if (o.loop == DiffusionLoop::SemiArRemasking) {  // generate.py's asserts, as errors
    const std::int64_t L = o.block_length > 0 ? o.block_length : o.max_new_tokens;
    if (o.block_length < 0) bad_input("block_length must be at least 1, got {}", o.block_length);
    if (o.max_new_tokens % L != 0)
      bad_input("block_length: {} does not divide max_new_tokens {} (LLaDA's generate needs gen_length % block_length == 0)",
                L, o.max_new_tokens);
    if (o.steps % (o.max_new_tokens / L) != 0)
      bad_input("steps: {} is not a multiple of the {} blocks of {} new tokens in blocks of {} (LLaDA's generate splits "
                "the steps evenly over the blocks)",
                o.steps, o.max_new_tokens / L, o.max_new_tokens, L);
    if (!(o.cfg_scale >= 0) || !std::isfinite(o.cfg_scale)) bad_input("cfg_scale: {} is not a number >= 0", o.cfg_scale);
    if (o.mode == DiffusionMode::Block)
      bad_input("diffusion_mode: block is Dream's; LLaDA's generate is block-wise already (block_length): use exact, "
                "block-cache or dual-cache");
    if (o.remasking_threshold && !(*o.remasking_threshold > 0 && *o.remasking_threshold <= 1))
      bad_input("threshold: {} is outside (0, 1]", *o.remasking_threshold);
    if (diffusion_mode_cached(o.mode) && o.cfg_scale > 0)
      bad_input("cfg_scale: {} with diffusion_mode {}: Fast-dLLM's cached generation has no classifier-free guidance",
                o.cfg_scale, diffusion_mode_name(o.mode));
    return;
  }
  if (!(o.eps > 0 && o.eps < 1)) bad_input("eps must lie in (0, 1), got {}", o.eps);
  if (o.alg_temp && *o.alg_temp < 0) bad_input("alg_temp must not be negative, got {}", *o.alg_temp);
  if (o.block_size < 1) bad_input("block_size must be at least 1, got {}", o.block_size);
  if (!(o.threshold > 0 && o.threshold <= 1)) bad_input("threshold: {} is outside (0, 1]", o.threshold);
  if (o.tokens_per_step < 0) bad_input("tokens_per_step must be at least 1, got {}", o.tokens_per_step);
  if (o.tokens_per_step > 0 && (o.sampling.alg == DiffusionAlg::Origin || o.sampling.alg == DiffusionAlg::ConfidenceThreshold))
    bad_input("tokens_per_step needs alg maskgit_plus, topk_margin or entropy, not {}", diffusion_alg_name(o.sampling.alg));
  if (o.refresh_every < 0) bad_input("refresh_every must be at least 1, got {}", o.refresh_every);
  if (o.refresh_every > 0 && !diffusion_mode_cached(o.mode))
    bad_input("refresh_every: {} needs diffusion_mode block-cache or dual-cache, not {}", o.refresh_every,
              diffusion_mode_name(o.mode));
  const auto blocks = block_count(o);
  if (!(std::isfinite(o.eos_penalty) && o.eos_penalty >= 0))
    bad_input("eos_penalty: {} must be a finite number >= 0", o.eos_penalty);
  if (o.eos_penalty > 0 && (o.mode != DiffusionMode::Exact || !scheduled(o)))
    bad_input("eos_penalty: {} runs in exact mode with a steps schedule only (not diffusion_mode {}, alg {}, "
              "tokens_per_step {})", o.eos_penalty, diffusion_mode_name(o.mode), diffusion_alg_name(o.sampling.alg),
              o.tokens_per_step);
  if (scheduled(o) && o.steps < blocks)
    bad_input("steps: {} is fewer than the {} blocks of {} new tokens in blocks of {} (each block needs a step)", o.steps,
              blocks, o.max_new_tokens, o.block_size);
}

std::vector<DiffusionBlock> diffusion_blocks(const DiffusionOptions& o) {
  const std::int64_t G = o.max_new_tokens, S = scheduled(o) ? o.steps : 0;
  if (o.mode == DiffusionMode::Exact) return {{0, G, S}};
  std::vector<DiffusionBlock> out;
  for (std::int64_t start = 0; start < G; start += o.block_size) {
    const std::int64_t end = std::min(G, start + o.block_size);
    out.push_back({start, end - start, S * end / G - S * start / G});
  }
  return out;
}

std::int64_t block_unmask_count(std::int64_t length, std::int64_t steps, std::int64_t j) {
  return (j + 1) * length / steps - j * length / steps;
}

namespace diffusion_detail {

Canvas make_canvas(const PaddedBatch& pb, const DiffusionOptions& o) {
  Canvas c{pb.batch, pb.tokens + o.max_new_tokens, pb.tokens, {}, {}, pb.pad};
  std::vector<std::uint8_t> am;  // the prompt mask, padded with 1 for the generated slots
  std::vector<std::int32_t> pos;
  for (std::int64_t r = 0; r < c.B; ++r) {
    std::int32_t count = 0;
    for (std::int64_t j = 0; j < c.N; ++j) {
      const bool in_prompt = j < c.T;
      const auto at = static_cast<std::size_t>(r * c.T + j);
      c.x.push_back(in_prompt ? pb.ids[at] : o.mask_id);
      const std::uint8_t m = in_prompt ? pb.mask[at] : 1;
      am.push_back(m);
      count += m;
      pos.push_back(pb.any_pad ? (m ? count - 1 : 1) : static_cast<std::int32_t>(j));  // tok_idx
    }
  }
  // Only a mask with a zero is used; the Attention op then allows (q, k) iff am[q] && am[k].
  c.input = StepInput{c.B, c.N, 0, {}, pos, pb.any_pad ? am : std::vector<std::uint8_t>{}, false};
  return c;
}

std::vector<std::int64_t> top_slots(const double* conf, std::int64_t N, std::int64_t k) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(N));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](std::int64_t a, std::int64_t b) { return conf[a] > conf[b]; });
  idx.resize(static_cast<std::size_t>(std::min(k, N)));
  return idx;
}

// One draw at a time, each from the renormalised weights of the slots not drawn yet.
std::vector<std::int64_t> sample_slots(const double* conf, std::int64_t N, std::int64_t k, double alg_temp,
                                       std::uint64_t seed, std::int64_t step) {
  double m = kNegInf;
  for (std::int64_t j = 0; j < N; ++j) m = std::max(m, conf[j] / alg_temp);
  std::vector<double> w(static_cast<std::size_t>(N));
  for (std::int64_t j = 0; j < N; ++j) w[static_cast<std::size_t>(j)] = std::isinf(conf[j]) ? 0.0 : std::exp(conf[j] / alg_temp - m);
  std::vector<std::int64_t> out;
  for (std::int64_t d = 0; d < std::min(k, N); ++d) {
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    if (total <= 0) break;  // torch would raise: fewer nonzero weights than k
    std::vector<double> p(w.size());
    for (std::size_t j = 0; j < w.size(); ++j) p[j] = w[j] / total;
    const auto j = sample_index(p, counter_uniform(seed, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(d),
                                                   RngStream::Position));
    out.push_back(j);
    w[static_cast<std::size_t>(j)] = 0;
  }
  return out;
}

std::span<const float> shifted_row(const Tensor& logits, std::int64_t r, std::int64_t j, std::int64_t N, std::int64_t V,
                                   std::int64_t first) {
  const std::int64_t src = (j == 0 ? 0 : j - 1) - first;
  if (src < 0 || src >= N) runtime_error("diffusion: slot {} needs logits of slot {}, outside the forward's [{}, {})", j,
                                         src + first, first, first + N);
  return {logits.data<float>() + (r * N + src) * V, static_cast<std::size_t>(V)};
}

void set_head_slots(StepInput& in, const std::vector<bool>& reads, std::int64_t B, std::int64_t N, int shift) {
  std::int64_t from = N, to = 0;
  for (std::int64_t r = 0; r < B; ++r)
    for (std::int64_t j = 0; j < N; ++j)
      if (reads[static_cast<std::size_t>(r * N + j)]) {
        const std::int64_t src = std::max<std::int64_t>(j - shift, 0);
        from = std::min(from, src), to = std::max(to, src + 1);
      }
  in.logits_from = from < to ? from : 0;
  in.logits_to = from < to ? to : 0;
}

std::int64_t head_first(const Tensor& logits, const StepInput& in) {
  return !logits.empty() && logits.shape()[1] != in.tokens ? in.logits_from : 0;
}

DiffusionResult make_result(const Canvas& c, const std::vector<std::vector<std::int32_t>>& prompts,
                            const DiffusionOptions& o) {
  DiffusionResult res{c.B, c.N, {}, {}};
  for (std::int64_t r = 0; r < c.B; ++r) {
    const auto& p = prompts[static_cast<std::size_t>(r)];
    auto gen_begin = c.x.begin() + r * c.N + c.T;
    std::vector<std::int32_t> completion(gen_begin, gen_begin + o.max_new_tokens);
    std::vector<std::int32_t> seq = p;
    seq.insert(seq.end(), completion.begin(), completion.end());
    res.sequences.push_back(std::move(seq));
    res.completions.push_back(std::move(completion));
  }
  return res;
}

}  // namespace diffusion_detail

using namespace diffusion_detail;

DiffusionResult diffusion_generate(DecodeForward& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                   const DiffusionOptions& o, const DiffusionCallback& on_step) {
  check_diffusion_options(o);
  if (o.loop == DiffusionLoop::SemiArRemasking) return remasking_generate(model, prompts, o, on_step);
  if (o.loop == DiffusionLoop::BlockDiffusion) return block_diffusion_generate(model, prompts, o, on_step);
  if (o.mode != DiffusionMode::Exact || !scheduled(o)) return blockwise_generate(model, prompts, o, on_step);
  Canvas c = make_canvas(left_pad(prompts, o.pad_id), o);
  const std::int64_t B = c.B, N = c.N, V = model.vocab_size();
  const auto ts = diffusion_timesteps(o.steps, o.eps);
  auto seed = [&](std::int64_t r) { return o.seeds.empty() ? 0 : o.seeds.at(static_cast<std::size_t>(r)); };
  const bool by_position_sampling = o.alg_temp && *o.alg_temp > 0;
  const std::vector<std::int64_t> block(static_cast<std::size_t>(B), 0);
  std::vector<std::int64_t> recomputed;  // no cache: every real slot, every step
  for (auto p : c.pad) recomputed.push_back(N - p);
  // A draw's slot counter is the slot in the row's own (unpadded) canvas, so a prompt's draws do
  // not depend on how far a batch left-pads it (one seed, one output, alone or in a batch).
  auto slot = [&](std::int64_t r, std::int64_t j) {
    return static_cast<std::uint64_t>(j - c.pad[static_cast<std::size_t>(r)]);
  };
  std::vector<float> penalized;  // one slot's logits with Dream-Coder's padding penalty added

  for (std::int64_t i = 0; i < o.steps; ++i) {
    const float t = ts[static_cast<std::size_t>(i)], s = ts[static_cast<std::size_t>(i + 1)];
    const bool last = i == o.steps - 1;
    c.input.ids = c.x;
    std::vector<bool> masked(c.x.size());
    for (std::size_t a = 0; a < c.x.size(); ++a) masked[a] = c.x[a] == o.mask_id;
    set_head_slots(c.input, masked, B, N, 1);
    const Tensor logits = model.forward(c.input);
    const std::int64_t first = head_first(logits, c.input), width = logits.shape()[1];
    // logits[pad] += eos_penalty * log(1 - t + 1e-3), added in float32 as torch adds a Python float
    const auto pad_bias = static_cast<float>(o.eos_penalty * std::log(1.0 - static_cast<double>(t) + 1e-3));
    auto row_logits = [&](std::int64_t r, std::int64_t j) -> std::span<const float> {
      const auto row = shifted_row(logits, r, j, width, V, first);
      if (o.eos_penalty == 0 || o.pad_id < 0 || o.pad_id >= V) return row;
      penalized.assign(row.begin(), row.end());
      penalized[static_cast<std::size_t>(o.pad_id)] += pad_bias;
      return penalized;
    };
    std::vector<double> conf(static_cast<std::size_t>(B * N), kNaN);
    std::vector<std::int32_t> x0(c.x.size(), o.mask_id);
    std::vector<std::vector<std::int64_t>> transfer(static_cast<std::size_t>(B));
    std::int64_t n_total = 0, k = 0;

    if (o.sampling.alg == DiffusionAlg::Origin) {
      const float p = last ? 1.0f : 1.0f - s / t;  // each masked slot is revealed with probability p
      for (std::int64_t r = 0; r < B; ++r)
        for (std::int64_t j = 0; j < N; ++j) {
          const auto at = static_cast<std::size_t>(r * N + j);
          if (c.x[at] != o.mask_id) continue;
          if (!(counter_uniform(seed(r), static_cast<std::uint64_t>(i), slot(r, j), RngStream::Reveal) < p))
            continue;
          const auto u = counter_uniform(seed(r), static_cast<std::uint64_t>(i), slot(r, j), RngStream::Token);
          const auto ch = dream_sample_token(row_logits(r, j), o.sampling, u);
          conf[at] = ch.confidence;
          c.x[at] = ch.token;
          transfer[static_cast<std::size_t>(r)].push_back(j);
        }
    } else {
      std::vector<double> full(static_cast<std::size_t>(B * N), kNegInf);
      for (std::int64_t r = 0; r < B; ++r)
        for (std::int64_t j = 0; j < N; ++j) {
          const auto at = static_cast<std::size_t>(r * N + j);
          if (c.x[at] != o.mask_id) continue;
          const auto u = counter_uniform(seed(r), static_cast<std::uint64_t>(i), slot(r, j), RngStream::Token);
          const auto ch = dream_sample_token(row_logits(r, j), o.sampling, u);
          full[at] = conf[at] = ch.confidence;
          x0[at] = ch.token;
          ++n_total;
        }
      // k uses the batch-average mask count in float32 (model-spec §3.2 notes).
      k = diffusion_unmask_count(static_cast<float>(n_total) / static_cast<float>(B), t, s, last);
      for (std::int64_t r = 0; k > 0 && r < B; ++r) {
        const double* row = full.data() + r * N;
        auto picked = by_position_sampling ? sample_slots(row, N, k, *o.alg_temp, seed(r), i) : top_slots(row, N, k);
        for (auto j : picked) {
          // A slot that was not masked takes x_'s mask id, as Dream does when k exceeds a row's masks.
          c.x[static_cast<std::size_t>(r * N + j)] = x0[static_cast<std::size_t>(r * N + j)];
          transfer[static_cast<std::size_t>(r)].push_back(j);
        }
      }
    }
    if (on_step) on_step(DiffusionStep{i, k, t, s, B, N, c.x, conf, transfer, block, recomputed, last});
  }
  return make_result(c, prompts, o);
}

}  // namespace sonde
