// SAEs and transcoders at hook points against the float64 PyTorch reference of
// tests/reference/make_sae_goldens.py (sae_reference.py, written from SAELens's definitions), on
// every backend built, for tiny Qwen2 and Dream checkpoints and random SAEs in SAELens's layout
// (tests/data/sae/<case>, every architecture, both cfg.json layouts, f32 and bf16 weights,
// constant_norm_rescale, a transcoder):
// - `sonde forward --sae DIR --hooks '<hook>.hook_sae_*'` gives every hook_sae_* value within
//   max|err| / max|ref| <= 1e-5, and the model's logits unchanged;
// - with --sae-splice the logits are the reference's with the hook replaced (1e-4), and with
//   --sae-error-term too, those of the plain model (1e-4);
// - generation with the SAE spliced in chooses the reference's tokens: Qwen2 greedy (every decode
//   step through the KV cache) and Dream's diffusion (every denoising step);
// - sae_feature edits (clamp, scale, steer) give the reference's edited logits (1e-4).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sonde/model_dir.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "h5_read.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

constexpr double kSaeTolerance = 1e-5, kLogitTolerance = 1e-4;
namespace fs = std::filesystem;

std::vector<fs::path> sae_golden_files() {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(data_dir(), ec))
    if (e.path().extension() == ".h5" && e.path().stem().string().rfind("sae-", 0) == 0) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

struct SaeCase {
  fs::path file;
  std::string name, sae_case, backend;
};

std::vector<SaeCase> sae_cases() {
  std::vector<SaeCase> c;
  const auto backends = built_backends();
  for (const auto& f : sae_golden_files())
    for (const auto& name : nlohmann::json::parse(read_string_attr(f, "cases")))
      for (const auto& b : backends) c.push_back({f, f.stem().string(), name.get<std::string>(), b});
  return c;
}

void PrintTo(const SaeCase& c, std::ostream* os) { *os << c.name << "/" << c.sae_case << "/" << c.backend; }

fs::path make_sae_model(const fs::path& golden, const fs::path& dir) {
  std::vector<std::string> mm{"make-model"};
  for (const auto& a : nlohmann::json::parse(read_string_attr(golden, "sae_make_model_args"))) mm.push_back(a.get<std::string>());
  const auto model = dir / "model";
  mm.insert(mm.end(), {"--out", model.string()});
  const auto made = run_sonde(mm);
  EXPECT_EQ(made.exit_code, 0) << made.output;
  EXPECT_EQ(sonde::sha256_file(model / "model.safetensors"), read_string_attr(golden, "model_sha256"))
      << "make-model changed; regenerate: /usr/bin/python3 tests/reference/make_sae_goldens.py --sonde build/bin/sonde --out tests/data";
  return model;
}

std::string golden_ids(const fs::path& golden, const std::string& path) {
  std::vector<std::int64_t> ids;
  for (auto v : as_ints(read_dataset(golden, path))) ids.push_back(v);
  return join_ids(ids);
}

class SaeGolden : public ::testing::TestWithParam<SaeCase> {};

TEST_P(SaeGolden, HookPointsAndSplicedLogitsMatchPyTorchFloat64Reference) {
  const SaeCase& c = GetParam();
  const auto dir = temp_dir();
  const auto model = make_sae_model(c.file, dir);
  const auto sae = (data_dir() / "sae" / c.sae_case).string();
  const std::string hook = nlohmann::json::parse(read_string_attr(c.file, "case_hooks")).at(c.sae_case);
  const std::vector<std::string> base{"forward", "--model", model.string(), "--backend", c.backend,
                                      "--ids", golden_ids(c.file, "ids"), "--sae", sae};
  const std::string g = c.sae_case + "/";

  auto plain = base;
  const auto out = dir / "sae.h5";
  plain.insert(plain.end(), {"--hooks", hook + ".hook_sae_*", "--out", out.string()});
  const auto r = run_sonde(plain);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // golden dataset -> sonde's point
  const std::pair<const char*, const char*> points[] = {{"sae_input", "hook_sae_input"}, {"acts_pre", "hook_sae_acts_pre"},
                                                        {"acts_post", "hook_sae_acts_post"}, {"recons", "hook_sae_recons"},
                                                        {"error", "hook_sae_error"}, {"output", "hook_sae_output"}};
  for (const auto& [golden, point] : points)
    EXPECT_LE(normalised_error(read_dataset(out, "acts/" + hook + "." + point), read_dataset(c.file, g + golden)), kSaeTolerance)
        << point;
  EXPECT_LE(normalised_error(read_dataset(out, "logits"), read_dataset(c.file, "logits")), kLogitTolerance)
      << "attaching an SAE without --sae-splice changes the forward";

  for (const bool error_term : {false, true}) {
    auto spliced = base;
    const auto sp = dir / (error_term ? "splice-error.h5" : "splice.h5");
    spliced.insert(spliced.end(), {"--sae-splice", "--out", sp.string()});
    if (error_term) spliced.push_back("--sae-error-term");
    const auto rs = run_sonde(spliced);
    ASSERT_EQ(rs.exit_code, 0) << rs.output;
    EXPECT_LE(normalised_error(read_dataset(sp, "logits"), read_dataset(c.file, error_term ? "logits" : g + "logits_splice")),
              kLogitTolerance)
        << (error_term ? "spliced with the error term" : "spliced");
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, SaeGolden, ::testing::ValuesIn(sae_cases()), [](const auto& info) {
  std::string n = info.param.name + "_" + info.param.sae_case + "_" + info.param.backend;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

struct FeatureEditCase {
  fs::path file;
  std::string name, edit_case, backend;
};

std::vector<FeatureEditCase> feature_edit_cases() {
  std::vector<FeatureEditCase> c;
  const auto backends = built_backends();
  for (const auto& f : sae_golden_files()) {
    const auto edits = nlohmann::json::parse(read_string_attr(f, "feature_edits"));  // items() refers to it
    for (const auto& [name, v] : edits.items())
      for (const auto& b : backends) c.push_back({f, f.stem().string(), name, b});
  }
  return c;
}

void PrintTo(const FeatureEditCase& c, std::ostream* os) { *os << c.name << "/" << c.edit_case << "/" << c.backend; }

class SaeFeatureEditGolden : public ::testing::TestWithParam<FeatureEditCase> {};

// {"op": "sae_feature", ...} (clamp with the error term spliced in, scale at some positions with
// the splice, steering without one) gives the reference's logits with the edit applied.
TEST_P(SaeFeatureEditGolden, LogitsMatchPyTorchFloat64Reference) {
  const FeatureEditCase& c = GetParam();
  const auto dir = temp_dir();
  const auto model = make_sae_model(c.file, dir);
  const auto spec = nlohmann::json::parse(read_string_attr(c.file, "feature_edits")).at(c.edit_case);
  const auto edits = dir / "edits.json";
  std::ofstream(edits) << nlohmann::json{{"edits", {spec["edit"]}}}.dump();
  const auto out = dir / "out.h5";
  std::vector<std::string> args{"forward", "--model", model.string(), "--backend", c.backend, "--ids", golden_ids(c.file, "ids"),
                                "--sae", (data_dir() / "sae" / "standard_flat").string(), "--edits", edits.string(),
                                "--out", out.string()};
  for (const auto& f : spec["flags"]) args.push_back(f.get<std::string>());
  const auto r = run_sonde(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LE(normalised_error(read_dataset(out, "logits"), read_dataset(c.file, "feature_edits/" + c.edit_case + "/logits")),
            kLogitTolerance);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, SaeFeatureEditGolden, ::testing::ValuesIn(feature_edit_cases()), [](const auto& info) {
  std::string n = info.param.name + "_" + info.param.edit_case + "_" + info.param.backend;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

TEST(SaeGoldenFiles, ArePresent) { EXPECT_EQ(sae_golden_files().size(), 2u) << "SAE goldens in " << data_dir(); }

std::vector<std::int64_t> completion_of(const std::vector<std::string>& args) {
  const auto lines = generate_json(args);
  EXPECT_EQ(lines.size(), 1u);
  return lines.empty() ? std::vector<std::int64_t>{} : lines[0]["completion_ids"].get<std::vector<std::int64_t>>();
}

// Qwen2: greedy decoding (prefill, then each step through the KV cache) with the SAE spliced in at
// every position chooses the reference's tokens. Dream: the diffusion loop with the SAE spliced in
// at every denoising step does, and without the splice the reference's unspliced tokens.
TEST(SaeGoldenGenerate, SplicedGenerationIsTokenExact) {
  for (const auto& f : sae_golden_files()) {
    const auto dir = temp_dir();
    const auto model = make_sae_model(f, dir);
    const auto want = as_ints(read_dataset(f, "generate_splice/tokens"));
    const auto unspliced = as_ints(read_dataset(f, "generate_splice/unspliced_tokens"));
    const auto sae = (data_dir() / "sae" / "standard_flat").string();
    for (const auto& b : built_backends()) {
      std::vector<std::string> base{"--model", model.string(), "--backend", b, "--ids", golden_ids(f, "generate_splice/prompt"),
                                    "--json"};
      for (const auto& a : nlohmann::json::parse(read_string_attr(f, "generate_splice_settings"))) base.push_back(a.get<std::string>());
      auto spliced = base;
      spliced.insert(spliced.end(), {"--sae", sae, "--sae-splice"});
      EXPECT_EQ(completion_of(spliced), want) << f.filename() << " on " << b;
      if (!unspliced.empty()) {
        EXPECT_EQ(completion_of(base), unspliced) << f.filename() << " on " << b;
      }
    }
  }
}

}  // namespace
}  // namespace sonde::test
