// `sonde generate --json` against our own float64 PyTorch generation goldens (tests/data/gen-*.h5,
// made by tests/reference/make_generation_goldens.py, never from sonde's output), on every
// backend built. They cover what ../shared/golden leaves out: left-padded Qwen2 greedy batches
// (f32 and bf16 weights), Dream topk_margin, entropy with top_p at temperature 0, maskgit_plus
// with bf16 weights and a left-padded Dream batch under the pairwise mask. Checkpoints come from
// `sonde make-model <make_model_args>`, except gen-shared-*.h5, which use a ../shared/golden
// checkpoint (make-model's tied Qwen2 mostly repeats the last prompt token under greedy
// decoding; the shared one gives varied continuations) and are skipped when it is absent.
//
// Each file's `generation_cases` attribute lists its cases; every decision in them is at least
// the recorded margin away from a tie (see the script), so tokens, sequences and per-step
// canvases must agree exactly. A batch case is run as one left-padded batch (repeated --ids) and
// each prompt also alone: both must give the golden tokens.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sonde/model_dir.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
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

struct GenCase {
  std::filesystem::path file;
  nlohmann::json spec;  // one entry of `generation_cases`
  std::string backend;
};

void PrintTo(const GenCase& c, std::ostream* os) {
  *os << c.file.stem().string() << "/" << c.spec["name"].get<std::string>() << "/" << c.backend;
}

std::vector<std::filesystem::path> gen_files() {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(data_dir(), ec))
    if (e.path().extension() == ".h5" && e.path().stem().string().rfind("gen-", 0) == 0) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

// Files made from a ../shared checkpoint are instantiated as Shared/..., registered only when it
// is present (tests/CMakeLists.txt).
std::vector<GenCase> cases(bool shared) {
  std::vector<GenCase> out;
  const auto backends = built_backends();
  for (const auto& f : gen_files())
    if ((f.stem().string().rfind("gen-shared-", 0) == 0) == shared)
    for (const auto& c : nlohmann::json::parse(read_string_attr(f, "generation_cases")))
      for (const auto& b : backends) out.push_back({f, c, b});
  return out;
}


std::string num(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

bool has_attr(const std::filesystem::path& file, const std::string& name) {
  try {
    read_string_attr(file, name);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// The checkpoint a golden file was made from: rebuilt with make-model once per file, or a
// checkpoint of ../shared/golden (empty path when that is absent). sha256 checked either way.
std::filesystem::path model_for(const std::filesystem::path& file) {
  static std::map<std::string, std::filesystem::path> made;
  if (auto it = made.find(file.string()); it != made.end()) return it->second;
  if (has_attr(file, "shared_model")) {
    const auto dir = shared_dir() / read_string_attr(file, "shared_model");
    if (!std::filesystem::exists(dir / "model.safetensors")) return {};
    if (sonde::sha256_file(dir / "model.safetensors") != read_string_attr(file, "model_sha256"))
      throw std::runtime_error(dir.string() + " is not the checkpoint " + file.filename().string() + " was made from");
    return made[file.string()] = dir;
  }
  std::vector<std::string> mm;
  for (const auto& a : nlohmann::json::parse(read_string_attr(file, "make_model_args"))) mm.push_back(a.get<std::string>());
  const auto dir = made_model_args(mm);
  if (sonde::sha256_file(dir / "model.safetensors") != read_string_attr(file, "model_sha256"))
    throw std::runtime_error("sonde make-model no longer produces the checkpoint " + file.filename().string() +
                             " was computed from; regenerate: /usr/bin/python3 "
                             "tests/reference/make_generation_goldens.py --sonde build/bin/sonde --out tests/data");
  made[file.string()] = dir;
  return dir;
}

class GenerateOwnGolden : public ::testing::TestWithParam<GenCase> {};

TEST_P(GenerateOwnGolden, MatchesPyTorchFloat64Reference) {
  const GenCase& c = GetParam();
  const auto& spec = c.spec;
  std::filesystem::path model;
  ASSERT_NO_THROW(model = model_for(c.file));
  if (model.empty()) GTEST_SKIP() << "skipped: needs " << read_string_attr(c.file, "shared_model") << " in " << shared_dir();
  const bool diffusion = spec["kind"] == "diffusion";
  std::vector<std::string> common{"--model", model.string(), "--backend", c.backend, "--json", "--max-new-tokens",
                                  std::to_string(spec["max_new_tokens"].get<int>()), "--temperature", "0"};
  if (diffusion) {
    common.insert(common.end(), {"--alg", spec["alg"].get<std::string>(), "--steps", std::to_string(spec["steps"].get<int>()),
                                 "--eps", num(spec["eps"].get<double>()), "--history"});
    if (spec.contains("top_p")) common.insert(common.end(), {"--top-p", num(spec["top_p"].get<double>())});
    if (spec.contains("top_k")) common.insert(common.end(), {"--top-k", std::to_string(spec["top_k"].get<int>())});
  }
  struct Row {
    std::vector<std::int64_t> prompt, expected;  // AR: tokens; diffusion: prompt + completion
    Array history;
    std::string finish;
  };
  std::vector<Row> rows;
  for (const auto& r : spec["rows"]) {
    const std::string g = r["group"].get<std::string>() + "/";
    Row row{as_ints(read_dataset(c.file, g + "prompt")), as_ints(read_dataset(c.file, g + (diffusion ? "sequence" : "tokens"))),
            {}, r.value("finish_reason", "length")};
    if (diffusion) row.history = read_dataset(c.file, g + "history");
    rows.push_back(std::move(row));
  }
  auto check = [&](const nlohmann::json& out, const Row& row) {
    EXPECT_EQ(out["prompt_ids"].get<std::vector<std::int64_t>>(), row.prompt);
    auto got = out["completion_ids"].get<std::vector<std::int64_t>>();
    if (!diffusion) {
      EXPECT_EQ(got, row.expected);
      EXPECT_EQ(out["finish_reason"], row.finish);
      return;
    }
    got.insert(got.begin(), row.prompt.begin(), row.prompt.end());
    EXPECT_EQ(got, row.expected);
    const auto h = out["history"].get<std::vector<std::vector<std::int64_t>>>();
    ASSERT_EQ(static_cast<std::int64_t>(h.size()), row.history.shape[0]);
    for (std::int64_t i = 0; i < row.history.shape[0]; ++i)
      EXPECT_EQ(h[static_cast<std::size_t>(i)], as_ints(row.history.at(i))) << "step " << i;
  };

  // The whole case as one (left-padded) batch.
  auto args = common;
  for (const auto& row : rows) args.insert(args.end(), {"--ids", join_ids(row.prompt)});
  const auto batch = generate_json(args);
  ASSERT_EQ(batch.size(), rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    SCOPED_TRACE("batch row " + std::to_string(r));
    check(batch[r], rows[r]);
  }
  if (!diffusion) {  // the KV cache changes nothing (model-spec §1.3)
    auto nc = args;
    nc.push_back("--no-kv-cache");
    const auto recompute = generate_json(nc);
    ASSERT_EQ(recompute.size(), rows.size());
    for (std::size_t r = 0; r < rows.size(); ++r) {
      SCOPED_TRACE("batch row " + std::to_string(r) + " without KV cache");
      check(recompute[r], rows[r]);
    }
  }
  if (rows.size() > 1)  // a batch gives every prompt its single-run result
    for (std::size_t r = 0; r < rows.size(); ++r) {
      SCOPED_TRACE("row " + std::to_string(r) + " alone");
      auto one = common;
      one.insert(one.end(), {"--ids", join_ids(rows[r].prompt)});
      const auto single = generate_json(one);
      ASSERT_EQ(single.size(), 1u);
      check(single[0], rows[r]);
    }
}

TEST(GenerateOwnGoldenFiles, ArePresent) {
  const auto files = gen_files();
  EXPECT_GE(files.size(), 4u) << "generation goldens missing in " << data_dir();
  for (const auto& f : files)
    EXPECT_FALSE(nlohmann::json::parse(read_string_attr(f, "generation_cases")).empty()) << f;
}

std::string case_name(const ::testing::TestParamInfo<GenCase>& info) {
  std::string n = info.param.file.stem().string() + "_" + info.param.spec["name"].template get<std::string>() + "_" +
                  info.param.backend;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(AllBackends, GenerateOwnGolden, ::testing::ValuesIn(cases(false)), case_name);
INSTANTIATE_TEST_SUITE_P(Shared, GenerateOwnGolden, ::testing::ValuesIn(cases(true)), case_name);

}  // namespace
}  // namespace sonde::test
