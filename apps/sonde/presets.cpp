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
  // Efficient-Large-Model/Fast_dLLM_v2_1.5B and _7B (Qwen2.5-1.5B / 7B-Instruct shapes)
  if (name == "fast-dllm-v2-1.5b") return {1536, 28, 12, 2, 8960, 151936, 32768, true};
  if (name == "fast-dllm-v2-7b") return {3584, 28, 28, 4, 18944, 152064, 32768, true, true};
  bad_input("--preset: unknown preset '{}' (tiny, small, qwen2.5-0.5b, dream-7b, llada-8b, fast-dllm-v2-1.5b, "
            "fast-dllm-v2-7b)", name);
}

}  // namespace sonde::cli
