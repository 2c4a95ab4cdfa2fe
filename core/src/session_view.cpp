#include <sonde/error.h>
#include <sonde/session_view.h>

namespace sonde {
namespace {

class RequestView final : public RunModel {
 public:
  explicit RequestView(Session& s) : s_(s) {}
  const ModelConfig& config() const override { return s_.config(); }
  const ModelInfo& info() const override { return s_.info(); }
  std::vector<HookPoint> hook_points() const override { return s_.hook_points(); }
  std::vector<AttachedSae> saes() const override { return s_.saes(); }
  const Tokenizer* tokenizer() const override { return s_.tokenizer(); }
  std::string backend_name() const override { return s_.backend_name(); }
  std::string compute() const override { return s_.compute(); }
  std::filesystem::path model_dir() const override { return s_.model_dir(); }
  DecodeForward& decoder() override { runtime_error("this view prepares requests; the engine runs them"); }
  Tensor forward(const std::vector<std::int32_t>&, const std::set<std::string>&, const HookTap&, bool) override {
    runtime_error("this view prepares requests; the engine runs them");
  }

 private:
  Session& s_;
};

}  // namespace

std::unique_ptr<RunModel> session_request_view(Session& session) { return std::make_unique<RequestView>(session); }

}  // namespace sonde
