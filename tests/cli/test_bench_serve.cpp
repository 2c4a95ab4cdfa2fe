// sonde bench --mode serve on the tiny Qwen2: the --json report's structure and invariants
// (every request completed with its length, the same requests for every system, percentiles in
// order, ratios present, tokens equal to the request run alone), never its speed; bad options
// exit 2 with one line naming the option and the value.
#include "checkpoint.h"
#include "expect.h"
#include "process.h"
#include "tiny_model_suite.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

namespace sonde::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class BenchServe : public TwoFamilySuite {
 protected:

  static json serve_json(std::vector<std::string> extra) {
    std::vector<std::string> args{"bench", "--model", qwen_.string(), "--mode", "serve", "--json", "--threads", "1",
                                  "--prompt-range", "4:12", "--gen-range", "2:6"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Outcome o = run(args);
    EXPECT_EQ(o.exit_code, 0) << o.describe();
    const auto lines = lines_of(o.out);
    EXPECT_EQ(lines.size(), 1u) << o.describe();
    if (lines.size() != 1) return json();
    return json::parse(lines[0]);
  }

};

void expect_percentiles(const json& p, std::size_t samples, const std::string& what) {
  for (const char* f : {"p50", "p90", "p99", "samples"}) ASSERT_TRUE(p.contains(f)) << what << " lacks " << f << ": " << p.dump();
  EXPECT_EQ(p["samples"].get<std::size_t>(), samples) << what;
  EXPECT_GE(p["p50"].get<double>(), 0.0) << what;
  EXPECT_LE(p["p50"].get<double>(), p["p90"].get<double>()) << what;
  EXPECT_LE(p["p90"].get<double>(), p["p99"].get<double>()) << what;
}

// One system's figures: every request completed with exactly its length (greedy, EOS ignored),
// within the ranges asked for, and the percentiles over one TTFT per request and one ITL per
// token after a request's first.
void expect_system(const json& s, std::int64_t requests, const std::string& what) {
  for (const char* f : {"tokens", "seconds", "tokens_per_s", "completed", "same_tokens_as_alone", "ttft_s", "itl_s", "requests"})
    ASSERT_TRUE(s.contains(f)) << what << " lacks " << f;
  EXPECT_EQ(s["completed"].get<std::int64_t>(), requests) << what << ": " << s.dump();
  ASSERT_EQ(s["requests"].size(), static_cast<std::size_t>(requests)) << what;
  std::int64_t tokens = 0, gaps = 0;
  for (const auto& r : s["requests"]) {
    const auto gen = r["gen_tokens"].get<std::int64_t>(), got = r["tokens"].get<std::int64_t>();
    if (r["finish_reason"] == "eos") {
      EXPECT_LE(got, gen) << what << ": " << r.dump();
    } else {
      EXPECT_EQ(r["finish_reason"], "length") << what << ": " << r.dump();
      EXPECT_EQ(got, gen) << what << ": " << r.dump();
    }
    EXPECT_GE(r["prompt_tokens"].get<std::int64_t>(), 4);
    EXPECT_LE(r["prompt_tokens"].get<std::int64_t>(), 12);
    EXPECT_GE(gen, 2);
    EXPECT_LE(gen, 6);
    EXPECT_GE(r["ttft_s"].get<double>(), 0.0) << what << ": " << r.dump();
    EXPECT_GE(r["arrival_s"].get<double>(), 0.0) << what << ": " << r.dump();
    EXPECT_FALSE(r.contains("error")) << what << ": " << r.dump();
    tokens += got;
    gaps += got - 1;
  }
  EXPECT_EQ(s["tokens"].get<std::int64_t>(), tokens) << what;
  EXPECT_GT(s["seconds"].get<double>(), 0.0) << what;
  EXPECT_NEAR(s["tokens_per_s"].get<double>(), static_cast<double>(tokens) / s["seconds"].get<double>(),
              1e-9 * s["tokens_per_s"].get<double>()) << what;
  expect_percentiles(s["ttft_s"], static_cast<std::size_t>(requests), what + " TTFT");
  expect_percentiles(s["itl_s"], static_cast<std::size_t>(gaps), what + " ITL");
  // The kernels are batch-invariant and decoding is greedy: a request's tokens do not depend on
  // who shares its forwards (engine.h, docs/engine.md).
  EXPECT_EQ(s["same_tokens_as_alone"].get<std::int64_t>(), requests) << what;
}

TEST_F(BenchServe, JsonHasEveryLevelSystemAndRatio) {
  // No think time: every client sends at once, so the static batches hold several requests.
  const json j = serve_json({"--clients", "1,3", "--requests", "5", "--seed", "7", "--think", "0"});
  if (j.is_null()) return;
  EXPECT_EQ(j["mode"], "serve");
  EXPECT_EQ(j["threads"].get<int>(), 1);
  EXPECT_EQ(j["seed"].get<std::uint64_t>(), 7u);
  EXPECT_EQ(j["prompt_range"], json({4, 12}));
  EXPECT_EQ(j["gen_range"], json({2, 6}));
  EXPECT_GT(j["reference_s"].get<double>(), 0.0);
  EXPECT_EQ(j["reference_prompt"].get<std::int64_t>(), 256);
  ASSERT_EQ(j["levels"].size(), 2u) << j.dump();
  const std::int64_t clients[] = {1, 3};
  for (std::size_t l = 0; l < 2; ++l) {
    const json& L = j["levels"][l];
    const std::string at = std::to_string(clients[l]) + " clients ";
    EXPECT_EQ(L["clients"].get<std::int64_t>(), clients[l]);
    EXPECT_EQ(L["requests"].get<std::int64_t>(), 5);
    EXPECT_EQ(L["slots"].get<std::int64_t>(), clients[l]);  // by default one slot and one batch row per client
    EXPECT_EQ(L["batch"].get<std::int64_t>(), clients[l]);
    EXPECT_GT(L["reference_s"].get<double>(), 0.0) << at;  // measured next to each client count's runs
    for (const char* sys : {"engine", "one_at_a_time", "static"}) expect_system(L[sys], 5, at + sys);
    // Every system served the same requests (lengths by request index), and every level sends the
    // first requests of one pool.
    for (std::size_t r = 0; r < 5; ++r)
      for (const char* sys : {"one_at_a_time", "static"})
        for (const char* f : {"prompt_tokens", "gen_tokens"}) {
          EXPECT_EQ(L[sys]["requests"][r][f], L["engine"]["requests"][r][f]) << at << sys << " request " << r;
          EXPECT_EQ(L[sys]["requests"][r][f], j["levels"][0]["engine"]["requests"][r][f]) << at << sys;
        }
    // Clients take the requests round robin.
    for (std::size_t r = 0; r < 5; ++r)
      EXPECT_EQ(L["engine"]["requests"][r]["client"].get<std::int64_t>(), static_cast<std::int64_t>(r) % clients[l]);
    for (const char* base : {"one_at_a_time", "static"})
      for (const char* f : {"tokens_per_s", "ttft_p50", "ttft_p90", "itl_p50", "itl_p90"}) {
        ASSERT_TRUE(L["ratios"][base].contains(f)) << at << base << " " << f;
        EXPECT_GT(L["ratios"][base][f].get<double>(), 0.0) << at << base << " " << f;
      }
    const double x = L["engine"]["tokens_per_s"].get<double>() / L["one_at_a_time"]["tokens_per_s"].get<double>();
    EXPECT_NEAR(L["ratios"]["one_at_a_time"]["tokens_per_s"].get<double>(), x, 1e-9 * x);
    const auto batches = L["static"]["batches"].get<std::int64_t>();
    EXPECT_GE(batches, (5 + clients[l] - 1) / clients[l]) << at;
    if (clients[l] == 1) EXPECT_EQ(batches, 5) << at;
    else EXPECT_LT(batches, 5) << at << "static batches of one request each";
  }
  // The targets are read at the most clients run when 16 is not among them.
  const json& t = j["targets"];
  EXPECT_EQ(t["clients"].get<std::int64_t>(), 3);
  EXPECT_EQ(t["reference_s"].get<double>(), j["reference_s"].get<double>());
  EXPECT_EQ(t["reference_s"].get<double>(), j["levels"][1]["reference_s"].get<double>());
  EXPECT_EQ(t["ttft_p50_s"].get<double>(), j["levels"][1]["engine"]["ttft_s"]["p50"].get<double>());
  EXPECT_EQ(t["throughput_met"].get<bool>(), t["tokens_per_s_vs_one_at_a_time"].get<double>() >= 3.0);
  EXPECT_EQ(t["ttft_met"].get<bool>(), t["ttft_p50_s"].get<double>() < t["reference_s"].get<double>());
}

TEST_F(BenchServe, TheSeedFixesTheRequestsAndSlotsAndBatchAreTheirOwn) {
  const json a = serve_json({"--clients", "2", "--requests", "4", "--seed", "3", "--slots", "1", "--batch", "3",
                             "--prefill-chunk", "5", "--think", "0.01", "--reference-prompt", "8"});
  const json b = serve_json({"--clients", "2", "--requests", "4", "--seed", "3", "--think", "0.01"});
  if (a.is_null() || b.is_null()) return;
  EXPECT_EQ(a["prefill_chunk"].get<std::int64_t>(), 5);
  EXPECT_EQ(a["reference_prompt"].get<std::int64_t>(), 8);
  const json& L = a["levels"][0];
  EXPECT_EQ(L["slots"].get<std::int64_t>(), 1);
  EXPECT_EQ(L["batch"].get<std::int64_t>(), 3);
  for (const char* sys : {"engine", "one_at_a_time", "static"}) expect_system(L[sys], 4, std::string("slots 1 ") + sys);
  for (std::size_t r = 0; r < 4; ++r)
    for (const char* f : {"prompt_tokens", "gen_tokens"})
      EXPECT_EQ(L["engine"]["requests"][r][f], b["levels"][0]["engine"]["requests"][r][f]) << "request " << r;
}

TEST_F(BenchServe, TextOutputNamesTheSystemsAndTargets) {
  const Outcome o = run({"bench", "--model", qwen_.string(), "--mode", "serve", "--clients", "2", "--requests", "3",
                         "--prompt-range", "4:8", "--gen-range", "2:4", "--think", "0", "--threads", "1"});
  ASSERT_EQ(o.exit_code, 0) << o.describe();
  for (const char* s : {"tokens/s", "TTFT", "ITL", "one at a time", "static batches", "engine", "targets at 2 clients",
                        "reference"})
    EXPECT_NE(o.out.find(s), std::string::npos) << s << "\n" << o.describe();
}

TEST_F(BenchServe, BadOptionsExitTwoNamingTheValue) {
  const std::string q = qwen_.string(), d = dream_.string();
  const auto serve = [&](std::vector<std::string> extra, const std::string& model = "") {
    std::vector<std::string> args{"bench", "--model", model.empty() ? q : model, "--mode", "serve"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  };
  EXPECT_TRUE(one_line_error(serve({"--clients", "0"}), "bench", {"--clients", "0"}, {"at least"}));
  EXPECT_TRUE(one_line_error(serve({"--clients", "1,x,4"}), "bench", {"--clients", "'x'"}, {"not a whole number"}));
  EXPECT_TRUE(one_line_error(serve({"--clients", "4,"}), "bench", {"--clients", "4,"}, {"not a whole number"}));
  EXPECT_TRUE(one_line_error(serve({"--prompt-range", "0:8"}), "bench", {"--prompt-range", "0:8"}, {"MIN:MAX"}));
  EXPECT_TRUE(one_line_error(serve({"--gen-range", "8:4"}), "bench", {"--gen-range", "8:4"}, {"MIN:MAX"}));
  EXPECT_TRUE(one_line_error(serve({"--gen-range", "4:y"}), "bench", {"--gen-range", "'y'"}, {"not a whole number"}));
  EXPECT_TRUE(one_line_error(serve({"--think", "-1"}), "bench", {"--think", "-1"}, {">= 0"}));
  EXPECT_TRUE(one_line_error(serve({"--prefill-chunk", "0"}), "bench", {"--prefill-chunk", "0"}, {"at least"}));
  EXPECT_TRUE(one_line_error(serve({"--reference-prompt", "0"}), "bench", {"--reference-prompt", "0"}, {"at least"}));
  EXPECT_TRUE(one_line_error(serve({"--requests", "-2"}), "bench", {"--requests", "-2"}, {"negative"}));
  EXPECT_TRUE(one_line_error(serve({"--tokens", "8"}), "bench", {"--tokens", "serve"}, {"do not apply"}));
  // The tiny preset's context is finite: a range past it is refused before any work.
  EXPECT_TRUE(one_line_error(serve({"--prompt-range", "16:40000"}), "bench", {"--prompt-range", "max_position_embeddings"},
                             {"exceed"}));
  // Serving measures tokens as they stream: an autoregressive model only.
  EXPECT_TRUE(one_line_error(serve({}, d), "bench", {"--mode serve", "dream"}, {"masked diffusion"}));
}

}  // namespace
}  // namespace sonde::test
