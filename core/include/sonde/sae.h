#pragma once
// Sparse autoencoders and transcoders at hook points (docs/sae.md). A SAELens folder (cfg.json,
// flat or v6's nested `metadata`, and sae_weights.safetensors) is read into an Sae: weights widened
// to f32 and laid out for the graph's Linear (nn.Linear's [N, K]). attach (session.h) inserts its
// nodes after the hooked node (insert_saes), named as SAELens's HookedSAETransformer names them,
// so capture, edits, sinks and every backend treat them like any other node:
//   <hook>.hook_sae_input       the hook's value (another name of the hooked node)
//   <hook>.hook_sae_acts_pre    the encoder's pre-activation   <hook>.hook_sae_acts_post  features
//   <hook>.hook_sae_recons      acts_post W_dec + b_dec (before constant_norm_rescale's undoing)
//   <hook>.hook_sae_output      recons in the hook's scale      <hook>.hook_sae_error  x_out - output
// (with the error term spliced in, the error is that of the activations as encoded: an edit of
// hook_sae_acts_post changes the output, not the error, as in SAELens).
// A transcoder reads <hook> and writes its output hook (hook_out); its nodes are named after <hook>.
#include <sonde/graph.h>
#include <sonde/model.h>
#include <sonde/tensor.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace sonde {

enum class SaeArch { Standard, JumpRelu, TopK, Gated };
enum class SaeNorm { None, ExpectedAverageOnlyIn, ConstantNormRescale };

struct SaeConfig {
  std::string folder;       // for messages
  std::string architecture; // as cfg.json says it ("standard", "jumprelu_transcoder", ...)
  SaeArch arch = SaeArch::Standard;
  bool transcoder = false;
  std::int64_t d_in = 0, d_sae = 0, d_out = 0, k = 0;
  std::string hook_name, hook_name_out;  // as cfg.json gives them (TransformerLens names)
  bool apply_b_dec_to_input = true;
  SaeNorm norm = SaeNorm::None;
  std::string dtype = "float32";
};

// Weights as the graph reads them (f32): Linear's [N, K] layout.
struct SaeWeights {
  Tensor enc;       // [d_sae, d_in]: W_enc^T (gated: the gate path's)
  Tensor enc_bias;  // [d_sae]: b_enc - b_dec W_enc when apply_b_dec_to_input (gated: b_gate - b_dec W_enc)
  Tensor mag;       // gated: [d_sae, d_in] (W_enc * exp(r_mag))^T
  Tensor mag_bias;  // gated: [d_sae] b_mag - b_dec (W_enc * exp(r_mag))
  Tensor threshold; // jumprelu: [d_sae]
  Tensor dec;       // [d_out, d_sae]: W_dec^T
  Tensor b_dec;     // [d_out]
  Tensor w_dec;     // [d_sae, d_out]: W_dec as stored (feature directions, for edits)
};

class Sae {
 public:
  // Reads a SAELens folder. BadInput naming the file, the field and the value: a missing or
  // mistyped field, an unknown architecture or normalisation, a missing tensor or one of the wrong
  // shape or dtype.
  static std::shared_ptr<const Sae> load(const std::filesystem::path& folder);
  const SaeConfig& config() const { return cfg_; }
  const SaeWeights& weights() const { return w_; }

 private:
  SaeConfig cfg_;
  SaeWeights w_;
};

// An SAE attached to a model: resolved hooks (canonical names), and what it does to the forward.
struct AttachedSae {
  std::shared_ptr<const Sae> sae;
  std::string hook;      // canonical: the hook read
  std::string hook_out;  // canonical: the hook written (== hook for an SAE)
  std::vector<std::int64_t> in_row, out_row;  // the hooks' row shapes
  std::string prefix;    // weight names on the backend: "sae.<index>."
  bool splice = false;      // the output hook's consumers read hook_sae_output (+ error) instead
  bool error_term = false;  // splice: hook_sae_output + hook_sae_error (the forward unchanged up to rounding)
};

// Checks an SAE against a model's hook points and resolves its hooks (aliases included): BadInput
// for a hook the model lacks (closest names suggested), a d_in or d_out that is not the hook's
// row size.
AttachedSae resolve_sae(std::shared_ptr<const Sae> sae, const std::vector<HookPoint>& hooks, std::int64_t n_layers,
                        std::size_t index, bool splice, bool error_term);

// The hook points an attached SAE adds, after its hook's.
std::vector<HookPoint> sae_hook_points(const AttachedSae& a);

// Inserts each SAE's nodes after its output hook's node (so a transcoder's input is computed),
// in order; with splice, every later reader of the output hook reads the SAE's output instead.
// Weights are Weight nodes named prefix + "enc", "enc_bias", ... (sae_weight_views), looked up
// in `weights` (the backend they were uploaded to). Runtime error for a hook the graph lacks.
void insert_saes(Graph& g, const std::vector<AttachedSae>& saes, const GraphBuilder::WeightLookup& weights);

// What a run records of its SAEs (run_config_json's key saes): folder, architecture, hooks, widths,
// splice and error term.
nlohmann::json saes_json(const std::vector<AttachedSae>& saes);

// (name, view) of each weight an attached SAE's nodes read, for Backend::upload.
std::vector<std::pair<std::string, TensorView>> sae_weight_views(const AttachedSae& a);

}  // namespace sonde
