// config.json / generation_config.json parsing. Every check names the file, the field and the value.
#include <sonde/config.h>
#include <sonde/error.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace sonde {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string shown_value(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 80) + "...";
  return s;
}

// Field access for one JSON object; `label` names the file in every error.
class Fields {
 public:
  Fields(const json& obj, const std::string& label) : obj_(obj), label_(label) {}

  // Absent and null read the same: Hugging Face writes null for "not set".
  const json* find(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }

  const json& require(const char* key) const {
    const json* v = find(key);
    if (!v) bad_input("{}: field '{}' is missing", label_, key);
    return *v;
  }

  [[noreturn]] void wrong(const char* key, const json& v, const char* expected) const {
    bad_input("{}: field '{}' is {}, expected {}", label_, key, shown_value(v), expected);
  }

  std::int64_t integer(const char* key, const json& v, std::int64_t min, const char* expected) const {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX) ||
        v.get<std::int64_t>() < min)
      wrong(key, v, expected);
    return v.get<std::int64_t>();
  }

  std::int64_t positive_int(const char* key) const { return integer(key, require(key), 1, "a positive integer"); }

  double positive_number(const char* key) const {
    const json& v = require(key);
    if (!v.is_number() || !(v.get<double>() > 0)) wrong(key, v, "a positive number");
    return v.get<double>();
  }

  std::string string(const char* key) const {
    const json& v = require(key);
    if (!v.is_string()) wrong(key, v, "a string");
    return v.get<std::string>();
  }

  std::optional<std::int64_t> opt_int(const char* key, std::int64_t min = 0) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    return integer(key, *v, min, min > 0 ? "a positive integer" : "a non-negative integer");
  }

  std::optional<double> opt_number(const char* key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) wrong(key, *v, "a number");
    return v->get<double>();
  }

  std::optional<bool> opt_bool(const char* key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) wrong(key, *v, "true or false");
    return v->get<bool>();
  }

  std::optional<std::string> opt_string(const char* key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) wrong(key, *v, "a string");
    return v->get<std::string>();
  }

  // eos_token_id is an int in Qwen2 configs and a list in some instruct models.
  std::vector<std::int64_t> token_ids(const char* key) const {
    const json* v = find(key);
    if (!v) return {};
    if (!v->is_array()) return {integer(key, *v, 0, "a token id or a list of token ids")};
    std::vector<std::int64_t> ids;
    for (const auto& x : *v) ids.push_back(integer(key, x, 0, "a list of non-negative token ids"));
    return ids;
  }

  std::vector<std::string> strings(const char* key) const {
    const json* v = find(key);
    if (!v) return {};
    if (!v->is_array()) wrong(key, *v, "a list of strings");
    std::vector<std::string> out;
    for (const auto& x : *v) {
      if (!x.is_string()) wrong(key, *v, "a list of strings");
      out.push_back(x.get<std::string>());
    }
    return out;
  }

 private:
  const json& obj_;
  const std::string& label_;
};

json parse_object(const std::string& text, const std::string& label) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    bad_input("{}: not valid JSON: {}", label, e.what());
  }
  if (!root.is_object()) bad_input("{}: expected a JSON object, got {}", label, shown_value(root));
  return root;
}

std::optional<std::string> read_optional_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Each dimension under its Hugging Face name, or under the name OLMo-derived configs (LLaDA)
// publish for the same quantity: a naming table, not a model switch (design idiom 8).
const char* present_name(const Fields& f, const char* hf, const char* olmo) {
  return f.find(hf) || !f.find(olmo) ? hf : olmo;
}

void read_dimensions(ModelConfig& c, const Fields& f) {
  const auto dim = [&](const char* hf, const char* olmo) { return f.positive_int(present_name(f, hf, olmo)); };
  c.hidden_size = dim("hidden_size", "d_model");
  c.num_hidden_layers = dim("num_hidden_layers", "n_layers");
  c.num_attention_heads = dim("num_attention_heads", "n_heads");
  // OLMo: n_kv_heads null means one kv head per query head (or one in all with multi_query_attention).
  if (!f.find("num_key_value_heads") && f.find("n_heads") && !f.find("n_kv_heads"))
    c.num_key_value_heads = f.opt_bool("multi_query_attention").value_or(false) ? 1 : c.num_attention_heads;
  else
    c.num_key_value_heads = dim("num_key_value_heads", "n_kv_heads");
  // OLMo: mlp_hidden_size null means mlp_ratio * d_model.
  if (!f.find("intermediate_size") && f.find("d_model") && !f.find("mlp_hidden_size"))
    c.intermediate_size = f.positive_int("mlp_ratio") * c.hidden_size;
  else
    c.intermediate_size = dim("intermediate_size", "mlp_hidden_size");
  c.vocab_size = f.positive_int("vocab_size");
  c.max_position_embeddings = dim("max_position_embeddings", "max_sequence_length");
  c.rms_norm_eps = f.positive_number("rms_norm_eps");
  c.rope_theta = f.positive_number("rope_theta");
}

// Head layout: GQA needs whole query groups per kv head, and rotate_half RoPE needs an even head_dim.
void check_heads(ModelConfig& c, const Fields& f, const std::string& label) {
  if (auto hd = f.opt_int("head_dim", 1)) {
    c.head_dim = *hd;
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      bad_input("{}: hidden_size {} is not divisible by num_attention_heads {}", label, c.hidden_size,
                c.num_attention_heads);
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    bad_input("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", label, c.num_attention_heads,
              c.num_key_value_heads);
  if (c.head_dim % 2 != 0) bad_input("{}: head_dim {} is odd; RoPE needs an even head_dim", label, c.head_dim);
}

// Features the Qwen2 blocks do not implement: refuse rather than compute something else.
void reject_unsupported(ModelConfig& c, const Fields& f, const std::string& label) {
  const char* act = present_name(f, "hidden_act", "activation_type");
  c.hidden_act = f.opt_string(act).value_or("silu");
  if (c.hidden_act != "silu")
    bad_input("{}: field '{}' is \"{}\": only \"silu\" is supported", label, act, c.hidden_act);
  if (f.opt_bool("use_sliding_window").value_or(false))
    bad_input("{}: field 'use_sliding_window' is true: sliding-window attention is not supported", label);
  if (const json* rs = f.find("rope_scaling"))
    bad_input("{}: field 'rope_scaling' is {}: RoPE scaling is not supported (expected null)", label, shown_value(*rs));
}

}  // namespace

GenerationConfig parse_generation_config(const std::string& json_text, const std::string& label) {
  const json root = parse_object(json_text, label);
  const Fields f(root, label);
  GenerationConfig g;
  g.eos_token_ids = f.token_ids("eos_token_id");
  g.bos_token_id = f.opt_int("bos_token_id");
  g.pad_token_id = f.opt_int("pad_token_id");
  g.mask_token_id = f.opt_int("mask_token_id");
  g.max_new_tokens = f.opt_int("max_new_tokens");
  g.do_sample = f.opt_bool("do_sample").value_or(false);
  g.temperature = f.opt_number("temperature");
  g.top_p = f.opt_number("top_p");
  g.top_k = f.opt_int("top_k");
  g.repetition_penalty = f.opt_number("repetition_penalty");
  g.steps = f.opt_int("steps", 1);
  g.eps = f.opt_number("eps");
  g.alg = f.opt_string("alg").value_or("");
  g.alg_temp = f.opt_number("alg_temp");
  g.eos_penalty = f.opt_number("eos_penalty");
  g.raw_json = json_text;
  return g;
}

ModelConfig ModelConfig::parse(const std::string& json_text, const std::string& label) {
  const json root = parse_object(json_text, label);
  const Fields f(root, label);
  ModelConfig c;
  c.model_type = f.string("model_type");
  c.architectures = f.strings("architectures");
  read_dimensions(c, f);
  check_heads(c, f, label);
  reject_unsupported(c, f, label);
  c.tie_word_embeddings = f.opt_bool(present_name(f, "tie_word_embeddings", "weight_tying")).value_or(false);
  c.torch_dtype = f.opt_string("torch_dtype").value_or("");
  c.bos_token_id = f.opt_int("bos_token_id");
  c.pad_token_id = f.opt_int("pad_token_id");
  c.mask_token_id = f.opt_int("mask_token_id");
  c.eos_token_ids = f.token_ids("eos_token_id");
  // Validated by the plugin that uses it (its own message); here only taken when well formed.
  if (const auto it = root.find("bd_size"); it != root.end() && it->is_number_integer() && it->get<std::int64_t>() > 0)
    c.bd_size = it->get<std::int64_t>();
  c.raw_json = json_text;
  // Without generation_config.json, Hugging Face derives the generation ids from the model config.
  c.generation.eos_token_ids = c.eos_token_ids;
  c.generation.bos_token_id = c.bos_token_id;
  c.generation.pad_token_id = c.pad_token_id;
  c.generation.raw_json = "{}";
  return c;
}

ModelConfig ModelConfig::load(const fs::path& dir) {
  const fs::path file = dir / "config.json";
  auto text = read_optional_file(file);
  if (!text) bad_input("{}: cannot read the model config: {}", file.string(), std::strerror(errno));
  ModelConfig c = parse(*text, file.string());
  c.dir = dir;
  const fs::path gen_file = dir / "generation_config.json";
  if (fs::exists(gen_file)) {
    auto gen = read_optional_file(gen_file);
    if (!gen) bad_input("{}: cannot read: {}", gen_file.string(), std::strerror(errno));
    c.generation = parse_generation_config(*gen, gen_file.string());
  }
  return c;
}

}  // namespace sonde
