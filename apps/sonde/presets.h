#pragma once
// Model shapes for `sonde make-model`. The real-size presets copy the published configs
// (model-spec §1.1) so benchmarks see real memory traffic.
#include <cstdint>
#include <string>

namespace sonde::cli {

struct Preset {
  std::int64_t hidden, layers, heads, kv_heads, intermediate, vocab, max_positions;
  bool real_vocab;  // special ids are Qwen2.5's real ones (151643...) rather than the top of the vocab
  bool untied_head = false;  // Fast-dLLM v2: its 7B (from Qwen2.5-7B) has an lm_head of its own
};

// arch: "qwen2" or "dream"; name: tiny, small, qwen2.5-0.5b, dream-7b. Throws BadInput.
Preset find_preset(const std::string& name);

}  // namespace sonde::cli
