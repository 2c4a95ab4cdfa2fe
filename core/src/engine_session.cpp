// The engine's model on a loaded Session (engine.h): each merged forward is one of the session's
// forward, forward_cached or forward_range calls, with the engine's EditCall.
#include <sonde/engine.h>
#include <sonde/error.h>

namespace sonde {
namespace {

class SessionEngineModel : public EngineModel {
 public:
  SessionEngineModel(Session& s, bool use_kv_cache) : s_(s), use_kv_cache_(use_kv_cache) {}
  std::int64_t vocab_size() const override { return s_.config().vocab_size; }
  bool has_kv_cache() const override {
    return use_kv_cache_ && s_.info().decoding == DecodingKind::Autoregressive && !s_.info().past_k.empty();
  }
  bool has_slot_cache() const override { return use_kv_cache_ && !s_.info().causal && !s_.info().past_k.empty(); }
  KvCache new_cache(std::int64_t batch, std::int64_t capacity) const override { return s_.new_kv_cache(batch, capacity); }
  void set_edits(std::vector<Edit> edits) override { s_.set_edits(std::move(edits)); }
  bool only_with_logits(const std::string& hook) const override { return hook == "hook_logits"; }

  Tensor forward(const EngineBatch& b) override {
    const StepInput& in = b.step;
    ForwardInput fi{in.batch, in.tokens, in.ids, in.positions, in.key_mask, &b.call};
    fi.last_logits_only = in.last_logits_only && !in.fill_cache && in.slots == 0;
    fi.logits_from = in.logits_from, fi.logits_to = in.logits_to;
    const Executor::Tap tap = b.tap ? Executor::Tap(b.tap) : Executor::Tap();
    if (in.fill_cache) {
      KvCache& c = *b.cache;
      if (c.batch != in.batch || c.capacity != in.tokens) c = s_.new_kv_cache(in.batch, in.tokens);
      c.filled = 0;
      return s_.forward_cached(fi, c, b.taps, tap, in.need_logits);
    }
    if (in.slots > 0) {
      if (b.cache->filled != in.slots)
        runtime_error("engine: a range of a {}-slot sequence but the cache holds {}", in.slots, b.cache->filled);
      return s_.forward_range(fi, *b.cache, in.first_slot, *b.scratch, b.taps, tap, in.need_logits);
    }
    if (in.use_cache) {
      if (b.cache->filled != in.past)
        runtime_error("engine: a step reads {} cached slots but the cache holds {}", in.past, b.cache->filled);
      return s_.forward_cached(fi, *b.cache, b.taps, tap, in.need_logits);
    }
    return s_.forward(fi, in.need_logits, b.taps, tap);
  }

 private:
  Session& s_;
  bool use_kv_cache_;
};

}  // namespace

std::unique_ptr<EngineModel> session_engine_model(Session& session, bool use_kv_cache) {
  return std::make_unique<SessionEngineModel>(session, use_kv_cache);
}

}  // namespace sonde
