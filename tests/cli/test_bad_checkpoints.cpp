// Bad checkpoints: `sonde forward` exits with status 2 and one clear line naming the file and the
// problem; never a crash, a hang, an out-of-bounds read or an output file. Each case starts from
// fresh `make-model --preset tiny` output and breaks one thing.
#include "checkpoint.h"
#include "expect.h"
#include "h5_check.h"
#include "process.h"
#include "test_paths.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace sonde::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class BadCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir();
    model_ = dir_ / "model";
    out_ = dir_ / "acts.h5";
    make_tiny_model(model_);
    st_ = model_ / "model.safetensors";
    cfg_ = model_ / "config.json";
  }

  Outcome forward() const {
    return run({"forward", "--model", model_.string(), "--ids", "1,2,3", "--out", out_.string(), "--hooks",
                "blocks.*.hook_resid_post"});
  }

  // Validation happens before the sink opens, so no output file is created at all (and so none
  // can claim to be complete).
  void expect_no_output() const {
    EXPECT_FALSE(fs::exists(out_)) << out_ << " was left behind; its root attribute complete is "
                                   << complete_attr(out_).value_or(-1);
  }

  void set_header_length(std::uint64_t n) const {
    std::string bytes = read_text(st_);
    for (int i = 0; i < 8; ++i, n >>= 8) bytes[static_cast<std::size_t>(i)] = static_cast<char>(n & 0xff);
    write_text(st_, bytes);
  }

  fs::path dir_, model_, out_, st_, cfg_;
};

TEST_F(BadCheckpoint, TruncatedInTheData) {
  fs::resize_file(st_, fs::file_size(st_) / 2);
  EXPECT_TRUE(one_line_error(forward(), "forward", {st_.string()}, {"past", "truncated", "short", "beyond"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, TruncatedInTheHeader) {
  const auto header_len = read_text(st_).size() - read_safetensors(st_).data.size() - 8;
  fs::resize_file(st_, 8 + header_len / 2);
  EXPECT_TRUE(one_line_error(forward(), "forward", {st_.string(), "header"}, {"past", "truncated", "short", "beyond"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, TruncatedInTheLengthField) {
  fs::resize_file(st_, 5);
  EXPECT_TRUE(one_line_error(forward(), "forward", {st_.string()}, {"short", "truncated"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, EmptyWeightsFile) {
  fs::resize_file(st_, 0);
  EXPECT_TRUE(one_line_error(forward(), "forward", {st_.string()}, {"short", "empty", "truncated"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, HeaderLengthPastTheEnd) {
  set_header_length(fs::file_size(st_));  // 8 bytes more than there are after the length field
  EXPECT_TRUE(one_line_error(forward(), "forward", {st_.string(), "header length"}, {"past", "beyond", "exceeds"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, HeaderLengthHuge) {
  set_header_length(0xfffffffffffffff0ull);  // would wrap a careless 8 + n bound check
  EXPECT_TRUE(one_line_error(forward(), "forward", {st_.string(), "header length"}, {"past", "larger", "limit", "exceeds"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, HeaderNotJson) {
  std::string bytes = read_text(st_);
  const auto header_len = bytes.size() - read_safetensors(st_).data.size() - 8;
  bytes.replace(8, header_len, std::string(header_len, '!'));
  write_text(st_, bytes);
  EXPECT_TRUE(one_line_error(forward(), "forward", {st_.string()}, {"JSON"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, TensorOffsetsOutsideTheData) {
  const auto data_size = read_safetensors(st_).data.size();
  edit_safetensors(st_, [&](json& h) {
    const auto n = h["model.norm.weight"]["data_offsets"][1].get<std::uint64_t>() -
                   h["model.norm.weight"]["data_offsets"][0].get<std::uint64_t>();
    h["model.norm.weight"]["data_offsets"] = {data_size, data_size + n};
  });
  EXPECT_TRUE(one_line_error(forward(), "forward", {st_.string(), "model.norm.weight"}, {"past", "outside", "beyond"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, TensorOffsetsOverlap) {
  // Both norms of layer 0 have 64 elements; point the second at the first one's bytes.
  const std::string a = "model.layers.0.input_layernorm.weight", b = "model.layers.0.post_attention_layernorm.weight";
  edit_safetensors(st_, [&](json& h) {
    ASSERT_EQ(h[a]["shape"], h[b]["shape"]);
    h[b]["data_offsets"] = h[a]["data_offsets"];
  });
  EXPECT_TRUE(one_line_error(forward(), "forward", {st_.string(), a, b}, {"overlap"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, UnknownDtype) {
  edit_safetensors(st_, [](json& h) { h["model.norm.weight"]["dtype"] = "Q4_X"; });
  EXPECT_TRUE(one_line_error(forward(), "forward", {st_.string(), "model.norm.weight", "Q4_X"}, {"dtype"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, IntegerWeight) {
  // I32 has the size of F32, so the header stays consistent; the model must still refuse it.
  edit_safetensors(st_, [](json& h) { h["model.norm.weight"]["dtype"] = "I32"; });
  EXPECT_TRUE(one_line_error(forward(), "forward", {"model.norm.weight", "I32"}, {"dtype"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, TensorShapeDisagreesWithConfig) {
  // Transposed: the same number of bytes, so only the check against config.json can catch it.
  const std::string name = "model.layers.0.mlp.gate_proj.weight";
  const json cfg = read_json(cfg_);
  const auto I = cfg["intermediate_size"].get<std::int64_t>(), H = cfg["hidden_size"].get<std::int64_t>();
  edit_safetensors(st_, [&](json& h) {
    ASSERT_EQ(h[name]["shape"], json({I, H}));
    h[name]["shape"] = {H, I};
  });
  const std::string got = "[" + std::to_string(H) + ", " + std::to_string(I) + "]";
  EXPECT_TRUE(one_line_error(forward(), "forward", {st_.string(), name, got, "config.json"}, {"shape"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, ConfigShapeDisagreesWithTensors) {
  json cfg = read_json(cfg_);
  const auto I = cfg["intermediate_size"].get<std::int64_t>(), H = cfg["hidden_size"].get<std::int64_t>();
  cfg["intermediate_size"] = I / 2;
  write_text(cfg_, cfg.dump(2));
  const std::string want = "[" + std::to_string(I / 2) + ", " + std::to_string(H) + "]";
  EXPECT_TRUE(one_line_error(forward(), "forward", {"model.layers.0.mlp.gate_proj.weight", want}, {"shape"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, MissingTensor) {
  edit_safetensors(st_, [](json& h) { ASSERT_EQ(h.erase("model.norm.weight"), 1u); });
  EXPECT_TRUE(one_line_error(forward(), "forward", {model_.string(), "model.norm.weight"}, {"missing", "not found"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, UntiedDreamMissingLmHead) {
  fs::remove_all(model_);
  make_tiny_model(model_, "dream");
  ASSERT_EQ(read_json(cfg_)["tie_word_embeddings"], false) << "the tiny Dream preset should have an untied head";
  edit_safetensors(st_, [](json& h) { ASSERT_EQ(h.erase("lm_head.weight"), 1u); });
  EXPECT_TRUE(one_line_error(forward(), "forward", {model_.string(), "lm_head.weight"}, {"missing", "not found"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, MissingWeightsFile) {
  fs::remove(st_);
  EXPECT_TRUE(one_line_error(forward(), "forward", {model_.string(), "model.safetensors"},
                             {"no ", "missing", "not found", "cannot"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, ConfigNotJson) {
  write_text(cfg_, "{ \"hidden_size\": 64, this is not JSON");
  EXPECT_TRUE(one_line_error(forward(), "forward", {cfg_.string()}, {"JSON"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, ConfigLacksAField) {
  json cfg = read_json(cfg_);
  ASSERT_EQ(cfg.erase("num_hidden_layers"), 1u);
  write_text(cfg_, cfg.dump(2));
  EXPECT_TRUE(one_line_error(forward(), "forward", {cfg_.string(), "num_hidden_layers"}, {"missing"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, ConfigFieldHasTheWrongType) {
  json cfg = read_json(cfg_);
  cfg["hidden_size"] = "sixty-four";
  write_text(cfg_, cfg.dump(2));
  EXPECT_TRUE(one_line_error(forward(), "forward", {cfg_.string(), "hidden_size"}, {"expected"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, EmptyDirectory) {
  const fs::path empty = dir_ / "empty";
  fs::create_directories(empty);
  const Outcome o = run({"forward", "--model", empty.string(), "--ids", "1,2,3", "--out", out_.string()});
  EXPECT_TRUE(one_line_error(o, "forward", {empty.string()}, {"empty", "no such file", "missing", "does not exist"}));
  expect_no_output();
}

TEST_F(BadCheckpoint, MissingDirectory) {
  const fs::path gone = dir_ / "no-such-model";
  const Outcome o = run({"forward", "--model", gone.string(), "--ids", "1,2,3", "--out", out_.string()});
  EXPECT_TRUE(one_line_error(o, "forward", {"no-such-model"}, {"no such directory", "does not exist", "not found"}));
  expect_no_output();
}

// The other commands that open a model report the same way.
TEST_F(BadCheckpoint, InspectAndHooksReportOneLineToo) {
  fs::resize_file(st_, fs::file_size(st_) / 2);
  for (const std::string cmd : {"inspect", "hooks"})
    EXPECT_TRUE(one_line_error(run({cmd, "--model", model_.string()}), cmd, {st_.string()}, {"past", "truncated"}));
}

}  // namespace
}  // namespace sonde::test
