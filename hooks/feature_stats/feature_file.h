#pragma once
// The feature dashboard file (schema sonde.features/1; docs/sae.md): root attributes as the
// activation file's plus top_n, window, complete; /progress/mark [prompts, rows, steps,
// results_bytes]; /prompts/{prompt_idx, id_bytes, id_offsets}; per hook /features/<hook>/:
// rows, n_fire, frequency, sum, mean_active, max, hist [F, bins], hist_edges [bins + 1],
// top_value [F, top_n] (NaN where a feature fired fewer times), top_row, top_prompt_idx, top_pos,
// top_step (-1 there), top_context [F, top_n, 2 window + 1] (-1 beyond the sequence).
// Written whole under "<path>.tmp", then renamed: a file on disk is always one complete state.
#include "feature_state.h"

#include <sonde/sink.h>

#include <map>
#include <string>
#include <vector>

namespace sonde::feature_stats {

struct FileState {
  RunMetadata meta;
  std::map<std::string, FeatureState> hooks;
  std::vector<std::int64_t> prompt_idx;  // every prompt seen, with its id
  std::vector<std::string> prompt_id;
  CommitMark mark;
  bool complete = false;
  // Per hook, the SAE's own log10 feature density from training (sparsity.safetensors), when
  // its folder has one: written as /features/<hook>/sae_sparsity beside the run's frequency.
  std::map<std::string, std::vector<double>> sae_sparsity;
};

void write_feature_file(const std::string& path, const FileState& s, bool durable);
// The state of `path` for these hooks (BadInput when it lacks one or its run_config_sha256 differs).
FileState read_feature_file(const std::string& path, const std::vector<HookPoint>& hooks, const std::string& run_config_sha);

// A data-parallel run's complete parts (one per model copy, in copy order) as one state, as one
// process would have made it (FeatureState::merge): row numbers follow the parts' concatenation,
// as in the joined activation file; prompts by prompt_idx; the marks added up. Runtime error when
// a part is incomplete, of another run, or holds other hooks or widths than the first.
FileState join_feature_files(const std::vector<std::string>& parts, const std::string& run_config_sha);

}  // namespace sonde::feature_stats
