#pragma once
// The decode loops' forward (decode.h) on a loaded Session: full forwards for diffusion, and
// KV-cached forwards for autoregressive decoding when the model supports them.
#include <sonde/decode.h>
#include <sonde/session.h>

namespace sonde {

class SessionDecodeForward : public DecodeForward {
 public:
  explicit SessionDecodeForward(Session& session, bool use_kv_cache = true)
      : session_(session), use_kv_cache_(use_kv_cache) {}
  std::int64_t vocab_size() const override { return session_.config().vocab_size; }
  bool has_kv_cache() const override;
  void reset_cache(std::int64_t batch, std::int64_t capacity) override;
  bool has_slot_cache() const override;
  Tensor forward(const StepInput& in) override;
  void set_taps(const std::vector<std::string>& hooks, HookTap tap) override;
  // The sequences of the next generation, for the session's edits: each row's prompt length and
  // id; forwards from now on are steps 0, 1, ...
  void begin_edit_rows(std::vector<std::int64_t> prompt_len, std::vector<std::string> prompt_id);

 private:
  Session& session_;
  bool use_kv_cache_;
  KvCache cache_;
  KvCache range_scratch_;  // Session::forward_range's working space (dual cache)
  std::set<std::string> taps_;
  HookTap tap_;
  EditCall edit_call_;
};

}  // namespace sonde
