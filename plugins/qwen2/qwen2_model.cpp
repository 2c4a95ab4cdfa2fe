// Qwen2.5 (Qwen2ForCausalLM): the shared decoder with causal attention.
#include <decoder_model.h>

#include <sonde/error.h>
#include <sonde/model.h>

namespace sonde::qwen2 {

class Qwen2Model final : public common::DecoderModel {
 public:
  ModelInfo info() const override {
    ModelInfo i = decoder_info();
    i.arch = "qwen2";
    i.decoding = DecodingKind::Autoregressive;
    i.causal = true;
    i.prediction_shift = 0;
    return i;
  }
  void configure(const ModelConfig& c) override { spec_ = common::DecoderSpec::from_config(c, /*causal=*/true); }
};

}  // namespace sonde::qwen2

SONDE_PLUGIN(sonde::qwen2::Qwen2Model, "model", "qwen2", "0.1.0", "qwen2", 0)
