#pragma once
// Shared by the autoregressive and diffusion captures: the tapped values of the latest forward
// and the copying of one slot's row of every selected hook into a CapturedPrompt.
#include <sonde/capture.h>

#include <functional>
#include <map>
#include <string>

namespace sonde::capture_detail {

// The diffusion state of one slot (is_diffusion_state_hook), NaN-free except confidence.
struct StateValues {
  float token = 0, confidence = 0, transfer = 0;
};

// Installs taps on `model` for the selected forward hooks for as long as it lives; keeps f32
// copies [B, T, *row] of the latest forward's values.
class TapStore {
 public:
  TapStore(DecodeForward& model, const CaptureSpec& spec);
  ~TapStore();
  TapStore(const TapStore&) = delete;
  TapStore& operator=(const TapStore&) = delete;

  // Appends slot `slot` of batch row `b` of every selected hook to `cap`, with its /rows entry.
  void append_row(CapturedPrompt& cap, std::int64_t b, std::int64_t slot, const RowRecord& rec,
                  const StateValues& state) const;
  // The same with each forward hook's values from `source(hook)` (numel(row_shape) floats).
  void append_row_from(CapturedPrompt& cap, const RowRecord& rec, const StateValues& state,
                       const std::function<const float*(const HookPoint&)>& source) const;
  // Slot `slot` of batch row `b` of forward hook `hook` in the latest forward.
  const float* row(const std::string& hook, std::int64_t b, std::int64_t slot) const;

 private:
  DecodeForward& model_;
  const CaptureSpec& spec_;
  std::map<std::string, Tensor> values_;
};

// A DecodeForward that forwards to `inner`, then calls `after` with the input (the taps of
// that call are then in the TapStore).
class AfterForward : public DecodeForward {
 public:
  AfterForward(DecodeForward& inner, std::function<void(const StepInput&)> after)
      : inner_(inner), after_(std::move(after)) {}
  std::int64_t vocab_size() const override { return inner_.vocab_size(); }
  bool has_kv_cache() const override { return inner_.has_kv_cache(); }
  void reset_cache(std::int64_t b, std::int64_t c) override { inner_.reset_cache(b, c); }
  bool has_slot_cache() const override { return inner_.has_slot_cache(); }
  Tensor forward(const StepInput& in) override {
    Tensor logits = inner_.forward(in);
    after_(in);
    return logits;
  }

 private:
  DecodeForward& inner_;
  std::function<void(const StepInput&)> after_;
};

// Floats in one row of a hook with a fixed row shape.
std::int64_t row_numel(const HookPoint& h);

// Kind of a prompt slot's row: Special for the spec's special ids, else Prompt.
RowKind prompt_kind(const CaptureSpec& spec, std::int32_t token);

}  // namespace sonde::capture_detail
