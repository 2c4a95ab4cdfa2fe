// sonde bench (design §6) on tiny checkpoints: the --json object of every mode has every field
// with values that follow from the request (no timing assertions: speed is measured in bench/),
// and bad input exits 2 with one line naming the value.
#include "checkpoint.h"
#include "expect.h"
#include "process.h"
#include "tiny_model_suite.h"
#include "test_paths.h"

#include <algorithm>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <map>

namespace sonde::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class Bench : public TwoFamilySuite {
 protected:

  // Runs `sonde bench --json` and returns the one JSON object it prints.
  static json bench_json(const fs::path& model, std::vector<std::string> extra) {
    std::vector<std::string> args{"bench", "--model", model.string(), "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Outcome o = run(args);
    EXPECT_EQ(o.exit_code, 0) << o.describe();
    const auto lines = lines_of(o.out);
    EXPECT_EQ(lines.size(), 1u) << o.describe();
    if (lines.size() != 1) return json();
    return json::parse(lines[0]);
  }

  // Every field of design §6 with values consistent with the request.
  static void expect_fields(const json& j, const std::string& mode, std::int64_t tokens, std::int64_t batch,
                            const std::string& backend) {
    for (const char* f : {"mode", "tokens", "batch", "seconds", "tokens_per_s", "peak_rss_mb", "backend", "threads"})
      ASSERT_TRUE(j.contains(f)) << "missing field " << f << " in " << j.dump();
    EXPECT_EQ(j["mode"], mode);
    EXPECT_EQ(j["tokens"].get<std::int64_t>(), tokens);
    EXPECT_EQ(j["batch"].get<std::int64_t>(), batch);
    const double s = j["seconds"].get<double>();
    EXPECT_GT(s, 0.0);
    const double expected_rate = static_cast<double>(tokens * batch) / s;
    EXPECT_NEAR(j["tokens_per_s"].get<double>(), expected_rate, 1e-6 * expected_rate) << j.dump();
    EXPECT_GT(j["peak_rss_mb"].get<double>(), 0.0);
    EXPECT_EQ(j["backend"], backend);
    EXPECT_GE(j["threads"].get<int>(), 1);
    // The median of the repeats is never faster than the best.
    ASSERT_TRUE(j.contains("median_seconds"));
    EXPECT_GE(j["median_seconds"].get<double>(), s);
    // Every timed run, in order: the best is their minimum, the median their middle.
    ASSERT_TRUE(j.contains("samples_seconds")) << j.dump();
    auto samples = j["samples_seconds"].get<std::vector<double>>();
    ASSERT_EQ(static_cast<std::int64_t>(samples.size()), j["repeat"].get<std::int64_t>());
    std::sort(samples.begin(), samples.end());
    EXPECT_EQ(samples.front(), s);
    EXPECT_EQ(samples[samples.size() / 2], j["median_seconds"].get<double>());
  }

};

TEST_F(Bench, PrefillJsonHasEveryField) {
  for (const std::string backend : {"reference", "cpu-blas"}) {
    const json j = bench_json(qwen_, {"--mode", "prefill", "--tokens", "16", "--batch", "2", "--repeat", "3",
                                      "--backend", backend, "--threads", "1"});
    expect_fields(j, "prefill", 16, 2, backend);
    if (!j.is_null()) {
      EXPECT_EQ(j["threads"].get<int>(), 1);
    }
  }
}

// A comparison must show which kernels ran: the backend's own description, with the compute
// mode's kernel table for bf16 (one the host has: `sonde plugins` lists the threaded backend's).
TEST_F(Bench, JsonNamesTheKernelsThatRan) {
  const json f32 = bench_json(qwen_, {"--mode", "prefill", "--tokens", "8", "--repeat", "1", "--threads", "1"});
  const json bf16 = bench_json(qwen_, {"--mode", "prefill", "--tokens", "8", "--repeat", "1", "--threads", "1",
                                       "--compute", "bf16"});
  ASSERT_TRUE(f32.contains("backend_description") && bf16.contains("backend_description"));
  const std::string d32 = f32["backend_description"], d16 = bf16["backend_description"];
  EXPECT_NE(d32.find("compute f32"), std::string::npos) << d32;
  EXPECT_EQ(d32.find(" kernels)"), std::string::npos) << d32;  // no low-precision table in f32
  EXPECT_NE(d16.find("compute bf16 ("), std::string::npos) << d16;
  EXPECT_NE(d16.find(" kernels)"), std::string::npos) << d16;
}

TEST_F(Bench, DecodeJsonHasEveryFieldAndExcludesThePrefill) {
  const json j = bench_json(qwen_, {"--mode", "decode", "--tokens", "8", "--prompt-tokens", "12", "--repeat", "2",
                                    "--backend", "cpu-blas"});
  expect_fields(j, "decode", 8, 1, "cpu-blas");
  if (j.is_null()) return;
  EXPECT_EQ(j["prompt_tokens"].get<std::int64_t>(), 12);
  EXPECT_GT(j["prefill_seconds"].get<double>(), 0.0);
  EXPECT_EQ(j["kv_cache"], true);
  const json slow = bench_json(qwen_, {"--mode", "decode", "--tokens", "8", "--repeat", "1", "--no-kv-cache"});
  expect_fields(slow, "decode", 8, 1, slow.is_null() ? "" : slow["backend"].get<std::string>());
  if (!slow.is_null()) {
    EXPECT_EQ(slow["kv_cache"], false);
  }
}

TEST_F(Bench, DiffusionStepJsonHasEveryField) {
  const json j = bench_json(dream_, {"--mode", "diffusion-step", "--tokens", "24", "--repeat", "1",
                                     "--backend", "reference"});
  expect_fields(j, "diffusion-step", 24, 1, "reference");
  if (!j.is_null()) {
    EXPECT_EQ(j["prompt_tokens"].get<std::int64_t>(), 12);  // half the canvas by default
  }
}

TEST_F(Bench, WeightBytesAreTheCheckpointsTensorBytes) {
  const json j = bench_json(qwen_, {"--tokens", "4", "--repeat", "1", "--backend", "reference"});
  if (j.is_null()) return;
  // The checkpoint file holds the tensor bytes plus an 8-byte length and the JSON header.
  const auto st = read_safetensors(qwen_ / "model.safetensors");
  EXPECT_EQ(j["weight_bytes"].get<std::uint64_t>(), st.data.size());
}

// The bytes one decode step reads, from the checkpoint's header: every tensor, except that the
// LM head is the embedding table when tied (no lm_head.weight read) and an untied embedding
// table is only gathered one row at a time (not read whole).
std::uint64_t decode_bytes(const SafetensorsFile& st, bool tied) {
  std::uint64_t bytes = 0;
  for (const auto& [name, info] : st.header.items()) {
    if (name == "__metadata__" || name == (tied ? "lm_head.weight" : "model.embed_tokens.weight")) continue;
    bytes += info["data_offsets"][1].get<std::uint64_t>() - info["data_offsets"][0].get<std::uint64_t>();
  }
  return bytes;
}

// The decode bound: the fields agree with each other and with the checkpoint's bytes.
void expect_bound(const json& j, std::uint64_t bytes) {
  for (const char* f : {"weight_bytes_per_token", "bandwidth_gb_s", "bound_tokens_per_s", "bound_fraction",
                        "median_bound_fraction"})
    ASSERT_TRUE(j.contains(f)) << "missing field " << f << " in " << j.dump();
  EXPECT_EQ(j["weight_bytes_per_token"].get<std::uint64_t>(), bytes);
  const double bw = j["bandwidth_gb_s"].get<double>(), bound = j["bound_tokens_per_s"].get<double>();
  EXPECT_GT(bw, 0.0);
  const double batch = j["batch"].get<double>();
  EXPECT_NEAR(bound, batch * bw * 1e9 / static_cast<double>(bytes), 1e-6 * bound) << j.dump();
  EXPECT_NEAR(j["bound_fraction"].get<double>(), j["tokens_per_s"].get<double>() / bound, 1e-6) << j.dump();
  EXPECT_GT(j["median_bound_fraction"].get<double>(), 0.0);
}

TEST_F(Bench, DecodeReportsItsBandwidthBoundOverTheWeightsItReads) {
  const auto st = read_safetensors(qwen_ / "model.safetensors");
  ASSERT_TRUE(read_json(qwen_ / "config.json")["tie_word_embeddings"].get<bool>());
  const json j = bench_json(qwen_, {"--mode", "decode", "--tokens", "4", "--prompt-tokens", "4", "--repeat", "2",
                                    "--backend", "reference", "--batch", "2"});
  if (!j.is_null()) expect_bound(j, decode_bytes(st, true));
  // Prefill is compute-bound: no bound reported.
  const json p = bench_json(qwen_, {"--tokens", "4", "--repeat", "1", "--backend", "reference"});
  if (!p.is_null()) {
    EXPECT_FALSE(p.contains("bound_fraction")) << p.dump();
  }
}

TEST_F(Bench, DecodeBoundOfAnUntiedModelLeavesTheEmbeddingTableOut) {
  // The tiny Qwen2 with its own LM head: lm_head.weight = a copy of the embedding table.
  const fs::path dir = root_ / "untied";
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(qwen_)) fs::copy(e.path(), dir / e.path().filename());
  auto cfg = read_json(dir / "config.json");
  cfg["tie_word_embeddings"] = false;
  write_text(dir / "config.json", cfg.dump(2));
  auto st = read_safetensors(dir / "model.safetensors");
  const auto& emb = st.header["model.embed_tokens.weight"];
  const auto b = emb["data_offsets"][0].get<std::size_t>(), e = emb["data_offsets"][1].get<std::size_t>();
  st.header["lm_head.weight"] = {{"dtype", emb["dtype"]}, {"shape", emb["shape"]},
                                 {"data_offsets", {st.data.size(), st.data.size() + (e - b)}}};
  st.data += st.data.substr(b, e - b);
  write_safetensors(dir / "model.safetensors", st);
  const json j = bench_json(dir, {"--mode", "decode", "--tokens", "3", "--prompt-tokens", "4", "--repeat", "1",
                                  "--backend", "reference"});
  if (!j.is_null()) expect_bound(j, decode_bytes(st, false));
}

TEST_F(Bench, DecodeBoundCountsTheBytesAsTheBackendHoldsThem) {
  // cpu-blas widens bf16 weights to f32 on upload, so a step reads twice the checkpoint's bytes.
  const fs::path dir = root_ / "bf16";
  const Outcome made = run({"make-model", "--preset", "tiny", "--dtype", "bf16", "--out", dir.string()});
  ASSERT_EQ(made.exit_code, 0) << made.describe();
  const auto st = read_safetensors(dir / "model.safetensors");
  const json j = bench_json(dir, {"--mode", "decode", "--tokens", "3", "--prompt-tokens", "4", "--repeat", "1",
                                  "--backend", "cpu-blas"});
  if (!j.is_null()) expect_bound(j, 2 * decode_bytes(st, true));
}

TEST_F(Bench, Q8DecodeBoundCountsTheInt8BlocksTheBackendReads) {
  // Under --weights q8 the threaded backend reads, for every 2-D weight [N, K], N x kp int8
  // values plus one f32 scale per 32-value block (kp = K rounded up to 32: backends/threaded/q8.h);
  // 1-D weights (norms, biases) are read as stored (f32 here).
  const auto st = read_safetensors(qwen_ / "model.safetensors");
  std::uint64_t bytes = 0;
  for (const auto& [name, info] : st.header.items()) {
    if (name == "__metadata__" || name == "lm_head.weight") continue;  // tied: the table is the head
    const auto& shape = info["shape"];
    if (shape.size() == 2) {
      const std::uint64_t N = shape[0].get<std::uint64_t>(), K = shape[1].get<std::uint64_t>(), kp = (K + 31) / 32 * 32;
      bytes += N * kp + N * (kp / 32) * 4;
    } else {
      bytes += info["data_offsets"][1].get<std::uint64_t>() - info["data_offsets"][0].get<std::uint64_t>();
    }
  }
  const json j = bench_json(qwen_, {"--mode", "decode", "--tokens", "3", "--prompt-tokens", "4", "--repeat", "1",
                                    "--backend", "threaded", "--weights", "q8"});
  if (j.is_null()) return;
  expect_bound(j, bytes);
  EXPECT_EQ(j["backend_weight_bytes"].get<std::uint64_t>(), bytes) << j.dump();
}

// --logits says where the LM head ran, read off the logits the forward returned: every position by
// default, each row's last with --logits last; the text output says which.
TEST_F(Bench, PrefillSaysWhereTheLogitsWereComputed) {
  const json all = bench_json(qwen_, {"--tokens", "8", "--batch", "2", "--repeat", "1", "--backend", "reference"});
  const json last = bench_json(qwen_, {"--tokens", "8", "--batch", "2", "--repeat", "1", "--backend", "reference",
                                       "--logits", "last"});
  ASSERT_TRUE(all.contains("logits")) << all.dump();
  ASSERT_TRUE(last.contains("logits")) << last.dump();
  EXPECT_EQ(all["logits"], "all");
  EXPECT_EQ(last["logits"], "last");
  expect_fields(last, "prefill", 8, 2, "reference");
  const json threaded = bench_json(qwen_, {"--tokens", "5", "--repeat", "1", "--logits", "last"});
  EXPECT_EQ(threaded["logits"], "last") << threaded.dump();
  const Outcome text = run({"bench", "--model", qwen_.string(), "--tokens", "4", "--repeat", "1", "--logits", "last"});
  ASSERT_EQ(text.exit_code, 0) << text.describe();
  EXPECT_NE(text.out.find("logits at each row's last position"), std::string::npos) << text.out;
  // Decode has no such choice; a diffusion model reads every position.
  EXPECT_FALSE(bench_json(qwen_, {"--mode", "decode", "--tokens", "2", "--prompt-tokens", "3", "--repeat", "1"})
                   .contains("logits"));
}

TEST_F(Bench, TextOutputNamesTheRate) {
  const Outcome o = run({"bench", "--model", qwen_.string(), "--tokens", "4", "--repeat", "1"});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  EXPECT_NE(o.out.find("tokens/s"), std::string::npos) << o.describe();
  EXPECT_NE(o.out.find("peak RSS"), std::string::npos) << o.describe();
}

// Whole generations per decoding mode: forwards and tokens per forward follow from the modes
// (8 new tokens, blocks of 4: exact and block one slot per step; 2 per step: 2 per block).
TEST_F(Bench, DiffusionModesReportForwardsPerMode) {
  const json j = bench_json(dream_, {"--mode", "diffusion", "--tokens", "8", "--prompt-tokens", "4", "--repeat", "1",
                                     "--block-size", "4", "--tokens-per-step", "2", "--backend", "reference"});
  ASSERT_TRUE(j.contains("runs")) << j.dump();
  const auto& runs = j["runs"];
  ASSERT_EQ(runs.size(), 10u);  // exact, block x 3, block-cache x 3, dual-cache x 3
  EXPECT_EQ(runs[0]["mode"], "exact");
  EXPECT_EQ(runs[4]["mode"], "block-cache");
  EXPECT_EQ(runs[7]["mode"], "dual-cache");
  for (std::size_t cached : {4u, 7u}) {  // a cache changes the cost of a forward, not their number
    EXPECT_EQ(runs[cached]["forwards"].get<std::int64_t>(), 8);
    EXPECT_GE(runs[cached + 1]["forwards"].get<std::int64_t>(), 2);
    EXPECT_EQ(runs[cached + 2]["forwards"].get<std::int64_t>(), 4);
  }
  EXPECT_EQ(runs[0]["forwards"].get<std::int64_t>(), 8);
  EXPECT_EQ(runs[1]["forwards"].get<std::int64_t>(), 8);
  EXPECT_GE(runs[2]["forwards"].get<std::int64_t>(), 2);  // threshold: between 1 and 4 slots a step
  EXPECT_LE(runs[2]["forwards"].get<std::int64_t>(), 8);
  EXPECT_EQ(runs[3]["forwards"].get<std::int64_t>(), 4);
  EXPECT_DOUBLE_EQ(runs[3]["tokens_per_forward"].get<double>(), 2.0);
  for (const auto& r : runs) EXPECT_GT(r["tokens_per_s"].get<double>(), 0) << r.dump();
}

// --profile: every profiled run counts each node once, the warm-up not at all; the SAE's
// encoder and TopK are there, and its tapped acts_post is counted as tapped in every run.
TEST_F(Bench, PrefillProfileCountsEachNodeOncePerTimedRun) {
  const std::string acts = "blocks.1.hook_resid_post.hook_sae_acts_post";
  const json j = bench_json(qwen_, {"--mode", "prefill", "--tokens", "8", "--repeat", "2", "--backend", "threaded",
                                    "--threads", "1", "--profile", "--sae", (data_dir() / "sae" / "topk_flat").string(),
                                    "--hooks", acts});
  ASSERT_TRUE(j.contains("profile")) << j.dump();
  const json& p = j["profile"];
  EXPECT_EQ(p["runs"].get<std::int64_t>(), 2);
  EXPECT_EQ(j["hooks"], json::array({acts}));
  std::int64_t node_runs = 0, kind_runs = 0;
  std::map<std::string, json> by_name;
  for (const auto& n : p["nodes"]) {
    EXPECT_EQ(n["runs"].get<std::int64_t>(), 2) << n.dump();
    node_runs += n["runs"].get<std::int64_t>();
    by_name[n["name"].get<std::string>()] = n;
  }
  for (const auto& k : p["by_kind"]) kind_runs += k["nodes"].get<std::int64_t>();
  EXPECT_EQ(node_runs, kind_runs);
  ASSERT_TRUE(by_name.count("blocks.1.hook_resid_post.hook_sae_acts_pre")) << p.dump();
  const json& enc = by_name["blocks.1.hook_resid_post.hook_sae_acts_pre"];
  EXPECT_EQ(enc["op"], "Linear");
  EXPECT_DOUBLE_EQ(enc["flops"].get<double>(), 2.0 * 2 * 8 * 64 * 96);  // 2 runs x 2 x 8 rows x d_in x d_sae
  ASSERT_TRUE(by_name.count(acts));
  EXPECT_EQ(by_name[acts]["op"], "SaeActivation");
  EXPECT_EQ(by_name[acts]["taps"].get<std::int64_t>(), 2);
  EXPECT_EQ(by_name.count("blocks.1.hook_resid_post.hook_sae_recons"), 0u);  // no splice: the decoder does not run
  const json plain = bench_json(qwen_, {"--mode", "prefill", "--tokens", "8", "--repeat", "1", "--backend", "threaded"});
  EXPECT_FALSE(plain.contains("profile"));
}

TEST_F(Bench, BadInputExitsTwoNamingTheValue) {
  const std::string q = qwen_.string(), d = dream_.string();
  EXPECT_TRUE(one_line_error(run({"bench", "--model", q, "--mode", "train"}), "bench", {"train"}, {"mode"}));
  EXPECT_TRUE(one_line_error(run({"bench", "--model", q, "--tokens", "0"}), "bench", {"--tokens", "0"}, {"at least"}));
  EXPECT_TRUE(one_line_error(run({"bench", "--model", q, "--batch", "0"}), "bench", {"--batch", "0"}, {"at least"}));
  EXPECT_TRUE(one_line_error(run({"bench", "--model", q, "--repeat", "0"}), "bench", {"--repeat", "0"}, {"at least"}));
  EXPECT_TRUE(one_line_error(run({"bench", "--model", q, "--mode", "decode", "--prompt-tokens", "0"}), "bench",
                             {"--prompt-tokens", "0"}, {"at least"}));
  EXPECT_TRUE(one_line_error(run({"bench", "--model", q, "--no-kv-cache"}), "bench", {"--no-kv-cache", "prefill"},
                             {"applies to"}));
  EXPECT_TRUE(one_line_error(run({"bench", "--model", q, "--logits", "some"}), "bench", {"--logits", "some"}, {"all or last"}));
  EXPECT_TRUE(one_line_error(run({"bench", "--model", q, "--mode", "decode", "--logits", "last"}), "bench",
                             {"--logits", "decode"}, {"applies to"}));
  EXPECT_TRUE(one_line_error(run({"bench", "--model", d, "--logits", "last"}), "bench", {"--logits last", "dream"},
                             {"every position"}));
  // A diffusion step needs a masked-diffusion model; decode needs a KV cache (not Dream).
  EXPECT_TRUE(one_line_error(run({"bench", "--model", q, "--mode", "diffusion-step"}), "bench", {"qwen2"},
                             {"masked-diffusion"}));
  EXPECT_TRUE(one_line_error(run({"bench", "--model", d, "--mode", "decode"}), "bench", {"dream"}, {"kv cache"}));
  EXPECT_TRUE(one_line_error(run({"bench", "--model", q, "--mode", "diffusion"}), "bench", {"qwen2"}, {"masked-diffusion"}));
  EXPECT_TRUE(one_line_error(run({"bench", "--model", d, "--mode", "diffusion", "--tokens", "8", "--threshold", "1.5"}),
                             "bench", {"threshold", "1.5"}, {"outside"}));
  EXPECT_TRUE(one_line_error(run({"bench", "--model", d, "--mode", "diffusion-step", "--tokens", "8",
                                  "--prompt-tokens", "8"}),
                             "bench", {"8"}, {"no masked slot"}));
  EXPECT_TRUE(one_line_error(run({"bench", "--model", q, "--hooks", "blocks.0.hook_nope"}), "bench",
                             {"--hooks", "blocks.0.hook_nope"}, {"not a hook point"}));
  // --profile times graph nodes in prefill, decode and serve (the engine's forwards); not in a
  // diffusion-step run.
  EXPECT_TRUE(one_line_error(run({"bench", "--model", d, "--mode", "diffusion-step", "--tokens", "8", "--profile"}),
                             "bench", {"--profile", "diffusion-step"}, {"applies to"}));
  EXPECT_TRUE(one_line_error(run({"bench", "--model", q, "--mode", "decode", "--hooks", "hook_embed"}), "bench",
                             {"--hooks", "decode"}, {"apply to"}));
  // The tiny preset's context is finite: a request past it is refused before any work.
  EXPECT_TRUE(one_line_error(run({"bench", "--model", q, "--tokens", "100000000"}), "bench",
                             {"max_position_embeddings"}, {"exceed"}));
}

}  // namespace
}  // namespace sonde::test
