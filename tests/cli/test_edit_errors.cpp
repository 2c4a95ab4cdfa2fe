// Bad edits (--edits, --steer) on forward, generate and batch: each is one line naming the edit,
// the file or dataset and the value, exit 2, and no output file is written.
#include "expect.h"
#include "process.h"
#include "test_paths.h"
#include "tiny_model_suite.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace sonde::test {
namespace {

namespace fs = std::filesystem;

// A .npy file (format 1.0) with the given descr ('<f4', '<i4') and shape, `bytes` of data.
void write_npy(const fs::path& p, const std::string& descr, std::int64_t n, const std::string& bytes) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + std::to_string(n) + ",), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(p, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const auto len = static_cast<std::uint16_t>(header.size());
  f.put(static_cast<char>(len & 0xff));
  f.put(static_cast<char>(len >> 8));
  f << header << bytes;
}

void write_f32(const fs::path& p, const std::vector<float>& v) {
  std::string b(v.size() * 4, '\0');
  std::memcpy(b.data(), v.data(), b.size());
  write_npy(p, "<f4", static_cast<std::int64_t>(v.size()), b);
}

class EditErrors : public TinyModelSuite {
 protected:
  void SetUp() override {
    TinyModelSuite::SetUp();
    const auto H = read_json(model_ / "config.json")["hidden_size"].get<std::int64_t>();
    write_f32(dir_ / "v.npy", std::vector<float>(static_cast<std::size_t>(H), 0.5f));
    write_f32(dir_ / "short.npy", std::vector<float>(static_cast<std::size_t>(H - 1), 0.5f));
    write_f32(dir_ / "zeros.npy", std::vector<float>(static_cast<std::size_t>(H), 0.0f));
    write_npy(dir_ / "ints.npy", "<i4", H, std::string(static_cast<std::size_t>(H) * 4, '\1'));
  }
  std::string edits(const nlohmann::json& list) {
    const auto p = dir_ / "e.json";
    std::ofstream(p) << nlohmann::json{{"edits", list}}.dump();
    return p.string();
  }
  Outcome forward(std::vector<std::string> extra, const std::string& ids = "1,2,3") {
    std::vector<std::string> a{"forward", "--model", model_.string(), "--ids", ids, "--out", out().string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a);
  }
  Outcome generate(std::vector<std::string> extra) {
    std::vector<std::string> a{"generate", "--model", model_.string(), "--ids", "1,2,3", "--max-new-tokens", "3",
                               "--hooks", "blocks.0.hook_resid_post", "--out", out().string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a);
  }
  fs::path out() const { return dir_ / "out.h5"; }
  std::string v() const { return (dir_ / "v.npy").string(); }
};

TEST_F(EditErrors, AnUnknownHookSuggestsTheClosestNames) {
  EXPECT_TRUE(one_line_error(forward({"--steer", "blocks.0.hook_resid_pst=" + v() + "*2"}), "forward",
                             {"--steer", "blocks.0.hook_resid_pst", "blocks.0.hook_resid_post"}, {"did you mean"}));
  EXPECT_FALSE(fs::exists(out()));
}

// Core finds a file's array reader by what the reader reads (array_reader_for), not by a plugin's
// name: a .txt vector source is read by no plugin and said so; an .h5 one by the hdf5 sink.
TEST_F(EditErrors, AVectorFileNoPluginReadsIsNamed) {
  std::ofstream(dir_ / "v.txt") << "1 2 3\n";
  EXPECT_TRUE(one_line_error(forward({"--steer", "blocks.0.hook_resid_post=" + (dir_ / "v.txt").string() + ":/v*2"}), "forward",
                             {"v.txt", "no plugin reads this file", "hdf5"}, {}));
  EXPECT_TRUE(one_line_error(forward({"--steer", "blocks.0.hook_resid_post=" + (dir_ / "none.h5").string() + ":/v*2"}), "forward",
                             {"none.h5", "no such file"}, {}));
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(EditErrors, AVectorOfTheWrongLengthOrDtype) {
  EXPECT_TRUE(one_line_error(forward({"--steer", "blocks.0.hook_resid_post=" + (dir_ / "short.npy").string()}), "forward",
                             {"short.npy", "blocks.0.hook_resid_post"}, {"values"}));
  EXPECT_TRUE(one_line_error(forward({"--steer", "blocks.0.hook_resid_post=" + (dir_ / "ints.npy").string()}), "forward",
                             {"ints.npy"}, {"integers", "floating"}));
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(EditErrors, AMissingFileOrDataset) {
  EXPECT_TRUE(one_line_error(forward({"--steer", "blocks.0.hook_resid_post=" + (dir_ / "none.npy").string()}), "forward",
                             {"none.npy"}, {"cannot open", "no such"}));
  const auto golden = (data_dir() / "edits-tiny-qwen2-f32.h5").string();
  EXPECT_TRUE(one_line_error(forward({"--steer", "blocks.0.hook_resid_post=" + golden + ":/inputs/nothere"}), "forward",
                             {"/inputs/nothere"}, {"no dataset"}));
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(EditErrors, ADirectionOfZeroNorm) {
  const auto e = edits({{{"hook", "blocks.0.hook_resid_post"}, {"op", "project_out"}, {"direction", (dir_ / "zeros.npy").string()}}});
  EXPECT_TRUE(one_line_error(forward({"--edits", e}), "forward", {"edit 0", "zeros.npy"}, {"zero norm"}));
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(EditErrors, PositionsStepsAndHeadsOutOfRange) {
  EXPECT_TRUE(one_line_error(forward({"--edits", edits({{{"hook", "blocks.0.hook_resid_post"}, {"op", "zero"}, {"positions", {1, 3}}}})}),
                             "forward", {"edit 0", "position 3"}, {"out of range"}));
  // Generation: the prompt's 3 tokens and 3 new ones reach position 5.
  EXPECT_TRUE(one_line_error(generate({"--edits", edits({{{"hook", "blocks.0.hook_resid_post"}, {"op", "zero"}, {"positions", {6}}}})}),
                             "generate", {"position 6"}, {"out of range"}));
  EXPECT_TRUE(one_line_error(generate({"--edits", edits({{{"hook", "blocks.0.hook_resid_post"}, {"op", "zero"}, {"steps", "0-2"}}})}),
                             "generate", {"steps", "0-2"}, {"diffusion"}));
  EXPECT_TRUE(one_line_error(forward({"--edits", edits({{{"hook", "blocks.0.attn.hook_z"}, {"op", "zero"}, {"heads", {9}}}})}),
                             "forward", {"head 9"}, {"out of range"}));
  EXPECT_TRUE(one_line_error(forward({"--edits", edits({{{"hook", "blocks.0.hook_resid_post"}, {"op", "zero"}, {"heads", {0}}}})}),
                             "forward", {"heads"}, {"not per head"}));
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(EditErrors, MalformedEditsFilesAndSteerText) {
  EXPECT_TRUE(one_line_error(forward({"--edits", edits({{{"hook", "blocks.0.hook_resid_post"}, {"op", "shift"}}})}), "forward",
                             {"edit 0", "shift"}, {"not add"}));
  EXPECT_TRUE(one_line_error(forward({"--edits", edits({{{"hook", "blocks.0.hook_resid_post"}, {"op", "add"}}})}), "forward",
                             {"edit 0", "vector"}, {"needs"}));
  EXPECT_TRUE(one_line_error(forward({"--edits", edits({{{"hook", "blocks.0.hook_resid_post"}, {"op", "zero"}, {"postions", "all"}}})}),
                             "forward", {"postions"}, {"unknown key"}));
  EXPECT_TRUE(one_line_error(forward({"--steer", "blocks.0.hook_resid_post=" + v() + "*lots"}), "forward", {"lots"}, {"not a number"}));
  EXPECT_TRUE(one_line_error(forward({"--steer", "nohook"}), "forward", {"--steer"}, {"expected"}));
  // std::stod reads these as numbers: a NaN or infinite scale is refused like NaN in a vector file.
  for (const char* scale : {"nan", "inf", "-inf", "NAN"})
    EXPECT_TRUE(one_line_error(forward({"--steer", "blocks.0.hook_resid_post=" + v() + "*" + scale}), "forward", {scale},
                               {"not a finite number"}));
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(EditErrors, APatchSourceOfAnotherModelOrWithoutThePromptId) {
  // A source made by this model: prompt "0" only.
  const auto src = dir_ / "src.h5";
  ASSERT_EQ(run({"forward", "--model", model_.string(), "--ids", "1,2,3", "--hooks", "blocks.0.hook_resid_post", "--out", src.string()}).exit_code, 0);
  const auto patch = edits({{{"hook", "blocks.0.hook_resid_post"}, {"op", "patch"}, {"source", src.string()}}});
  const auto two = run({"generate", "--model", model_.string(), "--ids", "1,2,3", "--ids", "4,5,6", "--max-new-tokens", "2",
                        "--edits", patch, "--hooks", "blocks.0.hook_resid_post", "--out", out().string()});
  EXPECT_TRUE(one_line_error(two, "generate", {"src.h5", "'1'"}, {"no prompt"}));
  EXPECT_TRUE(one_line_error(forward({"--edits", edits({{{"hook", "blocks.1.hook_resid_post"}, {"op", "patch"}, {"source", src.string()}}})}),
                             "forward", {"src.h5", "blocks.1.hook_resid_post"}, {"no dataset"}));
  // Another model (another seed: the same config, other weights would pass; another preset differs).
  const auto other = root_ / "other";
  ASSERT_EQ(run({"make-model", "--arch", "dream", "--preset", "tiny", "--out", other.string()}).exit_code, 0);
  const auto foreign = dir_ / "foreign.h5";
  ASSERT_EQ(run({"forward", "--model", other.string(), "--ids", "1,2,3", "--hooks", "blocks.0.hook_resid_post", "--out", foreign.string()}).exit_code, 0);
  EXPECT_TRUE(one_line_error(forward({"--edits", edits({{{"hook", "blocks.0.hook_resid_post"}, {"op", "patch"}, {"source", foreign.string()}}})}),
                             "forward", {"foreign.h5"}, {"another model"}));
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(EditErrors, BatchRefusesBadEditsBeforeWritingAnything) {
  std::ofstream(dir_ / "in.jsonl") << R"({"id": "a", "ids": [1, 2]})" << "\n";
  const auto o = run({"batch", "--model", model_.string(), "--input", (dir_ / "in.jsonl").string(), "--output",
                      (dir_ / "res.jsonl").string(), "--steer", "blocks.9.hook_resid_post=" + v()});
  EXPECT_TRUE(one_line_error(o, "batch", {"blocks.9.hook_resid_post"}, {"matches no hook"}));
  EXPECT_FALSE(fs::exists(dir_ / "res.jsonl"));
}

}  // namespace
}  // namespace sonde::test
