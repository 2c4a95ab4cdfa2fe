// Fuzz target: hook selections (--hooks) and aliases on arbitrary text, against the hook points
// of a 4-layer model. A selection either resolves to hook points of the model, each once and in
// the model's order, or is refused with BadInput.
#include <sonde/error.h>
#include <sonde/hooks.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "fuzz_hooks.h"
#include "fuzz_support.h"

namespace {

[[noreturn]] void broken(const char* what) { sonde::fuzz::broken("hook selector", what); }

const std::vector<sonde::HookPoint>& points() {
  static const std::vector<sonde::HookPoint> p = [] {
    std::vector<sonde::HookPoint> v{{"hook_embed", {64}}};
    for (int l = 0; l < 4; ++l)
      for (const char* h : {"hook_resid_pre", "attn.hook_q", "attn.hook_pattern", "hook_resid_mid", "mlp.hook_post",
                            "hook_resid_post"}) {
        std::vector<std::int64_t> shape{64};
        if (std::string(h) == "attn.hook_q") shape = {4, 16};
        if (std::string(h) == "attn.hook_pattern") shape = {4, sonde::kKeysDim};
        v.push_back({"blocks." + std::to_string(l) + "." + h, shape});
      }
    v.push_back({"ln_final.hook_out", {64}});
    return v;
  }();
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    sonde::canonical_hook_name(input, 4);
    const auto sel = sonde::HookSelector::parse(input);
    const auto got = sel.resolve(points(), 4);
    std::size_t at = 0;
    std::set<std::string> seen;
    for (const auto& h : got) {
      while (at < points().size() && points()[at].name != h.name) ++at;
      if (at == points().size()) broken("a resolved hook that is not the model's, or out of order");
      if (!seen.insert(h.name).second) broken("a hook selected twice");
    }
  } catch (const sonde::Error& e) {
    if (e.kind() != sonde::ErrorKind::BadInput) broken("a runtime error, not bad input");
  }
  return 0;
}

std::vector<std::string> sonde_fuzz_seeds() {
  return {"blocks.*.hook_resid_post,hook_embed", "blocks.1-3.mlp.hook_post", "hidden_states.4", "model.layers.0.mlp",
          "blocks.?.attn.hook_*", ",,", "blocks.99999999999999999999.hook_resid_post", "blocks.3-1.hook_resid_pre"};
}
