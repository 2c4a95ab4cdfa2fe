// Option values are checked in one place (GenerationSettings::check, the run layer) for the
// command line and dataset lines alike (reliability issue, items 4-6): each bad value is one
// line naming the setting and value, exit 2, and nothing is written.
#include "expect.h"
#include "process.h"
#include "test_paths.h"
#include "tiny_model_suite.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace sonde::test {
namespace {

namespace fs = std::filesystem;

class OptionValues : public TinyModelSuite {
 protected:
  Outcome generate(std::vector<std::string> extra) const {
    std::vector<std::string> args{"generate", "--model", model_.string(), "--ids", "1,2,3", "--max-new-tokens", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  }
  Outcome batch(const std::string& line, std::vector<std::string> extra = {}) const {
    std::ofstream(dir_ / "in.jsonl") << line << "\n";
    std::vector<std::string> args{"batch", "--model", model_.string(), "--input", (dir_ / "in.jsonl").string(),
                                  "--output", (dir_ / "out.jsonl").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  }
};

TEST_F(OptionValues, SamplingValuesOutOfRangeAreRefusedOnTheCommandLine) {
  EXPECT_TRUE(one_line_error(generate({"--temperature", "-1"}), "generate", {"temperature", "-1"}, {"negative"}));
  EXPECT_TRUE(one_line_error(generate({"--top-p", "2"}), "generate", {"top_p", "2"}, {"outside"}));
  EXPECT_TRUE(one_line_error(generate({"--top-k", "-3"}), "generate", {"top_k", "-3"}, {"negative"}));
  EXPECT_TRUE(one_line_error(generate({"--repetition-penalty", "0"}), "generate", {"repetition_penalty"}, {"positive"}));
  EXPECT_TRUE(one_line_error(generate({"--eps", "1.5"}), "generate", {"eps", "1.5"}, {"outside"}));
}

TEST_F(OptionValues, TheSameValuesAreRefusedInADatasetLineNamingTheLine) {
  const auto o = batch(R"({"id": "a", "ids": [1, 2], "temperature": -1})");
  EXPECT_TRUE(one_line_error(o, "batch", {"line 1", "temperature", "-1"}, {"negative"}));
  EXPECT_FALSE(fs::exists(dir_ / "out.jsonl"));
  // A diffusion setting is checked for an autoregressive model too: a typo is never ignored.
  EXPECT_TRUE(one_line_error(batch(R"({"id": "a", "ids": [1, 2], "alg": "nosuch"})"), "batch", {"line 1", "nosuch"},
                             {"alg", "unknown", "not"}));
  EXPECT_TRUE(one_line_error(batch(R"({"id": "a", "ids": [1, 2], "top_p": 0})"), "batch", {"line 1", "top_p"}, {"outside"}));
}

TEST_F(OptionValues, AnEmptyHookSelectionIsRefused) {
  for (const char* sel : {"", ",,", " , "}) {
    const auto out = dir_ / "g.h5";
    EXPECT_TRUE(one_line_error(generate({"--hooks", sel, "--out", out.string()}), "generate", {"--hooks"}, {"no hook"}))
        << "'" << sel << "'";
    EXPECT_FALSE(fs::exists(out));
  }
  EXPECT_TRUE(one_line_error(run({"forward", "--model", model_.string(), "--ids", "1", "--hooks", ",,", "--out",
                                  (dir_ / "f.h5").string()}),
                             "forward", {"--hooks"}, {"no hook"}));
}

TEST_F(OptionValues, AThreadCountFarPastTheCoresIsRefusedNotACrash) {
  for (const char* n : {"100000", "20000"})
    EXPECT_TRUE(one_line_error(generate({"--threads", n}), "generate", {"threads", n}, {"outside"})) << n;
  const Outcome ok = generate({"--threads", "2"});
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();
}

}  // namespace
}  // namespace sonde::test
