// DecodeForward on a Session: stateless full forwards (diffusion, or AR without cache) and
// KV-cached forwards for AR decoding.
#include <sonde/error.h>
#include <sonde/session_decode.h>

namespace sonde {

bool SessionDecodeForward::has_kv_cache() const {
  return use_kv_cache_ && session_.info().decoding == DecodingKind::Autoregressive;
}

void SessionDecodeForward::reset_cache(std::int64_t batch, std::int64_t capacity) {
  cache_ = session_.new_kv_cache(batch, capacity);
}

// Bidirectional attention: a slot's K/V depend on the whole sequence, and the cached modes
// reuse them across steps (an approximation the diffusion loop chooses; decode.h).
bool SessionDecodeForward::has_slot_cache() const {
  return use_kv_cache_ && !session_.info().causal && !session_.info().past_k.empty();
}

Tensor SessionDecodeForward::forward(const StepInput& in) {
  ForwardInput fi{in.batch, in.tokens, in.ids, in.positions, in.key_mask, &edit_call_};
  fi.last_logits_only = in.last_logits_only && !in.fill_cache && in.slots == 0;
  fi.logits_from = in.logits_from, fi.logits_to = in.logits_to;
  struct NextStep {  // the step counts forwards, thrown or not
    EditCall& c;
    ~NextStep() { ++c.step; }
  } next{edit_call_};
  if (in.fill_cache || in.slots > 0) {
    if (!has_slot_cache()) runtime_error("decode: a slot-cache forward on a model without one ({})", session_.info().arch);
    if (in.fill_cache) {
      if (cache_.batch != in.batch || cache_.capacity != in.tokens) cache_ = session_.new_kv_cache(in.batch, in.tokens);
      cache_.filled = 0;
      return session_.forward_cached(fi, cache_, taps_, tap_, in.need_logits);
    }
    if (cache_.filled != in.slots)
      runtime_error("decode: a range of a {}-slot sequence but the cache holds {}", in.slots, cache_.filled);
    return session_.forward_range(fi, cache_, in.first_slot, range_scratch_, taps_, tap_, in.need_logits);
  }
  if (in.use_cache) {
    if (in.past != cache_.filled)
      runtime_error("decode: step reads {} cached slots but the cache holds {}", in.past, cache_.filled);
    return session_.forward_cached(fi, cache_, taps_, tap_, in.need_logits);
  }
  if (in.past != 0) runtime_error("decode: past = {} without a cache", in.past);
  return session_.forward(fi, in.need_logits, taps_, tap_);
}

void SessionDecodeForward::begin_edit_rows(std::vector<std::int64_t> prompt_len, std::vector<std::string> prompt_id) {
  edit_call_ = EditCall{std::move(prompt_len), std::move(prompt_id), 0, {}, {}};
}

void SessionDecodeForward::set_taps(const std::vector<std::string>& hooks, HookTap tap) {
  taps_ = std::set<std::string>(hooks.begin(), hooks.end());
  tap_ = taps_.empty() ? HookTap() : std::move(tap);
}

}  // namespace sonde
