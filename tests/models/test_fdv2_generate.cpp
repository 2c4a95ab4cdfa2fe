// `sonde generate` on a Fast-dLLM v2 checkpoint against batch_sample in float64
// (tests/reference/fast_dllm_v2_reference.py via make_fast_dllm_v2_goldens.py, never sonde's
// output), on every backend built. tests/data/tiny-fdv2-f32.h5's `fdv2_generation_cases` cover
// block sizes 8, 16 and 32, sub-blocks of 4 to 32, thresholds 0.3 to 0.95, prompts shorter than a
// block, across blocks and ending on a block boundary, and a stop token committed inside a block.
// Every decision clears the recorded margins, so the completions must agree token for token.
// The `edge_*` cases put the prompt at the block edges batch_sample treats specially: exactly one
// block (its first decoded block is forwarded without the prompt), exactly two, one token short of
// and one past a block. `fdv2_sampled_cases` are sampled (temperature, top_p, top_k) with the
// counter-based draws of docs/generation.md, re-implemented in the reference: each is run as one
// batch of prompts of different lengths (prompt r draws with --seed + r) and each prompt alone.
// The stop token is config.json's eos_token_id (batch_sample's stop_token), so a case with its
// own runs on a copy of the checkpoint whose eos_token_id is that token.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sonde/model_dir.h>

#include <algorithm>
#include <cmath>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <map>
#include <set>
#include <ostream>
#include <string>
#include <vector>

#include "h5_read.h"
#include "made_models.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

namespace fs = std::filesystem;

const char* const kGoldens = "tiny-fdv2-f32.h5";

struct FdCase {
  nlohmann::json spec;
  std::string backend;
};

void PrintTo(const FdCase& c, std::ostream* os) { *os << c.spec["name"].get<std::string>() << "/" << c.backend; }

nlohmann::json fd_cases_json() {
  return nlohmann::json::parse(read_string_attr(data_dir() / kGoldens, "fdv2_generation_cases"));
}

std::vector<FdCase> fd_cases() {
  std::vector<FdCase> out;
  for (const auto& c : fd_cases_json())
    for (const auto& b : built_backends()) out.push_back({c, b});
  return out;
}

fs::path fd_base_model() {
  const fs::path f = data_dir() / kGoldens;
  std::vector<std::string> mm;
  for (const auto& a : nlohmann::json::parse(read_string_attr(f, "make_model_args"))) mm.push_back(a.get<std::string>());
  const auto dir = made_model_args(mm);
  if (sonde::sha256_file(dir / "model.safetensors") != read_string_attr(f, "model_sha256"))
    throw std::runtime_error("sonde make-model no longer produces the checkpoint of tests/data/tiny-fdv2-f32.h5; "
                             "regenerate: /usr/bin/python3 tests/reference/make_fast_dllm_v2_goldens.py --sonde "
                             "build/bin/sonde --out tests/data");
  return dir;
}

void set_json_field(const fs::path& file, const char* key, const nlohmann::json& v) {
  nlohmann::json j;
  std::ifstream(file) >> j;
  j[key] = v;
  std::ofstream(file) << j.dump(2);
}

// The checkpoint with the case's stop token as its eos_token_id (made once per token).
fs::path fd_model(std::int64_t stop, std::int64_t pad) {
  static std::map<std::int64_t, fs::path> made;
  if (auto it = made.find(stop); it != made.end()) return it->second;
  const fs::path base = fd_base_model();
  const fs::path dir = process_temp_dir() / ("fdv2-stop-" + std::to_string(stop));
  fs::remove_all(dir);
  fs::copy(base, dir, fs::copy_options::recursive);
  set_json_field(dir / "config.json", "eos_token_id", stop);
  set_json_field(dir / "config.json", "pad_token_id", pad);
  if (fs::exists(dir / "generation_config.json")) {
    set_json_field(dir / "generation_config.json", "eos_token_id", stop);
    set_json_field(dir / "generation_config.json", "pad_token_id", pad);
  }
  return made[stop] = dir;
}

std::vector<std::string> fd_args(const nlohmann::json& c, const std::string& backend) {
  const auto& s = c["settings"];
  const auto model = fd_model(c["stop_token"].get<std::int64_t>(), c["pad_token"].get<std::int64_t>());
  return {"generate", "--model", model.string(), "--backend", backend, "--json", "--ids",
          join_ids(c["prompt"].get<std::vector<std::int64_t>>()), "--max-new-tokens",
          std::to_string(s["max_new_tokens"].get<int>()), "--block-size", std::to_string(s["block_size"].get<int>()),
          "--small-block-size", std::to_string(s["small_block_size"].get<int>()), "--threshold",
          [&] {
            std::ostringstream o;
            o.precision(17);
            o << s["threshold"].get<double>();
            return o.str();
          }()};
}

std::string exact_number(double v) {
  std::ostringstream o;
  o.precision(17);
  o << v;
  return o.str();
}

class FdV2Golden : public ::testing::TestWithParam<FdCase> {};

TEST_P(FdV2Golden, MatchesBatchSampleInFloat64) {
  const FdCase& c = GetParam();
  std::vector<std::string> args;
  ASSERT_NO_THROW(args = fd_args(c.spec, c.backend));
  const auto out = generate_json(args);
  ASSERT_EQ(out.size(), 1u);
  const auto want = c.spec["completion"].get<std::vector<std::int64_t>>();
  EXPECT_EQ(out[0]["completion_ids"].get<std::vector<std::int64_t>>(), want) << c.spec["name"];
  const bool stopped = !want.empty() && want.back() == c.spec["stop_token"].get<std::int64_t>();
  EXPECT_EQ(out[0]["finish_reason"], stopped ? "eos" : "length");
}

INSTANTIATE_TEST_SUITE_P(AllBackends, FdV2Golden, ::testing::ValuesIn(fd_cases()),
                         [](const ::testing::TestParamInfo<FdCase>& info) {
  std::string n = info.param.spec["name"].get<std::string>() + "_" + info.param.backend;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

nlohmann::json sampled_cases_json() {
  return nlohmann::json::parse(read_string_attr(data_dir() / kGoldens, "fdv2_sampled_cases"));
}

std::vector<FdCase> sampled_cases() {
  std::vector<FdCase> out;
  for (const auto& c : sampled_cases_json())
    for (const auto& b : built_backends()) out.push_back({c, b});
  return out;
}

// `sonde generate` over some of the case's prompts (all: one batch) with --seed `seed`.
std::vector<std::string> sampled_args(const nlohmann::json& c, const std::string& backend,
                                      const std::vector<std::size_t>& which, std::uint64_t seed) {
  const auto& s = c["settings"];
  const auto model = fd_model(c["stop_token"].get<std::int64_t>(), c["pad_token"].get<std::int64_t>());
  std::vector<std::string> a{"--model", model.string(), "--backend", backend, "--json", "--seed", std::to_string(seed),
                             "--max-new-tokens", std::to_string(s["max_new_tokens"].get<int>()), "--block-size",
                             std::to_string(s["block_size"].get<int>()), "--small-block-size",
                             std::to_string(s["small_block_size"].get<int>()), "--threshold",
                             exact_number(s["threshold"].get<double>()), "--temperature",
                             exact_number(s["temperature"].get<double>()), "--top-p", exact_number(s["top_p"].get<double>())};
  if (s.contains("top_k")) a.insert(a.end(), {"--top-k", std::to_string(s["top_k"].get<int>())});
  for (auto r : which) a.insert(a.end(), {"--ids", join_ids(c["prompts"][r].get<std::vector<std::int64_t>>())});
  return a;
}

class FdV2SampledGolden : public ::testing::TestWithParam<FdCase> {};

// Seeded sampling, token for token against the float64 reference, as one batch and alone.
TEST_P(FdV2SampledGolden, MatchesTheReferenceAloneAndInABatch) {
  const auto& c = GetParam().spec;
  const auto seed = c["seed"].get<std::uint64_t>();
  const auto n = c["prompts"].size();
  std::vector<std::size_t> all(n);
  for (std::size_t r = 0; r < n; ++r) all[r] = r;
  std::vector<nlohmann::json> batch;
  ASSERT_NO_THROW(batch = generate_json(sampled_args(c, GetParam().backend, all, seed)));
  ASSERT_EQ(batch.size(), n);
  for (std::size_t r = 0; r < n; ++r) {
    const auto want = c["completions"][r].get<std::vector<std::int64_t>>();
    EXPECT_EQ(batch[r]["completion_ids"].get<std::vector<std::int64_t>>(), want) << "prompt " << r << " in the batch";
    if (n == 1) continue;  // alone is the batch
    const auto alone = generate_json(sampled_args(c, GetParam().backend, {r}, seed + r));
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_EQ(alone[0]["completion_ids"].get<std::vector<std::int64_t>>(), want) << "prompt " << r << " alone";
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, FdV2SampledGolden, ::testing::ValuesIn(sampled_cases()),
                         [](const ::testing::TestParamInfo<FdCase>& info) {
  std::string n = info.param.spec["name"].get<std::string>() + "_" + info.param.backend;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

// The sampled goldens can tell sampling from greedy decoding and one seed from another: each case's
// completions differ from the greedy ones of the same prompts and, prompt by prompt, from those of
// other seeds (the reference's, recorded beside them; a wrong seed or stream word fails a case);
// one case uses top_k, one top_p < 1 and one runs several prompts of different lengths.
TEST(FdV2SampledGoldenCoverage, SampledCasesDifferFromGreedyAndSpanTheSettings) {
  bool top_k = false, top_p = false, batch = false;
  for (const auto& c : sampled_cases_json()) {
    EXPECT_NE(c["completions"], c["greedy_completions"]) << c["name"];
    ASSERT_EQ(c["other_seed_completions"].size(), c["completions"].size()) << c["name"];
    for (std::size_t r = 0; r < c["completions"].size(); ++r)
      EXPECT_NE(c["completions"][r], c["other_seed_completions"][r]) << c["name"] << " prompt " << r;
    const auto& s = c["settings"];
    EXPECT_GT(s["temperature"].get<double>(), 0) << c["name"];
    top_k |= s.contains("top_k");
    top_p |= s["top_p"].get<double>() < 1;
    std::set<std::size_t> lengths;
    for (const auto& p : c["prompts"]) lengths.insert(p.size());
    batch |= lengths.size() > 1;
  }
  EXPECT_TRUE(top_k && top_p && batch);
}

// The golden set itself covers what the loop branches on (so a fault in one branch fails a case).
TEST(FdV2GoldenCoverage, CasesSpanBlockSettingsAndAStopInsideABlock) {
  std::vector<int> blocks, smalls;
  bool stop_inside = false, boundary_prompt = false, short_prompt = false;
  bool one_block = false, two_blocks = false, one_short = false, one_past = false;
  for (const auto& c : fd_cases_json()) {
    const auto& s = c["settings"];
    const int bs = s["block_size"].get<int>();
    blocks.push_back(bs);
    smalls.push_back(s["small_block_size"].get<int>());
    const auto L = static_cast<int>(c["prompt"].size());
    const auto gen = c["completion"].size();
    boundary_prompt |= L > bs && L % bs == 0;
    one_block |= L == bs;
    two_blocks |= L == 2 * bs;
    one_short |= L == bs - 1;
    one_past |= L == bs + 1;
    short_prompt |= L < bs;
    stop_inside |= c["completion"].back() == c["stop_token"] && (L + static_cast<int>(gen)) % bs != 0;
  }
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  EXPECT_GE(blocks.size(), 3u);
  EXPECT_TRUE(std::find(smalls.begin(), smalls.end(), 4) != smalls.end());
  EXPECT_TRUE(stop_inside && boundary_prompt && short_prompt);
  EXPECT_TRUE(one_block && two_blocks && one_short && one_past);
}

// Hooks captured per step: each step's forward is the block over the cache, so a step's rows are
// the block's slots (block_size of them, with --diffusion-capture all), and the state hooks agree
// with the completion.
TEST(FdV2Hooks, CapturedPerStepWithTheBlocksRows) {
  const auto cases = fd_cases_json();
  const auto& c = cases.at(4);  // p9_block8_small4_th0.9: three blocks of 8 after a 9-token prompt
  ASSERT_EQ(c["name"], "p9_block8_small4_th0.9");
  const fs::path out = temp_dir() / "fdv2-hooks.h5";
  auto args = fd_args(c, "cpu-blas");
  args.erase(args.begin());  // generate_json adds the command
  args.insert(args.end(), {"--out", out.string(), "--diffusion-capture", "all", "--hooks",
                           "blocks.0.attn.hook_z,blocks.1.hook_resid_post,diffusion.hook_tokens,diffusion.hook_transfer,"
                           "diffusion.hook_confidence"});
  const auto json = generate_json(args);
  ASSERT_EQ(json.size(), 1u);
  const auto completion = json[0]["completion_ids"].get<std::vector<std::int64_t>>();
  ASSERT_EQ(completion, c["completion"].get<std::vector<std::int64_t>>());

  const auto step = as_ints(read_dataset(out, "rows/step")), pos = as_ints(read_dataset(out, "rows/pos"));
  const auto rows = static_cast<std::int64_t>(step.size());
  const Array z = read_dataset(out, "acts/blocks.0.attn.hook_z"), resid = read_dataset(out, "acts/blocks.1.hook_resid_post");
  const Array tokens = read_dataset(out, "acts/diffusion.hook_tokens"), transfer = read_dataset(out, "acts/diffusion.hook_transfer");
  const Array conf = read_dataset(out, "acts/diffusion.hook_confidence");
  EXPECT_EQ(z.shape, (std::vector<std::int64_t>{rows, 4, 16}));  // tiny: 4 heads of 16
  EXPECT_EQ(resid.shape, (std::vector<std::int64_t>{rows, 64}));
  EXPECT_EQ(tokens.shape, std::vector<std::int64_t>{rows});
  ASSERT_GT(rows, 0);

  // Every step: the 8 slots of its block, in order, inside the prompt's blocks or after them.
  std::map<std::int64_t, std::vector<std::int64_t>> by_step;
  for (std::int64_t i = 0; i < rows; ++i) by_step[step[static_cast<std::size_t>(i)]].push_back(pos[static_cast<std::size_t>(i)]);
  const std::int64_t L = 9, bs = 8;
  std::int64_t committed = 0;
  for (const auto& [st, ps] : by_step) {
    ASSERT_EQ(ps.size(), 8u) << "step " << st;
    EXPECT_EQ(ps.front() % bs, 0) << "step " << st;
    EXPECT_GE(ps.front(), L / bs * bs);
    for (std::size_t k = 1; k < ps.size(); ++k) EXPECT_EQ(ps[k], ps[k - 1] + 1);
  }
  // A committed slot keeps its token unless that token is the mask itself (this random model often
  // predicts it, and batch_sample then decodes the slot again): each of the 7 masked slots of the
  // 3 blocks gets its final token exactly once. The closing forward of each block commits no row
  // (the slot it appends, the next block's first, lies outside it): 3 steps without a commit.
  const std::int64_t mask = 2047;
  std::map<std::int64_t, std::int64_t> per_step;
  for (std::int64_t i = 0; i < rows; ++i) {
    const auto at = static_cast<std::size_t>(i);
    per_step[step[at]] += static_cast<std::int64_t>(transfer.values[at]);
    if (transfer.values[at] == 1 && tokens.values[at] != mask) ++committed;
    if (transfer.values[at] == 1) { EXPECT_TRUE(std::isfinite(conf.values[at])) << "a committed slot has a confidence"; }
  }
  EXPECT_EQ(committed, 21);
  EXPECT_EQ(std::count_if(per_step.begin(), per_step.end(), [](const auto& e) { return e.second == 0; }), 3);
  // After the last step the canvas holds the completion.
  const std::int64_t last = by_step.rbegin()->first;
  for (std::int64_t i = 0; i < rows; ++i)
    if (step[static_cast<std::size_t>(i)] == last && pos[static_cast<std::size_t>(i)] >= L) {
      EXPECT_EQ(tokens.values[static_cast<std::size_t>(i)], completion.at(static_cast<std::size_t>(pos[static_cast<std::size_t>(i)] - L)));
    }
}

}  // namespace
}  // namespace sonde::test
