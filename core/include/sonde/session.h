#pragma once
// A loaded model on a backend: config, weights, model plugin, executor. One forward pass over a
// batch of token ids returns the logits and hands tapped hooks to a callback.
#include <sonde/config.h>
#include <sonde/executor.h>
#include <sonde/model.h>
#include <sonde/safetensors.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace sonde {

struct SessionOptions {
  std::string model;       // a directory or org/name in the local Hugging Face cache
  std::string backend;     // "" = the fastest available
  int threads = 0;
  std::string plugin_dir;
};

struct ForwardInput {
  std::int64_t batch = 1, tokens = 0;
  std::vector<std::int32_t> ids;        // [B*T]
  std::vector<std::int32_t> positions;  // [B*T]; empty: 0..T-1 per row
  std::vector<std::uint8_t> mask;       // [B*T]; empty: all ones
};

class Session {
 public:
  static std::unique_ptr<Session> open(const SessionOptions& options);
  ~Session();

  const ModelConfig& config() const { return config_; }
  ModelInfo info() const { return model_->info(); }
  std::vector<HookPoint> hook_points() const { return model_->hook_points(); }
  Backend& backend() { return *backend_; }
  const WeightSource& weights() const { return *weights_; }
  const std::filesystem::path& model_dir() const { return dir_; }

  // Runs one forward pass. Hooks named in `taps` are delivered to `tap` as [B, T, *row_shape].
  // Returns logits [B, T, V] f32 when need_logits, else an empty tensor.
  Tensor forward(const ForwardInput& in, bool need_logits, const std::set<std::string>& taps,
                 const Executor::Tap& tap);

 private:
  Session() = default;
  std::filesystem::path dir_;
  ModelConfig config_;
  std::unique_ptr<WeightSource> weights_;
  std::shared_ptr<ModelPlugin> model_;
  std::shared_ptr<Backend> backend_;
  std::shared_ptr<Backend> reference_;
  std::unique_ptr<Executor> executor_;
};

}  // namespace sonde
