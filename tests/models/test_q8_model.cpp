// `--weights q8` on whole models (threaded backend), against our own float64 PyTorch goldens
// (tests/data/small-*.h5, made by tests/reference/make_goldens.py) and against the same backend
// with native weights. Issue 6 asks for a documented looser bound on the logits and the same
// greedy tokens on the small preset; docs/backends.md documents the bound: a normalised logits
// error (max|err| / max|ref|) of at most kQ8Bound.
//
// Per prompt of each golden: the logits are within kQ8Bound of the golden but not within 1e-4
// (the weights really were quantised), and at every position whose golden top-2 margin is wider
// than twice the error seen, q8 picks the golden's argmax. Then greedy generation on the small
// Qwen2 preset gives the native run's tokens. (make-model's random Qwen2 repeats one token under
// greedy decoding, so that last check is weak; the per-position argmax check above is the one
// that sees a wrong decision.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <filesystem>
#include <string>
#include <vector>

#include "h5_read.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

constexpr double kQ8Bound = 5e-2;

std::filesystem::path make_model_from(const std::filesystem::path& golden, const std::filesystem::path& out) {
  std::vector<std::string> mm{"make-model"};
  for (const auto& a : nlohmann::json::parse(read_string_attr(golden, "make_model_args"))) mm.push_back(a.get<std::string>());
  mm.insert(mm.end(), {"--out", out.string()});
  const auto r = run_sonde(mm);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

bool threaded_built() {
  const auto b = built_backends();
  return std::find(b.begin(), b.end(), "threaded") != b.end();
}

class Q8Model : public ::testing::TestWithParam<std::string> {};

TEST_P(Q8Model, LogitsWithinTheDocumentedBoundAndClearDecisionsKept) {
  if (!threaded_built()) GTEST_SKIP() << "the threaded backend is not built here";
  const auto golden = data_dir() / (GetParam() + ".h5");
  const auto dir = temp_dir();
  const auto model = make_model_from(golden, dir / "model");
  for (const auto& p : nlohmann::json::parse(read_string_attr(golden, "prompts"))) {
    const std::string g = "forward/" + p.get<std::string>() + "/";
    SCOPED_TRACE(GetParam() + " " + g);
    const auto ids = as_ints(read_dataset(golden, g + "input_ids"));
    const auto out = dir / ("q8-" + p.get<std::string>() + ".h5");
    const auto r = run_sonde({"forward", "--model", model.string(), "--backend", "threaded", "--weights", "q8", "--ids",
                              join_ids(ids), "--out", out.string()});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Array got = read_dataset(out, "logits"), want = read_dataset(golden, g + "logits");
    const double err = normalised_error(got, want);
    EXPECT_LE(err, kQ8Bound);
    EXPECT_GT(err, 1e-4) << "as close as native weights: was the model quantised?";
    std::cout << "[ note ] " << GetParam() << " " << p.get<std::string>() << ": q8 normalised logits error " << err << "\n";

    ASSERT_EQ(got.shape, want.shape);
    const std::int64_t T = want.shape[0], V = want.shape[1];
    double scale = 0;
    for (double v : want.values) scale = std::max(scale, std::fabs(v));
    int clear = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      const auto row = want.values.begin() + t * V, grow = got.values.begin() + t * V;
      std::vector<double> sorted(row, row + V);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] <= 2 * err * scale) continue;  // a near tie: q8 may flip it
      ++clear;
      EXPECT_EQ(std::max_element(grow, grow + V) - grow, std::max_element(row, row + V) - row) << "position " << t;
    }
    EXPECT_GT(clear, 0) << "no position with a clear decision: the check above checked nothing";
    std::cout << "[ note ] " << clear << " of " << T << " positions with a clear decision\n";
  }
}

INSTANTIATE_TEST_SUITE_P(SmallPresets, Q8Model, ::testing::Values("small-qwen2-bf16", "small-dream-f32"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// Greedy decoding on the small Qwen2 preset (bf16): q8 gives the native weights' tokens.
TEST(Q8Generate, SmallQwen2GreedyTokensMatchNativeWeights) {
  if (!threaded_built()) GTEST_SKIP() << "the threaded backend is not built here";
  const auto golden = data_dir() / "small-qwen2-bf16.h5";
  const auto dir = temp_dir();
  const auto model = make_model_from(golden, dir / "model");
  for (const std::string p : {"p7", "p23"}) {
    SCOPED_TRACE(p);
    const auto ids = join_ids(as_ints(read_dataset(golden, "forward/" + p + "/input_ids")));
    const auto run = [&](const std::string& weights) {
      const auto out = generate_json({"--model", model.string(), "--backend", "threaded", "--weights", weights, "--json",
                                      "--ids", ids, "--max-new-tokens", "24", "--temperature", "0"});
      return out.at(0)["completion_ids"].get<std::vector<std::int64_t>>();
    };
    const auto native = run("native"), q8 = run("q8");
    EXPECT_EQ(native.size(), 24u);
    EXPECT_EQ(q8, native);
    std::cout << "[ note ] " << p << ": greedy tokens " << join_ids(native) << "\n";
  }
}

}  // namespace
}  // namespace sonde::test
