#pragma once
// A fake model for the run layer's tests (test_run_*.cpp): a RunModel whose decoder is a tiny
// hand-written language model and whose sinks are GoogleMock mocks. Nothing is loaded.
//
// The fake LM: the logits of a slot holding token x favour (x + 1) mod kEos, so greedy decoding
// from a prompt ending in x gives x+1, x+2, ...; a hook's value at a slot holding x is the row
// {x, x + 0.5, layer, slot's position in its row} (4 floats), so tests can tell which token and
// which slot a captured row came from.
#include <sonde/decode.h>
#include <sonde/run.h>
#include <sonde/sink.h>

#include <gmock/gmock.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace sonde::test {

constexpr std::int64_t kVocab = 40;
constexpr std::int32_t kEos = 39;

class FakeLm : public DecodeForward {
 public:
  std::int64_t vocab_size() const override { return vocab; }
  Tensor forward(const StepInput& in) override;
  void set_taps(const std::vector<std::string>& hooks, HookTap tap) override {
    hooks_ = hooks;
    tap_ = std::move(tap);
  }
  std::int64_t vocab = kVocab;
  std::int64_t fail_at_call = -1;  // the forward with this index (0-based) throws a runtime error
  std::int32_t eos = kEos;
  std::vector<std::int64_t> batch_sizes;  // rows of every forward, in call order

 private:
  std::vector<std::string> hooks_;
  HookTap tap_;
};

class FakeModel : public RunModel {
 public:
  explicit FakeModel(bool diffusion = false);
  const ModelConfig& config() const override { return config_; }
  const ModelInfo& info() const override { return info_; }
  std::vector<HookPoint> hook_points() const override;
  const Tokenizer* tokenizer() const override { return tokenizer_.get(); }
  std::string backend_name() const override { return "fake"; }
  std::filesystem::path model_dir() const override { return config_.dir; }
  DecodeForward& decoder() override { return lm_; }
  Tensor forward(const std::vector<std::int32_t>& ids, const std::set<std::string>& taps, const HookTap& tap,
                 bool need_logits) override;

  // A synthetic byte-level BPE tokenizer; the vocabulary grows to its 300 tokens (eos 299).
  void use_tokenizer();
  ModelConfig config_;
  ModelInfo info_;
  FakeLm lm_;
  std::int64_t forwards = 0;

 private:
  std::shared_ptr<Tokenizer> tokenizer_;
};

class MockSink : public Sink {
 public:
  MOCK_METHOD(CommitMark, open, (const SinkOptions&, const RunMetadata&, const std::vector<HookPoint>&), (override));
  MOCK_METHOD(bool, wants, (const std::string&), (const, override));
  MOCK_METHOD(void, write, (const TapRecord&, const TensorView&), (override));
  MOCK_METHOD(void, add_rows, (const std::vector<RowRecord>&), (override));
  MOCK_METHOD(void, add_steps, (const std::vector<StepRecord>&), (override));
  MOCK_METHOD(void, end_prompt, (const PromptRecord&), (override));
  MOCK_METHOD(void, write_array, (const std::string&, const TensorView&), (override));
  MOCK_METHOD(void, checkpoint, (const CommitMark&), (override));
  MOCK_METHOD(void, flush, (), (override));
  MOCK_METHOD(void, close, (), (override));
  MOCK_METHOD(void, join, (const std::vector<std::string>&, const std::string&, const RunMetadata&), (override));
  MOCK_METHOD(bool, joins, (), (const, override));
};

// A whole file's bytes ("" when it cannot be read).
std::string read_file(const std::filesystem::path& p);

// Requests of token ids, ids "r0", "r1", ...
std::vector<Request> id_requests(const std::vector<std::vector<std::int32_t>>& prompts);

}  // namespace sonde::test
