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
  void load(const WeightSource& w, Backend& backend) override {
    spec_.shard = shard_plan(spec_, backend);
    load_weights(spec_, w, backend);
  }
  void build(const BatchShape& shape, GraphBuilder& b) const override { build_decoder(spec_, shape, b); }

 protected:
  // What every family of the shared decoder names alike (decoder.cpp builds these names).
  ModelInfo decoder_info() const {
    ModelInfo i;
    i.embedding_weight = spec_.names.embed + ".weight";
    i.final_norm_weight = spec_.names.final_norm + ".weight";
    i.head_weight = (spec_.tied_embeddings ? spec_.names.embed : spec_.names.head) + ".weight";
    i.final_norm_eps = spec_.rms_eps;
    for (std::int64_t l = 0; l < spec_.layers; ++l) {
      const auto layer = std::to_string(l);
      i.past_k.push_back("past_k." + layer);
      i.past_v.push_back("past_v." + layer);
      // Under tensor parallelism the cache holds this rank's kv heads: the local values, not
      // the gathered hooks (decoder.cpp names both).
      const std::string shard = spec_.shard.active() ? "_shard" : "";
      i.new_k.push_back("blocks." + layer + ".attn.hook_rot_k" + shard);
      i.new_v.push_back("blocks." + layer + ".attn.hook_v" + shard);
    }
    if (spec_.shard.active()) i.cache_kv_heads = spec_.shard.kv.size();
    return i;
  }
  DecoderSpec spec_;
};

}  // namespace sonde::common
