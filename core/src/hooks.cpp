// Hook aliases and selection (design §4). Aliases map onto canonical TransformerLens-style names;
// a selection term is a name, an alias, a glob or a layer range, resolved once against the
// model's hook list.
#include <sonde/error.h>
#include <sonde/hooks.h>

#include <algorithm>
#include <charconv>
#include <regex>

namespace sonde {
namespace {

struct AliasRule {
  std::regex pattern;  // one capture group: the layer index
  std::string canonical;  // "{}" is replaced by the layer index
};

// Hugging Face module paths (the module's output) and llama.cpp graph tensor names.
const std::vector<AliasRule>& alias_rules() {
  static const std::vector<AliasRule> rules = [] {
    const std::pair<const char*, const char*> table[] = {
        {R"(model\.layers\.(\d+))", "blocks.{}.hook_resid_post"},
        {R"(model\.layers\.(\d+)\.input_layernorm)", "blocks.{}.ln1.hook_out"},
        {R"(model\.layers\.(\d+)\.self_attn\.q_proj)", "blocks.{}.attn.hook_q"},
        {R"(model\.layers\.(\d+)\.self_attn\.k_proj)", "blocks.{}.attn.hook_k"},
        {R"(model\.layers\.(\d+)\.self_attn\.v_proj)", "blocks.{}.attn.hook_v"},
        {R"(model\.layers\.(\d+)\.self_attn(\.o_proj)?)", "blocks.{}.hook_attn_out"},
        {R"(model\.layers\.(\d+)\.post_attention_layernorm)", "blocks.{}.ln2.hook_out"},
        {R"(model\.layers\.(\d+)\.mlp\.gate_proj)", "blocks.{}.mlp.hook_pre"},
        {R"(model\.layers\.(\d+)\.mlp\.up_proj)", "blocks.{}.mlp.hook_pre_linear"},
        {R"(model\.layers\.(\d+)\.mlp(\.down_proj)?)", "blocks.{}.hook_mlp_out"},
        {R"(l_out-(\d+))", "blocks.{}.hook_resid_post"},
        {R"(attn_norm-(\d+))", "blocks.{}.ln1.hook_out"},
        {R"(Qcur-(\d+))", "blocks.{}.attn.hook_q"},
        {R"(Kcur-(\d+))", "blocks.{}.attn.hook_k"},
        {R"(Vcur-(\d+))", "blocks.{}.attn.hook_v"},
        {R"(kqv_out-(\d+))", "blocks.{}.attn.hook_z"},
        {R"(attn_out-(\d+))", "blocks.{}.hook_attn_out"},
        {R"(ffn_inp-(\d+))", "blocks.{}.hook_resid_mid"},
        {R"(ffn_norm-(\d+))", "blocks.{}.ln2.hook_out"},
        {R"(ffn_out-(\d+))", "blocks.{}.hook_mlp_out"},
        // TransformerLens: the norms' outputs, and the attention and MLP inputs.
        {R"(blocks\.(\d+)\.ln1\.hook_normalized)", "blocks.{}.ln1.hook_out"},
        {R"(blocks\.(\d+)\.ln2\.hook_normalized)", "blocks.{}.ln2.hook_out"},
        {R"(blocks\.(\d+)\.hook_mlp_in)", "blocks.{}.hook_resid_mid"},
        // TransformerLens 3 (TransformerBridge): every component's hook_in / hook_out.
        {R"(blocks\.(\d+)\.hook_in)", "blocks.{}.hook_resid_pre"},
        {R"(blocks\.(\d+)\.hook_out)", "blocks.{}.hook_resid_post"},
        {R"(blocks\.(\d+)\.ln1\.hook_in)", "blocks.{}.hook_resid_pre"},
        {R"(blocks\.(\d+)\.attn\.hook_in)", "blocks.{}.ln1.hook_out"},
        {R"(blocks\.(\d+)\.attn\.hook_out)", "blocks.{}.hook_attn_out"},
        {R"(blocks\.(\d+)\.ln2\.hook_in)", "blocks.{}.hook_resid_mid"},
        {R"(blocks\.(\d+)\.mlp\.hook_in)", "blocks.{}.ln2.hook_out"},
        {R"(blocks\.(\d+)\.mlp\.hook_out)", "blocks.{}.hook_mlp_out"},
        {R"(blocks\.(\d+)\.attn\.q\.hook_out)", "blocks.{}.attn.hook_q"},
        {R"(blocks\.(\d+)\.attn\.k\.hook_out)", "blocks.{}.attn.hook_k"},
        {R"(blocks\.(\d+)\.attn\.v\.hook_out)", "blocks.{}.attn.hook_v"},
        {R"(blocks\.(\d+)\.attn\.o\.hook_in)", "blocks.{}.attn.hook_z"},
    };
    std::vector<AliasRule> r;
    for (const auto& [re, canon] : table) r.push_back({std::regex(re), canon});
    return r;
  }();
  return rules;
}

std::string replace_index(std::string canon, const std::string& idx) {
  return canon.replace(canon.find("{}"), 2, idx);
}

bool glob_match(std::string_view pat, std::string_view s) {
  // Iterative matcher with single-star backtracking: linear in practice for hook names.
  std::size_t p = 0, i = 0, star = std::string_view::npos, mark = 0;
  while (i < s.size()) {
    if (p < pat.size() && (pat[p] == '?' || pat[p] == s[i])) {
      ++p, ++i;
    } else if (p < pat.size() && pat[p] == '*') {
      star = p++, mark = i;
    } else if (star != std::string_view::npos) {
      p = star + 1, i = ++mark;
    } else {
      return false;
    }
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  return std::string(s.substr(b, s.find_last_not_of(" \t") - b + 1));
}

// A layer index from a hook term; numbers too large for any model are bad input, not a crash.
std::int64_t layer_number(const std::string& digits, const std::string& term) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size()) bad_setting("hooks", "'{}': layer number {} is out of range", term, digits);
  return v;
}

// "blocks.10-23.hook_mlp_out" -> the names for layers 10..23; returns false when not a range.
bool expand_range(const std::string& term, std::int64_t n_layers, std::vector<std::string>& out) {
  static const std::regex range(R"(blocks\.(\d+)-(\d+)\.(.+))");
  std::smatch m;
  if (!std::regex_match(term, m, range)) return false;
  const std::int64_t a = layer_number(m[1], term), b = layer_number(m[2], term);
  if (a > b) bad_setting("hooks", "range '{}' runs backwards ({} > {})", term, a, b);
  if (b >= n_layers) bad_setting("hooks", "range '{}' goes past the last layer (the model has {} layers: 0..{})", term, n_layers, n_layers - 1);
  for (std::int64_t i = a; i <= b; ++i) out.push_back("blocks." + std::to_string(i) + "." + m[3].str());
  return true;
}

}  // namespace

bool HookPoint::per_sequence() const {
  return std::find(row_shape.begin(), row_shape.end(), kKeysDim) != row_shape.end();
}

std::string canonical_hook_name(std::string_view name, std::int64_t n_layers) {
  const std::string s(name);
  static const std::regex hidden(R"(hidden_states\.(\d+)|hidden_states\[(\d+)\])");
  std::smatch m;
  if (std::regex_match(s, m, hidden)) {
    const std::int64_t k = layer_number(m[1].matched ? m[1].str() : m[2].str(), s);
    if (k == 0) return "hook_embed";
    if (k == n_layers) return "ln_final.hook_out";
    if (k > n_layers) bad_setting("hooks", "'{}' is past the last hidden state (the model has {} layers, so 0..{})", s, n_layers, n_layers);
    return "blocks." + std::to_string(k - 1) + ".hook_resid_post";
  }
  // An SAE's points (sae.h) follow the name of the hook they hang on, alias or not.
  if (const auto at = s.find(".hook_sae_"); at != std::string::npos && at > 0)
    return canonical_hook_name(s.substr(0, at), n_layers) + s.substr(at);
  if (s == "model.embed_tokens" || s == "inp_embd" || s == "embed.hook_out") return "hook_embed";
  if (s == "model.norm" || s == "result_norm" || s == "ln_final.hook_normalized" || s == "unembed.hook_in")
    return "ln_final.hook_out";
  if (s == "lm_head" || s == "result_output" || s == "unembed.hook_out") return "hook_logits";
  if (s == "ln_final.hook_in" && n_layers > 0) return "blocks." + std::to_string(n_layers - 1) + ".hook_resid_post";
  for (const auto& rule : alias_rules())
    if (std::regex_match(s, m, rule.pattern)) return replace_index(rule.canonical, m[1].str());
  return s;
}

HookSelector HookSelector::parse(std::string_view spec) {
  HookSelector sel;
  std::size_t start = 0;
  while (start <= spec.size()) {
    const auto comma = spec.find(',', start);
    const auto term = trim(spec.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (!term.empty()) sel.terms_.push_back(term);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return sel;
}

std::vector<HookPoint> HookSelector::resolve(const std::vector<HookPoint>& available, std::int64_t n_layers) const {
  std::vector<bool> chosen(available.size(), false);
  std::vector<std::string> names;
  for (const auto& h : available) names.push_back(h.name);
  for (const auto& term : terms_) {
    std::vector<std::string> wanted;
    if (!expand_range(term, n_layers, wanted)) wanted.push_back(canonical_hook_name(term, n_layers));
    for (const auto& w : wanted) {
      bool hit = false;
      // Attention patterns are large and computed on the slow path, so a glob takes them only
      // when it names them ("blocks.*.attn.hook_pattern"), never as a side effect of "blocks.0.*".
      const bool glob = w.find_first_of("*?") != std::string::npos;
      const bool names_patterns = w.find("hook_pattern") != std::string::npos;
      for (std::size_t i = 0; i < available.size(); ++i) {
        if (glob && available[i].per_sequence() && !names_patterns) continue;
        if (glob_match(w, available[i].name)) chosen[i] = hit = true;
      }
      if (hit) continue;
      bad_setting("hooks", "'{}' matches no hook point{} (list them with `sonde hooks`)", w, did_you_mean(w, names));
    }
  }
  std::vector<HookPoint> out;
  for (std::size_t i = 0; i < available.size(); ++i)
    if (chosen[i]) out.push_back(available[i]);
  return out;
}

}  // namespace sonde
