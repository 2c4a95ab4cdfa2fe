#pragma once
// The logit lens: the model's own final norm and unembedding (ModelInfo::final_norm_weight,
// head_weight) applied to every layer's hook_resid_post, at every position of one sequence. No
// training: what each layer's residual stream would predict if the network stopped there.
#include <sonde/decode.h>
#include <sonde/session.h>

#include <cstdint>
#include <vector>

namespace sonde {

struct LensCell {
  std::vector<std::int32_t> top_ids;   // the k most probable tokens, most probable first
  std::vector<float> top_probs;        // their softmax probabilities
  std::int32_t next_id = -1;           // the token at the next position (-1 at the last)
  std::int64_t next_rank = -1;         // its rank (0 = most probable), -1 at the last position
  float next_prob = 0;                 // its probability
};

struct LensResult {
  std::int64_t layers = 0, tokens = 0, top_k = 0;
  std::vector<LensCell> cells;  // [layer][position], layer-major
  Tensor last_logits;           // [T, V]: the last layer's lens logits (equal the model's logits)
  Tensor logits;                // [T, V]: the model's own logits, from the same forward
  const LensCell& at(std::int64_t layer, std::int64_t pos) const {
    return cells[static_cast<std::size_t>(layer * tokens + pos)];
  }
};

// One forward over `ids`, then the lens (on the session's backend). BadInput for top_k < 1.
LensResult logit_lens(Session& s, const std::vector<std::int32_t>& ids, std::int64_t top_k);

// A masked-diffusion generation of `prompt` (one row), the lens at every denoising step over the
// whole canvas as that step's forward saw it; the "next token" of slot p is the final
// sequence's token at p + 1. LensResult::logits stays empty.
struct DiffusionLens {
  std::vector<std::int64_t> steps;
  std::vector<LensResult> per_step;
  std::vector<std::int32_t> sequence;  // prompt + completion
};
DiffusionLens logit_lens_diffusion(Session& s, const std::vector<std::int32_t>& prompt, const DiffusionOptions& d,
                                   std::int64_t top_k);

}  // namespace sonde
