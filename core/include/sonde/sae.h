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
#include <sonde/backend.h>
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
  std::string weights_sha256;  // of sae_weights.safetensors: which weights a run used, in its files
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
  // [d_sae] SAELens's log10 feature density from training (sparsity.safetensors); empty when the
  // folder has none. Not used by the graph: the features sink writes it beside its frequencies.
  Tensor sparsity;
};

// `folder`/sparsity.safetensors's tensor `sparsity` as f32 [d_sae]; an empty tensor when the file
// is absent. BadInput naming the file for a missing tensor, another shape or a non-float dtype.
Tensor read_sae_sparsity(const std::filesystem::path& folder, std::int64_t d_sae);

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

// What a run records of its SAEs (run_config_json's key saes, and the root attribute saes_json):
// folder (absolute: path), architecture, hook_name as cfg.json gives it and the canonical hooks,
// widths, k, the weights' sha256, splice and error term.
nlohmann::json saes_json(const std::vector<AttachedSae>& saes);

// Whether `hook` is an SAE's feature activations (<hook>.hook_sae_acts_post): what sparse storage
// and the features sink take.
bool sae_acts_post_hook(const std::string& hook);

// The entries sparse storage keeps of one row of feature activations (--sae-sparse,
// docs/hdf5-layout.md): its non-zero values (top_k 0) or the top_k largest of them (ties: the
// lower index), as ascending feature indices in `idx`.
void sparse_row_entries(const float* row, std::int64_t n, std::int64_t top_k, std::vector<std::int32_t>& idx);

// The SAE's encoder and decoder on host f32 rows, by the formulas the graph runs (docs/sae.md
// "Exact formulas"; dot products in double): encode gives hook_sae_acts_post [rows, d_sae] of
// rows x [rows, d_in]; decode gives hook_sae_recons [rows, d_out] (f W_dec + b_dec, before
// constant_norm_rescale's undoing) of rows f [rows, d_sae]. For the Python package's
// sae.encode / sae.decode on NumPy arrays.
std::vector<float> sae_encode(const Sae& sae, const float* x, std::int64_t rows);
std::vector<float> sae_decode(const Sae& sae, const float* f, std::int64_t rows);

// A weight an attached SAE's nodes read: its Weight node's name and view, for Backend::upload,
// and whether it is hinted WeightHint::KeepPacked: the encoder's Linear weights (enc, and mag when
// gated), which every forward runs over all its rows, so a backend that rearranges a Linear's
// weight per call (the threaded backend's packed GEMM) does it once instead. The decoder runs for
// the recons hooks only: a packed copy of it would be memory for no gain.
struct SaeWeightView {
  std::string name;
  TensorView view;
  bool keep_packed = false;
};
std::vector<SaeWeightView> sae_weight_views(const AttachedSae& a);

// Uploads those weights to `backend` and hints the keep_packed ones.
void upload_sae_weights(Backend& backend, const AttachedSae& a);

}  // namespace sonde
