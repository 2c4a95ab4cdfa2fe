#pragma once
// Base of the Qwen2-family model plugins: everything but info() and configure(), which are
// where the families differ.
#include "decoder.h"

namespace sonde::common {

class DecoderModel : public ModelPlugin {
 public:
  std::vector<HookPoint> hook_points() const override { return common::hook_points(spec_); }
  std::vector<WeightSpec> weight_specs() const override {
    std::vector<WeightSpec> out;
    for (const auto& e : expected_weights(spec_)) out.push_back({e.name, e.shape, e.split});
    return out;
  }
  void load(const WeightSource& w, Backend& backend) override { load_weights(spec_, w, backend); }
  void build(const BatchShape& shape, GraphBuilder& b) const override { build_decoder(spec_, shape, b); }

 protected:
  DecoderSpec spec_;
};

}  // namespace sonde::common
