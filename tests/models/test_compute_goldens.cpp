// The --compute modes' error against our float64 PyTorch goldens (tests/data, never sonde's
// output), pinned: for each golden with forward cases and each mode on the threaded backend, the
// logits and the hidden states (hook_embed, every hook_resid_post, ln_final.hook_out) of the first
// prompt within the mode's bound, the greedy token (argmax) equal to the reference's at all but one
// position at most, and the error above the f32 path's 1e-4 (the mode is in effect). Measured
// with bench/compute_accuracy.py (docs/backends.md): bf16 2.3e-3 .. 7.4e-3, int8 9.8e-3 .. 2.6e-2
// normalised; the bounds leave 2x.
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

namespace sonde::test::compute_goldens {
namespace {

struct ModeCase {
  std::filesystem::path file;
  std::string name, compute;
  double bound;
};

void PrintTo(const ModeCase& c, std::ostream* os) { *os << c.name << "/" << c.compute; }

std::vector<ModeCase> mode_cases() {
  std::vector<ModeCase> out;
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(data_dir(), ec))
    if (e.path().extension() == ".h5" && has_object(e.path(), "forward")) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    try {
      read_string_attr(f, "make_model_args");
    } catch (const std::exception&) {
      continue;
    }
    out.push_back({f, f.stem().string(), "bf16", 1.5e-2});
    out.push_back({f, f.stem().string(), "int8", 5e-2});
  }
  return out;
}

// Row-wise argmax of a [T, V] array.
std::vector<std::int64_t> argmax_rows(const Array& a) {
  const std::int64_t V = a.shape.back(), T = static_cast<std::int64_t>(a.values.size()) / V;
  std::vector<std::int64_t> out;
  for (std::int64_t t = 0; t < T; ++t) {
    const auto row = a.values.begin() + t * V;
    out.push_back(std::max_element(row, row + V) - row);
  }
  return out;
}

class ComputeGolden : public ::testing::TestWithParam<ModeCase> {};

TEST_P(ComputeGolden, WithinTheModesBoundOfTheFloat64Reference) {
  const ModeCase& c = GetParam();
  if (std::find(built_backends().begin(), built_backends().end(), "threaded") == built_backends().end())
    GTEST_SKIP() << "the threaded backend is not built";
  const auto dir = temp_dir();
  std::vector<std::string> mm{"make-model"};
  for (const auto& a : nlohmann::json::parse(read_string_attr(c.file, "make_model_args"))) mm.push_back(a.get<std::string>());
  const auto model = dir / "model";
  mm.insert(mm.end(), {"--out", model.string()});
  ASSERT_EQ(run_sonde(mm).exit_code, 0);
  // The first prompt only (the test's time: one make-model and one forward per case);
  // bench/compute_accuracy.py measures all of them.
  const auto prompts = nlohmann::json::parse(read_string_attr(c.file, "prompts"));
  ASSERT_FALSE(prompts.empty());
  {
    const std::string g = "forward/" + prompts.front().get<std::string>() + "/";
    SCOPED_TRACE(g);
    const Array ids = read_dataset(c.file, g + "input_ids");
    const auto out = dir / "out.h5";
    std::vector<std::string> args{"forward", "--model", model.string(), "--backend", "threaded", "--compute", c.compute,
                                  "--ids", join_ids(as_ints(ids)), "--out", out.string(), "--hooks",
                                  "hook_embed,blocks.*.hook_resid_post,ln_final.hook_out"};
    if (c.compute == "int8") args.insert(args.end(), {"--weights", "q8"});
    const auto r = run_sonde(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Array logits = read_dataset(out, "logits"), ref = read_dataset(c.file, g + "logits");
    const double err = normalised_error(logits, ref);
    EXPECT_LE(err, c.bound) << "logits";
    EXPECT_GT(err, 1e-4) << "logits as exact as f32: the mode is not in effect";
    const Array hidden = read_dataset(c.file, g + "hidden_states");
    const std::int64_t L = hidden.shape[0] - 1;
    EXPECT_LE(normalised_error(read_dataset(out, "acts/hook_embed"), hidden.at(0)), c.bound) << "hook_embed";
    for (std::int64_t k = 1; k < L; ++k)
      EXPECT_LE(normalised_error(read_dataset(out, "acts/blocks." + std::to_string(k - 1) + ".hook_resid_post"), hidden.at(k)),
                c.bound)
          << "hidden_states[" << k << "]";
    EXPECT_LE(normalised_error(read_dataset(out, "acts/ln_final.hook_out"), hidden.at(L)), c.bound) << "ln_final";
    const auto got = argmax_rows(logits), want = argmax_rows(ref);
    ASSERT_EQ(got.size(), want.size());
    std::size_t differ = 0;
    for (std::size_t t = 0; t < got.size(); ++t) differ += got[t] != want[t];
    EXPECT_LE(differ, 1u) << "greedy tokens differing from the reference's";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ComputeGolden, ::testing::ValuesIn(mode_cases()), [](const auto& info) {
  std::string n = info.param.name + "_" + info.param.compute;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

}  // namespace
}  // namespace sonde::test::compute_goldens
