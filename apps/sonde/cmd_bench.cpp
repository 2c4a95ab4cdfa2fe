// sonde bench: prefill tokens/s, decode tokens/s (KV cache), one diffusion step, peak RSS
// (design §6). Every mode runs once to warm up (page in the weights, grow the allocator), then
// --repeat times; "seconds" is the best run and "median_seconds" the median.
#include "app_common.h"
#include "bench_diffusion.h"
#include "bench_serve.h"
#include "cmd_bench_profile.h"
#include "commands.h"
#include "run_flags.h"
#include <sonde/host/cpu.h>
#include <sonde/host/stream_read.h>

#include <sonde/decode.h>
#include <sonde/error.h>
#include <sonde/session_decode.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

namespace sonde::cli {
namespace {

using host::ByteRange;
using host::fastest_read;

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  CommonOptions common;
  std::string mode = "prefill";
  std::string logits = "all";  // prefill: the LM head at every position or at each row's last
  std::int64_t tokens = 128, prompt_tokens = 128, batch = 1, repeat = 3;
  DiffusionBenchOptions diffusion;  // --mode diffusion
  ServeBenchOptions serve;          // --mode serve
  bool json = false, prompt_given = false, no_cache = false, logits_given = false;
  bool profile = false;  // prefill: per-node wall time over the timed runs (cmd_bench_profile.h)
  int profile_top = 15;
  std::string hooks;     // prefill: hook points tapped in every run
  SaeFlags sae;          // --sae DIR: attached before the runs
  std::set<std::string> taps;  // --hooks, checked against the model
};

// One timed run: `seconds` is the timed part; decode also reports the prefill it excludes.
struct RunTime {
  double seconds = 0, prefill_seconds = 0;
  std::int64_t logit_rows = 0;  // prefill: positions per row the LM head ran at (as returned)
  double read_seconds = 0;  // decode: one streaming read of the weights a step reads, next to this run
};

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Peak resident set (VmHWM) in MB; 0 when /proc is not there.
double peak_rss_mb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    std::istringstream ss(line.substr(6));
    double kb = 0;
    ss >> kb;
    return kb / 1024.0;
  }
  return 0;
}

// Deterministic ids spread over the vocabulary, never the mask token (a Dream prompt must not
// contain masks) nor an end-of-sequence id.
std::vector<std::int32_t> bench_ids(const Session& s, std::int64_t n, std::uint64_t row) {
  const auto& cfg = s.config();
  const auto V = static_cast<std::uint64_t>(cfg.vocab_size);
  std::vector<std::int32_t> ids;
  std::uint64_t x = 0x9E3779B97F4A7C15ull * (row + 1);
  while (static_cast<std::int64_t>(ids.size()) < n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;  // LCG step
    const auto id = static_cast<std::int64_t>((x >> 33) % V);
    const bool special = (cfg.mask_token_id && id == *cfg.mask_token_id) ||
                         std::find(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end(), id) != cfg.eos_token_ids.end();
    if (!special || V < 4) ids.push_back(static_cast<std::int32_t>(id));
  }
  return ids;
}

std::vector<std::vector<std::int32_t>> bench_prompts(const Session& s, std::int64_t batch, std::int64_t n) {
  std::vector<std::vector<std::int32_t>> prompts;
  for (std::int64_t r = 0; r < batch; ++r) prompts.push_back(bench_ids(s, n, static_cast<std::uint64_t>(r)));
  return prompts;
}

// Prefill: one forward over batch x tokens, logits at every position (--logits all, as a forward
// returns them) or at each row's last (--logits last, as a generation's prefill and llama-bench
// run the head). What ran is read off the logits returned, not assumed from the option.
RunTime run_prefill(Session& s, const BenchOptions& o) {
  ForwardInput in;
  in.batch = o.batch;
  in.tokens = o.tokens;
  in.last_logits_only = o.logits == "last";
  for (const auto& p : bench_prompts(s, o.batch, o.tokens)) in.ids.insert(in.ids.end(), p.begin(), p.end());
  const auto t0 = Clock::now();
  const Tensor logits = s.forward(in, true, o.taps, o.taps.empty() ? Executor::Tap() : bench_tap());
  RunTime r{since(t0), 0};
  r.logit_rows = logits.shape()[1];
  return r;
}

// Decode: greedy, no EOS, KV cache (unless --no-kv-cache). max_new_tokens = tokens + 1: step 0 is the prefill (its
// token is not counted); the timed part is the next `tokens` steps, one cached forward each.
// `profile`: attached after the prefill, so it holds the decode steps' nodes only.
RunTime run_decode(Session& s, const BenchOptions& o, std::int64_t tokens, ExecProfile* profile) {
  ArOptions a;
  a.max_new_tokens = tokens + 1;
  a.sampling.do_sample = false;
  a.use_cache = !o.no_cache;
  SessionDecodeForward fwd(s);
  const auto t0 = Clock::now();
  Clock::time_point after_prefill = t0, last = t0;
  generate_autoregressive(fwd, bench_prompts(s, o.batch, o.prompt_tokens), a, [&](const ArStep& st) {
    (st.step == 0 ? after_prefill : last) = Clock::now();
    if (st.step == 0 && profile) s.set_profile(profile);
  });
  if (profile) s.set_profile(nullptr);
  return {std::chrono::duration<double>(last - after_prefill).count(),
          std::chrono::duration<double>(after_prefill - t0).count()};
}

// One denoising step of the family's diffusion loop (steps = 1): a bidirectional forward over the
// canvas of prompt + masks, then Dream's entropy sampler (LLaDA: low-confidence remasking, one
// block) commits the masked slots.
RunTime run_diffusion_step(Session& s, const BenchOptions& o) {
  const auto& cfg = s.config();
  DiffusionOptions d;
  d.max_new_tokens = o.tokens - o.prompt_tokens;
  d.steps = 1;
  d.loop = s.info().diffusion_loop;
  d.sampling.alg = DiffusionAlg::Entropy;
  d.mask_id = static_cast<std::int32_t>(s.info().mask_token_id);
  d.pad_id = static_cast<std::int32_t>(cfg.pad_token_id.value_or(0));
  SessionDecodeForward fwd(s);
  const auto prompts = bench_prompts(s, o.batch, o.prompt_tokens);
  const auto t0 = Clock::now();
  diffusion_generate(fwd, prompts, d);
  return {since(t0), 0};
}

RunTime run_once(Session& s, const BenchOptions& o, bool warmup, ExecProfile* profile = nullptr) {
  if (o.mode == "prefill") return run_prefill(s, o);
  // A short decode warms up as well as a long one: it touches every weight and the cache.
  if (o.mode == "decode") return run_decode(s, o, warmup ? std::min<std::int64_t>(o.tokens, 4) : o.tokens, profile);
  return run_diffusion_step(s, o);
}

void check_options(BenchOptions& o) {
  if (o.mode != "prefill" && o.mode != "decode" && o.mode != "diffusion-step" && o.mode != "diffusion" && o.mode != "serve")
    bad_input("--mode: '{}' is not prefill, decode, diffusion-step, diffusion or serve", o.mode);
  if (o.tokens < 1) bad_input("--tokens must be at least 1, got {}", o.tokens);
  if (o.batch < 1) bad_input("--batch must be at least 1, got {}", o.batch);
  if (o.repeat < 1) bad_input("--repeat must be at least 1, got {}", o.repeat);
  if (o.prompt_tokens < 1) bad_input("--prompt-tokens must be at least 1, got {}", o.prompt_tokens);
  if (o.no_cache && o.mode != "decode") bad_input("--no-kv-cache applies to --mode decode, not {}", o.mode);
  if (o.logits != "all" && o.logits != "last") bad_input("--logits: '{}' is not all or last", o.logits);
  if (o.logits_given && o.mode != "prefill") bad_input("--logits applies to --mode prefill, not {}", o.mode);
  if (o.mode != "prefill" && (!o.hooks.empty() || !o.sae.dirs.empty()))
    bad_input("--hooks and --sae apply to --mode prefill, not {}", o.mode);
  if (o.profile && o.mode != "prefill" && o.mode != "decode" && o.mode != "serve")
    bad_input("--profile applies to --mode prefill, decode or serve, not {}", o.mode);
  if (o.profile_top < 1) bad_input("--profile-top must be at least 1, got {}", o.profile_top);
  if (o.mode != "diffusion-step") return;
  // The canvas is prompt + masks; by default half and half (64 + 64 for --tokens 128).
  if (o.tokens < 2) bad_input("--tokens: a diffusion canvas needs a prompt token and a mask, got {}", o.tokens);
  if (!o.prompt_given) o.prompt_tokens = o.tokens / 2;
  if (o.prompt_tokens >= o.tokens)
    bad_input("--prompt-tokens {} leaves no masked slot in a canvas of --tokens {}", o.prompt_tokens, o.tokens);
}

void check_model(const Session& s, const BenchOptions& o) {
  if (o.mode == "serve") return;  // bench_serve checks its own
  const auto& cfg = s.config();
  const bool diffusion = s.info().diffusion();
  if ((o.mode == "diffusion-step" || o.mode == "diffusion") && !diffusion)
    bad_input("--mode {}: {} is a {} model (autoregressive); it needs a masked-diffusion model such as Dream",
              o.mode, cfg.dir.string(), s.info().arch);
  if (o.mode == "decode" && diffusion)
    bad_input("--mode decode: {} is a {} model (masked diffusion, no KV cache); use --mode diffusion-step",
              cfg.dir.string(), s.info().arch);
  if (o.mode == "prefill" && o.logits == "last" && diffusion)
    bad_input("--logits last: {} is a {} model (masked diffusion), which reads logits at every position",
              cfg.dir.string(), s.info().arch);
  const auto total = o.mode == "decode" ? o.prompt_tokens + o.tokens + 1
                     : o.mode == "diffusion" ? o.prompt_tokens + o.tokens : o.tokens;
  if (total > cfg.max_position_embeddings)
    bad_input("--tokens: {} positions exceed max_position_embeddings {} of {}", total, cfg.max_position_embeddings,
              cfg.dir.string());
}

// Bytes of the weights as the backend holds them (cpu-blas widens bf16 to f32 on upload; the
// threaded backend's q8 copies replace the Linear weights they quantise).
std::uint64_t backend_weight_bytes(Session& s) {
  std::uint64_t bytes = 0;
  s.weights().visit([&](const WeightInfo& w) {
    try {
      for (const auto& part : s.backend().weight_storage(w.name)) bytes += part.size();
    } catch (const Error&) {  // a tensor the model does not read (e.g. a tied lm_head)
    }
  });
  return bytes;
}

// What one decode step reads of the weights, as the backend holds them (its q8 copies under
// --weights q8): every weight, except
// that an embedding table the LM head does not share is read one row per token (so not counted).
std::vector<ByteRange> decode_weight_ranges(Session& s) {
  std::vector<ByteRange> ranges;
  s.weights().visit([&](const WeightInfo& w) {
    if (w.name == s.info().embedding_weight && !s.config().tie_word_embeddings) return;
    try {
      for (const auto& part : s.backend().weight_storage(w.name)) ranges.push_back({part.data(), part.size()});
    } catch (const Error&) {  // a tensor the model does not read (e.g. a tied lm_head)
    }
  });
  return ranges;
}

// read_bytes: what the decode bound's streaming read covers (0 when there is no bound).
nlohmann::ordered_json report(Session& s, const BenchOptions& o, std::vector<RunTime> runs, std::uint64_t read_bytes) {
  std::vector<double> samples;  // in the order run, as llama-bench's samples: the spread is visible
  for (const auto& r : runs) samples.push_back(r.seconds);
  std::sort(runs.begin(), runs.end(), [](const RunTime& a, const RunTime& b) { return a.seconds < b.seconds; });
  const double best = runs.front().seconds, median = runs[runs.size() / 2].seconds;
  const double work = static_cast<double>(o.tokens * o.batch);
  const auto info = s.backend().info();
  nlohmann::ordered_json j{{"mode", o.mode}, {"tokens", o.tokens}, {"batch", o.batch}, {"seconds", best},
                   {"tokens_per_s", best > 0 ? work / best : 0.0}, {"peak_rss_mb", peak_rss_mb()},
                   {"backend", info.name}, {"threads", info.threads}};
  j["median_seconds"] = median;
  j["median_tokens_per_s"] = median > 0 ? work / median : 0.0;
  j["repeat"] = o.repeat;
  j["samples_seconds"] = samples;
  if (o.mode != "prefill") j["prompt_tokens"] = o.prompt_tokens;
  if (o.mode == "prefill") {
    // Every run's head covered the same rows (one plan); "all" only when it ran at every position.
    const std::int64_t rows = runs.front().logit_rows;
    j["logits"] = rows == o.tokens ? "all" : rows == 1 ? "last" : fmt::format("{} of {}", rows, o.tokens);
  }
  if (o.mode == "decode") {
    j["prefill_seconds"] = runs.front().prefill_seconds;
    j["kv_cache"] = !o.no_cache;
  }
  j["arch"] = s.info().arch;
  j["weights"] = o.common.weights;
  j["compute"] = s.compute();
  j["weight_bytes"] = s.weights().total_bytes();
  j["backend_weight_bytes"] = backend_weight_bytes(s);
  j["isa"] = host::widest_isa();
  // Which kernels ran (the threaded backend names its f32 ISA and its bf16/int8 table here), so
  // a comparison can show it is like for like.
  j["backend_description"] = info.description;
  if (runs.front().read_seconds > 0) {
    // fraction = (time to stream the step's weights once) / (time per generated token)
    const auto fraction = [&](const RunTime& r) { return r.read_seconds * static_cast<double>(o.tokens) / r.seconds; };
    std::vector<double> frac;
    for (const auto& r : runs) frac.push_back(fraction(r));
    std::sort(frac.begin(), frac.end());
    j["weight_bytes_per_token"] = read_bytes;
    j["bandwidth_gb_s"] = static_cast<double>(read_bytes) / runs.front().read_seconds / 1e9;
    j["bound_tokens_per_s"] = static_cast<double>(o.batch) / runs.front().read_seconds;
    j["bound_fraction"] = fraction(runs.front());
    j["median_bound_fraction"] = frac[frac.size() / 2];
  }
  return j;
}

void print_text(const nlohmann::ordered_json& j) {
  std::cout << "sonde bench " << j["mode"].get<std::string>() << ": " << j["tokens"] << " tokens x batch "
            << j["batch"] << " on " << j["backend"].get<std::string>() << " (" << j["threads"] << " threads)\n";
  if (j.contains("logits")) {
    const auto l = j["logits"].get<std::string>();
    std::cout << "  logits " << (l == "all" ? "at every position" : l == "last" ? "at each row's last position" : l)
              << " (--logits)\n";
  }
  std::cout << fmt::format("  best   {:.4f} s  {:.2f} tokens/s\n", j["seconds"].get<double>(),
                           j["tokens_per_s"].get<double>());
  std::cout << fmt::format("  median {:.4f} s  {:.2f} tokens/s  ({} runs after 1 warm-up)\n",
                           j["median_seconds"].get<double>(), j["median_tokens_per_s"].get<double>(),
                           j["repeat"].get<std::int64_t>());
  if (j.contains("prefill_seconds"))
    std::cout << fmt::format("  prefill of {} prompt tokens (not counted): {:.4f} s\n",
                             j["prompt_tokens"].get<std::int64_t>(), j["prefill_seconds"].get<double>());
  if (j.contains("bound_fraction"))
    std::cout << fmt::format(
        "  bandwidth bound: {:.1f} MB of weights per step, streamed at {:.1f} GB/s beside the best run -> {:.2f} "
        "tokens/s; best run at {:.0f}% of its bound, median {:.0f}%\n",
        j["weight_bytes_per_token"].get<double>() / 1e6, j["bandwidth_gb_s"].get<double>(),
        j["bound_tokens_per_s"].get<double>(), 100 * j["bound_fraction"].get<double>(),
        100 * j["median_bound_fraction"].get<double>());
  if (j.contains("rank_peak_rss_mb")) {
    std::string list;
    for (const auto& v : j["rank_peak_rss_mb"]) list += fmt::format("{}{:.1f}", list.empty() ? "" : " ", v.get<double>());
    std::cout << fmt::format("  {} ranks ({} per model copy); peak RSS per rank (MB): {}\n", j["ranks"].get<int>(),
                             j["tensor_parallel"].get<int>(), list);
  }
  std::cout << fmt::format("  peak RSS {:.1f} MB; weights {:.1f} MB in the checkpoint, {:.1f} MB on the backend\n",
                           j["peak_rss_mb"].get<double>(), j["weight_bytes"].get<double>() / 1e6,
                           j["backend_weight_bytes"].get<double>() / 1e6);
}

}  // namespace

int cmd_bench(const Args& args) {
  BenchOptions o;
  po::options_description desc("bench options");
  add_common_options(desc, o.common);
  desc.add_options()
      ("mode", po::value(&o.mode)->default_value("prefill"),
       "prefill, decode, diffusion-step, diffusion (whole generations per decoding mode) or serve "
       "(simulated clients against the engine, one at a time and static batches)")
      ("tokens", po::value(&o.tokens)->default_value(128),
       "prefill: tokens per row; decode, diffusion: tokens generated after the prompt; diffusion-step: canvas length")
      ("prompt-tokens", po::value(&o.prompt_tokens),
       "decode, diffusion: prompt length (default 128); diffusion-step: prompt part of the canvas (default tokens/2)")
      ("batch", po::value(&o.batch)->default_value(1), "rows per forward; serve: static batches of up to N (default: the clients)")
      ("logits", po::value(&o.logits)->default_value("all"),
       "prefill: all (the LM head at every position, as forward writes them) or last (each row's last "
       "position only, as a generation's prefill and llama-bench)")
      ("repeat", po::value(&o.repeat)->default_value(3), "timed runs after one warm-up; best and median reported")
      ("no-kv-cache", po::bool_switch(&o.no_cache), "decode: recompute the whole prefix every step (what the cache saves)")
      ("block-size", po::value(&o.diffusion.block_size)->default_value(32), "diffusion: block size of the block modes")
      ("threshold", po::value(&o.diffusion.threshold)->default_value(0.9, "0.9"), "diffusion: confidence_threshold's threshold")
      ("tokens-per-step", po::value(&o.diffusion.tokens_per_step)->default_value(4),
       "diffusion: slots per step of the fixed-rate mode (independent of the weights)")
      ("clients", po::value(&o.serve.clients_text)->default_value(o.serve.clients_text),
       "serve: concurrent clients, one run per count (comma-separated)")
      ("requests", po::value(&o.serve.requests)->default_value(0), "serve: requests per client count (0: max(8, 2 x clients))")
      ("prompt-range", po::value(&o.serve.prompt_range)->default_value(o.serve.prompt_range),
       "serve: prompt lengths MIN:MAX, uniform")
      ("gen-range", po::value(&o.serve.gen_range)->default_value(o.serve.gen_range),
       "serve: generated tokens MIN:MAX, uniform (greedy, EOS ignored)")
      ("think", po::value(&o.serve.think)->default_value(0.5, "0.5"),
       "serve: mean seconds (exponential) a client waits before each request")
      ("seed", po::value(&o.serve.seed)->default_value(1), "serve: seed of the lengths and think times")
      ("slots", po::value(&o.serve.slots)->default_value(0), "serve: engine slots (0: the clients)")
      ("prefill-chunk", po::value(&o.serve.prefill_chunk)->default_value(256),
       "serve: prompt tokens the engine prefills per step")
      ("engine-only", po::bool_switch(&o.serve.engine_only),
       "serve: the engine alone, no one-at-a-time or static baselines (sweeps of --prefill-chunk)")
      ("reference-prompt", po::value(&o.serve.reference_prompt)->default_value(256),
       "serve: the TTFT target is one prefill of N tokens + 2 decode steps alone")
      ("profile", po::bool_switch(&o.profile),
       "prefill, decode (its steps only), serve (the engine's decode and prompt forwards apart): wall time of every graph node over the timed runs, per op kind and the top nodes (JSON: \"profile\")")
      ("profile-top", po::value(&o.profile_top)->default_value(15), "prefill --profile: nodes listed by time")
      ("hooks", po::value(&o.hooks), "prefill: hook points tapped in every run (comma-separated names); "
       "*.hook_sae_acts_post rows are cut to their non-zero entries as --sae-sparse nonzero stores them, "
       "other hooks dropped")
      ("json", po::bool_switch(&o.json), "print one JSON object");
  add_sae_options(desc, o.sae);
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde bench --model DIR [--mode prefill|decode|diffusion-step|diffusion|serve] [--tokens N] "
                           "[--prompt-tokens N] [--batch N] [--logits all|last] [--repeat N] [--profile] [--sae DIR --hooks H,...] [--json]\n"
                           "       sonde bench --model DIR --mode serve [--clients 1,4,16] [--requests N] "
                           "[--prompt-range 16:512] [--gen-range 16:256] [--think S] [--slots N] [--prefill-chunk N] [--json]",
                     desc, vm))
    return 0;
  o.prompt_given = vm.count("prompt-tokens") > 0;
  o.logits_given = !vm["logits"].defaulted();
  check_options(o);
  if (o.mode == "serve") {
    if (!vm["tokens"].defaulted() || o.prompt_given)
      bad_input("--tokens and --prompt-tokens do not apply to --mode serve; it takes --prompt-range and --gen-range");
    o.serve.batch = vm["batch"].defaulted() ? 0 : o.batch;
    o.serve.json = o.json;
    o.serve.profile = o.profile;
    o.serve.profile_top = o.profile_top;
    prepare_serve_options(o.serve);
  }

  auto session = open_session(o.common);
  check_model(*session, o);
  if (o.mode == "serve") {  // simulated clients against the engine (bench_serve.h)
    if (ProcessGroup* job = current_job(); job && job->size() > 1)
      bad_input("--mode serve runs in one process, not on {} ranks", job->size());
    Session& s = *session;
    return bench_serve(s, o.serve, [&s](std::int64_t n, std::uint64_t row) { return bench_ids(s, n, row); });
  }
  if (o.mode == "diffusion") {  // whole generations per decoding mode (bench_diffusion.h)
    o.diffusion.tokens = o.tokens;
    o.diffusion.repeat = o.repeat;
    o.diffusion.json = o.json;
    return bench_diffusion_modes(*session, bench_prompts(*session, o.batch, o.prompt_tokens), o.diffusion);
  }
  attach_saes(*session, o.sae);
  if (!o.hooks.empty()) o.taps = bench_hooks(*session, o.hooks);
  run_once(*session, o, true);
  ExecProfile profile;  // attached after the warm-up, so only timed runs count
  const bool decode_profile = o.profile && o.mode == "decode";  // its steps only, not its prefill
  if (o.profile && !decode_profile) session->set_profile(&profile);
  // Decode is bound by reading the weights once per token. The host's memory bandwidth moves
  // with its other tenants (45 to 80 GB/s seen here within minutes), so the bound is measured
  // next to every run: a streaming read of the same bytes before and after it (each the faster of
  // one and four streams per thread), the faster kept.
  const bool bound = o.mode == "decode";
  const auto ranges = bound ? decode_weight_ranges(*session) : std::vector<ByteRange>{};
  const int threads = session->backend().info().threads;
  double before = bound ? fastest_read(ranges, threads) : 0;
  std::vector<RunTime> runs;
  for (std::int64_t r = 0; r < o.repeat; ++r) {
    runs.push_back(run_once(*session, o, false, decode_profile ? &profile : nullptr));
    if (!bound) continue;
    const double after = fastest_read(ranges, threads);
    runs.back().read_seconds = std::min(before, after);
    before = after;
  }
  session->set_profile(nullptr);
  std::uint64_t read_bytes = 0;
  for (const auto& r : ranges) read_bytes += r.bytes;
  auto j = report(*session, o, runs, read_bytes);
  if (!o.taps.empty()) j["hooks"] = std::vector<std::string>(o.taps.begin(), o.taps.end());
  if (o.profile) j["profile"] = profile_json(profile);
  // Under mpiexec every rank ran the same steps in step; rank 0 reports, with each rank's peak RSS
  // (a tensor-parallel rank holds its slices only).
  if (ProcessGroup* job = current_job(); job && job->size() > 1) {
    const double mine = peak_rss_mb();
    std::vector<double> per_rank;
    for (const auto& b : job->allgather(std::as_bytes(std::span<const double>(&mine, 1)))) {
      double v = 0;
      std::memcpy(&v, b.data(), sizeof v);
      per_rank.push_back(v);
    }
    j["ranks"] = job->size();
    j["tensor_parallel"] = session->backend().info().tensor_parallel;
    j["rank_peak_rss_mb"] = per_rank;
    if (job->rank() != 0) return 0;
  }
  if (o.json) std::cout << j.dump() << "\n";
  else print_text(j);
  if (!o.json && o.profile) print_profile(j["profile"], o.profile_top);
  return 0;
}

}  // namespace sonde::cli
