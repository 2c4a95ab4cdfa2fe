#pragma once
// Feature edits (op sae_feature, docs/sae.md) as the edits of edits.h.
#include <sonde/edit_spec.h>
#include <sonde/sae.h>

namespace sonde {

// The edit for `e` against the attached SAEs, with its positions and steps already parsed.
// BadInput: no SAE attached, an SAE that is not attached, a feature out of range.
Edit sae_feature_edit(const std::vector<AttachedSae>& saes, std::int64_t n_layers, const EditSpec& e, EditPositions positions,
                      EditSteps steps);

}  // namespace sonde
