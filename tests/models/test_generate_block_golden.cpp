// `sonde generate --diffusion-mode block` and `--alg confidence_threshold` / `--tokens-per-step`
// against the float64 PyTorch reference of block-wise Dream decoding
// (tests/reference/make_block_goldens.py -> tests/data/block-tiny-dream-f32.json; the script
// follows docs/generation.md, not sonde's sources). The checkpoint is rebuilt here with
// make-model, so a fresh clone runs it. Every decision in the goldens clears a margin (see the
// script), so completions and per-step canvases must agree token for token. Batch cases also run
// each prompt alone: rows leave their blocks at different steps, and each must get its own result.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sonde/model_dir.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

using nlohmann::json;
using Ids = std::vector<std::int64_t>;

const json& golden() {
  static const json g = [] {
    std::ifstream in(data_dir() / "block-tiny-dream-f32.json");
    if (!in) throw std::runtime_error("missing " + (data_dir() / "block-tiny-dream-f32.json").string());
    return json::parse(in);
  }();
  return g;
}

std::filesystem::path model() {
  static const std::filesystem::path dir = [] {
    const auto d = temp_dir() / "block-golden-dream-tiny";
    std::filesystem::remove_all(d);
    std::vector<std::string> mm{"make-model"};
    for (const auto& a : golden()["make_model_args"]) mm.push_back(a.get<std::string>());
    mm.insert(mm.end(), {"--out", d.string()});
    const auto r = run_sonde(mm);
    if (r.exit_code != 0) throw std::runtime_error("make-model failed: " + r.output);
    if (sonde::sha256_file(d / "model.safetensors") != golden()["model_sha256"].get<std::string>())
      throw std::runtime_error("make-model no longer gives the checkpoint of the block goldens; regenerate with "
                               "/usr/bin/python3 tests/reference/make_block_goldens.py");
    return d;
  }();
  return dir;
}

std::string num(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

std::vector<std::string> flags(const json& st, const std::string& backend) {
  std::vector<std::string> a{"--model", model().string(), "--backend", backend, "--json", "--history", "--temperature", "0",
                             "--alg", st["alg"].get<std::string>(), "--max-new-tokens", std::to_string(st["max_new_tokens"].get<int>())};
  if (st.contains("block_size"))
    a.insert(a.end(), {"--diffusion-mode", "block", "--block-size", std::to_string(st["block_size"].get<int>())});
  if (st.contains("steps")) a.insert(a.end(), {"--steps", std::to_string(st["steps"].get<int>())});
  if (st.contains("threshold")) a.insert(a.end(), {"--threshold", num(st["threshold"].get<double>())});
  if (st.contains("tokens_per_step")) a.insert(a.end(), {"--tokens-per-step", std::to_string(st["tokens_per_step"].get<int>())});
  if (st.contains("top_p")) a.insert(a.end(), {"--top-p", num(st["top_p"].get<double>())});
  if (st.contains("seed")) a.insert(a.end(), {"--seed", std::to_string(st["seed"].get<int>())});
  return a;
}

struct Case {
  std::size_t index;
  std::string backend;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << golden()["cases"][c.index]["name"].get<std::string>() << "/" << c.backend;
}

class BlockGolden : public ::testing::TestWithParam<Case> {};

TEST_P(BlockGolden, MatchesPyTorchReference) {
  const json& c = golden()["cases"][GetParam().index];
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
    EXPECT_EQ(out[r]["history"].get<std::vector<Ids>>(), c["history"][r].get<std::vector<Ids>>());
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

// Every case on the default backend; the reference backend (the double-precision oracle) on the
// batches only, to keep the suite quick.
std::vector<Case> cases() {
  std::vector<Case> out;
  const auto n = golden()["cases"].size();
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back({i, "threaded"});
    if (golden()["cases"][i]["prompts"].size() > 1) out.push_back({i, "reference"});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Dream, BlockGolden, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string n = golden()["cases"][info.param.index]["name"].template get<std::string>() + "_" + info.param.backend;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

}  // namespace
}  // namespace sonde::test
