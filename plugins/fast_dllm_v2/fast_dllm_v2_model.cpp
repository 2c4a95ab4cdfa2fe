// Fast-dLLM v2 (Fast_dLLM_QwenForCausalLM, model_type Fast_dLLM_Qwen; NVlabs, arXiv 2509.26328):
// Qwen2.5 fine-tuned into a block-diffusion model. Its modeling.py forward at inference is the
// Qwen2 decoder (same weight names, q/k/v biases, RMSNorm, SwiGLU, RoPE) whose attention is
// block-causal over blocks of bd_size slots (eval_block_diff_mask: bidirectional inside a block,
// causal across blocks). Its batch_sample reads the logits at slot p - 1 for slot p (inside a
// block; the block's first slot is always a known token), as Dream does: prediction shift 1.
// docs/models.md states the forward, the published decoding and what sonde runs of it.
#include <decoder_model.h>

#include <sonde/error.h>
#include <sonde/model.h>

#include <nlohmann/json.hpp>

namespace sonde::fast_dllm_v2 {

using nlohmann::json;

// batch_sample's defaults: mask_id 151665 (|<MASK>| in its tokenizer) when config.json names none.
constexpr std::int64_t kPublishedMaskId = 151665;

class FastDllmV2Model final : public common::DecoderModel {
 public:
  ModelInfo info() const override {
    ModelInfo i = decoder_info();
    i.arch = "fast_dllm_v2";
    i.decoding = DecodingKind::MaskedDiffusion;
    i.diffusion_loop = DiffusionLoop::BlockDiffusion;  // batch_sample (core/src/decode_diffusion_bd.cpp)
    i.causal = false;
    i.prediction_shift = 1;
    i.mask_token_id = mask_token_id_;
    i.end_tokens = {"<|im_end|>", "<|endoftext|>"};  // batch_sample's stop_token 151645 is <|im_end|>
    return i;
  }
  void configure(const ModelConfig& c) override {
    const std::string file = (c.dir / "config.json").string();
    const json raw = json::parse(c.raw_json);
    for (const auto& a : c.architectures)
      if (a != "Fast_dLLM_QwenForCausalLM")
        bad_input("{}: field 'architectures' has \"{}\": only Fast_dLLM_QwenForCausalLM is supported", file, a);
    spec_ = common::DecoderSpec::from_config(c, /*causal=*/false);
    spec_.block_size = block_size(raw, file);
    mask_token_id_ = c.mask_token_id ? *c.mask_token_id : kPublishedMaskId;
    if (mask_token_id_ < 0 || mask_token_id_ >= c.vocab_size)
      bad_input("{}: field 'mask_token_id' is {}{}, outside the vocabulary [0, {})", file, mask_token_id_,
                c.mask_token_id ? "" : " (batch_sample's default, the field is absent)", c.vocab_size);
  }

 private:
  // bd_size: the block of the block-causal mask (the published forward's block_size, 32).
  static std::int64_t block_size(const json& raw, const std::string& file) {
    const auto it = raw.find("bd_size");
    if (it == raw.end() || it->is_null()) bad_input("{}: field 'bd_size' is missing (Fast-dLLM v2 models need it)", file);
    if (!it->is_number_integer() || it->get<std::int64_t>() < 1)
      bad_input("{}: field 'bd_size' is {}, expected a positive integer", file, it->dump());
    return it->get<std::int64_t>();
  }

  std::int64_t mask_token_id_ = -1;
};

}  // namespace sonde::fast_dllm_v2

SONDE_PLUGIN(sonde::fast_dllm_v2::FastDllmV2Model, "model", "fast_dllm_v2", "0.1.0", "Fast_dLLM_Qwen", 0)
