// Sae::load (sae.h): a SAELens folder read and checked, weights laid out for the graph.
// cfg.json as SAELens writes it: flat (up to v5: hook_name at the top, TopK as architecture
// "standard" with activation_fn_str "topk" and activation_fn_kwargs.k) or v6 (hook_name inside
// `metadata`, architecture "topk" with a top-level k). Formulas: docs/sae.md.
#include <sonde/error.h>
#include <sonde/sae.h>
#include <sonde/model_dir.h>
#include <sonde/safetensors.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <optional>

namespace sonde {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct CfgFile {
  std::string path;
  json j;
  const json* meta = nullptr;  // v6's nested metadata, when present

  // The field at the top level, else in metadata; null when in neither.
  const json* find(const char* key) const {
    if (auto it = j.find(key); it != j.end() && !it->is_null()) return &*it;
    if (meta)
      if (auto it = meta->find(key); it != meta->end() && !it->is_null()) return &*it;
    return nullptr;
  }
  [[noreturn]] void bad(const char* key, const std::string& why) const { bad_input("{}: field '{}' {}", path, key, why); }
  std::string str(const char* key, std::optional<std::string> fallback = std::nullopt) const {
    const json* v = find(key);
    if (!v) {
      if (fallback) return *fallback;
      bad(key, "is missing");
    }
    if (!v->is_string()) bad(key, "is " + v->dump() + ", expected a string");
    return v->get<std::string>();
  }
  std::int64_t positive(const char* key, std::optional<std::int64_t> fallback = std::nullopt) const {
    const json* v = find(key);
    if (!v) {
      if (fallback) return *fallback;
      bad(key, "is missing");
    }
    if (!v->is_number_integer() || v->get<std::int64_t>() < 1) bad(key, "is " + v->dump() + ", expected a positive integer");
    return v->get<std::int64_t>();
  }
  bool flag(const char* key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) bad(key, "is " + v->dump() + ", expected true or false");
    return v->get<bool>();
  }
};

CfgFile read_cfg(const fs::path& folder) {
  CfgFile c;
  c.path = (folder / "cfg.json").string();
  std::ifstream in(c.path);
  if (!in) bad_setting("sae", "{}: no cfg.json there (a SAELens folder holds cfg.json and sae_weights.safetensors)", folder.string());
  try {
    c.j = json::parse(in);
  } catch (const json::exception& e) {
    bad_input("{}: not valid JSON ({})", c.path, e.what());
  }
  if (!c.j.is_object()) bad_input("{}: expected a JSON object", c.path);
  for (const char* key : {"metadata", "meta"})
    if (auto it = c.j.find(key); it != c.j.end() && !it->is_null()) {
      if (!it->is_object()) c.bad(key, "is " + it->dump() + ", expected an object");
      c.meta = &*it;
      break;
    }
  return c;
}

SaeConfig parse_cfg(const CfgFile& c, const fs::path& folder) {
  SaeConfig s;
  s.folder = folder.string();
  s.architecture = c.str("architecture", std::string("standard"));  // SAELens's default when absent
  const std::string act = c.str("activation_fn_str", std::string("relu"));
  if (act != "relu" && act != "topk") c.bad("activation_fn_str", "is '" + act + "'; sonde reads relu and topk");
  const std::string& a = s.architecture;
  if (a == "standard" || a == "transcoder") s.arch = act == "topk" ? SaeArch::TopK : SaeArch::Standard;
  else if (a == "jumprelu" || a == "jumprelu_transcoder") s.arch = SaeArch::JumpRelu;
  else if (a == "topk") s.arch = SaeArch::TopK;
  else if (a == "gated") s.arch = SaeArch::Gated;
  else c.bad("architecture", "is '" + a + "': not one of standard, jumprelu, topk, gated, transcoder, jumprelu_transcoder");
  s.transcoder = a == "transcoder" || a == "jumprelu_transcoder";
  s.d_in = c.positive("d_in");
  s.d_sae = c.positive("d_sae");
  s.hook_name = c.str("hook_name");
  if (const json* h = c.find("hook_head_index"); h && !h->is_null())
    c.bad("hook_head_index", "is " + h->dump() + ": SAEs on one attention head are not supported");
  if (s.arch == SaeArch::TopK) {
    if (const json* kw = c.j.find("activation_fn_kwargs") != c.j.end() ? &c.j["activation_fn_kwargs"] : nullptr;
        !c.find("k") && kw && kw->is_object() && kw->contains("k")) {
      if (!(*kw)["k"].is_number_integer() || (*kw)["k"].get<std::int64_t>() < 1)
        c.bad("activation_fn_kwargs.k", "is " + (*kw)["k"].dump() + ", expected a positive integer");
      s.k = (*kw)["k"].get<std::int64_t>();
    } else {
      s.k = c.positive("k");
    }
    if (s.k > s.d_sae) c.bad("k", "is " + std::to_string(s.k) + ", more than d_sae " + std::to_string(s.d_sae));
  }
  s.apply_b_dec_to_input = c.flag("apply_b_dec_to_input", true) && !s.transcoder;
  const std::string norm = c.str("normalize_activations", std::string("none"));
  if (norm == "none") s.norm = SaeNorm::None;
  else if (norm == "expected_average_only_in") s.norm = SaeNorm::ExpectedAverageOnlyIn;
  else if (norm == "constant_norm_rescale") s.norm = SaeNorm::ConstantNormRescale;
  else c.bad("normalize_activations", "is '" + norm + "': not one of none, expected_average_only_in, constant_norm_rescale");
  if (c.flag("finetuning_scaling_factor", false)) c.bad("finetuning_scaling_factor", "is true: not supported");
  const std::string reshape = c.str("reshape_activations", std::string("none"));
  if (reshape != "none" && reshape != "hook_z") c.bad("reshape_activations", "is '" + reshape + "': not none or hook_z");
  s.dtype = c.str("dtype", std::string("float32"));
  if (s.transcoder) {
    s.d_out = c.positive("d_out", s.d_in);
    s.hook_name_out = c.str("hook_name_out");
  } else {
    s.d_out = s.d_in;
    s.hook_name_out = s.hook_name;
  }
  return s;
}

// A tensor of the weights file as f32, checked for shape and a float dtype.
Tensor read(const WeightSource& w, const std::string& file, const std::string& name, const Shape& shape) {
  if (!w.has(name)) bad_input("{}: tensor '{}' is missing", file, name);
  const auto& info = w.info(name);
  if (info.shape != shape) bad_input("{}: tensor '{}' has shape {}, expected {}", file, name, info.shape.str(), shape.str());
  if (!is_float(info.dtype)) bad_input("{}: tensor '{}' has dtype {}, expected a float type", file, name, dtype_name(info.dtype));
  return to_f32(w.view(name));
}

Tensor transposed(const Tensor& m) {
  const std::int64_t R = m.shape()[0], C = m.shape()[1];
  Tensor t(DType::f32, Shape{C, R});
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t c = 0; c < C; ++c) t.data<float>()[c * R + r] = m.data<float>()[r * C + c];
  return t;
}

// bias - b_dec W for W [d_in, d_sae] (in double): SAELens subtracts b_dec from the input before
// the encoder; (x - b_dec) W + b = x W + (b - b_dec W), so the graph's Linear reads x directly.
Tensor folded_bias(const Tensor& bias, const Tensor& w, const Tensor* b_dec) {
  Tensor out = Tensor::copy_of(bias.view());
  if (!b_dec) return out;
  const std::int64_t I = w.shape()[0], N = w.shape()[1];
  for (std::int64_t j = 0; j < N; ++j) {
    double acc = bias.data<float>()[j];
    for (std::int64_t i = 0; i < I; ++i) acc -= static_cast<double>(b_dec->data<float>()[i]) * w.data<float>()[i * N + j];
    out.data<float>()[j] = static_cast<float>(acc);
  }
  return out;
}

}  // namespace

Tensor read_sae_sparsity(const fs::path& folder, std::int64_t d_sae) {
  const fs::path file = folder / "sparsity.safetensors";
  if (!fs::exists(file)) return {};
  const WeightSource w = WeightSource::open(file);
  return read(w, file.string(), "sparsity", Shape{d_sae});
}

std::shared_ptr<const Sae> Sae::load(const fs::path& folder) {
  auto sae = std::make_shared<Sae>();
  sae->cfg_ = parse_cfg(read_cfg(folder), folder);
  const SaeConfig& c = sae->cfg_;
  const fs::path file = folder / "sae_weights.safetensors";
  if (!fs::exists(file)) bad_setting("sae", "{}: no sae_weights.safetensors there", folder.string());
  const WeightSource w = WeightSource::open(file);
  sae->cfg_.weights_sha256 = sha256_file(file);
  const std::string f = file.string();
  const Tensor w_enc = read(w, f, "W_enc", Shape{c.d_in, c.d_sae});
  SaeWeights& o = sae->w_;
  o.w_dec = read(w, f, "W_dec", Shape{c.d_sae, c.d_out});
  o.b_dec = read(w, f, "b_dec", Shape{c.d_out});
  o.dec = transposed(o.w_dec);
  const Tensor* shift = c.apply_b_dec_to_input ? &o.b_dec : nullptr;
  if (c.arch == SaeArch::Gated) {
    const Tensor r_mag = read(w, f, "r_mag", Shape{c.d_sae});
    Tensor w_mag = Tensor::copy_of(w_enc.view());
    for (std::int64_t i = 0; i < c.d_in; ++i)
      for (std::int64_t j = 0; j < c.d_sae; ++j)
        w_mag.data<float>()[i * c.d_sae + j] =
            static_cast<float>(static_cast<double>(w_enc.data<float>()[i * c.d_sae + j]) * std::exp(static_cast<double>(r_mag.data<float>()[j])));
    o.enc_bias = folded_bias(read(w, f, "b_gate", Shape{c.d_sae}), w_enc, shift);
    o.mag_bias = folded_bias(read(w, f, "b_mag", Shape{c.d_sae}), w_mag, shift);
    o.mag = transposed(w_mag);
  } else {
    o.enc_bias = folded_bias(read(w, f, "b_enc", Shape{c.d_sae}), w_enc, shift);
  }
  if (c.arch == SaeArch::JumpRelu) o.threshold = read(w, f, "threshold", Shape{c.d_sae});
  o.enc = transposed(w_enc);
  o.sparsity = read_sae_sparsity(folder, c.d_sae);
  return sae;
}

}  // namespace sonde
