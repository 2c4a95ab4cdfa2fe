// Edits (interventions) against the float64 PyTorch reference of tests/reference/make_edit_goldens.py,
// on every backend built: for each operation, `sonde forward --edits` must give the reference's
// logits and every layer's hook_resid_post within max|err| / max|ref| <= 1e-4, on Qwen2 and Dream
// checkpoints with f32 and bf16 weights. The vectors are read by sonde from the golden file itself
// (`golden.h5:/inputs/v`); the patch source is a sonde run on the reference's clean prompt.
// Also: greedy generation with a steering vector is token-exact against the reference.
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

constexpr double kTolerance = 1e-4;
namespace fs = std::filesystem;

std::vector<fs::path> edit_files() {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(data_dir(), ec))
    if (e.path().extension() == ".h5" && e.path().stem().string().rfind("edits-", 0) == 0) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

struct Case {
  fs::path file;
  std::string name, edit_case, backend;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  const auto backends = built_backends();
  for (const auto& f : edit_files())
    for (const auto& name : nlohmann::json::parse(read_string_attr(f, "cases")))
      for (const auto& b : backends) c.push_back({f, f.stem().string(), name.get<std::string>(), b});
  return c;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name << "/" << c.edit_case << "/" << c.backend; }

// The golden's checkpoint, rebuilt by make-model (its sha256 must be the recorded one).
fs::path make_model(const fs::path& golden, const fs::path& dir) {
  std::vector<std::string> mm{"make-model"};
  for (const auto& a : nlohmann::json::parse(read_string_attr(golden, "edits_make_model_args"))) mm.push_back(a.get<std::string>());
  const auto model = dir / "model";
  mm.insert(mm.end(), {"--out", model.string()});
  const auto made = run_sonde(mm);
  EXPECT_EQ(made.exit_code, 0) << made.output;
  EXPECT_EQ(sonde::sha256_file(model / "model.safetensors"), read_string_attr(golden, "model_sha256"))
      << "make-model changed; regenerate: /usr/bin/python3 tests/reference/make_edit_goldens.py --sonde build/bin/sonde --out tests/data";
  return model;
}

std::string ids_attr(const fs::path& golden, const std::string& name) {
  std::vector<std::int64_t> ids;
  for (const auto& x : nlohmann::json::parse(read_string_attr(golden, name)))
    ids.push_back(x.get<std::int64_t>());
  return join_ids(ids);
}

// "@/inputs/v" -> "<golden>:/inputs/v"; "@clean" -> the clean run's file.
nlohmann::json resolve_sources(nlohmann::json edit, const fs::path& golden, const fs::path& clean) {
  for (const char* key : {"vector", "direction", "stats", "source"})
    if (edit.contains(key)) {
      const std::string v = edit[key];
      edit[key] = v == "@clean" ? clean.string() : golden.string() + ":" + v.substr(1);
    }
  return edit;
}

class EditGolden : public ::testing::TestWithParam<Case> {};

TEST_P(EditGolden, ForwardMatchesPyTorchFloat64Reference) {
  const Case& c = GetParam();
  const auto dir = temp_dir();
  const auto model = make_model(c.file, dir);
  const std::string g = "cases/" + c.edit_case + "/";
  const auto edit = nlohmann::json::parse(read_string_attr(c.file, "case_edits")).at(c.edit_case);

  const auto clean = dir / "clean.h5";
  if (edit["op"] == "patch") {
    const auto r = run_sonde({"forward", "--model", model.string(), "--backend", c.backend, "--ids",
                              ids_attr(c.file, "clean_prompt"), "--hooks", edit["hook"], "--out", clean.string()});
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const auto edits = dir / "edits.json";
  std::ofstream(edits) << nlohmann::json{{"edits", {resolve_sources(edit, c.file, clean)}}}.dump();
  const auto out = dir / "out.h5";
  const auto r = run_sonde({"forward", "--model", model.string(), "--backend", c.backend, "--ids", ids_attr(c.file, "prompt"),
                            "--edits", edits.string(), "--hooks", "blocks.*.hook_resid_post", "--out", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;

  EXPECT_LE(normalised_error(read_dataset(out, "logits"), read_dataset(c.file, g + "logits")), kTolerance) << "logits";
  const Array resid = read_dataset(c.file, g + "resid_post");
  for (std::int64_t i = 0; i < resid.shape[0]; ++i)
    EXPECT_LE(normalised_error(read_dataset(out, "acts/blocks." + std::to_string(i) + ".hook_resid_post"), resid.at(i)),
              kTolerance)
        << "resid_post[" << i << "]";
}

INSTANTIATE_TEST_SUITE_P(AllBackends, EditGolden, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string n = info.param.name + "_" + info.param.edit_case + "_" + info.param.backend;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

TEST(EditGoldenFiles, ArePresent) { EXPECT_EQ(edit_files().size(), 4u) << "edit goldens in " << data_dir(); }

std::vector<std::int64_t> completion(const std::vector<std::string>& args) {
  const auto lines = generate_json(args);
  EXPECT_EQ(lines.size(), 1u);
  return lines.empty() ? std::vector<std::int64_t>{} : lines[0]["completion_ids"].get<std::vector<std::int64_t>>();
}

// Greedy decoding with v * scale added to blocks.0.hook_resid_post at every position (prompt and
// generated, every step, through the KV cache) chooses the reference's tokens, on every backend.
TEST(EditGoldenGenerate, SteeredGreedyIsTokenExact) {
  for (const auto& f : edit_files()) {
    if (!has_object(f, "generate")) continue;
    const auto dir = temp_dir();
    const auto model = make_model(f, dir);
    const auto want = as_ints(read_dataset(f, "generate/tokens"));
    const auto unsteered = as_ints(read_dataset(f, "generate/unsteered_tokens"));
    ASSERT_NE(want, unsteered) << "the golden's steering changes nothing";
    const std::string prompt = ids_attr(f, "gen_prompt");
    const auto scale = read_string_attr(f, "gen_scale");
    for (const auto& b : built_backends()) {
      const std::vector<std::string> base{"--model", model.string(), "--backend", b, "--ids", prompt,
                                          "--max-new-tokens", std::to_string(want.size()), "--json"};
      auto steered = base;
      steered.insert(steered.end(), {"--steer", read_string_attr(f, "gen_hook") + "=" + f.string() + ":/inputs/v*" + scale});
      EXPECT_EQ(completion(steered), want) << f.filename() << " on " << b;
      EXPECT_EQ(completion(base), unsteered) << f.filename() << " on " << b;
    }
  }
}

// Dream's diffusion_generate (topk_margin, 4 steps, 8 new tokens) with a steering vector added to
// the generated positions at steps 1-2 only chooses the reference's tokens, on every backend; the
// unsteered run chooses the reference's unsteered ones.
TEST(EditGoldenGenerate, DiffusionEditLimitedToStepsIsTokenExact) {
  int files = 0;
  for (const auto& f : edit_files()) {
    if (!has_object(f, "diffusion_steered")) continue;
    ++files;
    const auto dir = temp_dir();
    const auto model = make_model(f, dir);
    const auto want = as_ints(read_dataset(f, "diffusion_steered/tokens"));
    const auto unsteered = as_ints(read_dataset(f, "diffusion_steered/unsteered_tokens"));
    const auto edits = dir / "e.json";
    std::ofstream(edits) << nlohmann::json{{"edits", {resolve_sources(nlohmann::json::parse(read_string_attr(f, "diff_edit")), f, "")}}}.dump();
    for (const auto& b : built_backends()) {
      std::vector<std::string> base{"--model", model.string(), "--backend", b, "--ids", ids_attr(f, "diff_prompt"), "--json"};
      for (const auto& a : nlohmann::json::parse(read_string_attr(f, "diff_settings"))) base.push_back(a.get<std::string>());
      auto steered = base;
      steered.insert(steered.end(), {"--edits", edits.string()});
      EXPECT_EQ(completion(steered), want) << f.filename() << " on " << b;
      EXPECT_EQ(completion(base), unsteered) << f.filename() << " on " << b;
    }
  }
  EXPECT_EQ(files, 2);
}

}  // namespace
}  // namespace sonde::test
