// The success paths of every command, checked against values derived here from the tiny preset
// (hidden 64, 2 layers, 4 heads, 2 KV heads, head dim 16, intermediate 128, vocab 2048) and
// from design §4, never from the program's own output.
#include "checkpoint.h"
#include "expect.h"
#include "h5_check.h"
#include "process.h"
#include "test_paths.h"
#include "tiny_model_suite.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>
#include <set>

namespace sonde::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::int64_t kHidden = 64, kLayers = 2, kHeads = 4, kKvHeads = 2, kHeadDim = 16, kInter = 128, kVocab = 2048;

// Parameters of a Qwen2 decoder: embedding, per layer two norms, q/k/v with biases, o, the MLP,
// the final norm, and an lm_head unless tied.
std::int64_t expected_parameters(bool tied) {
  const std::int64_t H = kHidden, q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
  const std::int64_t layer = 2 * H + (q * H + q) + 2 * (kv * H + kv) + H * q + 3 * kInter * H;
  return kVocab * H + kLayers * layer + H + (tied ? 0 : kVocab * H);
}

// Every hook point of design §4 for the tiny preset, with its row shape.
std::map<std::string, std::vector<std::int64_t>> expected_hooks() {
  std::map<std::string, std::vector<std::int64_t>> h{
      {"hook_embed", {kHidden}}, {"ln_final.hook_out", {kHidden}}, {"hook_logits", {kVocab}}};
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".";
    for (const char* n : {"hook_resid_pre", "ln1.hook_out", "hook_attn_out", "hook_resid_mid", "ln2.hook_out",
                          "hook_mlp_out", "hook_resid_post"})
      h[p + n] = {kHidden};
    for (const char* n : {"attn.hook_q", "attn.hook_rot_q", "attn.hook_z"}) h[p + n] = {kHeads, kHeadDim};
    for (const char* n : {"attn.hook_k", "attn.hook_v", "attn.hook_rot_k"}) h[p + n] = {kKvHeads, kHeadDim};
    h[p + "attn.hook_pattern"] = {kHeads, -1};  // one probability per key: -1 (JSON), "T" (text)
    for (const char* n : {"mlp.hook_pre", "mlp.hook_pre_linear", "mlp.hook_post"}) h[p + n] = {kInter};
  }
  return h;
}

class Commands : public TinyModelSuite {};

TEST_F(Commands, TopLevelHelpListsEveryCommand) {
  for (const std::string flag : {"--help", "-h", "help"}) {
    const Outcome o = run({flag});
    EXPECT_EQ(o.exit_code, 0) << o.describe();
    for (const char* cmd : {"demo", "make-model", "inspect", "hooks", "forward", "tokenize", "plugins"})
      EXPECT_NE(o.out.find(std::string("  ") + cmd + " "), std::string::npos) << cmd << "\n" << o.describe();
  }
}

TEST_F(Commands, EachCommandHelpNamesItsOptions) {
  const std::map<std::string, std::vector<std::string>> options{
      {"demo", {"--dir", "--text", "--backend"}},
      {"make-model", {"--arch", "--preset", "--dtype", "--vocab", "--seed", "--tokenizer", "--out", "--force"}},
      {"inspect", {"--model", "--backend", "--plugin-dir"}},
      {"hooks", {"--model", "--json"}},
      {"forward", {"--model", "--ids", "--text", "--out", "--hooks", "--storage-dtype", "--overwrite", "--backend",
                   "--threads"}},
      {"tokenize", {"--model", "--text", "--input", "--decode"}},
      {"plugins", {"--plugin-dir", "--json"}},
  };
  for (const auto& [cmd, opts] : options) {
    const Outcome o = run({cmd, "--help"});
    EXPECT_EQ(o.exit_code, 0) << cmd << "\n" << o.describe();
    for (const auto& opt : opts) EXPECT_NE(o.out.find(opt), std::string::npos) << cmd << " --help lacks " << opt;
  }
}

TEST_F(Commands, DemoWritesAFileAndSaysHowToReadIt) {
  const fs::path demo = dir_ / "demo";
  const Outcome o = run({"demo", "--dir", demo.string()});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  const fs::path h5 = demo / "acts.h5";
  ASSERT_TRUE(fs::exists(h5)) << o.describe();
  EXPECT_EQ(complete_attr(h5), 1);
  EXPECT_NE(o.out.find("import h5py"), std::string::npos) << o.describe();
  EXPECT_NE(o.out.find(h5.string()), std::string::npos) << o.describe();
  const auto ids = read_ints(h5, "/input_ids");
  ASSERT_FALSE(ids.empty());
  const auto T = static_cast<std::int64_t>(ids.size());
  for (int i = 0; i < kLayers; ++i)
    EXPECT_EQ(dataset_shape(h5, "/acts/blocks." + std::to_string(i) + ".hook_resid_post"),
              (std::vector<std::int64_t>{T, kHidden}));
  EXPECT_EQ(dataset_shape(h5, "/acts/blocks.0.attn.hook_z"), (std::vector<std::int64_t>{T, kHeads, kHeadDim}));
  // A second run reuses the model and replaces the file.
  const Outcome again = run({"demo", "--dir", demo.string()});
  EXPECT_EQ(again.exit_code, 0) << again.describe();
  EXPECT_EQ(complete_attr(h5), 1);
}

TEST_F(Commands, PluginsListsTheFiveBuiltPlugins) {
  const Outcome o = run({"plugins"});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  for (const char* p : {"backend reference ", "backend cpu-blas ", "model qwen2 ", "model dream ", "sink hdf5 "})
    EXPECT_NE(o.out.find(p), std::string::npos) << p << "\n" << o.describe();
  // Each backend says whether a prompt's numbers depend on its micro-batch (docs/backends.md).
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(backend cpu-blas [^\n]*\n    [^\n]*not batch-invariant)"))) << o.out;
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"(backend threaded [^\n]*\n    [^\n]*; batch-invariant)"))) << o.out;
  const Outcome j = run({"plugins", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.describe();
  const json listing = json::parse(j.out);
  std::set<std::string> found;
  for (const auto& p : listing.at("plugins")) {
    found.insert(p.at("kind").get<std::string>() + "/" + p.at("name").get<std::string>());
    EXPECT_TRUE(fs::exists(p.at("path").get<std::string>())) << p.dump();
    EXPECT_EQ(p.at("description").get<std::string>().empty(), p.at("kind") != "backend") << p.dump();
  }
  for (const char* p : {"backend/reference", "backend/cpu-blas", "model/qwen2", "model/dream", "sink/hdf5"})
    EXPECT_EQ(found.count(p), 1u) << p;
  EXPECT_TRUE(listing.at("rejected").empty()) << listing.dump(1);
}

TEST_F(Commands, HooksListsEveryPointWithItsShape) {
  const Outcome o = run({"hooks", "--model", model_.string()});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  EXPECT_TRUE(std::regex_search(o.out, std::regex(R"((^|\n)blocks\.1\.hook_resid_post  +\[T, 64\]\n)"))) << o.out;
  const std::regex line(R"(^(\S+)  +\[T((?:, (?:\d+|T))*)\]$)");
  std::map<std::string, std::vector<std::int64_t>> listed;
  for (const auto& l : lines_of(o.out)) {
    std::smatch m;
    if (!std::regex_match(l, m, line)) continue;
    std::vector<std::int64_t> shape;
    const std::string dims = m[2];
    const std::regex number(R"(\d+|T)");
    for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it)
      shape.push_back(it->str() == "T" ? -1 : std::stoll(it->str()));
    listed[m[1]] = shape;
  }
  EXPECT_EQ(listed, expected_hooks());
}

TEST_F(Commands, HooksJsonParses) {
  const Outcome o = run({"hooks", "--model", model_.string(), "--json"});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  const json hooks = json::parse(o.out);
  ASSERT_TRUE(hooks.is_array());
  std::map<std::string, std::vector<std::int64_t>> listed;
  for (const auto& h : hooks) listed[h.at("name")] = h.at("row_shape").get<std::vector<std::int64_t>>();
  EXPECT_EQ(listed, expected_hooks());
  EXPECT_EQ(hooks.size(), expected_hooks().size()) << "a hook is listed twice";
}

TEST_F(Commands, InspectPrintsTheParameterCount) {
  const Outcome o = run({"inspect", "--model", model_.string()});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  const std::string n = std::to_string(expected_parameters(/*tied=*/true));
  EXPECT_TRUE(std::regex_search(o.out, std::regex("parameters +" + n + " "))) << "expected " << n << "\n" << o.out;
  EXPECT_NE(o.out.find("qwen2"), std::string::npos);
  EXPECT_NE(o.out.find("tokenizer    " + std::to_string(kVocab) + " tokens"), std::string::npos) << o.out;
}

TEST_F(Commands, InspectCountsTheUntiedHeadOfDream) {
  const fs::path dream = dir_ / "dream";
  make_tiny_model(dream, "dream");
  const Outcome o = run({"inspect", "--model", dream.string()});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  const std::string n = std::to_string(expected_parameters(/*tied=*/false));
  EXPECT_TRUE(std::regex_search(o.out, std::regex("parameters +" + n + " "))) << "expected " << n << "\n" << o.out;
  EXPECT_NE(o.out.find("masked diffusion"), std::string::npos) << o.out;
}

TEST_F(Commands, ForwardWritesLogitsAndTheSelectedHooks) {
  const fs::path out = dir_ / "acts.h5";
  const Outcome o = run({"forward", "--model", model_.string(), "--ids", "5,6,7,8", "--out", out.string(), "--hooks",
                         "blocks.*.hook_resid_post,blocks.0.attn.hook_k,blocks.0-1.mlp.hook_post"});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  EXPECT_EQ(complete_attr(out), 1);
  EXPECT_EQ(read_ints(out, "/input_ids"), (std::vector<std::int64_t>{5, 6, 7, 8}));
  EXPECT_EQ(read_ints(out, "/rows/token_id"), (std::vector<std::int64_t>{5, 6, 7, 8}));
  EXPECT_EQ(read_ints(out, "/rows/pos"), (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(dataset_shape(out, "/logits"), (std::vector<std::int64_t>{4, kVocab}));
  EXPECT_EQ(dataset_shape(out, "/acts/blocks.0.hook_resid_post"), (std::vector<std::int64_t>{4, kHidden}));
  EXPECT_EQ(dataset_shape(out, "/acts/blocks.1.hook_resid_post"), (std::vector<std::int64_t>{4, kHidden}));
  EXPECT_EQ(dataset_shape(out, "/acts/blocks.0.attn.hook_k"), (std::vector<std::int64_t>{4, kKvHeads, kHeadDim}));
  EXPECT_EQ(dataset_shape(out, "/acts/blocks.1.mlp.hook_post"), (std::vector<std::int64_t>{4, kInter}));
  EXPECT_TRUE(dataset_shape(out, "/acts/blocks.0.hook_resid_pre").empty()) << "a hook that was not asked for";
}

// Hooks only: no /logits, the file says so, and the hooks are those of a full forward.
TEST_F(Commands, ForwardWithoutLogitsWritesHooksAndSaysSo) {
  const fs::path full = dir_ / "full.h5", hooks = dir_ / "hooks.h5";
  const std::vector<std::string> common{"forward", "--model", model_.string(), "--ids", "5,6,7", "--hooks",
                                        "blocks.0.hook_resid_post"};
  auto with = common, without = common;
  with.insert(with.end(), {"--out", full.string()});
  without.insert(without.end(), {"--out", hooks.string(), "--no-logits"});
  const Outcome a = run(with), b = run(without);
  ASSERT_EQ(a.exit_code, 0) << a.describe();
  ASSERT_EQ(b.exit_code, 0) << b.describe();
  EXPECT_EQ(string_attr(full, "logits"), std::optional<std::string>("all"));
  EXPECT_EQ(string_attr(hooks, "logits"), std::optional<std::string>("none"));
  EXPECT_EQ(dataset_shape(full, "/logits"), (std::vector<std::int64_t>{3, kVocab}));
  EXPECT_TRUE(dataset_shape(hooks, "/logits").empty()) << "a /logits dataset under --no-logits";
  EXPECT_EQ(complete_attr(hooks), 1);
  EXPECT_EQ(read_ints(hooks, "/input_ids"), (std::vector<std::int64_t>{5, 6, 7}));
  EXPECT_EQ(dataset_shape(hooks, "/acts/blocks.0.hook_resid_post"), (std::vector<std::int64_t>{3, kHidden}));
  EXPECT_EQ(read_floats(hooks, "/acts/blocks.0.hook_resid_post"), read_floats(full, "/acts/blocks.0.hook_resid_post"));
  EXPECT_FALSE(read_floats(hooks, "/acts/blocks.0.hook_resid_post").empty());
  EXPECT_NE(b.out.find("no /logits"), std::string::npos) << b.out;
  // Nothing to compute: refused before any work.
  EXPECT_TRUE(one_line_error(run({"forward", "--model", model_.string(), "--ids", "1,2", "--out",
                                  (dir_ / "none.h5").string(), "--no-logits"}),
                             "forward", {"--no-logits"}, {"--hooks"}));
}

TEST_F(Commands, ForwardAcceptsAliases) {
  // design §4: HF module paths, hidden_states.k and llama.cpp tags, stored under canonical names.
  const fs::path out = dir_ / "acts.h5";
  const Outcome o = run({"forward", "--model", model_.string(), "--ids", "1,2", "--out", out.string(), "--hooks",
                         "model.layers.1,ffn_out-0,hidden_states.0,hidden_states.2,model.layers.0.mlp.up_proj"});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  for (const char* h : {"blocks.1.hook_resid_post", "blocks.0.hook_mlp_out", "hook_embed", "ln_final.hook_out",
                        "blocks.0.mlp.hook_pre_linear"})
    EXPECT_FALSE(dataset_shape(out, std::string("/acts/") + h).empty()) << h;
}

TEST_F(Commands, ForwardRunsOnEveryBackend) {
  for (const std::string backend : {"reference", "cpu-blas"}) {
    const fs::path out = dir_ / (backend + ".h5");
    const Outcome o = run({"forward", "--model", model_.string(), "--ids", "3,1,4,1,5", "--out", out.string(),
                           "--backend", backend, "--hooks", "ln_final.hook_out"});
    ASSERT_EQ(o.exit_code, 0) << o.describe();
    EXPECT_NE(o.out.find("backend " + backend), std::string::npos) << o.out;
    EXPECT_EQ(complete_attr(out), 1);
    EXPECT_EQ(dataset_shape(out, "/acts/ln_final.hook_out"), (std::vector<std::int64_t>{5, kHidden}));
  }
}

// --compute: recorded in the file; bf16 on threaded (its own kernels) and on reference (the
// emulation) give the same logits to f32 rounding, and not the exact ones; int8 needs q8 weights.
TEST_F(Commands, ForwardRecordsItsComputeMode) {
  const auto forward = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> args{"forward", "--model", model_.string(), "--ids", "3,1,4,1,5", "--out", (dir_ / name).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const Outcome o = run(args);
    EXPECT_EQ(o.exit_code, 0) << o.describe();
    return read_floats(dir_ / name, "/logits");
  };
  const auto exact = forward("f32.h5", {"--backend", "threaded"});
  const auto fast = forward("bf16.h5", {"--backend", "threaded", "--compute", "bf16"});
  const auto emulated = forward("bf16-ref.h5", {"--backend", "reference", "--compute", "bf16"});
  const auto int8 = forward("int8.h5", {"--backend", "threaded", "--compute", "int8", "--weights", "q8"});
  EXPECT_EQ(string_attr(dir_ / "f32.h5", "compute"), std::optional<std::string>("f32"));
  EXPECT_EQ(string_attr(dir_ / "bf16.h5", "compute"), std::optional<std::string>("bf16"));
  EXPECT_EQ(string_attr(dir_ / "bf16-ref.h5", "compute"), std::optional<std::string>("bf16"));
  EXPECT_EQ(string_attr(dir_ / "int8.h5", "compute"), std::optional<std::string>("int8"));
  ASSERT_EQ(exact.size(), fast.size());
  ASSERT_EQ(exact.size(), emulated.size());
  ASSERT_EQ(exact.size(), int8.size());
  double scale = 0, fast_vs_emulated = 0, fast_vs_exact = 0, int8_vs_exact = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    scale = std::max(scale, std::fabs(double(exact[i])));
    fast_vs_emulated = std::max(fast_vs_emulated, std::fabs(double(fast[i]) - emulated[i]));
    fast_vs_exact = std::max(fast_vs_exact, std::fabs(double(fast[i]) - exact[i]));
    int8_vs_exact = std::max(int8_vs_exact, std::fabs(double(int8[i]) - exact[i]));
  }
  EXPECT_LE(fast_vs_emulated, 1e-4 * scale);
  EXPECT_GT(fast_vs_exact, 1e-3 * scale);
  EXPECT_GT(int8_vs_exact, 1e-3 * scale);
  EXPECT_TRUE(one_line_error(run({"forward", "--model", model_.string(), "--ids", "1,2", "--out", (dir_ / "x.h5").string(),
                                  "--compute", "int8"}),
                             "forward", {"--compute", "int8", "q8 weights"}, {"needs"}));
  EXPECT_TRUE(one_line_error(run({"forward", "--model", model_.string(), "--ids", "1,2", "--out", (dir_ / "x.h5").string(),
                                  "--compute", "fp8"}),
                             "forward", {"fp8"}, {"not"}));
}

TEST_F(Commands, ForwardTextUsesTheModelTokenizer) {
  const std::string text = "Hello, sonde: 123 tokens!";
  const Outcome tok = run({"tokenize", "--model", model_.string(), "--text", text});
  ASSERT_EQ(tok.exit_code, 0) << tok.describe();
  const auto ids = json::parse(tok.out).at("ids").get<std::vector<std::int64_t>>();
  ASSERT_FALSE(ids.empty());
  const fs::path out = dir_ / "acts.h5";
  const Outcome o = run({"forward", "--model", model_.string(), "--text", text, "--out", out.string()});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  EXPECT_EQ(read_ints(out, "/input_ids"), ids);
  EXPECT_EQ(dataset_shape(out, "/logits"), (std::vector<std::int64_t>{static_cast<std::int64_t>(ids.size()), kVocab}));
}

TEST_F(Commands, ModelWithoutTokenizerRunsFromIdsOnly) {
  const fs::path bare = dir_ / "bare";
  make_tiny_model(bare);
  for (const auto& e : fs::directory_iterator(bare))
    if (e.path().filename().string().rfind("tokenizer", 0) == 0) fs::remove(e.path());
  const fs::path out = dir_ / "ids.h5";
  const Outcome o = run({"forward", "--model", bare.string(), "--ids", "1,2,3", "--out", out.string()});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  EXPECT_EQ(complete_attr(out), 1);

  const fs::path out2 = dir_ / "text.h5";
  EXPECT_TRUE(one_line_error(run({"forward", "--model", bare.string(), "--text", "hi", "--out", out2.string()}),
                             "forward", {bare.string()}, {"tokenizer"}));
  EXPECT_FALSE(fs::exists(out2));
  const Outcome inspect = run({"inspect", "--model", bare.string()});
  EXPECT_EQ(inspect.exit_code, 0) << inspect.describe();
  EXPECT_NE(inspect.out.find("--ids"), std::string::npos) << inspect.out;
}

}  // namespace
}  // namespace sonde::test
