// `sonde generate --diffusion-mode block` and `--alg confidence_threshold` / `--tokens-per-step`
// against the float64 PyTorch reference of block-wise Dream decoding
// (tests/reference/make_block_goldens.py -> tests/data/block-tiny-dream-f32.json; the script
// follows docs/generation.md, not sonde's sources). The checkpoint is rebuilt here with
// make-model, so a fresh clone runs it. Every decision in the goldens clears a margin (see the
// script), so completions and per-step canvases must agree token for token. Batch cases also run
// each prompt alone: rows leave their blocks at different steps, and each must get its own result.
// The cached modes (block-cache, dual-cache) are checked the same way against the reference's
// implementation of the same caching scheme, and in process (CachedForwards): every step's
// forward is the reference's (a refresh at a block's first step, else the same slot range), the
// logits of the recomputed slots agree within 1e-4, and a refresh is bit-identical to block
// mode's full forward over the same canvas.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sonde/decode.h>
#include <sonde/model_dir.h>
#include <sonde/session.h>
#include <sonde/session_decode.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <ostream>
#include <sstream>

#include "golden_checkpoint.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

using nlohmann::json;
using Ids = std::vector<std::int64_t>;

const json& block_golden() {
  static const json g = [] {
    std::ifstream in(data_dir() / "block-tiny-dream-f32.json");
    if (!in) throw std::runtime_error("missing " + (data_dir() / "block-tiny-dream-f32.json").string());
    return json::parse(in);
  }();
  return g;
}

std::filesystem::path model() {
  static const std::filesystem::path dir =  // shared by the process's tests
      make_golden_checkpoint(block_golden(), "block-golden-dream-tiny", "block goldens", "make_block_goldens.py");
  return dir;
}

std::vector<std::string> flags(const json& st, const std::string& backend) {
  std::vector<std::string> a{"--model", model().string(), "--backend", backend, "--json", "--history", "--temperature", "0",
                             "--alg", st["alg"].get<std::string>(), "--max-new-tokens", std::to_string(st["max_new_tokens"].get<int>())};
  if (st.contains("block_size"))
    a.insert(a.end(), {"--diffusion-mode", st.value("mode", std::string("block")), "--block-size",
                       std::to_string(st["block_size"].get<int>())});
  if (st.contains("steps")) a.insert(a.end(), {"--steps", std::to_string(st["steps"].get<int>())});
  if (st.contains("threshold")) a.insert(a.end(), {"--threshold", golden_number(st["threshold"].get<double>())});
  if (st.contains("tokens_per_step")) a.insert(a.end(), {"--tokens-per-step", std::to_string(st["tokens_per_step"].get<int>())});
  if (st.contains("refresh_every")) a.insert(a.end(), {"--refresh-every", std::to_string(st["refresh_every"].get<int>())});
  if (st.contains("top_p")) a.insert(a.end(), {"--top-p", golden_number(st["top_p"].get<double>())});
  if (st.contains("seed")) a.insert(a.end(), {"--seed", std::to_string(st["seed"].get<int>())});
  return a;
}

struct BlockCase {
  std::size_t index;
  std::string backend;
};

void PrintTo(const BlockCase& c, std::ostream* os) {
  *os << block_golden()["cases"][c.index]["name"].get<std::string>() << "/" << c.backend;
}

class BlockGolden : public ::testing::TestWithParam<BlockCase> {};

TEST_P(BlockGolden, MatchesPyTorchReference) {
  const json& c = block_golden()["cases"][GetParam().index];
  const auto args = flags(c["settings"], GetParam().backend);
  auto batch = args;
  for (const auto& p : c["prompts"]) batch.insert(batch.end(), {"--ids", join_ids(p.get<Ids>())});
  const auto out = generate_json(batch);
  ASSERT_EQ(out.size(), c["prompts"].size());
  for (std::size_t r = 0; r < out.size(); ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    auto seq = out[r]["prompt_ids"].get<Ids>();
    const auto comp = out[r]["completion_ids"].get<Ids>();
    seq.insert(seq.end(), comp.begin(), comp.end());
    EXPECT_EQ(seq, c["sequences"][r].get<Ids>());
    // The reference's batch loop moves its rows in lockstep (a row that finished its block waits,
    // its canvas repeated, until every row has; the loop steps until every row is done); sonde's
    // engine runs each request as alone, so its history has the same canvases without the waits.
    const auto distinct = [](const std::vector<Ids>& h) {
      std::vector<Ids> out;
      for (const auto& c : h)
        if (out.empty() || out.back() != c) out.push_back(c);
      return out;
    };
    const auto ours = out[r]["history"].get<std::vector<Ids>>(), theirs = c["history"][r].get<std::vector<Ids>>();
    ASSERT_FALSE(ours.empty());
    EXPECT_LE(ours.size(), theirs.size());
    EXPECT_EQ(distinct(ours), distinct(theirs));
  }
  if (out.size() > 1)
    for (std::size_t r = 0; r < out.size(); ++r) {
      SCOPED_TRACE("row " + std::to_string(r) + " alone");
      auto one = args;
      one.insert(one.end(), {"--ids", join_ids(c["prompts"][r].get<Ids>()), "--seed", std::to_string(r)});
      const auto alone = generate_json(one);
      ASSERT_EQ(alone.size(), 1u);
      auto seq = alone[0]["prompt_ids"].get<Ids>();
      const auto comp = alone[0]["completion_ids"].get<Ids>();
      seq.insert(seq.end(), comp.begin(), comp.end());
      EXPECT_EQ(seq, c["sequences"][r].get<Ids>());
    }
}

// ---- the cached modes in process --------------------------------------------------------------

// Records every forward of a cached run and checks each refresh against a plain forward (block
// mode's) over the same canvas, byte for byte.
class Recording : public DecodeForward {
 public:
  struct Call {
    bool refresh = false;
    std::int64_t first = 0, width = 0;
    Tensor logits;
  };
  Recording(Session& s) : cached_(s), plain_(s) {}
  std::int64_t vocab_size() const override { return cached_.vocab_size(); }
  bool has_slot_cache() const override { return cached_.has_slot_cache(); }
  Tensor forward(const StepInput& in) override {
    Tensor out = cached_.forward(in);
    if (in.fill_cache) {
      StepInput p = in;
      p.fill_cache = false;
      const Tensor full = plain_.forward(p);
      refreshes_differing += full.view().nbytes() != out.view().nbytes() ||
                             std::memcmp(full.data<float>(), out.data<float>(), out.view().nbytes()) != 0;
    }
    calls.push_back({in.fill_cache, in.first_slot, in.tokens, out});
    return out;
  }
  std::vector<Call> calls;
  int refreshes_differing = 0;

 private:
  SessionDecodeForward cached_, plain_;
};

DiffusionOptions options(const json& st, const Session& s) {
  DiffusionOptions o;
  o.mode = parse_diffusion_mode(st.value("mode", std::string("block")));
  o.block_size = st["block_size"].get<std::int64_t>();
  o.max_new_tokens = st["max_new_tokens"].get<std::int64_t>();
  o.steps = st.value("steps", o.max_new_tokens);
  o.sampling.alg = parse_diffusion_alg(st["alg"].get<std::string>());
  o.sampling.temperature = 0;
  if (st.contains("top_p")) o.sampling.top_p = st["top_p"].get<double>();
  if (st.contains("threshold")) o.threshold = st["threshold"].get<double>();
  if (st.contains("tokens_per_step")) o.tokens_per_step = st["tokens_per_step"].get<std::int64_t>();
  o.refresh_every = st.value("refresh_every", std::int64_t{0});
  o.mask_id = static_cast<std::int32_t>(s.info().mask_token_id);
  o.pad_id = static_cast<std::int32_t>(s.config().pad_token_id.value_or(0));
  return o;
}

class CachedForwards : public ::testing::TestWithParam<BlockCase> {};

TEST_P(CachedForwards, MatchReferenceWithin1e4AndRefreshesAreBlockModes) {
  const json& c = block_golden()["cases"][GetParam().index];
  auto s = Session::open(SessionOptions{model().string(), GetParam().backend, 1, plugin_root().string()});
  Recording rec(*s);
  std::vector<std::vector<std::int32_t>> prompts;
  for (const auto& p : c["prompts"]) prompts.push_back(p.get<std::vector<std::int32_t>>());
  const auto res = diffusion_generate(rec, prompts, options(c["settings"], *s));
  for (std::size_t r = 0; r < prompts.size(); ++r) {
    const auto& want = c["sequences"][r];
    EXPECT_EQ(res.sequences[r], want.get<std::vector<std::int32_t>>()) << "row " << r;
  }
  const auto& windows = c["windows"];
  ASSERT_EQ(rec.calls.size(), windows.size());
  EXPECT_EQ(rec.refreshes_differing, 0);
  const std::int64_t V = s->config().vocab_size;
  double worst = 0;
  int refreshes = 0;
  for (std::size_t i = 0; i < windows.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    const auto& w = windows[i];
    const auto& call = rec.calls[i];
    ASSERT_EQ(call.refresh, w["refresh"].get<bool>());
    refreshes += call.refresh;
    if (call.refresh) continue;
    ASSERT_EQ(call.first, w["first"].get<std::int64_t>());
    ASSERT_EQ(call.width, w["width"].get<std::int64_t>());
    for (std::size_t r = 0; r < w["rows"].size(); ++r)
      for (std::size_t q = 0; q < w["rows"][r].size(); ++q) {
        const auto got = logits_row_summary(call.logits.data<float>() + (static_cast<std::int64_t>(r) * call.width + static_cast<std::int64_t>(q)) * V, V);
        const auto want = w["rows"][r][q].get<std::vector<double>>();
        ASSERT_EQ(got.size(), want.size());
        for (std::size_t k = 0; k < got.size(); ++k) {
          worst = std::max(worst, std::abs(got[k] - want[k]));
          ASSERT_NEAR(got[k], want[k], 1e-4) << "row " << r << " slot " << call.first + static_cast<std::int64_t>(q) << " value " << k;
        }
      }
  }
  EXPECT_GT(refreshes, 0);
  EXPECT_LT(refreshes, static_cast<int>(windows.size()));  // some steps were cached
  std::cout << "[ cached   ] " << c["name"].get<std::string>() << ": " << windows.size() << " forwards, " << refreshes
            << " refreshes, largest |logit - reference| " << worst << "\n";
}

// A gtest parameter name: the golden case's name and the backend, with only [A-Za-z0-9_].
std::string block_case_name(const BlockCase& c) {
  std::string n = block_golden()["cases"][c.index]["name"].get<std::string>();
  n.append("_").append(c.backend);
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

std::vector<BlockCase> cached_cases() {
  std::vector<BlockCase> out;
  for (std::size_t i = 0; i < block_golden()["cases"].size(); ++i)
    if (block_golden()["cases"][i].contains("windows"))
      for (const char* b : {"threaded", "reference"}) out.push_back({i, b});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Dream, CachedForwards, ::testing::ValuesIn(cached_cases()), [](const auto& info) { return block_case_name(info.param); });

// Every case on the default backend; the reference backend (the double-precision oracle) on the
// batches only, to keep the suite quick.
std::vector<BlockCase> block_cases() {
  std::vector<BlockCase> out;
  const auto n = block_golden()["cases"].size();
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back({i, "threaded"});
    if (block_golden()["cases"][i]["prompts"].size() > 1) out.push_back({i, "reference"});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Dream, BlockGolden, ::testing::ValuesIn(block_cases()), [](const auto& info) { return block_case_name(info.param); });

}  // namespace
}  // namespace sonde::test
