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

struct DiffusionOptions {
  std::int64_t max_new_tokens = 16;
  std::int64_t steps = 16;
  double eps = 1e-3;
  DreamSampling sampling;                     // temperature, top_p, top_k, alg
  std::optional<double> alg_temp;             // > 0: positions sampled from softmax(conf / alg_temp)
  std::int32_t mask_id = 0;
  std::int32_t pad_id = 0;                    // fed at left-padding slots
  std::vector<std::uint64_t> seeds;           // per row; empty: 0 for every row
};

// The schedule of model-spec §3.4: t_i = linspace(1, eps, steps + 1)[i] in float32 (torch's
// two-sided formula), and k_i = trunc_f32(n * (1 - s/t)), k = n on the last step.
std::vector<float> diffusion_timesteps(std::int64_t steps, double eps);
std::int64_t diffusion_unmask_count(float n, float t, float s, bool last_step);

// The state after a step, for hooks (diffusion.hook_tokens / hook_confidence / hook_transfer).
struct DiffusionStep {
  std::int64_t step = 0, k = 0;
  float t = 0, s = 0;
  std::int64_t batch = 0, length = 0;
  const std::vector<std::int32_t>& canvas;        // [B, N] after the step
  const std::vector<double>& confidence;          // [B, N]: this step's confidence, NaN if unmasked before
  const std::vector<std::vector<std::int64_t>>& transfer;  // per row: slots committed, in order
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
