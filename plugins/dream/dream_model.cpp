// Dream / DiffuCoder (DreamModel): the Qwen2 decoder with fully bidirectional attention
// (model-spec §2). Its logits at slot p predict token p+1; the diffusion loop applies the shift.
#include <decoder_model.h>

#include <sonde/error.h>
#include <sonde/model.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

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
    check_variant(c);
    spec_ = common::DecoderSpec::from_config(c, /*causal=*/false);
    if (!c.mask_token_id) bad_input("{}: field 'mask_token_id' is missing (Dream models need it)", (c.dir / "config.json").string());
    if (*c.mask_token_id < 0 || *c.mask_token_id >= c.vocab_size)
      bad_input("{}: field 'mask_token_id' is {}, outside the vocabulary [0, {})", (c.dir / "config.json").string(),
                *c.mask_token_id, c.vocab_size);
    mask_token_id_ = *c.mask_token_id;
  }
 private:
  // Dream-family checkpoints share model_type "Dream" (Dream-v0, DiffuCoder, Dream-Coder all load
  // as DreamModel). Variants whose generation this plugin does not run are refused by what their
  // files say, never run as plain Dream: DreamOn's variable-length canvas (its generation expands
  // and deletes slots through expand_token_id / delete_token_id, read from generation_config.json
  // or config.json), and any other architecture class.
  static void check_variant(const ModelConfig& c) {
    const std::string file = (c.dir / "config.json").string();
    for (const auto& a : c.architectures)
      if (a != "DreamModel")
        bad_input("{}: field 'architectures' has \"{}\": only DreamModel (Dream, DiffuCoder, Dream-Coder) is supported", file, a);
    const std::pair<std::string, const std::string*> sources[] = {{file, &c.raw_json},
                                                                  {(c.dir / "generation_config.json").string(), &c.generation.raw_json}};
    for (const auto& [name, text] : sources) {
      const auto j = nlohmann::json::parse(*text, nullptr, false);
      if (!j.is_object()) continue;  // the config parser has judged the file already
      for (const char* key : {"expand_token_id", "delete_token_id"})
        if (const auto it = j.find(key); it != j.end() && !it->is_null())
          bad_input("{}: field '{}' is {}: DreamOn's variable-length canvas (expanding and deleting slots) is not supported",
                    name, key, it->dump());
    }
    check_no_bos_prepended(c);
  }

  // Every published Dream-family tokenizer has add_bos_token false (Dream-Coder names a bos,
  // <|beginoftext|>, but its code never prepends it), and sonde encodes prompts without one: a
  // tokenizer that asks for it would encode differently here than in transformers.
  static void check_no_bos_prepended(const ModelConfig& c) {
    const auto file = c.dir / "tokenizer_config.json";
    std::ifstream in(file, std::ios::binary);
    if (!in) return;  // no tokenizer: ids only
    std::ostringstream text;
    text << in.rdbuf();
    const auto j = nlohmann::json::parse(text.str(), nullptr, false);
    if (!j.is_object()) return;  // the tokenizer loader judges the file
    if (const auto it = j.find("add_bos_token"); it != j.end() && it->is_boolean() && it->get<bool>())
      bad_input("{}: field 'add_bos_token' is true: sonde never prepends a BOS token (no published Dream-family "
                "tokenizer does)", file.string());
  }

  std::int64_t mask_token_id_ = -1;
};

}  // namespace sonde::dream

SONDE_PLUGIN(sonde::dream::DreamModel, "model", "dream", "0.1.0", "Dream,dream", 0)
