#include "presets.h"

#include <sonde/error.h>

namespace sonde::cli {

Preset find_preset(const std::string& name) {
  // hidden, layers, heads, kv_heads, intermediate, vocab, max_positions, real_vocab
  if (name == "tiny") return {64, 2, 4, 2, 128, 2048, 32768, false};
  if (name == "small") return {256, 4, 8, 2, 704, 4096, 32768, false};
  if (name == "qwen2.5-0.5b") return {896, 24, 14, 2, 4864, 151936, 32768, true};
  if (name == "dream-7b") return {3584, 28, 28, 4, 18944, 152064, 131072, true};
  if (name == "llada-8b") return {4096, 32, 32, 32, 12288, 126464, 4096, true};  // LLaDA-8B-Base/Instruct, LLaDA-1.5
  bad_input("--preset: unknown preset '{}' (tiny, small, qwen2.5-0.5b, dream-7b, llada-8b)", name);
}

}  // namespace sonde::cli
