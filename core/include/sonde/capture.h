#pragma once
// Activation capture during generation (design §5 capture policy). The decode loops run over a
// forward that taps the selected hooks; the capture picks rows by position policy (which slots)
// and, for diffusion, by step policy (which denoising steps), and returns them per prompt, ready
// for a Sink in prompt order. With no hooks selected nothing is tapped or copied.
#include <sonde/decode.h>
#include <sonde/model.h>
#include <sonde/sink.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace sonde {

// all: every real (non-pad) slot; prompt: prompt slots; generated: generated slots;
// last: the last real slot of the prompt (autoregressive) or of the canvas (diffusion).
enum class PositionPolicy { All, Prompt, Generated, Last };
PositionPolicy parse_position_policy(std::string_view text);  // BadInput naming the choices
std::string position_policy_name(PositionPolicy p);

// Diffusion steps captured. commit: each slot once, from the forward of the step that unmasks
// it (kind committed); final: one extra forward over the final canvas; all: every step;
// every:K: steps 0, K, 2K, ... and the last.
struct StepPolicy {
  enum class Kind { Commit, Final, All, Every } kind = Kind::Commit;
  std::int64_t every = 1;
};
StepPolicy parse_step_policy(std::string_view text);  // "commit", "final", "all", "every:K"
std::string step_policy_name(const StepPolicy& p);

// The diffusion loop's own state as hooks (design §4), one scalar per row: the canvas token
// after the step, this step's confidence (NaN where none was computed), 1 if committed now.
std::vector<HookPoint> diffusion_state_hooks();
bool is_diffusion_state_hook(std::string_view name);

// BadInput for hooks whose rows change length during generation (attn.hook_pattern): generation
// and batch capture only hooks with fixed row shapes; `sonde forward` captures the rest.
void require_fixed_row_shapes(const std::vector<HookPoint>& hooks);

struct CaptureSpec {
  std::vector<HookPoint> hooks;  // selected, in the model's order
  PositionPolicy positions = PositionPolicy::All;
  StepPolicy steps;
  bool record_steps = false;                        // diffusion: fill CapturedPrompt::steps
  std::function<bool(std::int32_t)> is_special;     // prompt tokens of kind Special
  bool active() const { return !hooks.empty() || record_steps; }
};

// One prompt's capture: its /rows entries and, per hook, the rows' values (row-major floats,
// rows x numel(row_shape)) in the same order; diffusion adds one /steps entry per step.
struct CapturedPrompt {
  std::vector<RowRecord> rows;
  std::map<std::string, std::vector<float>> acts;
  std::vector<StepRecord> steps;
};

// Hands one whole prompt to the sink: each hook's rows, the /rows entries, /steps, end_prompt.
void write_captured(Sink& sink, const CaptureSpec& spec, const CapturedPrompt& cap, const PromptRecord& prompt);
// The same for `hooks` only (a subset of the spec's: those a sink wants).
void write_captured(Sink& sink, const std::vector<HookPoint>& hooks, const CapturedPrompt& cap,
                    const PromptRecord& prompt);

// generate_autoregressive, capturing prompt rows at prefill (step -1) and each generated
// token's row from the forward that reads it (step = the step that chose it). prompt_idx gives
// each prompt's index in the input; RowRecords carry it.
struct ArCaptureResult {
  std::vector<Completion> completions;
  std::vector<CapturedPrompt> captured;  // per prompt; empty when !spec.active()
};
ArCaptureResult generate_autoregressive_captured(DecodeForward& model,
                                                 const std::vector<std::vector<std::int32_t>>& prompts,
                                                 ArOptions options, const CaptureSpec& spec,
                                                 const std::vector<std::int64_t>& prompt_idx,
                                                 const ArCallback& on_step = {});

struct DiffusionCaptureResult {
  DiffusionResult result;
  std::vector<CapturedPrompt> captured;
};
DiffusionCaptureResult diffusion_generate_captured(DecodeForward& model,
                                                   const std::vector<std::vector<std::int32_t>>& prompts,
                                                   const DiffusionOptions& options, const CaptureSpec& spec,
                                                   const std::vector<std::int64_t>& prompt_idx,
                                                   const DiffusionCallback& on_step = {});

}  // namespace sonde
