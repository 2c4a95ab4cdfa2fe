// Batch invariance (issue 20, item 9): a prompt's activations and logits are bit-identical
// whatever its micro-batch (size, neighbours, left padding) and the thread count. 20 prompts of
// mixed lengths (1 to 70 tokens) on a fresh `make-model --preset small` checkpoint run through
// `sonde batch --hooks` alone, in batches of 3 and 8 in shuffled orders, with 1 and 2 threads
// (native weights; q8 alone against a batch of 8, and a batch of 3 with every Linear forced onto the
// GEMM path, SONDE_THREADED_LINEAR=gemm, decode steps too: q8 sums the same f32 weights on both paths);
// every captured dataset (every block's hooks, the final norm and the logits, prompt rows and
// generated rows) must match the first run bit for bit, prompt by prompt.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "h5_read.h"
#include "run_sonde.h"
#include "test_paths.h"
#include "test_scale.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

namespace sonde::test {
namespace {

struct Prompt {
  std::string id;
  std::vector<int> ids;
};

struct InvarianceRows {
  std::int64_t start = 0, count = 0;
};

// id -> the prompt's rows in /rows/* and /acts/*.
std::map<std::string, InvarianceRows> rows_by_id(const std::filesystem::path& acts) {
  const auto bytes = as_ints(read_dataset(acts, "/prompts/id_bytes"));
  const auto offsets = as_ints(read_dataset(acts, "/prompts/id_offsets"));
  const auto start = as_ints(read_dataset(acts, "/prompts/row_start"));
  const auto count = as_ints(read_dataset(acts, "/prompts/row_count"));
  std::map<std::string, InvarianceRows> out;
  for (std::size_t p = 0; p < start.size(); ++p) {
    std::string id;
    for (auto i = offsets[p]; i < offsets[p + 1]; ++i) id.push_back(static_cast<char>(bytes[static_cast<std::size_t>(i)]));
    out[id] = {start[p], count[p]};
  }
  return out;
}

std::vector<double> invariance_rows_of(const Array& a, const InvarianceRows& r) {
  std::int64_t width = 1;
  for (std::size_t i = 1; i < a.shape.size(); ++i) width *= a.shape[i];
  return {a.values.begin() + r.start * width, a.values.begin() + (r.start + r.count) * width};
}

// SONDE_TEST_BACKEND picks another backend for a manual check (cpu-blas is not batch-invariant:
// docs/backends.md).
std::string backend() {
  const char* b = std::getenv("SONDE_TEST_BACKEND");
  return b ? b : "threaded";
}

TEST(BatchInvariance, APromptsNumbersDoNotDependOnItsMicroBatchOrThreads) {
  const auto dir = temp_dir();
  const auto model = dir / "model";
  auto r = run_sonde({"make-model", "--preset", "small", "--out", model.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;

  std::mt19937 rng(20);
  std::vector<Prompt> prompts;
  // The first ten keep the mix's extremes and its pairs either side of 16 and 64: SONDE_TEST_SCALE
  // (test_scale.h) runs those only, still two micro-batches of 8.
  const int lengths[] = {1, 16, 17, 64, 65, 70, 2, 33, 8, 5, 3, 13, 21, 30, 40, 47, 4, 9, 27, 2};
  const auto n_prompts = scaled(20, 10);
  for (int i = 0; i < n_prompts; ++i) {
    Prompt p{"p" + std::to_string(i), {}};
    for (int t = 0; t < lengths[i]; ++t) p.ids.push_back(static_cast<int>(rng() % 4000));
    prompts.push_back(p);
  }
  std::vector<std::string> hooks;
  for (int l = 0; l < 4; ++l)
    for (const char* h : {"hook_resid_pre", "ln1.hook_out", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_rot_q",
                          "attn.hook_rot_k", "attn.hook_z", "hook_attn_out", "hook_resid_mid", "ln2.hook_out", "mlp.hook_pre",
                          "mlp.hook_pre_linear", "mlp.hook_post", "hook_mlp_out", "hook_resid_post"})
      hooks.push_back("blocks." + std::to_string(l) + "." + h);
  for (const char* h : {"hook_embed", "ln_final.hook_out", "hook_logits"}) hooks.push_back(h);
  std::string selection;
  for (const auto& h : hooks) selection += (selection.empty() ? "" : ",") + h;

  struct Config {
    int batch, threads;
    unsigned shuffle;  // 0: input order
    std::string weights = "native";
    std::string linear = "";  // SONDE_THREADED_LINEAR for this run ("": automatic)
  };
  // Each run is compared with the first of its weights (q8 rounds differently from native).
  const Config configs[] = {{1, 1, 0}, {1, 2, 0}, {3, 2, 1}, {3, 1, 2}, {8, 1, 3}, {8, 2, 4}, {1, 1, 0, "q8"}, {8, 2, 3, "q8"},
                            {3, 2, 1, "q8", "gemm"}};
  const std::size_t first_q8 = 6;
  std::vector<std::map<std::string, InvarianceRows>> rows;
  std::vector<std::filesystem::path> files;
  std::vector<std::map<std::string, nlohmann::json>> completions;
  for (const Config& c : configs) {
    std::string name = c.weights;  // appended, not a chain of +: GCC 12's false -Wrestrict
    name.append("b").append(std::to_string(c.batch)).append("t").append(std::to_string(c.threads));
    name.append("s").append(std::to_string(c.shuffle)).append(c.linear);
    auto order = prompts;
    if (c.shuffle) std::shuffle(order.begin(), order.end(), std::mt19937(c.shuffle));
    {
      std::ofstream in(dir / (name + ".jsonl"));
      for (const auto& p : order) in << nlohmann::json{{"id", p.id}, {"ids", p.ids}}.dump() << "\n";
    }
    files.push_back(dir / (name + ".h5"));
    if (!c.linear.empty()) setenv("SONDE_THREADED_LINEAR", c.linear.c_str(), 1);
    r = run_sonde({"batch", "--model", model.string(), "--backend", backend(), "--threads", std::to_string(c.threads),
                   "--input", (dir / (name + ".jsonl")).string(), "--output", (dir / (name + ".out.jsonl")).string(),
                   "--hooks", selection, "--acts", files.back().string(), "--max-new-tokens", "3", "--temperature", "0",
                   "--batch-size", std::to_string(c.batch), "--weights", c.weights});
    unsetenv("SONDE_THREADED_LINEAR");
    ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.output;
    rows.push_back(rows_by_id(files.back()));
    ASSERT_EQ(rows.back().size(), prompts.size()) << name;
    std::ifstream out(dir / (name + ".out.jsonl"));
    completions.emplace_back();
    for (std::string line; std::getline(out, line);) {
      const auto j = nlohmann::json::parse(line);
      completions.back()[j["id"]] = j["completion_ids"];
    }
  }
  int compared = 0;
  const auto base_of = [&](std::size_t c) { return c < first_q8 ? std::size_t{0} : first_q8; };
  for (const auto& hook : hooks) {
    const Array bases[] = {read_dataset(files[0], "/acts/" + hook), read_dataset(files[first_q8], "/acts/" + hook)};
    for (std::size_t c = 1; c < files.size(); ++c) {
      if (c == first_q8) continue;
      const Array& base = bases[c < first_q8 ? 0 : 1];
      const Array other = read_dataset(files[c], "/acts/" + hook);
      for (const auto& p : prompts) {
        const auto a = invariance_rows_of(base, rows[base_of(c)].at(p.id)), b = invariance_rows_of(other, rows[c].at(p.id));
        ASSERT_EQ(a.size(), b.size()) << hook << " " << p.id;
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)), 0)
            << hook << ", prompt " << p.id << " (" << p.ids.size() << " tokens): batch " << configs[c].batch << ", "
            << configs[c].threads << " threads, order " << configs[c].shuffle << ", " << configs[c].weights << " " << configs[c].linear
            << " differs from one prompt at a time, 1 thread";
        ++compared;
      }
    }
  }
  for (std::size_t c = 1; c < files.size(); ++c)
    for (const auto& p : prompts) EXPECT_EQ(completions[c].at(p.id), completions[base_of(c)].at(p.id)) << p.id;
  EXPECT_EQ(compared, static_cast<int>(hooks.size() * prompts.size() * (files.size() - 2)));
}

}  // namespace
}  // namespace sonde::test
