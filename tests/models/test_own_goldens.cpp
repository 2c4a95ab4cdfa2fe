// `sonde forward` against our own PyTorch goldens in tests/data (made by
// tests/reference/make_goldens.py, float64 reference, never sonde's output), on every backend built.
//
// Each tests/data/*.h5 carrying a `make_model_args` attribute is one case: the model is rebuilt
// with `sonde make-model <args>` (deterministic; its sha256 must equal `model_sha256`, otherwise
// make-model changed and the golden is stale), then for each prompt in `forward/` the logits, the
// Hugging Face hidden states, every layer output and three layer-0 internals (hook_z, hook_rot_q,
// mlp.hook_post) must agree within max|err| / max|ref| <= 1e-4. A float32 run of the same reference
// lands at about 1e-6 (the `f32_path_*` attributes), so 1e-4 leaves room for a different
// summation order but not for a wrong formula.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sonde/model_dir.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "h5_read.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

constexpr double kOwnTolerance = 1e-4;

struct OwnCase {
  std::filesystem::path file;  // tests/data/<name>.h5
  std::string name, prompt, backend;
};

// Golden files: *.h5 in tests/data with a `make_model_args` root attribute (other .h5 files that
// may live there are not ours and are ignored).
std::vector<std::filesystem::path> golden_files() {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(data_dir(), ec)) {
    if (e.path().extension() != ".h5") continue;
    try {
      read_string_attr(e.path(), "make_model_args");
      files.push_back(e.path());
    } catch (const std::exception&) {
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<OwnCase> own_cases() {
  std::vector<OwnCase> c;
  const auto backends = built_backends();
  for (const auto& f : golden_files()) {
    const auto prompts = nlohmann::json::parse(read_string_attr(f, "prompts"));
    for (const auto& p : prompts)
      for (const auto& b : backends) c.push_back({f, f.stem().string(), p.get<std::string>(), b});
  }
  return c;
}

// Readable parameter in test listings and ctest names (instead of gtest's byte dump).
void PrintTo(const OwnCase& c, std::ostream* os) { *os << c.name << "/" << c.prompt << "/" << c.backend; }

class OwnGolden : public ::testing::TestWithParam<OwnCase> {};

TEST_P(OwnGolden, ForwardMatchesPyTorchFloat64Reference) {
  const OwnCase& c = GetParam();
  const auto dir = temp_dir();

  // 1. Rebuild the checkpoint exactly as the golden was made from it.
  std::vector<std::string> mm{"make-model"};
  for (const auto& a : nlohmann::json::parse(read_string_attr(c.file, "make_model_args")))
    mm.push_back(a.get<std::string>());
  const auto model = dir / "model";
  mm.insert(mm.end(), {"--out", model.string()});
  const auto made = run_sonde(mm);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  ASSERT_EQ(sonde::sha256_file(model / "model.safetensors"), read_string_attr(c.file, "model_sha256"))
      << "sonde make-model no longer produces the checkpoint " << c.file.filename().string()
      << " was computed from; regenerate the goldens: /usr/bin/python3 tests/reference/make_goldens.py "
         "--sonde build/bin/sonde --out tests/data";

  // 2. One forward pass with every hook we hold a golden for.
  const std::string g = "forward/" + c.prompt + "/";
  const Array ids = read_dataset(c.file, g + "input_ids");
  const std::vector<std::int64_t> id_list(ids.values.begin(), ids.values.end());
  const auto out = dir / "out.h5";
  const auto r = run_sonde({"forward", "--model", model.string(), "--backend", c.backend, "--ids", join_ids(id_list),
                            "--out", out.string(), "--hooks",
                            "hook_embed,blocks.*.hook_resid_post,ln_final.hook_out,blocks.0.attn.hook_z,"
                            "blocks.0.mlp.hook_post,blocks.0.attn.hook_rot_q"});
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // 3. Compare. Ids must round-trip exactly.
  EXPECT_LE(normalised_error(read_dataset(out, "input_ids"), ids), 0.0);
  EXPECT_LE(normalised_error(read_dataset(out, "logits"), read_dataset(c.file, g + "logits")), kOwnTolerance)
      << "logits";

  // Hugging Face convention: hidden_states[0] = hook_embed, hidden_states[k] = blocks.{k-1}.hook_resid_post
  // for 1 <= k < L, hidden_states[L] = ln_final.hook_out; resid_post[i] = blocks.{i}.hook_resid_post.
  const Array hidden = read_dataset(c.file, g + "hidden_states");  // [L+1, T, H]
  const Array resid = read_dataset(c.file, g + "resid_post");      // [L, T, H]
  const std::int64_t L = resid.shape[0];
  ASSERT_EQ(hidden.shape[0], L + 1);
  EXPECT_LE(normalised_error(read_dataset(out, "acts/hook_embed"), hidden.at(0)), kOwnTolerance) << "hidden_states[0]";
  for (std::int64_t k = 1; k < L; ++k)
    EXPECT_LE(normalised_error(read_dataset(out, "acts/blocks." + std::to_string(k - 1) + ".hook_resid_post"),
                               hidden.at(k)),
              kOwnTolerance)
        << "hidden_states[" << k << "]";
  EXPECT_LE(normalised_error(read_dataset(out, "acts/ln_final.hook_out"), hidden.at(L)), kOwnTolerance)
      << "hidden_states[" << L << "] (final norm)";
  for (std::int64_t i = 0; i < L; ++i)
    EXPECT_LE(normalised_error(read_dataset(out, "acts/blocks." + std::to_string(i) + ".hook_resid_post"), resid.at(i)),
              kOwnTolerance)
        << "resid_post[" << i << "]";

  // Layer-0 internals: [T, nh, d] attention output before o_proj, [T, nh, d] q after RoPE,
  // [T, I] silu(gate) * up.
  EXPECT_LE(normalised_error(read_dataset(out, "acts/blocks.0.attn.hook_z"), read_dataset(c.file, g + "attn_z_0")),
            kOwnTolerance)
      << "blocks.0.attn.hook_z";
  EXPECT_LE(normalised_error(read_dataset(out, "acts/blocks.0.attn.hook_rot_q"), read_dataset(c.file, g + "rot_q_0")),
            kOwnTolerance)
      << "blocks.0.attn.hook_rot_q";
  EXPECT_LE(normalised_error(read_dataset(out, "acts/blocks.0.mlp.hook_post"), read_dataset(c.file, g + "mlp_post_0")),
            kOwnTolerance)
      << "blocks.0.mlp.hook_post";
}

// No golden files (e.g. a trimmed checkout) is a failure worth seeing, not a silent empty suite.
TEST(OwnGoldenFiles, ArePresent) { EXPECT_FALSE(golden_files().empty()) << "no golden *.h5 in " << data_dir(); }

INSTANTIATE_TEST_SUITE_P(AllBackends, OwnGolden, ::testing::ValuesIn(own_cases()), [](const auto& info) {
  std::string n = info.param.name + "_" + info.param.prompt + "_" + info.param.backend;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

}  // namespace
}  // namespace sonde::test
