// The stats sink (--stats): per-feature count, mean, variance, min, max, abs-max and the row L2
// norms' mean and quantiles equal a two-pass double computation over the rows the same run
// captured (1e-6 relative), whatever the micro-batch size; after a SIGKILL and --resume the file
// holds the bits of an uninterrupted run, also when the kill fell between the activation file's
// checkpoint and the statistics file's; two files of two halves merge (Chan) to the whole.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "h5_read.h"
#include "run_sonde.h"
#include "spawn.h"
#include "test_paths.h"
#include "test_scale.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>

namespace sonde::test {
namespace {

namespace fs = std::filesystem;
const char* kStatsHooks = "blocks.1.hook_resid_post,blocks.0.attn.hook_z";

fs::path tiny_model(const fs::path& dir, const std::string& arch = "qwen2") {
  const auto r = run_sonde({"make-model", "--arch", arch, "--preset", "tiny", "--seed", "3", "--out", (dir / "m").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return dir / "m";
}

void write_input(const fs::path& p, int n, int from = 0) {
  std::ofstream in(p);
  for (int i = from; i < from + n; ++i)
    in << nlohmann::json{{"id", "q" + std::to_string(i)}, {"ids", {1 + i % 1900, 7, 300 + i % 50, 9, 11}}}.dump() << "\n";
}

std::vector<std::string> stats_batch_args(const fs::path& model, const fs::path& in, const fs::path& out, int batch_size) {
  return {"batch", "--model", model.string(), "--input", in.string(), "--output", out.string(), "--hooks", kStatsHooks,
          "--max-new-tokens", "4", "--batch-size", std::to_string(batch_size), "--temperature", "0.9", "--seed", "2"};
}

double rel(double got, double want, double scale) { return std::fabs(got - want) / std::max(scale, 1e-30); }

// Linear interpolation between order statistics (numpy's default quantile).
double quantile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double pos = p * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

void expect_stats_of_rows(const fs::path& stats, const fs::path& acts, const std::string& hook) {
  SCOPED_TRACE(hook);
  const Array x = read_dataset(acts, "acts/" + hook);
  const std::int64_t N = x.shape[0], F = static_cast<std::int64_t>(x.values.size()) / N;
  const std::string g = "stats/" + hook + "/";
  ASSERT_EQ(as_ints(read_dataset(stats, g + "count")).at(0), N);
  const Array mean = read_dataset(stats, g + "mean"), var = read_dataset(stats, g + "var"), absmax = read_dataset(stats, g + "absmax");
  const Array mn = read_dataset(stats, g + "min"), mx = read_dataset(stats, g + "max");
  double worst = 0;
  for (std::int64_t j = 0; j < F; ++j) {
    double m = 0, v = 0, lo = INFINITY, hi = -INFINITY, am = 0;
    for (std::int64_t r = 0; r < N; ++r) m += x.values[static_cast<std::size_t>(r * F + j)];
    m /= static_cast<double>(N);
    for (std::int64_t r = 0; r < N; ++r) {
      const double d = x.values[static_cast<std::size_t>(r * F + j)];
      v += (d - m) * (d - m);
      lo = std::min(lo, d);
      hi = std::max(hi, d);
      am = std::max(am, std::fabs(d));
    }
    v /= static_cast<double>(N);
    const auto J = static_cast<std::size_t>(j);
    worst = std::max({worst, rel(mean.values[J], m, std::sqrt(v) + std::fabs(m)), rel(var.values[J], v, v)});
    EXPECT_EQ(mn.values[J], lo);
    EXPECT_EQ(mx.values[J], hi);
    EXPECT_EQ(absmax.values[J], am);
  }
  EXPECT_LE(worst, 1e-6);
  std::vector<double> norms;
  for (std::int64_t r = 0; r < N; ++r) {
    double s = 0;
    for (std::int64_t j = 0; j < F; ++j) s += x.values[static_cast<std::size_t>(r * F + j)] * x.values[static_cast<std::size_t>(r * F + j)];
    norms.push_back(std::sqrt(s));
  }
  const Array q = read_dataset(stats, g + "norm_quantiles"), p = read_dataset(stats, g + "quantile_probabilities");
  ASSERT_EQ(q.values.size(), p.values.size());
  for (std::size_t i = 0; i < q.values.size(); ++i) EXPECT_LE(rel(q.values[i], quantile(norms, p.values[i]), quantile(norms, 0.5)), 1e-9);
  double nm = 0;
  for (double n : norms) nm += n;
  EXPECT_LE(rel(read_dataset(stats, g + "norm_mean").values.at(0), nm / static_cast<double>(N), nm / static_cast<double>(N)), 1e-9);
}

TEST(StatsSink, EqualsTheCapturedRowsWhateverTheMicroBatchSize) {
  const auto dir = temp_dir();
  const auto model = tiny_model(dir);
  write_input(dir / "in.jsonl", 11);
  for (int bs : {1, 4}) {
    const auto tag = std::to_string(bs);
    auto args = stats_batch_args(model, dir / "in.jsonl", dir / ("r" + tag + ".jsonl"), bs);
    args.insert(args.end(), {"--acts", (dir / ("a" + tag + ".h5")).string(), "--stats", (dir / ("s" + tag + ".h5")).string()});
    const auto r = run_sonde(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* h : {"blocks.1.hook_resid_post", "blocks.0.attn.hook_z"})
      expect_stats_of_rows(dir / ("s" + tag + ".h5"), dir / ("a" + tag + ".h5"), h);
  }
  EXPECT_EQ(read_int_attr(dir / "s4.h5", "complete"), 1);
}

TEST(StatsSink, ASigkillThenResumeGivesTheBitsOfAnUninterruptedRun) {
  const auto dir = temp_dir();
  const auto model = tiny_model(dir);
  // SONDE_TEST_SCALE (test_scale.h): a quarter, the kill still a quarter of the way in.
  const auto n = scaled(400, 100);
  write_input(dir / "in.jsonl", static_cast<int>(n));
  auto ref = stats_batch_args(model, dir / "in.jsonl", dir / "ref.jsonl", 4);
  ref.insert(ref.end(), {"--stats", (dir / "ref.h5").string(), "--checkpoint-every", "8"});
  ASSERT_EQ(run_sonde(ref).exit_code, 0);

  auto args = stats_batch_args(model, dir / "in.jsonl", dir / "run.jsonl", 4);
  args.insert(args.end(), {"--stats", (dir / "run.h5").string(), "--checkpoint-every", "8"});
  ASSERT_TRUE(kill_at_lines(args, dir / "run.jsonl", n / 4, dir / "run.log"));
  ASSERT_EQ(read_int_attr(dir / "run.h5", "complete"), 0);
  args.push_back("--resume");
  const auto r = run_sonde(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_text(dir / "run.jsonl"), read_text(dir / "ref.jsonl"));
  for (const char* h : {"blocks.1.hook_resid_post", "blocks.0.attn.hook_z"})
    for (const char* d : {"count", "mean", "m2", "min", "max", "absmax", "norms"}) {
      const std::string p = std::string("stats/") + h + "/" + d;
      EXPECT_TRUE(read_dataset(dir / "run.h5", p).values == read_dataset(dir / "ref.h5", p).values) << p;
    }
}

std::int64_t committed_prompts(const fs::path& stats) { return as_ints(read_dataset(stats, "progress/mark")).at(0); }

// A run checkpoints the activation file, then the statistics file; a kill between the two leaves
// the activations a checkpoint (or more) ahead. Made here by putting back an older statistics
// file: the resumed run continues from the statistics' mark, trims the activations to it, and
// ends with every output equal to an uninterrupted run's (/steps of the diffusion model too).
class StatsBehindActs : public ::testing::TestWithParam<std::string> {};

TEST_P(StatsBehindActs, ResumeTrimsTheActivationsToTheStatisticsMark) {
  const auto dir = temp_dir();
  const auto model = tiny_model(dir, GetParam());
  // SONDE_TEST_SCALE (test_scale.h): fewer prompts, the kills at the same fractions of the run.
  const auto n = scaled(300, 90);
  write_input(dir / "in.jsonl", static_cast<int>(n));
  const auto with_outputs = [&](const char* tag) {
    auto a = stats_batch_args(model, dir / "in.jsonl", dir / (std::string(tag) + ".jsonl"), 4);
    a.insert(a.end(), {"--acts", (dir / (std::string(tag) + "_acts.h5")).string(), "--stats",
                       (dir / (std::string(tag) + "_stats.h5")).string(), "--checkpoint-every", "8"});
    return a;
  };
  ASSERT_EQ(run_sonde(with_outputs("ref")).exit_code, 0);
  auto args = with_outputs("run");
  ASSERT_TRUE(kill_at_lines(args, dir / "run.jsonl", n / 5, dir / "run1.log"));
  fs::copy_file(dir / "run_stats.h5", dir / "early_stats.h5");
  args.push_back("--resume");
  ASSERT_TRUE(kill_at_lines(args, dir / "run.jsonl", n * 8 / 15, dir / "run2.log"));
  const auto early = committed_prompts(dir / "early_stats.h5"), later = committed_prompts(dir / "run_stats.h5");
  ASSERT_LT(early, later) << "no checkpoint between the kills";  // so the activations are ahead
  fs::copy_file(dir / "early_stats.h5", dir / "run_stats.h5", fs::copy_options::overwrite_existing);

  const auto r = run_sonde(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_text(dir / "run.jsonl"), read_text(dir / "ref.jsonl"));
  std::vector<std::string> tables = {"rows/prompt_idx", "rows/pos", "rows/token_id", "rows/step", "rows/kind",
                                     "prompts/prompt_idx", "prompts/row_start", "prompts/row_count", "prompts/token_ids"};
  if (GetParam() == "dream") tables.insert(tables.end(), {"steps/prompt_idx", "steps/step", "steps/canvas"});
  for (const char* h : {"blocks.1.hook_resid_post", "blocks.0.attn.hook_z"}) {
    tables.push_back(std::string("acts/") + h);
    for (const char* d : {"count", "mean", "m2", "min", "max", "absmax", "norms"}) {
      const std::string p = std::string("stats/") + h + "/" + d;
      EXPECT_TRUE(read_dataset(dir / "run_stats.h5", p).values == read_dataset(dir / "ref_stats.h5", p).values) << p;
    }
  }
  for (const auto& t : tables) {
    const Array got = read_dataset(dir / "run_acts.h5", t), want = read_dataset(dir / "ref_acts.h5", t);
    EXPECT_EQ(got.shape, want.shape) << t;
    EXPECT_TRUE(got.values == want.values) << t;
  }
  EXPECT_EQ(read_int_attr(dir / "run_acts.h5", "complete"), 1);
}

INSTANTIATE_TEST_SUITE_P(Families, StatsBehindActs, ::testing::Values("qwen2", "dream"));

// Two files of two halves of a dataset carry what Chan's merge needs (count, mean, m2, min, max,
// norms): merged, they give the whole run's statistics.
TEST(StatsSink, TwoFilesMergeToTheWhole) {
  const auto dir = temp_dir();
  const auto model = tiny_model(dir);
  write_input(dir / "all.jsonl", 10);
  write_input(dir / "a.jsonl", 6);
  write_input(dir / "b.jsonl", 4, 6);
  for (const char* t : {"all", "a", "b"}) {
    auto args = stats_batch_args(model, dir / (std::string(t) + ".jsonl"), dir / (std::string(t) + ".out.jsonl"), 1);
    args.insert(args.end(), {"--stats", (dir / (std::string(t) + ".h5")).string()});
    ASSERT_EQ(run_sonde(args).exit_code, 0);
  }
  const std::string g = "stats/blocks.1.hook_resid_post/";
  const auto read = [&](const char* t, const char* d) { return read_dataset(dir / (std::string(t) + ".h5"), g + d).values; };
  const double na = read("a", "count")[0], nb = read("b", "count")[0], n = na + nb;
  ASSERT_EQ(n, read("all", "count")[0]);
  const auto ma = read("a", "mean"), mb = read("b", "mean"), m2a = read("a", "m2"), m2b = read("b", "m2");
  const auto mall = read("all", "mean"), vall = read("all", "var");
  for (std::size_t j = 0; j < ma.size(); ++j) {
    const double delta = mb[j] - ma[j];
    const double mean = ma[j] + delta * nb / n, var = (m2a[j] + m2b[j] + delta * delta * na * nb / n) / n;
    EXPECT_LE(rel(mean, mall[j], std::sqrt(vall[j]) + std::fabs(mall[j])), 1e-12) << j;
    EXPECT_LE(rel(var, vall[j], vall[j]), 1e-12) << j;
  }
  auto norms = read("a", "norms");
  const auto nb_norms = read("b", "norms");
  norms.insert(norms.end(), nb_norms.begin(), nb_norms.end());
  EXPECT_TRUE(norms == read("all", "norms"));
}

}  // namespace
}  // namespace sonde::test
