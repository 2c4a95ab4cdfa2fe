// run() on a loaded Session: the Session as the run layer's RunModel.
#include <sonde/run.h>
#include <sonde/session_decode.h>

#include <optional>

namespace sonde {
namespace {

class SessionModel final : public RunModel {
 public:
  explicit SessionModel(Session& s) : s_(s) {}
  const ModelConfig& config() const override { return s_.config(); }
  const ModelInfo& info() const override { return s_.info(); }
  // With edits, each edited hook's value before its first edit is a hook too: <hook>.pre_edit.
  std::vector<HookPoint> hook_points() const override {
    auto hooks = s_.hook_points();
    const auto n = hooks.size();
    for (std::size_t i = 0; i < n; ++i)
      for (const auto& e : s_.edits())
        if (e.hook == hooks[i].name) {
          hooks.push_back({hooks[i].name + ".pre_edit", hooks[i].row_shape});
          break;
        }
    return hooks;
  }
  void set_edits(std::vector<Edit> edits) override { s_.set_edits(std::move(edits)); }
  void begin_rows(const std::vector<std::int64_t>& prompt_len, const std::vector<std::string>& ids) override {
    call_ = EditCall{prompt_len, ids, 0, {}, {}};
    static_cast<SessionDecodeForward&>(decoder()).begin_edit_rows(prompt_len, ids);
  }
  const Tokenizer* tokenizer() const override { return s_.tokenizer(); }
  std::vector<AttachedSae> saes() const override { return s_.saes(); }
  std::string backend_name() const override { return s_.backend_name(); }
  std::string compute() const override { return s_.compute(); }
  std::filesystem::path model_dir() const override { return s_.model_dir(); }
  Session* session() override { return &s_; }
  DecodeForward& decoder() override {
    if (!decoder_) decoder_.emplace(s_);
    return *decoder_;
  }
  EngineModel* engine_model() override {
    if (!engine_) engine_ = session_engine_model(s_);
    return engine_.get();
  }
  Tensor forward(const std::vector<std::int32_t>& ids, const std::set<std::string>& taps, const HookTap& tap,
                 bool need_logits) override {
    ForwardInput in;
    in.tokens = static_cast<std::int64_t>(ids.size());
    in.ids = ids;
    in.edit = &call_;
    return s_.forward(in, need_logits, taps, tap);
  }

 private:
  Session& s_;
  std::optional<SessionDecodeForward> decoder_;
  std::unique_ptr<EngineModel> engine_;
  EditCall call_;
};

}  // namespace

RunResult run(Session& session, const std::vector<Request>& requests, const RunOptions& options) {
  SessionModel m(session);
  if (options.job || !session.backend().process_group()) return run(m, requests, options);
  RunOptions o = options;
  o.job = session.backend().process_group();
  o.tensor_parallel = session.backend().info().tensor_parallel;
  return run(m, requests, o);
}

EngineRequest engine_request(Session& s, const Request& r, const RunOptions& o, std::int64_t index) {
  SessionModel m(s);
  return engine_request(static_cast<const RunModel&>(m), r, o, index);
}

CaptureSpec make_capture_spec(Session& s, const CaptureSettings& settings, bool per_sequence_ok) {
  SessionModel m(s);
  return make_capture_spec(static_cast<const RunModel&>(m), settings, per_sequence_ok);
}

}  // namespace sonde
