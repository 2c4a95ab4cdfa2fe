// Dream / DiffuCoder (DreamModel): the Qwen2 decoder with fully bidirectional attention
// (model-spec §2). Its logits at slot p predict token p+1; the diffusion loop applies the shift.
#include <decoder_model.h>

#include <sonde/error.h>
#include <sonde/model.h>

namespace sonde::dream {

class DreamModel final : public common::DecoderModel {
 public:
  ModelInfo info() const override {
    ModelInfo i = decoder_info();
    i.arch = "dream";
    i.decoding = DecodingKind::MaskedDiffusion;
    i.causal = false;
    i.prediction_shift = 1;
    i.mask_token_id = mask_token_id_;
    i.end_tokens = {"<|endoftext|>", "<|dlm_pad|>"};  // model-spec §3.5
    return i;
  }
  void configure(const ModelConfig& c) override {
    spec_ = common::DecoderSpec::from_config(c, /*causal=*/false);
    if (!c.mask_token_id) bad_input("{}: field 'mask_token_id' is missing (Dream models need it)", (c.dir / "config.json").string());
    if (*c.mask_token_id < 0 || *c.mask_token_id >= c.vocab_size)
      bad_input("{}: field 'mask_token_id' is {}, outside the vocabulary [0, {})", (c.dir / "config.json").string(),
                *c.mask_token_id, c.vocab_size);
    mask_token_id_ = *c.mask_token_id;
  }
 private:
  std::int64_t mask_token_id_ = -1;
};

}  // namespace sonde::dream

SONDE_PLUGIN(sonde::dream::DreamModel, "model", "dream", "0.1.0", "Dream,dream", 0)
