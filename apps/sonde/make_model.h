#pragma once
// A random-weight checkpoint in Hugging Face layout (sonde make-model, and the demo's model).
#include <cstdint>
#include <string>

namespace sonde::cli {

struct MakeOptions {
  std::string arch = "qwen2", preset = "tiny", dtype = "f32", out, tokenizer_dir;
  std::string variant = "dream-v0";  // --arch dream: dream-v0, diffucoder or dream-coder (dream_variants.h)
  std::int64_t vocab = 0;
  std::uint64_t seed = 0;
  bool force = false;
};

// Writes config.json, generation_config.json, model.safetensors and a tokenizer to o.out; the
// model plugin (found through the registry, `plugin_dir` first) lists the weights. BadInput
// names the option and value.
void make_model(const MakeOptions& o, const std::string& plugin_dir);

}  // namespace sonde::cli
