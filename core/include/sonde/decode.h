#pragma once
// The two decode loops over a model-agnostic forward (design §2): Hugging Face style
// autoregressive generation with a KV cache (model-spec §4) and Dream's diffusion_generate
// (model-spec §3). Both take a batch of prompts of any lengths, left-pad them, and give each
// row the result it would get alone.
#include <sonde/sampling.h>
#include <sonde/tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sonde {

// One forward call. ids/positions are [B, T]; key_mask is [B, past + T] (1 = real token) or
// empty for "all real". With past > 0 the keys of the first `past` slots come from the cache
// that earlier calls filled; the call appends its own T slots to it.
struct StepInput {
  std::int64_t batch = 1, tokens = 0, past = 0;
  std::vector<std::int32_t> ids, positions;
  std::vector<std::uint8_t> key_mask;
  bool use_cache = false;  // read `past` cached slots and append these T slots (AR only)
  bool need_logits = true;  // false: the caller only wants taps (and the cache); logits may be empty
  // The caller reads each row's last slot's logits only: the forward may return [B, 1, V]
  // (the LM head run there alone; ForwardInput::last_logits_only says when).
  bool last_logits_only = false;
  // The caller reads the logits of this call's slots [logits_from, logits_to) only (a denoising
  // step: the rows its masked slots read): the forward may return [B, logits_to - logits_from, V]
  // (the head run there alone) or [B, T, V]; the caller tells them apart by the second dimension.
  std::int64_t logits_from = 0, logits_to = 0;
  // Diffusion K/V caching (DecodeForward::has_slot_cache; docs/generation.md, "Cached modes").
  // fill_cache: a full forward (past 0, every slot) that also keeps every slot's post-RoPE K and V.
  // slots > 0: ids/positions are slots [first_slot, first_slot + tokens) of a sequence of `slots`
  // whose K/V the cache holds; only these rows are computed, the other slots' keys and values
  // are read from the cache and this call's are written back over theirs. K is cached after
  // RoPE at its own absolute position, so a row's K is valid wherever it is read. key_mask is
  // [B, slots] (slot order) or empty.
  bool fill_cache = false;
  std::int64_t slots = 0, first_slot = 0;
};

// Receives a hook's value [B, T, *row_shape] during a forward; the view dies with the call.
using HookTap = std::function<void(const std::string& hook, const TensorView& value)>;

// What the loops need from a model. A fake implementation makes them testable without one.
class DecodeForward {
 public:
  virtual ~DecodeForward() = default;
  virtual std::int64_t vocab_size() const = 0;
  // Whether forward() accepts past > 0 (a KV cache). Without it the AR loop recomputes.
  virtual bool has_kv_cache() const { return false; }
  // Allocates the cache once for a sequence batch: `capacity` slots per row.
  virtual void reset_cache(std::int64_t /*batch*/, std::int64_t /*capacity*/) {}
  // Whether forward() accepts fill_cache and slot ranges (StepInput): bidirectional models.
  virtual bool has_slot_cache() const { return false; }
  // Logits [B, T, V] f32.
  virtual Tensor forward(const StepInput& in) = 0;
  // Later forwards deliver the hooks named in `hooks` to `tap` (capture.h). Empty: none, at no
  // cost. A forward that cannot tap refuses a non-empty set.
  virtual void set_taps(const std::vector<std::string>& hooks, HookTap tap);
};

// Left padding (model-spec §0.8): rows right-aligned to the longest, pad slots get mask 0 and
// position 1, real slots cumsum(mask) - 1.
struct PaddedBatch {
  std::int64_t batch = 0, tokens = 0;
  std::vector<std::int32_t> ids, positions;
  std::vector<std::uint8_t> mask;
  std::vector<std::int64_t> pad;  // pad slots per row
  bool any_pad = false;
};
PaddedBatch left_pad(const std::vector<std::vector<std::int32_t>>& prompts, std::int32_t pad_id);

// ---- autoregressive ------------------------------------------------------------------------

struct ArOptions {
  std::int64_t max_new_tokens = 16;
  SamplingParams sampling;
  std::vector<std::uint64_t> seeds;           // per row; empty: 0 for every row
  std::vector<std::int64_t> eos_ids;
  std::vector<std::string> stop_strings;      // need `detokenize`
  std::function<std::string(const std::vector<std::int32_t>&)> detokenize;
  std::int32_t pad_id = 0;                    // fed for finished rows and left padding
  bool use_cache = true;                      // false: full recompute every step (for tests)
  // One more forward after the last step over the last tokens, whose result is not sampled:
  // capture needs it to see the activations of the final generated token.
  bool feed_last = false;
};

struct Completion {
  std::vector<std::int32_t> prompt, tokens;   // tokens: the generated ids (eos included)
  std::string finish_reason;                  // "eos", "stop", "length"
};

// Called after each step with the new token of every row (-1 for finished rows) and the
// last-slot logits [B, V] that chose them.
struct ArStep {
  std::int64_t step = 0;
  const std::vector<std::int32_t>& new_tokens;
  const Tensor& logits;
};
using ArCallback = std::function<void(const ArStep&)>;

std::vector<Completion> generate_autoregressive(DecodeForward& model,
                                                const std::vector<std::vector<std::int32_t>>& prompts,
                                                const ArOptions& options, const ArCallback& on_step = {});

// ---- masked diffusion ----------------------------------------------------------------------

// exact: Dream's diffusion_generate over the whole canvas (the default and the oracle). block:
// the generation is cut into blocks of block_size slots (the last one shorter when block_size does
// not divide max_new_tokens) filled left to right; only the current block's masked slots get a
// confidence and can be committed (docs/generation.md, "Block mode"). block-cache and dual-cache
// are block mode with Fast-dLLM's K/V caches (arXiv 2505.22618; docs/generation.md, "Cached
// modes"): the first step of a block is a full forward that refreshes every slot's K/V; later
// steps of the block recompute slots [lo - 1, N) (block-cache: the block and the masked suffix
// over the cached prefix) or [lo - 1, hi) (dual-cache: the block alone over cached prefix and
// suffix), lo..hi the block's slots; lo - 1 because Dream's slot lo is predicted from slot lo - 1.
// They approximate block mode (cached K/V are those of the block's start) and need a model with
// a slot cache (DecodeForward::has_slot_cache).
enum class DiffusionMode { Exact, Block, BlockCache, DualCache };
DiffusionMode parse_diffusion_mode(std::string_view name);  // "exact", "block", "block-cache", "dual-cache"
std::string_view diffusion_mode_name(DiffusionMode mode);
bool diffusion_mode_cached(DiffusionMode mode);  // block-cache or dual-cache
// The root attribute / run config's "cache" of a mode: "none", "prefix" or "dual".
std::string_view diffusion_cache_name(DiffusionMode mode);

struct DiffusionOptions {
  DiffusionMode mode = DiffusionMode::Exact;
  std::int64_t block_size = 32;               // block mode
  double threshold = 0.9;                     // alg confidence_threshold: commit p[token] >= threshold
  std::int64_t tokens_per_step = 0;           // > 0: this many per step instead of the steps schedule
  // Cached modes: > 0 refreshes the whole cache (a full forward) every this many steps of a block
  // (dKV-Cache-style); 0: only at each block's first step.
  std::int64_t refresh_every = 0;
  std::int64_t max_new_tokens = 16;
  std::int64_t steps = 16;
  double eps = 1e-3;
  DreamSampling sampling;                     // temperature, top_p, top_k, alg
  std::optional<double> alg_temp;             // > 0: positions sampled from softmax(conf / alg_temp)
  std::int32_t mask_id = 0;
  std::int32_t pad_id = 0;                    // fed at left-padding slots
  // Dream-Coder's padding penalty (arXiv 2509.01142 §4.1; docs/models.md): > 0 adds
  // eos_penalty * log(1 - t + 1e-3) to pad_id's logit at every masked slot before sampling, t the
  // step's timestep, so padding is held back early (t near 1) and free at the end. Exact mode only.
  double eos_penalty = 0;
  std::vector<std::uint64_t> seeds;           // per row; empty: 0 for every row
  // LLaDA's generate() (loop SemiArRemasking; docs/models.md): blocks of block_length slots
  // (0: one block of max_new_tokens), steps / blocks steps each, remasking, classifier-free
  // guidance at cfg_scale (> 0), Gumbel-max sampling at sampling.temperature (> 0) with torch's
  // CPU draws from each row's seed. Its own rules: block_length divides max_new_tokens, the block
  // count divides steps, mode exact, no alg settings (alg, eps, alg_temp, top_p, top_k).
  DiffusionLoop loop = DiffusionLoop::DreamTimesteps;
  std::int64_t block_length = 0;
  Remasking remasking = Remasking::LowConfidence;
  double cfg_scale = 0;
  // LLaDA with Fast-dLLM (arXiv 2505.22618, its llada/generate.py): mode block-cache or dual-cache
  // runs generate_with_prefix_cache or generate_with_dual_cache; a threshold (in (0, 1]) commits
  // every candidate whose confidence reaches it, the most confident always (parallel decoding),
  // and a block then ends when it has no mask left. docs/models.md states the loops exactly.
  std::optional<double> remasking_threshold;
  // Fast-dLLM v2's batch_sample (loop BlockDiffusion; docs/models.md, arXiv 2509.26328): blocks of
  // block_size slots decoded in order over a K/V cache of the completed blocks, each in sub-blocks
  // of small_block_size filled by the threshold (every masked slot with p > threshold, and always
  // the most confident), greedy or sampled (sampling.temperature > 0: its top_p and top_k, with
  // counter_uniform draws from seeds); a committed stop_id ends the generation once its block is full.
  std::int64_t small_block_size = 8;
  std::int64_t attention_block = 0;  // the model's bd_size: block_size must divide it
  std::int32_t stop_id = -1;
};

// The canvas a loop reports steps on (DiffusionStep::length) for prompts padded to T tokens:
// T + max_new_tokens, or for BlockDiffusion (one prompt of T tokens) every block batch_sample
// decodes, (T / block_size + max_new_tokens / block_size) * block_size slots, and one more block
// whose first slot takes the token the last block's closing forward predicts.
std::int64_t diffusion_canvas_width(const DiffusionOptions& o, std::int64_t T);

// BadInput for options no loop can run: steps or max_new_tokens < 1, eps outside (0, 1), a
// negative alg_temp or block_size < 1, threshold outside (0, 1], tokens_per_step < 0 or set with
// origin or confidence_threshold, fewer steps than blocks, refresh_every < 0 or set without a
// cached mode; BlockDiffusion: small_block_size not dividing block_size, block_size not dividing
// attention_block, max_new_tokens < block_size, a negative temperature, top_p outside (0, 1],
// top_k < 1.
void check_diffusion_options(const DiffusionOptions& o);

// The blocks of the generation (slots [start, start + length) after the prompt) and the steps
// each gets: exact mode is one block of max_new_tokens slots with all the steps; block mode gives
// block b the steps floor(S*end_b/G) - floor(S*start_b/G) (G = max_new_tokens, S = steps), so
// every block gets at least one when S >= the number of blocks and steps = tokens gives one step
// per slot. steps is 0 when the step count is not scheduled (confidence_threshold,
// tokens_per_step).
struct DiffusionBlock {
  std::int64_t start = 0, length = 0, steps = 0;
};
std::vector<DiffusionBlock> diffusion_blocks(const DiffusionOptions& o);
// Block mode's schedule inside a block of `length` slots and `steps` steps: step j commits
// floor((j+1)*length/steps) - floor(j*length/steps) slots, so the block is full after its last.
std::int64_t block_unmask_count(std::int64_t length, std::int64_t steps, std::int64_t j);

// The schedule of model-spec §3.4: t_i = linspace(1, eps, steps + 1)[i] in float32 (torch's
// two-sided formula), and k_i = trunc_f32(n * (1 - s/t)), k = n on the last step.
std::vector<float> diffusion_timesteps(std::int64_t steps, double eps);
std::int64_t diffusion_unmask_count(float n, float t, float s, bool last_step);

// The state after a step, for hooks (diffusion.hook_tokens / hook_confidence / hook_transfer).
struct DiffusionStep {
  std::int64_t step = 0, k = 0;  // k: the step's count (block-wise loop: the most any row committed)
  float t = 0, s = 0;             // Dream's timesteps; NaN in the block-wise loop, which has none
  std::int64_t batch = 0, length = 0;
  const std::vector<std::int32_t>& canvas;        // [B, N] after the step
  const std::vector<double>& confidence;          // [B, N]: this step's confidence, NaN if unmasked before
  const std::vector<std::vector<std::int64_t>>& transfer;  // per row: slots committed, in order
  const std::vector<std::int64_t>& block;       // per row: the block this step worked on (-1: row done)
  const std::vector<std::int64_t>& recomputed;  // per row: slots the forward computed (all without a cache)
  bool last = false;                            // no step follows
};
using DiffusionCallback = std::function<void(const DiffusionStep&)>;

struct DiffusionResult {
  std::int64_t batch = 0, length = 0;
  std::vector<std::vector<std::int32_t>> sequences;  // per row: prompt (unpadded) + completion
  std::vector<std::vector<std::int32_t>> completions;
};

DiffusionResult diffusion_generate(DecodeForward& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                   const DiffusionOptions& options, const DiffusionCallback& on_step = {});

}  // namespace sonde
