// sonde score against the float64 PyTorch reference of tests/reference/make_edit_goldens.py
// (/score in tests/data/edits-*.h5), on every backend: Qwen2's per-token log-probabilities within
// 1e-4; Dream's masks follow the seed contract (score.h) exactly and each sample's weighted loss,
// the estimate and its standard error agree with the reference's for those masks. And the coupled
// estimator has a lower variance than the plain one at the same number of forwards (200 on a
// tiny model, fixed seed).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "h5_read.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

namespace fs = std::filesystem;

fs::path make(const fs::path& golden, const fs::path& dir) {
  std::vector<std::string> mm{"make-model"};
  for (const auto& a : nlohmann::json::parse(read_string_attr(golden, "edits_make_model_args"))) mm.push_back(a.get<std::string>());
  mm.insert(mm.end(), {"--out", (dir / "m").string()});
  EXPECT_EQ(run_sonde(mm).exit_code, 0);
  return dir / "m";
}

nlohmann::json score(const fs::path& model, const fs::path& dir, const std::string& backend, const nlohmann::json& line,
                     std::vector<std::string> extra) {
  std::ofstream(dir / "in.jsonl") << line.dump() << "\n";
  std::vector<std::string> args{"score", "--model", model.string(), "--backend", backend, "--input", (dir / "in.jsonl").string(),
                                "--output", (dir / "out.jsonl").string(), "--overwrite"};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_sonde(args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir / "out.jsonl");
  std::string l;
  std::getline(in, l);
  return nlohmann::json::parse(l);
}

double rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-12); }

TEST(Score, MatchesTheFloat64Reference) {
  for (const char* name : {"edits-tiny-qwen2-f32", "edits-tiny-qwen2-bf16", "edits-tiny-dream-f32", "edits-tiny-dream-bf16"}) {
    const fs::path golden = data_dir() / (std::string(name) + ".h5");
    const auto dir = temp_dir();
    const auto model = make(golden, dir);
    const nlohmann::json line{{"id", "s"},
                              {"ids", nlohmann::json::parse(read_string_attr(golden, "score_prompt"))},
                              {"completion_ids", nlohmann::json::parse(read_string_attr(golden, "score_completion"))}};
    const bool dream = std::string(name).find("dream") != std::string::npos;
    for (const auto& backend : built_backends()) {
      SCOPED_TRACE(std::string(name) + " on " + backend);
      if (!dream) {
        const auto want = read_dataset(golden, "score/token_logprobs").values;
        const auto got = score(model, dir, backend, line, {});
        ASSERT_EQ(got["token_logprobs"].size(), want.size());
        double sum = 0;
        for (std::size_t j = 0; j < want.size(); ++j) {
          EXPECT_LE(rel(got["token_logprobs"][j].get<double>(), want[j]), 1e-4) << "token " << j;
          sum += want[j];
        }
        EXPECT_LE(rel(got["logprob"].get<double>(), sum), 1e-4);
        continue;
      }
      for (const char* tag : {"plain", "coupled"}) {
        std::vector<std::string> extra{"--samples", "8", "--seed", "9", "--record-masks"};
        if (std::string(tag) == "coupled") extra.push_back("--coupled");
        const auto got = score(model, dir, backend, line, extra);
        const auto masks = nlohmann::json::parse(read_string_attr(golden, std::string("score_") + tag + "_masks"));
        const auto losses = read_dataset(golden, std::string("score/") + tag + "_losses").values;
        const auto est = read_dataset(golden, std::string("score/") + tag + "_estimate").values;
        ASSERT_EQ(got["masks"].size(), masks.size()) << tag;
        for (std::size_t k = 0; k < masks.size(); ++k) {
          EXPECT_EQ(got["masks"][k]["masked"], masks[k]["masked"]) << tag << " sample " << k;
          EXPECT_EQ(got["masks"][k]["t"].get<double>(), masks[k]["t"].get<double>()) << tag << " sample " << k;
          EXPECT_LE(std::fabs(got["masks"][k]["loss"].get<double>() - losses[k]), 1e-4 * std::max(1.0, std::fabs(losses[k])))
              << tag << " sample " << k;
        }
        EXPECT_LE(rel(got["logprob"].get<double>(), est[0]), 1e-4) << tag;
        EXPECT_LE(rel(got["stderr"].get<double>(), est[1]), 1e-4) << tag;
      }
    }
  }
}

// The coupled estimator against the plain one at 200 forwards (100 pairs vs 200 samples), by the
// spread of the estimate: the per-draw median absolute deviation over the square root of the
// draws. Not the sample variance: with the 1/t weight both estimators' variances diverge
// (logarithmically, from draws of small t), so the sample variance of 200 draws is decided by the
// smallest t drawn; the median absolute deviation is finite. (At 4000 forwards the per-forward
// sample variance is lower for coupled too: 2079 vs 2433, 2386 vs 2905, 5576 vs 14218 on three
// seeds of a tiny model.)
TEST(Score, CoupledPairsSpreadLessThanPlainSamples) {
  const auto dir = temp_dir();
  const auto model = make(data_dir() / "edits-tiny-dream-f32.h5", dir);
  const nlohmann::json line{{"id", "v"}, {"ids", {5, 17, 301, 44}}, {"completion_ids", {9, 1020, 3, 77, 12, 600, 8, 31}}};
  const auto spread = [&](bool coupled) {
    std::vector<std::string> extra{"--samples", "200", "--seed", "4", "--record-masks"};
    if (coupled) extra.push_back("--coupled");
    const auto j = score(model, dir, built_backends().back(), line, extra);
    std::vector<double> est;
    const auto& m = j["masks"];
    for (std::size_t k = 0; k < m.size(); k += coupled ? 2 : 1)
      est.push_back(coupled ? -(m[k]["loss"].get<double>() + m[k + 1]["loss"].get<double>()) / 2 : -m[k]["loss"].get<double>());
    const auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return (v[(v.size() - 1) / 2] + v[v.size() / 2]) / 2;
    };
    const double med = median(est);
    std::vector<double> dev;
    for (double e : est) dev.push_back(std::fabs(e - med));
    return median(dev) / std::sqrt(static_cast<double>(est.size()));
  };
  const double plain = spread(false), coupled = spread(true);
  EXPECT_LT(coupled, plain) << "coupled " << coupled << " vs plain " << plain;
}

// --hooks/--out while scoring (autoregressive): each line's rows are those of a forward over its
// prompt + completion, bit for bit, marked prompt then generated.
TEST(Score, CapturesHooksOverPromptAndCompletion) {
  const auto dir = temp_dir();
  const auto model = make(data_dir() / "edits-tiny-qwen2-f32.h5", dir);
  std::ofstream(dir / "in.jsonl") << R"({"id": "a", "ids": [5, 17, 301], "completion_ids": [44, 9]})" << "\n"
                                  << R"({"id": "b", "ids": [7, 8], "completion_ids": [1020]})" << "\n";
  const auto acts = dir / "acts.h5";
  const auto r = run_sonde({"score", "--model", model.string(), "--input", (dir / "in.jsonl").string(), "--output",
                            (dir / "out.jsonl").string(), "--hooks", "blocks.1.hook_resid_post", "--out", acts.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Array got = read_dataset(acts, "acts/blocks.1.hook_resid_post");
  EXPECT_EQ(as_ints(read_dataset(acts, "rows/kind")), (std::vector<std::int64_t>{0, 0, 0, 1, 1, 0, 0, 1}));
  std::size_t at = 0;
  for (const char* ids : {"5,17,301,44,9", "7,8,1020"}) {
    const auto f = dir / "f.h5";
    ASSERT_EQ(run_sonde({"forward", "--model", model.string(), "--ids", ids, "--hooks", "blocks.1.hook_resid_post", "--out",
                         f.string(), "--overwrite"}).exit_code, 0);
    const Array want = read_dataset(f, "acts/blocks.1.hook_resid_post");
    ASSERT_TRUE(std::equal(want.values.begin(), want.values.end(), got.values.begin() + static_cast<std::ptrdiff_t>(at))) << ids;
    at += want.values.size();
  }
  EXPECT_EQ(at, got.values.size());
  const auto dream = make(data_dir() / "edits-tiny-dream-f32.h5", temp_dir());
  const auto refused = run_sonde({"score", "--model", dream.string(), "--input", (dir / "in.jsonl").string(), "--output",
                                  (dir / "d.jsonl").string(), "--hooks", "blocks.1.hook_resid_post", "--out", (dir / "d.h5").string()});
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_FALSE(fs::exists(dir / "d.jsonl"));
}

}  // namespace
}  // namespace sonde::test
