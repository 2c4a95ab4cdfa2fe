#pragma once
// Hook names and selection. Canonical names follow TransformerLens (design §4); aliases from
// Hugging Face module paths, hidden_states indices and llama.cpp tags map onto them.
#include <sonde/did_you_mean.h>
#include <sonde/model.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sonde {

// Maps an alias to its canonical hook name, or returns the input when it is not an alias.
// n_layers is needed for hidden_states.{L} (= ln_final.hook_out).
std::string canonical_hook_name(std::string_view name, std::int64_t n_layers);

// A compiled selection: comma-separated terms, each a name, an alias, a glob (`*`, `?`) or a
// layer range `blocks.10-23.hook_mlp_out`.
class HookSelector {
 public:
  static HookSelector parse(std::string_view spec);
  bool empty() const { return terms_.empty(); }
  // The selected hook points, in the model's order. A term that matches nothing is an error
  // (BadInput) that suggests the closest valid names.
  std::vector<HookPoint> resolve(const std::vector<HookPoint>& available, std::int64_t n_layers) const;

 private:
  std::vector<std::string> terms_;
};


}  // namespace sonde
