// Sae::load and resolve_sae (sae.h): SAELens folders in both cfg.json layouts, the weights as the
// graph reads them (transposed, b_dec folded into the encoder bias), and every bad input as one
// BadInput naming the file, the field and the value.
#include <sonde/error.h>
#include <sonde/sae.h>
#include <sonde/safetensors.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "test_paths.h"

namespace sonde::sae_load_test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using json = nlohmann::json;

Tensor filled(const Shape& s, float start, float step) {
  Tensor t(DType::f32, s);
  for (std::int64_t i = 0; i < s.numel(); ++i) t.data<float>()[i] = start + step * static_cast<float>(i);
  return t;
}

// d_in 2, d_sae 3: W_enc [2,3] = 0..5 (row-major), W_dec [3,2] = 1..6 / 10, b_enc (1, 2, 3), b_dec (0.5, -1).
struct Folder {
  fs::path dir = sonde::test::temp_dir() / "sae";
  json cfg = {{"architecture", "standard"}, {"d_in", 2}, {"d_sae", 3}, {"dtype", "float32"},
              {"apply_b_dec_to_input", true}, {"normalize_activations", "none"},
              {"metadata", {{"hook_name", "blocks.0.hook_resid_post"}}}};
  std::map<std::string, Tensor> w{{"W_enc", filled(Shape{2, 3}, 0, 1)}, {"W_dec", filled(Shape{3, 2}, 0.1f, 0.1f)},
                                  {"b_enc", filled(Shape{3}, 1, 1)}, {"b_dec", filled(Shape{2}, 0.5f, -1.5f)}};
  fs::path write() {
    fs::create_directories(dir);
    std::ofstream(dir / "cfg.json") << cfg.dump();
    std::vector<std::pair<std::string, TensorView>> v;
    for (auto& [k, t] : w) v.emplace_back(k, t.view());
    write_safetensors(dir / "sae_weights.safetensors", v);
    return dir;
  }
};

std::string load_error(Folder& f) {
  try {
    Sae::load(f.write());
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(SaeLoad, V6LayoutWeightsTransposedAndBDecFolded) {
  Folder f;
  const auto sae = Sae::load(f.write());
  const auto& c = sae->config();
  EXPECT_EQ(c.hook_name, "blocks.0.hook_resid_post");
  EXPECT_EQ(c.arch, SaeArch::Standard);
  EXPECT_EQ(c.d_out, 2);
  const auto& w = sae->weights();
  ASSERT_EQ(w.enc.shape(), (Shape{3, 2}));
  EXPECT_EQ(w.enc.data<float>()[1 * 2 + 0], 1.0f);  // W_enc[0][1]
  EXPECT_EQ(w.enc.data<float>()[2 * 2 + 1], 5.0f);  // W_enc[1][2]
  ASSERT_EQ(w.dec.shape(), (Shape{2, 3}));
  EXPECT_FLOAT_EQ(w.dec.data<float>()[0 * 3 + 2], 0.5f);  // W_dec[2][0]
  // b_enc - b_dec W_enc: b_dec = (0.5, -1); column j of W_enc is (j, 3 + j).
  for (int j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(w.enc_bias.data<float>()[j], (1 + j) - (0.5f * j - 1.0f * (3 + j)));
}

TEST(SaeLoad, FlatLayoutTopKAndNoFoldWithoutApplyBDec) {
  Folder f;
  f.cfg = {{"architecture", "standard"}, {"activation_fn_str", "topk"}, {"activation_fn_kwargs", {{"k", 2}}},
           {"d_in", 2}, {"d_sae", 3}, {"hook_name", "blocks.1.hook_mlp_out"}, {"apply_b_dec_to_input", false}};
  const auto sae = Sae::load(f.write());
  EXPECT_EQ(sae->config().arch, SaeArch::TopK);
  EXPECT_EQ(sae->config().k, 2);
  EXPECT_EQ(sae->config().hook_name, "blocks.1.hook_mlp_out");
  for (int j = 0; j < 3; ++j) EXPECT_EQ(sae->weights().enc_bias.data<float>()[j], 1.0f + j);
}

TEST(SaeLoad, Bf16WeightsAndJumpReluThreshold) {
  Folder f;
  f.cfg["architecture"] = "jumprelu";
  Tensor t(DType::bf16, Shape{3});
  for (int j = 0; j < 3; ++j) t.data<std::uint16_t>()[j] = 0x3F80;  // 1.0
  f.w["threshold"] = t;
  Tensor enc(DType::bf16, Shape{2, 3});
  for (int j = 0; j < 6; ++j) enc.data<std::uint16_t>()[j] = 0x4000;  // 2.0
  f.w["W_enc"] = enc;
  const auto sae = Sae::load(f.write());
  EXPECT_EQ(sae->weights().threshold.data<float>()[2], 1.0f);
  EXPECT_EQ(sae->weights().enc.data<float>()[5], 2.0f);
}

TEST(SaeLoad, BadConfigsNameFileFieldAndValue) {
  {
    Folder f;
    f.cfg.erase("d_in");
    EXPECT_THAT(load_error(f), HasSubstr("cfg.json: field 'd_in' is missing"));
  }
  {
    Folder f;
    f.cfg["d_sae"] = "3";
    EXPECT_THAT(load_error(f), HasSubstr("field 'd_sae' is \"3\", expected a positive integer"));
  }
  {
    Folder f;
    f.cfg["architecture"] = "matryoshka";
    EXPECT_THAT(load_error(f), HasSubstr("field 'architecture' is 'matryoshka'"));
  }
  {
    Folder f;
    f.cfg["normalize_activations"] = "layer_norm";
    EXPECT_THAT(load_error(f), HasSubstr("field 'normalize_activations' is 'layer_norm'"));
  }
  {
    Folder f;
    f.cfg["metadata"].erase("hook_name");
    EXPECT_THAT(load_error(f), HasSubstr("field 'hook_name' is missing"));
  }
  {
    Folder f;
    f.cfg["apply_b_dec_to_input"] = 1;
    EXPECT_THAT(load_error(f), HasSubstr("field 'apply_b_dec_to_input' is 1, expected true or false"));
  }
  {
    Folder f;
    f.cfg["architecture"] = "topk";
    EXPECT_THAT(load_error(f), HasSubstr("field 'k' is missing"));
  }
}

TEST(SaeLoad, BadWeightsNameTheTensor) {
  {
    Folder f;
    f.w["W_enc"] = filled(Shape{3, 2}, 0, 1);
    EXPECT_THAT(load_error(f), HasSubstr("sae_weights.safetensors: tensor 'W_enc' has shape [3, 2], expected [2, 3]"));
  }
  {
    Folder f;
    f.cfg["architecture"] = "jumprelu";
    EXPECT_THAT(load_error(f), HasSubstr("tensor 'threshold' is missing"));
  }
  {
    Folder f;
    f.w["b_dec"] = Tensor(DType::i32, Shape{2});
    EXPECT_THAT(load_error(f), HasSubstr("tensor 'b_dec' has dtype i32, expected a float type"));
  }
  {
    Folder f;
    fs::create_directories(f.dir);
    std::ofstream(f.dir / "cfg.json") << f.cfg.dump();
    try {
      Sae::load(f.dir);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("no sae_weights.safetensors"));
    }
  }
}

// sparsity.safetensors (SAELens's log10 feature density): read when present, its shape checked,
// its absence fine.
TEST(SaeLoad, SparsityReadWhenPresentAndChecked) {
  Folder f;
  EXPECT_TRUE(Sae::load(f.write())->weights().sparsity.empty());
  const Tensor density = filled(Shape{3}, -3.5f, 0.75f);
  write_safetensors(f.dir / "sparsity.safetensors", {{"sparsity", density.view()}});
  const auto sae = Sae::load(f.dir);
  const Tensor& got = sae->weights().sparsity;
  ASSERT_EQ(got.shape(), Shape{3});
  EXPECT_EQ(got.data<float>()[0], -3.5f);
  EXPECT_EQ(got.data<float>()[2], -2.0f);
  const Tensor wrong = filled(Shape{4}, 0, 1);
  write_safetensors(f.dir / "sparsity.safetensors", {{"sparsity", wrong.view()}});
  EXPECT_THAT(load_error(f), HasSubstr("sparsity.safetensors: tensor 'sparsity' has shape [4], expected [3]"));
  write_safetensors(f.dir / "sparsity.safetensors", {{"density", density.view()}});
  EXPECT_THAT(load_error(f), HasSubstr("sparsity.safetensors: tensor 'sparsity' is missing"));
}

std::vector<HookPoint> hooks() {
  return {{"hook_embed", {2}},          {"blocks.0.ln2.hook_out", {2}}, {"blocks.0.hook_mlp_out", {2}},
          {"blocks.0.hook_resid_post", {2}}, {"blocks.0.attn.hook_z", {1, 2}}, {"blocks.1.hook_resid_post", {4}}};
}

TEST(SaeResolve, AliasesAndTheModelsHooks) {
  Folder f;
  f.cfg["metadata"]["hook_name"] = "blocks.0.hook_out";  // TransformerLens 3
  auto a = resolve_sae(Sae::load(f.write()), hooks(), 2, 0, false, false);
  EXPECT_EQ(a.hook, "blocks.0.hook_resid_post");
  EXPECT_EQ(a.hook_out, a.hook);
  EXPECT_EQ(sae_hook_points(a).at(2).name, "blocks.0.hook_resid_post.hook_sae_acts_post");
  f.cfg["metadata"]["hook_name"] = "blocks.0.attn.hook_z";  // per-head rows: d_in = nh * d
  EXPECT_EQ(resolve_sae(Sae::load(f.write()), hooks(), 2, 0, false, false).in_row, (std::vector<std::int64_t>{1, 2}));
}

TEST(SaeResolve, MissingHookAndWidthMismatchAreBadInput) {
  Folder f;
  f.cfg["metadata"]["hook_name"] = "blocks.7.hook_resid_post";
  try {
    resolve_sae(Sae::load(f.write()), hooks(), 2, 0, false, false);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_THAT(e.what(), HasSubstr("field 'hook_name' is 'blocks.7.hook_resid_post': the model has no such hook point"));
  }
  f.cfg["metadata"]["hook_name"] = "blocks.1.hook_resid_post";
  try {
    resolve_sae(Sae::load(f.write()), hooks(), 2, 0, false, false);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("field 'd_in' is 2, but hook 'blocks.1.hook_resid_post' has rows of 4"));
  }
}

TEST(SaeResolve, TranscoderReadsOneHookAndWritesAnother) {
  Folder f;
  f.cfg = {{"architecture", "transcoder"}, {"d_in", 2}, {"d_sae", 3}, {"d_out", 2},
           {"metadata", {{"hook_name", "blocks.0.ln2.hook_normalized"}}}, {"hook_name_out", "blocks.0.hook_mlp_out"}};
  const auto a = resolve_sae(Sae::load(f.write()), hooks(), 2, 0, true, false);
  EXPECT_EQ(a.hook, "blocks.0.ln2.hook_out");
  EXPECT_EQ(a.hook_out, "blocks.0.hook_mlp_out");
  EXPECT_FALSE(a.sae->config().apply_b_dec_to_input);  // b_dec is the output's
  f.cfg["d_out"] = 4;
  f.w["W_dec"] = filled(Shape{3, 4}, 0, 1);
  f.w["b_dec"] = filled(Shape{4}, 0, 1);
  try {
    resolve_sae(Sae::load(f.write()), hooks(), 2, 0, true, false);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("field 'd_out' is 4, but hook 'blocks.0.hook_mlp_out' has rows of 2"));
  }
}

// A backend that records what upload_sae_weights gives it.
struct RecordingBackend final : Backend {
  std::vector<std::string> uploads, hinted;
  void init(const BackendOptions&) override {}
  BackendInfo info() const override { return {"recording", "", 1}; }
  bool supports(const Node&, std::span<const DType>) const override { return false; }
  TensorView upload(const std::string& name, const TensorView& src, Split) override {
    uploads.push_back(name);
    return src;
  }
  TensorView weight(const std::string&) const override { return {}; }
  void hint(const std::string& name, WeightHint h) override {
    EXPECT_EQ(h, WeightHint::KeepPacked);
    EXPECT_NE(std::find(uploads.begin(), uploads.end(), name), uploads.end()) << name << ": hinted before its upload";
    hinted.push_back(name);
  }
  void run(const Node&, std::span<const TensorView>, const TensorView&) override {}
};

// The encoders are kept packed (every forward runs them over all rows); the decoder, biases and
// thresholds are not (memory for no gain: the decoder runs only for the recons hooks).
TEST(SaeUpload, EncodersAloneAreHintedKeepPacked) {
  Folder f;
  RecordingBackend b;
  upload_sae_weights(b, resolve_sae(Sae::load(f.write()), hooks(), 2, 3, false, false));
  EXPECT_THAT(b.uploads, ::testing::UnorderedElementsAre("sae.3.enc", "sae.3.enc_bias", "sae.3.dec", "sae.3.b_dec"));
  EXPECT_THAT(b.hinted, ::testing::ElementsAre("sae.3.enc"));

  Folder g;
  g.cfg["architecture"] = "gated";
  g.w.erase("b_enc");
  g.w["b_gate"] = filled(Shape{3}, 1, 1);
  g.w["b_mag"] = filled(Shape{3}, 0, 1);
  g.w["r_mag"] = filled(Shape{3}, 0, 0.1f);
  RecordingBackend gb;
  upload_sae_weights(gb, resolve_sae(Sae::load(g.write()), hooks(), 2, 0, false, false));
  EXPECT_THAT(gb.hinted, ::testing::UnorderedElementsAre("sae.0.enc", "sae.0.mag"));
}

}  // namespace
}  // namespace sonde::sae_load_test
