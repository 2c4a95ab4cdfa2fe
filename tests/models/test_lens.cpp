// sonde lens against the float64 PyTorch logit lens of tests/reference/make_edit_goldens.py
// (/lens in tests/data/edits-*.h5), on every backend: each layer's top-5 tokens (the reference's
// top-6 logits are at least 1e-4 apart, so an f32 engine must rank them alike) and their
// probabilities, the actual next token's probability and rank; and the last layer's lens equals
// the model's own logits within 1e-5.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <sstream>

#include "h5_read.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

namespace fs = std::filesystem;

std::string read_text_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Lens, MatchesTheFloat64ReferenceOnEveryBackend) {
  int files = 0;
  for (const char* name : {"edits-tiny-qwen2-f32", "edits-tiny-qwen2-bf16", "edits-tiny-dream-f32", "edits-tiny-dream-bf16"}) {
    const fs::path golden = data_dir() / (std::string(name) + ".h5");
    ++files;
    const auto dir = temp_dir();
    std::vector<std::string> mm{"make-model"};
    for (const auto& a : nlohmann::json::parse(read_string_attr(golden, "edits_make_model_args"))) mm.push_back(a.get<std::string>());
    mm.insert(mm.end(), {"--out", (dir / "m").string()});
    ASSERT_EQ(run_sonde(mm).exit_code, 0);
    std::vector<std::int64_t> prompt;
    for (const auto& x : nlohmann::json::parse(read_string_attr(golden, "prompt"))) prompt.push_back(x.get<std::int64_t>());
    const Array top_ids = read_dataset(golden, "lens/top_ids"), top_probs = read_dataset(golden, "lens/top_probs");
    const Array next_rank = read_dataset(golden, "lens/next_rank"), next_prob = read_dataset(golden, "lens/next_prob");
    const std::int64_t L = top_ids.shape[0], T = top_ids.shape[1], K = top_ids.shape[2];
    for (const auto& backend : built_backends()) {
      SCOPED_TRACE(std::string(name) + " on " + backend);
      const auto out = dir / (backend + ".h5");
      const auto r = run_sonde({"lens", "--model", (dir / "m").string(), "--backend", backend, "--ids", join_ids(prompt),
                                "--top-k", std::to_string(K), "--json", "--out", out.string()});
      ASSERT_EQ(r.exit_code, 0) << r.output;
      std::istringstream lines(r.output);
      std::int64_t n = 0;
      for (std::string line; std::getline(lines, line);) {
        if (line.empty() || line[0] != '{') continue;
        const auto j = nlohmann::json::parse(line);
        const std::int64_t l = j["layer"], t = j["pos"];
        const auto cell = static_cast<std::size_t>(l * T + t);
        for (std::int64_t k = 0; k < K; ++k) {
          const auto i = cell * static_cast<std::size_t>(K) + static_cast<std::size_t>(k);
          EXPECT_EQ(j["top_ids"][k].get<std::int64_t>(), static_cast<std::int64_t>(top_ids.values[i])) << "layer " << l << " pos " << t << " rank " << k;
          EXPECT_NEAR(j["top_probs"][k].get<double>(), top_probs.values[i], 1e-5) << "layer " << l << " pos " << t;
        }
        if (t + 1 < T) {
          EXPECT_NEAR(j["next_rank"].get<double>(), next_rank.values[cell], 1) << "layer " << l << " pos " << t;
          EXPECT_NEAR(j["next_prob"].get<double>() / next_prob.values[cell], 1.0, 1e-3) << "layer " << l << " pos " << t;
        } else {
          EXPECT_FALSE(j.contains("next_id"));
        }
        ++n;
      }
      EXPECT_EQ(n, L * T);
      EXPECT_LE(normalised_error(read_dataset(out, "lens/last_layer_logits"), read_dataset(out, "logits")), 1e-5);
    }
  }
  EXPECT_EQ(files, 4);
}

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] == '{') out.push_back(nlohmann::json::parse(line));
  return out;
}

// lens --diffusion: step s's lens is the lens of a forward over the canvas step s read (the prompt
// and masks at step 0, then the canvas after step s - 1 from generate --history), to the bit.
TEST(Lens, EachDenoisingStepIsTheLensOfTheCanvasItRead) {
  const fs::path golden = data_dir() / "edits-tiny-dream-f32.h5";
  const auto dir = temp_dir();
  std::vector<std::string> mm{"make-model"};
  for (const auto& a : nlohmann::json::parse(read_string_attr(golden, "edits_make_model_args"))) mm.push_back(a.get<std::string>());
  mm.insert(mm.end(), {"--out", (dir / "m").string()});
  ASSERT_EQ(run_sonde(mm).exit_code, 0);
  const std::string m = (dir / "m").string(), prompt = "5,17,301";
  const std::vector<std::string> gen{"--max-new-tokens", "4", "--steps", "3", "--alg", "topk_margin"};
  auto lens_args = std::vector<std::string>{"lens", "--model", m, "--ids", prompt, "--diffusion", "--json", "--top-k", "3"};
  lens_args.insert(lens_args.end(), gen.begin(), gen.end());
  const auto r = run_sonde(lens_args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cells = json_lines(r.output);
  auto gen_args = std::vector<std::string>{"--model", m, "--ids", prompt, "--history", "--json"};
  gen_args.insert(gen_args.end(), gen.begin(), gen.end());
  const auto history = generate_json(gen_args).at(0)["history"];
  ASSERT_EQ(history.size(), 3u);
  const std::int64_t mask = nlohmann::json::parse(read_text_file(dir / "m" / "config.json"))["mask_token_id"];
  std::vector<std::int64_t> canvas{5, 17, 301, mask, mask, mask, mask};
  std::size_t seen = 0;
  for (int step = 0; step < 3; ++step) {
    if (step > 0) canvas = history[step - 1].get<std::vector<std::int64_t>>();
    const auto plain = run_sonde({"lens", "--model", m, "--ids", join_ids(canvas), "--json", "--top-k", "3"});
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    for (const auto& want : json_lines(plain.output)) {
      const auto it = std::find_if(cells.begin(), cells.end(), [&](const nlohmann::json& c) {
        return c["step"] == step && c["layer"] == want["layer"] && c["pos"] == want["pos"];
      });
      ASSERT_NE(it, cells.end()) << "step " << step << " " << want.dump();
      EXPECT_EQ((*it)["top_ids"], want["top_ids"]) << "step " << step;
      EXPECT_EQ((*it)["top_probs"], want["top_probs"]) << "step " << step;
      ++seen;
    }
  }
  EXPECT_EQ(seen, cells.size());
}

}  // namespace
}  // namespace sonde::test
