// LLaDA under Fast-dLLM's prefix and dual caches and its threshold decoding, against the float64
// PyTorch reference written from the published llada/generate.py
// (tests/reference/llada_cache_reference.py via make_llada_cache_goldens.py ->
// tests/data/cache-tiny-llada-f32.json; never sonde's output). The checkpoint is rebuilt with
// make-model, so a fresh clone runs it. Every decision clears a recorded margin, so completions
// must agree token for token: greedy and seeded (Gumbel noise and random remasking are torch's
// CPU draws), scheduled and with a threshold, including the published loop's step that commits
// nothing after a block's first step filled it (its draws still taken). In process
// (LladaCachedForwards), every forward is the reference's (full at a block's start, else the same
// slot range) and the logits of every recomputed slot agree within 1e-4, as Dream's cached modes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sonde/decode.h>
#include <sonde/model_dir.h>
#include <sonde/request.h>
#include <sonde/session.h>
#include <sonde/session_decode.h>

#include <cctype>
#include <cmath>
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

const json& cache_golden() {
  static const json g = [] {
    const auto path = data_dir() / "cache-tiny-llada-f32.json";
    std::ifstream in(path);
    if (!in) throw std::runtime_error("missing " + path.string());
    return json::parse(in);
  }();
  return g;
}

std::filesystem::path cache_model() {
  static const std::filesystem::path dir =
      make_golden_checkpoint(cache_golden(), "llada-cache-golden-tiny", "LLaDA cache goldens", "make_llada_cache_goldens.py");
  return dir;
}

// The case's settings as sonde's flags.
std::vector<std::string> cache_flags(const json& st) {
  std::vector<std::string> f{"--diffusion-mode", st["diffusion_mode"].get<std::string>(), "--steps",
                             std::to_string(st["steps"].get<int>()), "--max-new-tokens",
                             std::to_string(st["max_new_tokens"].get<int>()), "--block-length",
                             std::to_string(st["block_length"].get<int>())};
  if (st.contains("remasking")) f.insert(f.end(), {"--remasking", st["remasking"].get<std::string>()});
  if (st.contains("temperature")) f.insert(f.end(), {"--temperature", golden_number(st["temperature"].get<double>())});
  if (st.contains("threshold")) f.insert(f.end(), {"--threshold", golden_number(st["threshold"].get<double>())});
  return f;
}

struct CacheCase {
  std::size_t index;
  std::string backend;
};

void PrintTo(const CacheCase& c, std::ostream* os) {
  *os << cache_golden()["cases"][c.index]["name"].get<std::string>() << "/" << c.backend;
}

std::string cache_case_name(const CacheCase& c) {
  std::string n = cache_golden()["cases"][c.index]["name"].get<std::string>() + "_" + c.backend;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

std::vector<CacheCase> every_case_on(const std::vector<std::string>& backends) {
  std::vector<CacheCase> out;
  for (std::size_t i = 0; i < cache_golden()["cases"].size(); ++i)
    for (const auto& b : backends) out.push_back({i, b});
  return out;
}

class LladaCacheGolden : public ::testing::TestWithParam<CacheCase> {};

TEST_P(LladaCacheGolden, MatchesFastDllmGenerateInFloat64) {
  const json& c = cache_golden()["cases"][GetParam().index];
  std::vector<std::string> args{"generate", "--model", cache_model().string(), "--backend", GetParam().backend, "--json",
                                "--ids", join_ids(c["prompt"].get<Ids>()), "--seed", std::to_string(c["seed"].get<int>())};
  for (auto& f : cache_flags(c["settings"])) args.push_back(f);
  const auto out = generate_json(args);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["completion_ids"].get<Ids>(), c["completion"].get<Ids>()) << c["name"];
}

INSTANTIATE_TEST_SUITE_P(AllBackends, LladaCacheGolden, ::testing::ValuesIn(every_case_on(built_backends())),
                         [](const auto& info) { return cache_case_name(info.param); });

// Cases whose settings agree and whose seeds are s and s + 1, as one left-padded batch with --seed
// s: the rows finish their blocks at different steps (threshold), wait for each other, and each
// must still get what it gets alone.
TEST(LladaCacheGoldenBatch, RowsOfASeededBatchEqualTheirGoldens) {
  int batches = 0;
  for (const auto& a : cache_golden()["cases"])
    for (const auto& b : cache_golden()["cases"]) {
      if (a["settings"] != b["settings"] || b["seed"].get<int>() != a["seed"].get<int>() + 1) continue;
      std::vector<std::string> args{"generate", "--model", cache_model().string(), "--backend", "threaded", "--json",
                                    "--ids", join_ids(a["prompt"].get<Ids>()), "--ids", join_ids(b["prompt"].get<Ids>()),
                                    "--seed", std::to_string(a["seed"].get<int>())};
      for (auto& f : cache_flags(a["settings"])) args.push_back(f);
      const auto out = generate_json(args);
      ASSERT_EQ(out.size(), 2u);
      EXPECT_EQ(out[0]["completion_ids"].get<Ids>(), a["completion"].get<Ids>()) << a["name"];
      EXPECT_EQ(out[1]["completion_ids"].get<Ids>(), b["completion"].get<Ids>()) << b["name"];
      ++batches;
    }
  EXPECT_GE(batches, 1) << "no pair of seeded cases to batch in cache-tiny-llada-f32.json";
}

// ---- every forward in process -------------------------------------------------------------------

class RecordingForward : public DecodeForward {
 public:
  struct Call {
    bool full = false, fill = false;
    std::int64_t first = 0, width = 0;
    Tensor logits;
  };
  explicit RecordingForward(Session& s) : inner_(s) {}
  std::int64_t vocab_size() const override { return inner_.vocab_size(); }
  bool has_slot_cache() const override { return inner_.has_slot_cache(); }
  Tensor forward(const StepInput& in) override {
    Tensor out = inner_.forward(in);
    calls.push_back({in.slots == 0, in.fill_cache, in.first_slot, in.tokens, out});
    return out;
  }
  std::vector<Call> calls;

 private:
  SessionDecodeForward inner_;
};

// As Dream's cached forwards: the oracle and the default backend (every backend's tokens are
// checked by the cases above; sharded runs under mpiexec).
std::vector<std::string> local_backends() {
  std::vector<std::string> out;
  for (const auto& b : built_backends())
    if (b == "reference" || b == "threaded") out.push_back(b);
  return out;
}

class LladaCachedForwards : public ::testing::TestWithParam<CacheCase> {};

TEST_P(LladaCachedForwards, SameWindowsAndLogitsWithin1e4) {
  const json& c = cache_golden()["cases"][GetParam().index];
  auto s = Session::open(SessionOptions{cache_model().string(), GetParam().backend, 1, plugin_root().string()});
  RecordingForward rec(*s);
  const GenerationSettings settings = GenerationSettings::from_json(c["settings"]);
  DiffusionOptions o = resolve_diffusion(settings, s->config(), s->info().diffusion_loop);
  o.seeds = {static_cast<std::uint64_t>(c["seed"].get<int>())};
  const std::vector<std::int32_t> prompt = c["prompt"].get<std::vector<std::int32_t>>();
  const auto res = diffusion_generate(rec, {prompt}, o);
  EXPECT_EQ(res.completions[0], c["completion"].get<std::vector<std::int32_t>>());
  // The reference lists the published loop's forwards; sonde skips the one per block that commits
  // nothing (after the block's first step filled it), so it may have fewer, never others.
  const auto& windows = c["windows"];
  const std::int64_t V = s->config().vocab_size;
  const bool cached = c["settings"]["diffusion_mode"] != "exact";
  std::size_t w = 0;
  double worst = 0;
  for (std::size_t i = 0; i < rec.calls.size(); ++i, ++w) {
    SCOPED_TRACE("forward " + std::to_string(i));
    const auto& call = rec.calls[i];
    // a skipped forward: the reference's cached step right after a full one that left no mask
    while (w < windows.size() && !windows[w]["refresh"].get<bool>() && windows[w]["first"].get<std::int64_t>() > 0 &&
           call.full)
      ++w;
    ASSERT_LT(w, windows.size());
    const auto& win = windows[w];
    ASSERT_EQ(call.full, win["first"].get<std::int64_t>() == 0);
    EXPECT_EQ(call.fill, call.full && cached);
    if (call.full) continue;
    ASSERT_EQ(call.first, win["first"].get<std::int64_t>());
    ASSERT_EQ(call.width, win["width"].get<std::int64_t>());
    for (std::int64_t q = 0; q < call.width; ++q) {
      const auto got = logits_row_summary(call.logits.data<float>() + q * V, V);
      const auto want = win["rows"][0][static_cast<std::size_t>(q)].get<std::vector<double>>();
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t k = 0; k < got.size(); ++k) {
        worst = std::max(worst, std::abs(got[k] - want[k]));
        ASSERT_NEAR(got[k], want[k], 1e-4) << "slot " << call.first + q << " value " << k;
      }
    }
  }
  EXPECT_LE(windows.size() - w, 1u) << "sonde ran fewer forwards than the reference (beyond a last skipped one)";
  std::cout << "[ cached   ] " << c["name"].get<std::string>() << ": " << rec.calls.size() << " forwards (reference "
            << windows.size() << "), largest |logit - reference| " << worst << "\n";
}

INSTANTIATE_TEST_SUITE_P(AllBackends, LladaCachedForwards,
                         ::testing::ValuesIn(every_case_on(local_backends())),
                         [](const auto& info) { return cache_case_name(info.param); });

}  // namespace
}  // namespace sonde::test
