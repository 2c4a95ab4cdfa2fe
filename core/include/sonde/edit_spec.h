#pragma once
// Edits as a user writes them (an --edits JSON file, a --steer short form, or the Python API):
// a hook selection, an operation and its arguments, and which rows and steps. resolve_edits
// turns them into the edits a Session inserts (edits.h), checking everything against the model
// before any output exists.
#include <sonde/edits.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sonde {

class RunModel;

struct EditSpec {
  std::string where;      // for messages: "e.json: edit 2", "steer 'HOOK=v.npy*4'"
  std::string hook;       // a selection (hooks.h): name, alias, glob or range; each match is edited
  std::string op;         // add, scale, zero, mean, project_out, clamp, patch, host
  std::string source;     // add: the vector; project_out, clamp: the direction (FILE.npy or
                          // FILE.h5:/dataset); mean: a stats file (its /stats/<hook>/mean) or
                          // FILE.h5:/dataset; patch: a sonde activation file
  double scale = 1.0;     // add: x + scale * v; scale: the factor
  double value = 0.0;     // clamp: the component's new value
  nlohmann::json positions = "all";  // "all", "prompt", "generated" or a list of positions
  std::string steps = "all";         // "all", "A-B", "A" or "every:K"
  std::vector<std::int64_t> heads;   // per-head hooks: the heads edited (empty: all)
  // sae_feature (docs/sae.md): the SAE (its folder as given to --sae, or its hook; empty when one
  // is attached), the feature, and what is done to it: "value" (set to `value`), "scale" (times
  // `scale`) or "add" (`scale` times W_dec[feature] added: the steering vector of the feature).
  std::string sae;
  std::int64_t feature = -1;
  std::string feature_op;
  EditFn fn;                         // op host: the function (not recorded)

  nlohmann::json to_json() const;    // recorded in run_config_json
};

// An --edits file: {"edits": [ {...}, ... ]} or a bare list; keys hook, op, vector | direction |
// stats | source, scale | factor, value, positions, steps, heads. BadInput naming the file,
// the edit's index and the key.
std::vector<EditSpec> parse_edits_file(const std::string& path);
std::vector<EditSpec> parse_edits_json(const nlohmann::json& j, const std::string& where);
// --steer 'HOOK=SOURCE*SCALE' (the scale optional, default 1): an add at every position.
EditSpec parse_steer(const std::string& text);

// What bounds an edit's positions and steps in a run.
struct EditLimits {
  bool diffusion = false;
  std::int64_t max_position = 0;   // exclusive: the longest sequence the run can see
  std::int64_t steps = 0;          // diffusion: the forwards of a generation (steps, +1 for final capture)
  std::vector<std::string> prompt_ids;  // patch: each must be in the source
  // patch: the tokens of each prompt id (its prompt), checked against the source's
  std::vector<std::vector<std::int32_t>> prompt_tokens;
};

// The edits for a model: hooks resolved (closest names suggested), vectors read and checked
// (length, dtype, non-zero norm for directions, normalised), positions and steps checked
// against `limits`, patch sources opened and matched to the model and the prompts. BadInput.
std::vector<Edit> resolve_edits(const RunModel& m, const std::vector<EditSpec>& specs, const EditLimits& limits);

}  // namespace sonde
