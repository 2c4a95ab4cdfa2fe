#include "run_fakes.h"

#include <sonde/error.h>
#include <sonde/tokenizer.h>

#include <fmt/format.h>

#include <fstream>
#include <sstream>

namespace sonde::test {

Tensor FakeLm::forward(const StepInput& in) {
  if (static_cast<std::int64_t>(batch_sizes.size()) == fail_at_call) runtime_error("fake: forward {} fails", fail_at_call);
  batch_sizes.push_back(in.batch);
  Tensor logits(DType::f32, Shape{in.batch, in.tokens, vocab});
  float* l = logits.data<float>();
  for (std::int64_t i = 0; i < in.batch * in.tokens; ++i)
    l[i * vocab + (in.ids[static_cast<std::size_t>(i)] + 1) % eos] = 5.0f;
  for (std::size_t h = 0; h < hooks_.size() && tap_; ++h) {
    Tensor v(DType::f32, Shape{in.batch, in.tokens, 4});
    float* p = v.data<float>();
    for (std::int64_t i = 0; i < in.batch * in.tokens; ++i) {
      const auto x = static_cast<float>(in.ids[static_cast<std::size_t>(i)]);
      p[i * 4 + 0] = x;
      p[i * 4 + 1] = x + 0.5f;
      p[i * 4 + 2] = static_cast<float>(h);
      p[i * 4 + 3] = static_cast<float>(i % in.tokens);
    }
    tap_(hooks_[h], v.view());
  }
  return logits;
}

FakeModel::FakeModel(bool diffusion) {
  config_.dir = "/nonexistent/fake-model";
  config_.model_type = diffusion ? "fake-diffusion" : "fake";
  config_.vocab_size = kVocab;
  config_.num_hidden_layers = 2;
  config_.max_position_embeddings = 64;
  config_.eos_token_ids = {kEos};
  config_.raw_json = R"({"model_type": "fake"})";
  config_.generation.raw_json = "{}";
  info_.arch = config_.model_type;
  if (diffusion) {
    config_.mask_token_id = 38;
    config_.pad_token_id = 37;
    info_.decoding = DecodingKind::MaskedDiffusion;
    info_.causal = false;
    info_.prediction_shift = 1;
    info_.mask_token_id = 38;
  }
}

std::vector<HookPoint> FakeModel::hook_points() const {
  return {{"blocks.0.hook_resid_post", {4}}, {"blocks.1.hook_resid_post", {4}}};
}

Tensor FakeModel::forward(const std::vector<std::int32_t>& ids, const std::set<std::string>& taps, const HookTap& tap,
                          bool need_logits) {
  ++forwards;
  StepInput in;
  in.tokens = static_cast<std::int64_t>(ids.size());
  in.ids = ids;
  std::vector<std::string> hooks(taps.begin(), taps.end());
  lm_.set_taps(hooks, tap);
  Tensor logits = lm_.forward(in);
  lm_.set_taps({}, {});
  return need_logits ? logits : Tensor();
}

void FakeModel::use_tokenizer() {
  tokenizer_ = std::make_shared<Tokenizer>(Tokenizer::from_json(make_synthetic_tokenizer_json(300, {{"<|endoftext|>", 299}}, 1)));
  config_.vocab_size = lm_.vocab = 300;
  config_.eos_token_ids = {299};
  lm_.eos = 299;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<Request> id_requests(const std::vector<std::vector<std::int32_t>>& prompts) {
  std::vector<Request> out;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    Request r;
    r.id = fmt::format("r{}", i);
    r.where = fmt::format("request {}", i);
    r.ids = prompts[i];
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace sonde::test
