// sae_feature edits (sae_edits.h): each is one of the existing edit ops.
//   value x:  at <hook>.hook_sae_acts_post, project with the unit vector e_F and value x
//             (EditProject: a - ((a . e_F) - x) e_F sets a_F = x, the rest unchanged)
//   scale s:  at <hook>.hook_sae_acts_post, EditAffine on group F of d_sae one-value groups
//   add x:    spliced SAE: acts_post + x e_F (through the decoder: + x W_dec[F] before the norm's
//             undoing); not spliced: the output hook + x W_dec[F] (EditAffine with W_dec[F])
// Without --sae-splice, value and scale change only the SAE's own points (the model reads the
// hook's value, not the reconstruction).
#include "sae_edits.h"

#include <sonde/error.h>
#include <sonde/hooks.h>

#include <filesystem>

namespace sonde {
namespace {

namespace fs = std::filesystem;

bool same_folder(const std::string& a, const std::string& b) {
  std::error_code e1, e2;
  const auto ca = fs::weakly_canonical(a, e1), cb = fs::weakly_canonical(b, e2);
  return !e1 && !e2 ? ca == cb : a == b;
}

const AttachedSae& find_sae(const std::vector<AttachedSae>& saes, std::int64_t n_layers, const EditSpec& e) {
  if (saes.empty()) bad_input("{}: op sae_feature needs an SAE attached", e.where);
  if (e.sae.empty()) {
    if (saes.size() > 1) bad_input("{}: {} SAEs are attached: name one with 'sae' (its folder or hook)", e.where, saes.size());
    return saes.front();
  }
  const std::string hook = canonical_hook_name(e.sae, n_layers);
  for (const auto& a : saes)
    if (same_folder(a.sae->config().folder, e.sae) || a.hook == hook) return a;
  std::string have;
  for (const auto& a : saes) have += (have.empty() ? "" : ", ") + a.sae->config().folder + " (" + a.hook + ")";
  bad_input("{}: sae '{}' is not attached; attached: {}", e.where, e.sae, have);
}

Tensor unit(std::int64_t n, std::int64_t at, float x = 1.0f) {
  Tensor t(DType::f32, Shape{1, n});
  t.data<float>()[at] = x;
  return t;
}

}  // namespace

Edit sae_feature_edit(const std::vector<AttachedSae>& saes, std::int64_t n_layers, const EditSpec& e, EditPositions positions,
                      EditSteps steps) {
  const AttachedSae& a = find_sae(saes, n_layers, e);
  const SaeConfig& c = a.sae->config();
  if (e.feature < 0 || e.feature >= c.d_sae)
    bad_input("{}: feature {} is out of range: the SAE {} has {} features (0..{})", e.where, e.feature, c.folder, c.d_sae,
              c.d_sae - 1);
  Edit out;
  out.positions = std::move(positions);
  out.steps = std::move(steps);
  out.hook = a.hook + ".hook_sae_acts_post";
  if (e.feature_op == "value") {
    out.op = EditOp::Clamp;
    out.value = static_cast<float>(e.value);
    out.operand = unit(c.d_sae, e.feature);
  } else if (e.feature_op == "scale") {
    out.op = EditOp::Scale;
    out.scale = static_cast<float>(e.scale);
    out.groups = c.d_sae;
    out.heads = {e.feature};
  } else if (e.feature_op == "add") {
    out.op = EditOp::Add;
    out.scale = static_cast<float>(e.scale);
    if (a.splice) {
      out.operand = unit(c.d_sae, e.feature);
    } else {
      out.hook = a.hook_out;
      const Tensor& w = a.sae->weights().w_dec;
      out.operand = Tensor(DType::f32, Shape{1, c.d_out});
      std::copy(w.data<float>() + e.feature * c.d_out, w.data<float>() + (e.feature + 1) * c.d_out, out.operand.data<float>());
    }
  } else {
    bad_input("{}: op sae_feature needs 'value', 'scale' or 'add'", e.where);
  }
  return out;
}

}  // namespace sonde
