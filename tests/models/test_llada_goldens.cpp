// `sonde generate --json` on LLaDA checkpoints against generate.py's algorithm in float64
// (tests/reference/llada_reference.py via make_llada_goldens.py, never sonde's output), on every
// backend built. Each tests/data/*.h5 with a `llada_generation_cases` attribute holds the cases of
// one `sonde make-model --arch llada` checkpoint: greedy and Gumbel-sampled, low_confidence and
// random remasking, one block and several, classifier-free guidance; seeded cases equal
// torch.manual_seed(seed) then generate() on CPU. Every decision is at least the recorded margin
// from a tie, so the completions must agree token for token. Cases that differ only in their
// seeds (s, s + 1) also run as one left-padded batch with --seed s: a row of a batch must equal
// the row alone. The small checkpoint's cases skip the (slow) reference backend. (The forward goldens in the same files are checked by test_own_goldens.cpp.)
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sonde/model_dir.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "h5_read.h"
#include "made_models.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

struct LladaCase {
  std::filesystem::path file;
  nlohmann::json spec;
  std::string backend;
};

void PrintTo(const LladaCase& c, std::ostream* os) {
  *os << c.file.stem().string() << "/" << c.spec["name"].get<std::string>() << "/" << c.backend;
}

std::vector<std::filesystem::path> llada_files() {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(data_dir(), ec)) {
    if (e.path().extension() != ".h5") continue;
    try {
      read_string_attr(e.path(), "llada_generation_cases");
      files.push_back(e.path());
    } catch (const std::exception&) {
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<LladaCase> llada_cases() {
  std::vector<LladaCase> out;
  const auto backends = built_backends();
  for (const auto& f : llada_files()) {
    // The reference backend (naive loops in double) runs the tiny checkpoint's cases: the small
    // one's take it a minute each, and the other backends run them all.
    const bool small = read_string_attr(f, "preset") == "small";
    for (const auto& c : nlohmann::json::parse(read_string_attr(f, "llada_generation_cases")))
      for (const auto& b : backends)
        if (!(small && b == "reference")) out.push_back({f, c, b});
  }
  return out;
}

std::filesystem::path llada_model(const std::filesystem::path& file) {
  std::vector<std::string> mm;
  for (const auto& a : nlohmann::json::parse(read_string_attr(file, "make_model_args"))) mm.push_back(a.get<std::string>());
  const auto dir = made_model_args(mm);
  if (sonde::sha256_file(dir / "model.safetensors") != read_string_attr(file, "model_sha256"))
    throw std::runtime_error("sonde make-model no longer produces the checkpoint " + file.filename().string() +
                             " was computed from; regenerate: /usr/bin/python3 tests/reference/make_llada_goldens.py "
                             "--sonde build/bin/sonde --out tests/data");
  return dir;
}

std::string llada_number(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

// generate()'s settings as sonde's flags (absent ones take generate.py's defaults in both).
std::vector<std::string> llada_flags(const nlohmann::json& s) {
  std::vector<std::string> f{"--max-new-tokens", std::to_string(s["gen_length"].get<int>()), "--steps",
                             std::to_string(s["steps"].get<int>()), "--block-length",
                             std::to_string(s["block_length"].get<int>())};
  if (s.contains("remasking")) f.insert(f.end(), {"--remasking", s["remasking"].get<std::string>()});
  if (s.contains("temperature")) f.insert(f.end(), {"--temperature", llada_number(s["temperature"].get<double>())});
  if (s.contains("cfg_scale")) f.insert(f.end(), {"--cfg-scale", llada_number(s["cfg_scale"].get<double>())});
  return f;
}

std::vector<std::int64_t> llada_ids(const nlohmann::json& v) { return v.get<std::vector<std::int64_t>>(); }

class LladaGolden : public ::testing::TestWithParam<LladaCase> {};

TEST_P(LladaGolden, MatchesGeneratePyInFloat64) {
  const LladaCase& c = GetParam();
  std::filesystem::path model;
  ASSERT_NO_THROW(model = llada_model(c.file));
  std::vector<std::string> args{"generate", "--model", model.string(), "--backend", c.backend, "--json", "--ids",
                                join_ids(llada_ids(c.spec["prompt"])), "--seed", std::to_string(c.spec["seed"].get<int>())};
  for (auto& f : llada_flags(c.spec["settings"])) args.push_back(f);
  const auto out = generate_json(args);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(llada_ids(out[0]["completion_ids"]), llada_ids(c.spec["completion"])) << c.spec.dump();
}

INSTANTIATE_TEST_SUITE_P(AllBackends, LladaGolden, ::testing::ValuesIn(llada_cases()),
                         [](const ::testing::TestParamInfo<LladaCase>& info) {
  std::string n = info.param.file.stem().string() + "_" + info.param.spec["name"].get<std::string>() + "_" + info.param.backend;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

// Seeded cases whose settings agree and whose seeds are s and s + 1, as one batch with --seed s.
TEST(LladaGoldenBatch, RowsOfASeededBatchEqualTheirGoldens) {
  int batches = 0;
  for (const auto& f : llada_files()) {
    const auto cases = nlohmann::json::parse(read_string_attr(f, "llada_generation_cases"));
    for (const auto& a : cases)
      for (const auto& b : cases) {
        if (a["settings"] != b["settings"] || b["seed"].get<int>() != a["seed"].get<int>() + 1) continue;
        const auto model = llada_model(f);
        std::vector<std::string> args{"generate", "--model", model.string(), "--backend", "cpu-blas", "--json", "--ids",
                                      join_ids(llada_ids(a["prompt"])), "--ids", join_ids(llada_ids(b["prompt"])), "--seed",
                                      std::to_string(a["seed"].get<int>())};
        for (auto& fl : llada_flags(a["settings"])) args.push_back(fl);
        const auto out = generate_json(args);
        ASSERT_EQ(out.size(), 2u);
        EXPECT_EQ(llada_ids(out[0]["completion_ids"]), llada_ids(a["completion"])) << a.dump();
        EXPECT_EQ(llada_ids(out[1]["completion_ids"]), llada_ids(b["completion"])) << b.dump();
        ++batches;
      }
  }
  EXPECT_GE(batches, 1) << "no pair of seeded cases to batch in tests/data";
}

}  // namespace
}  // namespace sonde::test
