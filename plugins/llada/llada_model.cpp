// LLaDA (LLaDAModelLM, GSAI-ML/LLaDA-8B-Base/Instruct, LLaDA-1.5): modeling_llada.py's forward
// with its "llama" block, which is the shared decoder under OLMo-derived names (docs/models.md):
//   x = wte(ids); per block: x += attn_out(attention(rope(q_proj(h)), rope(k_proj(h)), v_proj(h)))
//   with h = attn_norm(x), full bidirectional attention; x += ff_out(silu(ff_proj(h2)) * up_proj(h2))
//   with h2 = ff_norm(x); logits = ff_out(ln_f(x)) (wte when weight_tying). RMSNorm everywhere.
// Biases only as include_bias / include_qkv_bias say; no logit shift; mask token from config.json.
// The config's variant switches this forward does not implement are refused, never ignored.
#include <decoder_model.h>

#include <sonde/error.h>
#include <sonde/model.h>

#include <nlohmann/json.hpp>

namespace sonde::llada {

using nlohmann::json;

class LladaModel final : public common::DecoderModel {
 public:
  ModelInfo info() const override {
    ModelInfo i = decoder_info();
    i.arch = "llada";
    i.decoding = DecodingKind::MaskedDiffusion;
    i.diffusion_loop = DiffusionLoop::SemiArRemasking;
    i.causal = false;
    i.prediction_shift = 0;  // the logits at slot p predict the token at p
    i.mask_token_id = mask_token_id_;
    i.end_tokens = {"<|endoftext|>", "<|eot_id|>"};  // LLaDA's eos (126081) and end of turn (126348)
    return i;
  }
  void configure(const ModelConfig& c) override {
    const std::string file = (c.dir / "config.json").string();
    const json raw = json::parse(c.raw_json);
    check_variant(raw, file);
    spec_ = common::DecoderSpec::from_config(c, /*causal=*/false);
    spec_.names = olmo_names();
    const bool include_bias = flag(raw, "include_bias", false, file);
    spec_.qkv_bias = include_bias || flag(raw, "include_qkv_bias", false, file);
    spec_.out_bias = include_bias;
    if (!c.mask_token_id) bad_input("{}: field 'mask_token_id' is missing (LLaDA models need it)", file);
    if (*c.mask_token_id < 0 || *c.mask_token_id >= c.vocab_size)
      bad_input("{}: field 'mask_token_id' is {}, outside the vocabulary [0, {})", file, *c.mask_token_id, c.vocab_size);
    mask_token_id_ = *c.mask_token_id;
  }

 private:
  // modeling_llada.py's module paths (LLaDAModelLM.model.transformer...).
  static common::WeightNames olmo_names() {
    common::WeightNames n;
    n.embed = "model.transformer.wte";
    n.final_norm = "model.transformer.ln_f";
    n.head = "model.transformer.ff_out";
    n.layer_prefix = "model.transformer.blocks.";
    n.attn_norm = "attn_norm";
    n.q = "q_proj";
    n.k = "k_proj";
    n.v = "v_proj";
    n.o = "attn_out";
    n.mlp_norm = "ff_norm";
    n.gate = "ff_proj";  // silu is applied to ff_proj's output, then times up_proj's
    n.up = "up_proj";
    n.down = "ff_out";
    return n;
  }

  static bool flag(const json& raw, const char* key, bool absent, const std::string& file) {
    const auto it = raw.find(key);
    if (it == raw.end() || it->is_null()) return absent;
    if (!it->is_boolean()) bad_input("{}: field '{}' is {}, expected true or false", file, key, it->dump());
    return it->get<bool>();
  }

  // One line naming the file, the field and its value for every variant the forward above does
  // not compute (OLMo's other block types, norms, ALiBi, qk-norm, logit scaling, ...).
  static void check_variant(const json& raw, const std::string& file) {
    const auto text_is = [&](const char* key, const char* want, const char* absent) {
      const auto it = raw.find(key);
      const std::string v = it == raw.end() || it->is_null() ? absent : it->is_string() ? it->get<std::string>() : it->dump();
      if (v != want)
        bad_input("{}: field '{}' is \"{}\": only \"{}\" (LLaDA's published variant) is supported", file, key, v, want);
    };
    text_is("block_type", "llama", "llama");
    text_is("layer_norm_type", "rms", "rms");
    const auto flag_is = [&](const char* key, bool want, bool absent, const char* what) {
      if (flag(raw, key, absent, file) != want)
        bad_input("{}: field '{}' is {}: {} is not supported", file, key, want ? "false" : "true", what);
    };
    flag_is("rope", true, true, "a model without RoPE");
    flag_is("alibi", false, false, "ALiBi attention");
    flag_is("attention_layer_norm", false, false, "layer norm on q and k");
    flag_is("scale_logits", false, false, "logit scaling");
    flag_is("input_emb_norm", false, false, "an embedding norm");
    flag_is("bias_for_layer_norm", false, false, "a layer-norm bias");
    flag_is("layer_norm_with_affine", true, true, "a layer norm without weights");
    if (const auto it = raw.find("clip_qkv"); it != raw.end() && !it->is_null())
      bad_input("{}: field 'clip_qkv' is {}: q/k/v clipping is not supported (expected null)", file, it->dump());
    if (const auto it = raw.find("embedding_size"); it != raw.end() && !it->is_null() && *it != raw.value("vocab_size", json()))
      bad_input("{}: field 'embedding_size' is {}: an embedding padded past vocab_size {} is not supported", file,
                it->dump(), raw.value("vocab_size", json()).dump());
    if (const auto it = raw.find("architectures"); it != raw.end() && it->is_array())
      for (const auto& a : *it)
        if (a != "LLaDAModelLM")
          bad_input("{}: field 'architectures' has {}: only LLaDAModelLM is supported", file, a.dump());
  }

  std::int64_t mask_token_id_ = -1;
};

}  // namespace sonde::llada

SONDE_PLUGIN(sonde::llada::LladaModel, "model", "llada", "0.1.0", "llada", 0)
