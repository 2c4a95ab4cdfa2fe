// sonde make-model: a random-weight checkpoint in Hugging Face layout (config.json,
// generation_config.json, model.safetensors, tokenizer.json) for demos, tests and benchmarks.
// The weight list comes from the model plugin itself, so make-model and load() never disagree.
#include "app_common.h"
#include "commands.h"
#include "dream_variants.h"
#include "make_model.h"
#include "presets.h"
#include "random_weights.h"
#include "special_tokens.h"

#include <sonde/config.h>
#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/registry.h>
#include <sonde/safetensors.h>
#include <sonde/tokenizer.h>

#include <nlohmann/json.hpp>

#include <map>

#include <cmath>
#include <fstream>
#include <iostream>

namespace sonde::cli {
namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

// LLaDA-8B-Base's config.json (OLMo-derived names and switches), with the preset's shape.
ordered_json llada_config(const MakeOptions& o, const Preset& p, std::int64_t vocab, const SpecialIds& ids) {
  ordered_json c;
  c["activation_type"] = "silu";
  c["alibi"] = false;
  c["alibi_bias_max"] = 8.0;
  c["architectures"] = {"LLaDAModelLM"};
  c["attention_dropout"] = 0.0;
  c["attention_layer_norm"] = false;
  c["attention_layer_norm_with_affine"] = true;
  c["auto_map"] = {{"AutoConfig", "configuration_llada.LLaDAConfig"},
                   {"AutoModelForCausalLM", "modeling_llada.LLaDAModelLM"},
                   {"AutoModel", "modeling_llada.LLaDAModelLM"}};
  c["bias_for_layer_norm"] = false;
  c["block_group_size"] = 1;
  c["block_type"] = "llama";
  c["d_model"] = p.hidden;
  c["embedding_dropout"] = 0.0;
  c["embedding_size"] = vocab;
  c["eos_token_id"] = ids.endoftext;
  c["flash_attention"] = false;
  c["include_bias"] = false;
  c["include_qkv_bias"] = false;
  c["init_cutoff_factor"] = nullptr;
  c["init_device"] = "meta";
  c["init_fn"] = "mitchell";
  c["init_std"] = 0.02;
  c["input_emb_norm"] = false;
  c["layer_norm_type"] = "rms";
  c["layer_norm_with_affine"] = true;
  c["mask_token_id"] = ids.mask;
  c["max_sequence_length"] = p.max_positions;
  c["mlp_hidden_size"] = p.intermediate;
  c["mlp_ratio"] = 4;
  c["model_type"] = "llada";
  c["multi_query_attention"] = nullptr;
  c["n_heads"] = p.heads;
  c["n_kv_heads"] = p.kv_heads;
  c["n_layers"] = p.layers;
  c["pad_token_id"] = ids.endoftext;
  c["precision"] = "amp_bf16";
  c["residual_dropout"] = 0.0;
  c["rms_norm_eps"] = 1e-5;
  c["rope"] = true;
  c["rope_full_precision"] = true;
  c["rope_theta"] = 500000.0;
  c["scale_logits"] = false;
  c["torch_dtype"] = o.dtype == "bf16" ? "bfloat16" : "float32";
  c["use_cache"] = false;
  c["vocab_size"] = vocab;
  c["weight_tying"] = false;
  c["sonde_make_model"] = {{"preset", o.preset}, {"seed", o.seed}, {"dtype", o.dtype}};
  return c;
}

// Fast_dLLM_v2_1.5B / _7B's config.json: Qwen2.5-Instruct's fields with its own architecture,
// model_type and bd_size 32; the mask id too (absent from the published file, where the plugin
// takes batch_sample's 151665; a small vocabulary puts it at the top).
void make_fast_dllm_v2(ordered_json& c, const Preset& p, const SpecialIds& ids) {
  c["architectures"] = {"Fast_dLLM_QwenForCausalLM"};
  c["auto_map"] = {{"AutoConfig", "configuration.Fast_dLLM_QwenConfig"},
                   {"AutoModelForCausalLM", "modeling.Fast_dLLM_QwenForCausalLM"}};
  c["eos_token_id"] = ids.im_end;  // batch_sample's stop_token 151645
  c["pad_token_id"] = ids.endoftext;
  c["model_type"] = "Fast_dLLM_Qwen";
  c["tie_word_embeddings"] = !p.untied_head;
  c["bd_size"] = 32;
  c["mask_token_id"] = ids.mask;
}

ordered_json model_config(const MakeOptions& o, const Preset& p, std::int64_t vocab, const SpecialIds& ids) {
  if (o.arch == "llada") return llada_config(o, p, vocab, ids);
  const bool dream = o.arch == "dream";
  ordered_json c;
  c["architectures"] = {dream ? "DreamModel" : "Qwen2ForCausalLM"};
  if (dream)
    c["auto_map"] = {{"AutoConfig", "configuration_dream.DreamConfig"}, {"AutoModel", "modeling_dream.DreamModel"}};
  c["attention_dropout"] = 0.0;
  c["bos_token_id"] = ids.endoftext;
  c["eos_token_id"] = ids.endoftext;
  if (dream) c["pad_token_id"] = ids.endoftext;
  if (dream) c["mask_token_id"] = ids.mask;
  c["hidden_act"] = "silu";
  c["hidden_size"] = p.hidden;
  c["initializer_range"] = 0.02;
  c["intermediate_size"] = p.intermediate;
  c["max_position_embeddings"] = p.max_positions;
  c["max_window_layers"] = p.layers;
  c["model_type"] = dream ? "Dream" : "qwen2";
  c["num_attention_heads"] = p.heads;
  c["num_hidden_layers"] = p.layers;
  c["num_key_value_heads"] = p.kv_heads;
  c["rms_norm_eps"] = 1e-6;
  c["rope_scaling"] = nullptr;
  c["rope_theta"] = 1000000.0;
  c["sliding_window"] = nullptr;
  c["tie_word_embeddings"] = !dream;  // Qwen2.5 small models tie; Dream-7B does not
  c["torch_dtype"] = o.dtype == "bf16" ? "bfloat16" : "float32";
  c["use_cache"] = !dream;
  c["use_sliding_window"] = false;
  c["vocab_size"] = vocab;
  if (o.arch == "fast_dllm_v2") make_fast_dllm_v2(c, p, ids);
  if (dream) apply_variant_config(o.variant, ids, c);
  c["sonde_make_model"] = {{"preset", o.preset}, {"seed", o.seed}, {"dtype", o.dtype}};
  return c;
}

ordered_json generation_config(const MakeOptions& o, const SpecialIds& ids) {
  ordered_json g;
  g["bos_token_id"] = ids.endoftext;
  g["eos_token_id"] = ids.endoftext;
  if (o.arch == "llada") {
    g["pad_token_id"] = ids.endoftext;
  } else if (o.arch == "dream") {
    // Dream-v0's shipped values (model-spec §2).
    g["pad_token_id"] = ids.endoftext;
    g["mask_token_id"] = nullptr;
    g["alg"] = "origin";
    g["alg_temp"] = nullptr;
    g["eps"] = 0.001;
    g["steps"] = 512;
    g["temperature"] = 0.0;
    g["top_p"] = nullptr;
    g["top_k"] = nullptr;
    apply_variant_generation(o.variant, ids, g);
  } else {
    g["do_sample"] = false;
    g["max_new_tokens"] = 2048;
  }
  return g;
}

void write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary);
  out << text;
  if (!out) runtime_error("cannot write {}", file.string());
}

// Scale by role: norms near 1, biases small, projections 1/sqrt(fan_in) so activations stay O(1)
// through the stack, and embeddings N(0,1) so that tied logits are well separated.
struct Init {
  double mean, std;
};
Init init_for(const WeightSpec& w, const std::string& embedding) {
  const bool is_1d = w.shape.rank == 1;
  if (is_1d && (w.name.find("norm") != std::string::npos || w.name.ends_with("ln_f.weight"))) return {1.0, 0.1};
  if (is_1d) return {0.0, 0.1};
  if (w.name == embedding) return {0.0, 1.0};
  return {0.0, 1.0 / std::sqrt(static_cast<double>(w.shape[1]))};
}

// Each tensor is generated in chunks straight into the file: the dream-7b preset is 15 GB in bf16.
void write_random_safetensors(const fs::path& file, const std::vector<WeightSpec>& weights, const std::string& embedding,
                              DType dtype, std::uint64_t seed) {
  std::vector<TensorSpec> specs;
  std::map<std::string, Init> inits;
  for (const auto& w : weights) {
    specs.push_back({w.name, dtype, w.shape});
    inits[w.name] = init_for(w, embedding);
  }
  std::vector<float> f32;
  std::vector<std::uint16_t> b16;
  write_safetensors_streamed(file, specs, {{"format", "pt"}, {"generator", "sonde make-model"}},
                             [&](const TensorSpec& t, std::ostream& out) {
    SplitMix64 rng(tensor_seed(seed, t.name));
    const Init init = inits.at(t.name);
    for (std::int64_t left = t.shape.numel(); left > 0;) {
      const auto n = static_cast<std::size_t>(std::min<std::int64_t>(left, 1 << 20));
      f32.resize(n);
      for (auto& v : f32) v = static_cast<float>(init.mean + init.std * rng.normal());
      if (dtype == DType::bf16) {
        b16.resize(n);
        for (std::size_t i = 0; i < n; ++i) b16[i] = f32_to_bf16(f32[i]);
        out.write(reinterpret_cast<const char*>(b16.data()), static_cast<std::streamsize>(n * 2));
      } else {
        out.write(reinterpret_cast<const char*>(f32.data()), static_cast<std::streamsize>(n * 4));
      }
      left -= static_cast<std::int64_t>(n);
    }
  });
}

void write_tokenizer(const MakeOptions& o, const fs::path& out, const SpecialIds& ids, std::int64_t vocab) {
  if (!o.tokenizer_dir.empty()) {
    bool any = false;
    for (const char* f : {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "added_tokens.json",
                          "special_tokens_map.json"}) {
      const fs::path src = fs::path(o.tokenizer_dir) / f;
      if (fs::exists(src)) fs::copy_file(src, out / f, fs::copy_options::overwrite_existing), any = true;
    }
    if (!any) bad_input("--tokenizer: {} holds no tokenizer.json or vocab.json", o.tokenizer_dir);
    return;
  }
  write_text(out / "tokenizer.json", make_synthetic_tokenizer_json(static_cast<std::size_t>(vocab), special_tokens(ids), o.seed));
  auto tokenizer_config = nlohmann::ordered_json::parse(tokenizer_config_json(o.arch));
  if (o.arch == "dream") apply_variant_tokenizer(o.variant, tokenizer_config);
  write_text(out / "tokenizer_config.json", tokenizer_config.dump(2) + "\n");
}

}  // namespace

int cmd_make_model(const Args& args) {
  MakeOptions o;
  std::string plugin_dir, log_level = "warn";
  po::options_description desc("make-model options");
  desc.add_options()
      ("arch", po::value(&o.arch)->default_value("qwen2"), "qwen2, dream, llada or fast_dllm_v2")
      ("preset", po::value(&o.preset)->default_value("tiny"), "tiny, small, qwen2.5-0.5b, dream-7b, llada-8b, fast-dllm-v2-1.5b, fast-dllm-v2-7b")
      ("variant", po::value(&o.variant)->default_value("dream-v0"),
       "--arch dream: dream-v0, diffucoder or dream-coder (each variant's published files; docs/models.md)")
      ("dtype", po::value(&o.dtype)->default_value("f32"), "weight dtype: f32 or bf16")
      ("vocab", po::value(&o.vocab)->default_value(0), "vocabulary size (0: the preset's)")
      ("seed", po::value(&o.seed)->default_value(0), "random seed")
      ("tokenizer", po::value(&o.tokenizer_dir), "copy tokenizer files from this directory instead of a synthetic one")
      ("out", po::value(&o.out)->required(), "output directory")
      ("force", po::bool_switch(&o.force), "write into a non-empty output directory")
      ("plugin-dir", po::value(&plugin_dir), "look for plugins here first")
      ("log-level", po::value(&log_level)->default_value("warn"), "trace, debug, info, warn, error, off");
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde make-model --arch qwen2|dream|llada|fast_dllm_v2 --preset NAME --out DIR [options]", desc, vm))
    return 0;
  init_logging(log_level);
  make_model(o, plugin_dir);
  return 0;
}

void make_model(const MakeOptions& o, const std::string& plugin_dir) {
  if (o.arch != "qwen2" && o.arch != "dream" && o.arch != "llada" && o.arch != "fast_dllm_v2")
    bad_input("--arch: unknown architecture '{}' (qwen2, dream, llada, fast_dllm_v2)", o.arch);
  if (o.dtype != "f32" && o.dtype != "bf16") bad_input("--dtype: '{}' is not f32 or bf16", o.dtype);
  const Preset preset = find_preset(o.preset);
  const std::int64_t vocab = o.vocab ? o.vocab : preset.vocab;
  check_dream_variant(o.arch, o.variant);
  SpecialIds ids = special_ids(o.arch, vocab, preset.real_vocab);
  add_variant_specials(o.variant, vocab, preset.real_vocab, ids);
  if (vocab < 300 || ids.top >= vocab)
    bad_input("--vocab: {} is too small (at least 300, and above the special ids up to {})", vocab, ids.top);

  const fs::path out(o.out);
  if (fs::exists(out) && !fs::is_empty(out) && !o.force)
    bad_input("--out: {} exists and is not empty (use --force to write into it)", out.string());
  fs::create_directories(out);
  write_text(out / "config.json", model_config(o, preset, vocab, ids).dump(2) + "\n");
  write_text(out / "generation_config.json", generation_config(o, ids).dump(2) + "\n");

  auto& registry = PluginRegistry::instance();
  if (registry.searched().empty()) registry.scan(PluginRegistry::search_path(plugin_dir));
  const ModelConfig config = ModelConfig::load(out);
  auto model = registry.model_for(config.model_type);
  model->configure(config);
  write_random_safetensors(out / "model.safetensors", model->weight_specs(), model->info().embedding_weight,
                           o.dtype == "bf16" ? DType::bf16 : DType::f32, o.seed);
  write_tokenizer(o, out, ids, vocab);
  std::cout << "wrote " << o.arch << " " << o.preset << " (" << o.dtype << ", vocab " << vocab << ", seed " << o.seed
            << ") to " << out.string() << "\n";
}

}  // namespace sonde::cli
