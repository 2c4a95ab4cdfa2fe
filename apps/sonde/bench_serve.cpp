// sonde bench --mode serve (bench_serve.h). Closed-loop clients: client c sends its requests one
// after another; before each it waits an exponential think time (a Poisson process while it is
// idle; the first one staggers the starts), then streams the tokens until the request ends. The
// lengths and think times come from counter-based draws of --seed, so every run and every system
// gets the same requests and the same think times.
//   engine:        the step-level engine (engine.h) on its own thread; one thread per client
//                  sleeps until each arrival, submits and drains the handle's events.
//   one at a time: each request alone (generate_autoregressive on a SessionDecodeForward, today's
//                  generate), in arrival order on one server.
//   static:        today's batches: when the server is free it takes the waiting requests, up to
//                  --batch, left-pads them into one batch and runs it to its longest generation.
// The two baselines run their generations for real and place them on a simulated clock (a server
// that waits for an arrival does no work, so waiting is not slept): a request's tokens are at
// start + their offsets in its run, and its client's next arrival at its last token + think.
// TTFT is first token - arrival; ITL the gaps between a request's consecutive tokens; tokens/s
// the generated tokens over first arrival .. last token. Greedy, EOS ignored: every request
// generates exactly its length (a token is timed when the loop samples it).
#include "bench_serve.h"
#include "cmd_bench_profile.h"

#include <sonde/decode.h>
#include <sonde/engine.h>
#include <sonde/error.h>
#include <sonde/session_decode.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <thread>
#include <tuple>

namespace sonde::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::ordered_json;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- options -------------------------------------------------------------------------------------

std::int64_t parse_count(const std::string& text, const std::string& option, const std::string& whole) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) bad_input("{}: '{}' in '{}' is not a whole number", option, text, whole);
  return v;
}

// "MIN:MAX" (or one number for both), MIN >= 1.
std::pair<std::int64_t, std::int64_t> parse_range(const std::string& text, const std::string& option) {
  const auto colon = text.find(':');
  const std::int64_t lo = parse_count(text.substr(0, colon), option, text);
  const std::int64_t hi = colon == std::string::npos ? lo : parse_count(text.substr(colon + 1), option, text);
  if (lo < 1 || hi < lo) bad_input("{}: '{}' is not MIN:MAX with 1 <= MIN <= MAX", option, text);
  return {lo, hi};
}

}  // namespace

void prepare_serve_options(ServeBenchOptions& o) {
  o.clients.clear();
  std::string rest = o.clients_text;
  for (std::size_t at = 0; at <= rest.size();) {
    const auto comma = std::min(rest.find(',', at), rest.size());
    const std::int64_t n = parse_count(rest.substr(at, comma - at), "--clients", rest);
    if (n < 1) bad_input("--clients: {} in '{}' is not a client count (at least 1)", n, rest);
    o.clients.push_back(n);
    at = comma + 1;
  }
  std::tie(o.prompt_min, o.prompt_max) = parse_range(o.prompt_range, "--prompt-range");
  std::tie(o.gen_min, o.gen_max) = parse_range(o.gen_range, "--gen-range");
  if (o.requests < 0) bad_input("--requests must not be negative, got {}", o.requests);
  if (!(o.think >= 0) || !std::isfinite(o.think)) bad_input("--think must be a number of seconds >= 0, got {}", o.think);
  if (o.slots < 0) bad_input("--slots must not be negative, got {}", o.slots);
  if (o.batch < 0) bad_input("--batch must not be negative, got {}", o.batch);
  if (o.prefill_chunk < 1) bad_input("--prefill-chunk must be at least 1, got {}", o.prefill_chunk);
  if (o.reference_prompt < 1) bad_input("--reference-prompt must be at least 1, got {}", o.reference_prompt);
}

namespace {

// ---- the requests --------------------------------------------------------------------------------


// splitmix64 of (seed, a, b): the same draws on every platform.
double uniform01(std::uint64_t seed, std::uint64_t a, std::uint64_t b) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + a * 0xBF58476D1CE4E5B9ull + b * 0x94D049BB133111EBull + 1;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

std::int64_t uniform_int(std::int64_t lo, std::int64_t hi, double u) {
  return std::min(hi, lo + static_cast<std::int64_t>(u * static_cast<double>(hi - lo + 1)));
}

struct Req {
  std::vector<std::int32_t> prompt;
  std::int64_t gen = 0;
};

// One client count: R requests, request j sent by client j % clients after think[j] seconds.
// --profile: the engine run's graph nodes, decode forwards and prompt forwards apart.
struct ServeProfiles {
  ExecProfile decode, prefill;
};

struct Level {
  std::int64_t clients = 0, requests = 0, batch = 0, slots = 0;
  std::vector<double> think;
};

std::int64_t requests_for(const ServeBenchOptions& o, std::int64_t clients) {
  return o.requests > 0 ? o.requests : std::max<std::int64_t>(8, 2 * clients);
}

Level make_level(const ServeBenchOptions& o, std::int64_t clients) {
  Level L{clients, requests_for(o, clients), o.batch ? o.batch : clients, o.slots ? o.slots : clients, {}};
  for (std::int64_t j = 0; j < L.requests; ++j)  // exponential, mean o.think
    L.think.push_back(-o.think * std::log1p(-uniform01(o.seed, 1000 + static_cast<std::uint64_t>(clients),
                                                       static_cast<std::uint64_t>(j))));
  return L;
}

// ---- one generation, timed -----------------------------------------------------------------------

struct Generation {
  std::vector<double> step_at;  // seconds from the start to each step's tokens
  std::vector<Completion> out;
  double seconds = 0;
};

Generation generate(Session& s, const std::vector<std::vector<std::int32_t>>& prompts, std::int64_t new_tokens) {
  ArOptions a;
  a.max_new_tokens = new_tokens;
  a.sampling.do_sample = false;  // greedy; no eos_ids: every row runs to new_tokens
  SessionDecodeForward fwd(s);
  Generation g;
  const auto t0 = Clock::now();
  g.out = generate_autoregressive(fwd, prompts, a, [&](const ArStep&) { g.step_at.push_back(since(t0)); });
  g.seconds = since(t0);
  return g;
}

// ---- a request as one system served it -----------------------------------------------------------

struct Trace {
  std::int64_t client = 0;
  double arrival = 0;
  std::vector<double> token_at;  // same clock as arrival
  std::vector<std::int32_t> tokens;
  std::string finish_reason, error;
};

// What a server did with a batch of requests: each one's tokens and their offsets from its start.
struct Served {
  std::vector<std::vector<double>> offsets;
  std::vector<std::vector<std::int32_t>> tokens;
  double seconds = 0;
};
using Server = std::function<Served(const std::vector<std::int64_t>& requests)>;

// One server on a simulated clock: when free, it takes the requests that have arrived (oldest
// first, up to `batch`); when none has, it jumps to the next arrival. `runs`: the batches it ran.
std::vector<Trace> simulate(const Level& L, std::int64_t batch, const Server& serve, std::int64_t& runs) {
  runs = 0;
  const std::int64_t N = L.clients, R = L.requests;
  std::vector<Trace> traces(static_cast<std::size_t>(R));
  std::vector<std::int64_t> next(static_cast<std::size_t>(N));  // each client's next request, R when none
  std::vector<double> arrives(static_cast<std::size_t>(N));
  for (std::int64_t c = 0; c < N; ++c) {
    next[c] = c < R ? c : R;
    if (c < R) arrives[c] = L.think[c];
  }
  double t = 0;
  while (true) {
    std::vector<std::int64_t> ready;  // clients whose request has arrived by t
    double soonest = std::numeric_limits<double>::infinity();
    for (std::int64_t c = 0; c < N; ++c) {
      if (next[c] >= R) continue;
      soonest = std::min(soonest, arrives[c]);
      if (arrives[c] <= t) ready.push_back(c);
    }
    if (std::isinf(soonest)) break;
    if (ready.empty()) {
      t = soonest;
      continue;
    }
    std::stable_sort(ready.begin(), ready.end(), [&](auto a, auto b) { return arrives[a] < arrives[b]; });
    if (static_cast<std::int64_t>(ready.size()) > batch) ready.resize(static_cast<std::size_t>(batch));
    std::vector<std::int64_t> reqs;
    for (auto c : ready) reqs.push_back(next[c]);
    const Served sv = serve(reqs);
    ++runs;
    for (std::size_t i = 0; i < ready.size(); ++i) {
      const std::int64_t c = ready[i], j = reqs[i];
      Trace& tr = traces[j];
      tr.client = c;
      tr.arrival = arrives[c];
      for (double off : sv.offsets[i]) tr.token_at.push_back(t + off);
      tr.tokens = sv.tokens[i];
      tr.finish_reason = "length";
      next[c] = j + N < R ? j + N : R;
      if (next[c] < R) arrives[c] = tr.token_at.back() + L.think[next[c]];
    }
    t += sv.seconds;
  }
  return traces;
}

// ---- the engine ---------------------------------------------------------------------------------

// Client c of the engine run: sleeps until each arrival, submits, drains the events.
void engine_client(Engine& e, const Level& L, const std::vector<Req>& pool, std::int64_t c, std::vector<Trace>& traces) {
  double free_at = 0;  // when its last response ended
  for (std::int64_t j = c; j < L.requests; j += L.clients) {
    Trace& tr = traces[j];
    tr.client = c;
    tr.arrival = free_at + L.think[j];
    const double wait = tr.arrival - e.now();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    EngineRequest q;
    q.id = fmt::format("request {}", j);
    q.prompt = pool[j].prompt;
    q.ar.max_new_tokens = pool[j].gen;
    q.ar.sampling.do_sample = false;
    q.on_token = [&tr, &e](std::int64_t, std::int32_t, const Tensor&) { tr.token_at.push_back(e.now()); };
    const auto h = e.submit(std::move(q));
    while (const auto ev = h->next())
      if (ev->kind == EngineEvent::Kind::Token) tr.tokens.push_back(ev->token);
    const EngineResult r = h->wait();
    tr.finish_reason = r.finish_reason;
    tr.error = r.error;
    if (r.tokens != tr.tokens) tr.error += fmt::format(" (its events carried {} tokens, its result {})", tr.tokens.size(), r.tokens.size());
    free_at = e.now();
  }
}

// --profile: the session's model, with each forward's graph nodes timed into the profile of its
// kind (one-token forwards are the decode steps, the rest prompts), so that a decode forward's
// wall time (EngineStats) less its nodes' is what it spends outside them.
class ProfiledModel : public ForwardingEngineModel {
 public:
  ProfiledModel(Session& s, std::unique_ptr<EngineModel> inner, ServeProfiles& p)
      : ForwardingEngineModel(std::move(inner)), s_(s), p_(p) {}
  Tensor forward(const EngineBatch& b) override {
    s_.set_profile(b.step.tokens == 1 ? &p_.decode : &p_.prefill);
    Tensor out = inner_->forward(b);
    s_.set_profile(nullptr);
    return out;
  }

 private:
  Session& s_;
  ServeProfiles& p_;
};

std::vector<Trace> run_engine(Session& s, const ServeBenchOptions& o, const Level& L, const std::vector<Req>& pool,
                              EngineStats& stats, ServeProfiles* profiles) {
  std::unique_ptr<EngineModel> model = session_engine_model(s);
  if (profiles) model = std::make_unique<ProfiledModel>(s, std::move(model), *profiles);
  EngineOptions eo;
  eo.slots = L.slots;
  eo.max_waiting = L.requests;
  eo.max_context = o.prompt_max + o.gen_max;
  eo.prefill_chunk = o.prefill_chunk;
  Engine engine(*model, eo);
  engine.start();
  std::vector<Trace> traces(static_cast<std::size_t>(L.requests));
  std::mutex mu;
  std::string failure;
  std::vector<std::thread> clients;
  for (std::int64_t c = 0; c < std::min(L.clients, L.requests); ++c)
    clients.emplace_back([&, c] {
      try {
        engine_client(engine, L, pool, c, traces);
      } catch (const std::exception& e) {
        std::lock_guard lk(mu);
        failure = e.what();
      }
    });
  for (auto& t : clients) t.join();
  engine.stop();
  stats = engine.stats();
  if (!failure.empty()) runtime_error("bench serve: a client of the engine failed: {}", failure);
  return traces;
}

// ---- the baselines --------------------------------------------------------------------------------

// Each request alone, once: its tokens and their offsets from its start.
std::vector<Generation> run_alone(Session& s, const std::vector<Req>& reqs) {
  std::vector<Generation> out;
  for (const Req& r : reqs) out.push_back(generate(s, {r.prompt}, r.gen));
  return out;
}

Server one_at_a_time(const std::vector<Generation>& alone) {
  return [&alone](const std::vector<std::int64_t>& reqs) {
    const Generation& g = alone.at(static_cast<std::size_t>(reqs.at(0)));
    return Served{{g.step_at}, {g.out.at(0).tokens}, g.seconds};
  };
}

// A static batch: left-padded, run to its longest generation; each row keeps its own length.
Server static_batches(Session& s, const std::vector<Req>& pool) {
  return [&s, &pool](const std::vector<std::int64_t>& reqs) {
    std::vector<std::vector<std::int32_t>> prompts;
    std::int64_t longest = 0;
    for (auto j : reqs) {
      prompts.push_back(pool[j].prompt);
      longest = std::max(longest, pool[j].gen);
    }
    const Generation g = generate(s, prompts, longest);
    Served sv;
    sv.seconds = g.seconds;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      const auto n = static_cast<std::size_t>(pool[reqs[i]].gen);
      sv.offsets.emplace_back(g.step_at.begin(), g.step_at.begin() + n);
      sv.tokens.emplace_back(g.out[i].tokens.begin(), g.out[i].tokens.begin() + n);
    }
    return sv;
  };
}

// ---- the report ----------------------------------------------------------------------------------

// Nearest rank: the smallest sample with at least p% of the samples at or below it.
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}

ordered_json percentiles(const std::vector<double>& v) {
  return {{"p50", percentile(v, 50)}, {"p90", percentile(v, 90)}, {"p99", percentile(v, 99)}, {"samples", v.size()}};
}

// One system's figures; `alone` (the solo runs) to count the requests whose tokens equal them.
ordered_json summarize(const std::vector<Trace>& traces, const std::vector<Req>& pool, const std::vector<Generation>& alone) {
  std::vector<double> ttft, itl;
  double first = std::numeric_limits<double>::infinity(), last = 0;
  std::int64_t tokens = 0, completed = 0, same = 0;
  ordered_json reqs = ordered_json::array();
  for (std::size_t j = 0; j < traces.size(); ++j) {
    const Trace& t = traces[j];
    const bool whole = t.error.empty() && t.token_at.size() == t.tokens.size() &&
                       (static_cast<std::int64_t>(t.tokens.size()) == pool[j].gen || t.finish_reason == "eos");
    completed += whole && !t.tokens.empty() ? 1 : 0;
    same += !alone.empty() && t.tokens == alone[j].out.at(0).tokens ? 1 : 0;
    tokens += static_cast<std::int64_t>(t.tokens.size());
    first = std::min(first, t.arrival);
    if (!t.token_at.empty()) {
      ttft.push_back(t.token_at.front() - t.arrival);
      last = std::max(last, t.token_at.back());
    }
    for (std::size_t k = 1; k < t.token_at.size(); ++k) itl.push_back(t.token_at[k] - t.token_at[k - 1]);
    ordered_json r{{"client", t.client}, {"prompt_tokens", pool[j].prompt.size()}, {"gen_tokens", pool[j].gen},
                   {"tokens", t.tokens.size()}, {"finish_reason", t.finish_reason}, {"arrival_s", t.arrival},
                   {"ttft_s", t.token_at.empty() ? -1.0 : t.token_at.front() - t.arrival}};
    if (!t.error.empty()) r["error"] = t.error;
    reqs.push_back(std::move(r));
  }
  const double span = last - first;
  return {{"tokens", tokens}, {"seconds", span}, {"tokens_per_s", span > 0 ? static_cast<double>(tokens) / span : 0.0},
          {"completed", completed}, {"same_tokens_as_alone", same}, {"ttft_s", percentiles(ttft)},
          {"itl_s", percentiles(itl)}, {"requests", std::move(reqs)}};
}

// Where the engine's wall time went (EngineStats), in seconds and as shares of the run's span.
ordered_json breakdown(const EngineStats& st, double span) {
  const double known = st.prefill_s + st.decode_s + st.other_forward_s + st.copy_s + st.wait_s + st.idle_s;
  const auto ms = [](double s, std::int64_t n) { return n > 0 ? 1e3 * s / static_cast<double>(n) : 0.0; };
  return {{"span_s", span}, {"steps", st.steps},
          {"prefill", {{"s", st.prefill_s}, {"forwards", st.prefill_forwards}, {"tokens", st.prefill_tokens},
                       {"ms_per_token", ms(st.prefill_s, st.prefill_tokens)}}},
          {"decode", {{"s", st.decode_s}, {"forwards", st.decode_forwards}, {"rows", st.decode_rows},
                      {"ms_per_forward", ms(st.decode_s, st.decode_forwards)},
                      {"rows_per_forward", st.decode_forwards ? static_cast<double>(st.decode_rows) / static_cast<double>(st.decode_forwards) : 0.0}}},
          {"other_forward_s", st.other_forward_s}, {"copy_s", st.copy_s}, {"wait_s", st.wait_s}, {"idle_s", st.idle_s},
          {"rest_s", span - known}};
}

// The decode forwards' nodes, and their wall time outside the nodes (graph, plan, feeds, executor).
ordered_json serve_profile_json(const ServeProfiles& p, const EngineStats& st) {
  const ordered_json decode = profile_json(p.decode);
  const double nodes = decode["node_seconds"].get<double>();
  const double n = static_cast<double>(std::max<std::int64_t>(st.decode_forwards, 1));
  return {{"decode", decode},
          {"prefill", profile_json(p.prefill)},
          {"decode_ms_per_forward", 1e3 * st.decode_s / n},
          {"decode_node_ms_per_forward", 1e3 * nodes / n},
          {"decode_outside_ms_per_forward", 1e3 * (st.decode_s - nodes) / n}};
}

void print_serve_profile(const ordered_json& p, int top) {
  std::cout << fmt::format("  decode forwards: {:.2f} ms each, {:.2f} ms in graph nodes, {:.2f} ms outside them\n",
                           p["decode_ms_per_forward"].get<double>(), p["decode_node_ms_per_forward"].get<double>(),
                           p["decode_outside_ms_per_forward"].get<double>());
  std::cout << "  decode forwards' nodes:\n";
  print_profile(p["decode"], top);
  std::cout << "  prompt forwards' nodes:\n";
  print_profile(p["prefill"], top);
}

void print_breakdown(const ordered_json& b) {
  const double span = b["span_s"].get<double>();
  const auto pct = [&](double s) { return span > 0 ? 100.0 * s / span : 0.0; };
  const auto& p = b["prefill"];
  const auto& d = b["decode"];
  std::cout << fmt::format(
      "  engine time over {:.2f} s, {} steps: prefill {:.2f} s ({:.0f}%, {} forwards, {} tokens, {:.2f} ms a token); "
      "decode {:.2f} s ({:.0f}%, {} forwards, {:.1f} rows, {:.1f} ms each); other forwards {:.2f} s; copies {:.2f} s ({:.0f}%); "
      "waiting on the request loops {:.2f} s ({:.0f}%); idle {:.2f} s ({:.0f}%); rest {:.2f} s\n",
      span, b["steps"].get<std::int64_t>(), p["s"].get<double>(), pct(p["s"].get<double>()), p["forwards"].get<std::int64_t>(),
      p["tokens"].get<std::int64_t>(), p["ms_per_token"].get<double>(), d["s"].get<double>(), pct(d["s"].get<double>()),
      d["forwards"].get<std::int64_t>(), d["rows_per_forward"].get<double>(), d["ms_per_forward"].get<double>(),
      b["other_forward_s"].get<double>(), b["copy_s"].get<double>(), pct(b["copy_s"].get<double>()), b["wait_s"].get<double>(),
      pct(b["wait_s"].get<double>()), b["idle_s"].get<double>(), pct(b["idle_s"].get<double>()), b["rest_s"].get<double>());
}

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

ordered_json ratios(const ordered_json& engine, const ordered_json& base) {
  const auto get = [](const ordered_json& j, const char* k, const char* p) { return j[k][p].get<double>(); };
  return {{"tokens_per_s", ratio(engine["tokens_per_s"].get<double>(), base["tokens_per_s"].get<double>())},
          {"ttft_p50", ratio(get(engine, "ttft_s", "p50"), get(base, "ttft_s", "p50"))},
          {"ttft_p90", ratio(get(engine, "ttft_s", "p90"), get(base, "ttft_s", "p90"))},
          {"itl_p50", ratio(get(engine, "itl_s", "p50"), get(base, "itl_s", "p50"))},
          {"itl_p90", ratio(get(engine, "itl_s", "p90"), get(base, "itl_s", "p90"))}};
}

// Median of three: one prefill of `tokens` and two decode steps alone (to the third token).
double reference_seconds(Session& s, const PromptIds& ids, std::int64_t tokens) {
  const auto prompt = ids(tokens, 999983);
  std::vector<double> t;
  for (int i = 0; i < 3; ++i) t.push_back(generate(s, {prompt}, 3).step_at.at(2));
  std::sort(t.begin(), t.end());
  return t[1];
}

void print_system(const std::string& name, const ordered_json& j) {
  const auto p = [&](const char* k) {
    const auto& q = j[k];
    return std::array<double, 3>{q["p50"].get<double>(), q["p90"].get<double>(), q["p99"].get<double>()};
  };
  const auto ttft = p("ttft_s"), itl = p("itl_s");
  std::cout << fmt::format("  {:<16} {:>9.2f} {:>8.3f} {:>8.3f} {:>8.3f}   {:>7.1f} {:>7.1f} {:>7.1f}   {}/{}\n", name,
                           j["tokens_per_s"].get<double>(), ttft[0], ttft[1], ttft[2], 1e3 * itl[0], 1e3 * itl[1],
                           1e3 * itl[2], j["completed"].get<std::int64_t>(), j["requests"].size());
}

void print_text(const ordered_json& j) {
  std::cout << fmt::format(
      "sonde bench serve: {} on {} ({} threads); prompts {}..{}, generations {}..{} tokens (uniform, seed {}), "
      "think time exponential with mean {} s\n",
      j["arch"].get<std::string>(), j["backend"].get<std::string>(), j["threads"].get<int>(), j["prompt_range"][0].get<std::int64_t>(),
      j["prompt_range"][1].get<std::int64_t>(), j["gen_range"][0].get<std::int64_t>(), j["gen_range"][1].get<std::int64_t>(),
      j["seed"].get<std::uint64_t>(), j["think_s"].get<double>());
  std::cout << fmt::format("load average {:.1f} before, {:.1f} after\n", j["load_average"][0].get<double>(),
                           j["load_average"][1].get<double>());
  for (const auto& L : j["levels"]) {
    std::cout << fmt::format("{} clients, {} requests, {} generated tokens; engine slots {}, prefill chunk {}; static batches of up to {}\n",
                             L["clients"].get<std::int64_t>(), L["requests"].get<std::int64_t>(), L["engine"]["tokens"].get<std::int64_t>(),
                             L["slots"].get<std::int64_t>(), j["prefill_chunk"].get<std::int64_t>(), L["batch"].get<std::int64_t>());
    std::cout << fmt::format("  reference: one {}-token prefill + 2 decode steps alone: {:.3f} s (median of 3)\n",
                             j["reference_prompt"].get<std::int64_t>(), L["reference_s"].get<double>());
    std::cout << fmt::format("  {:<16} {:>9} {:>8} {:>8} {:>8}   {:>7} {:>7} {:>7}   {}\n", "system", "tokens/s", "TTFT p50",
                             "p90", "p99 (s)", "ITL p50", "p90", "p99 ms", "completed");
    print_system("engine", L["engine"]);
    if (L.contains("one_at_a_time")) {
      print_system("one at a time", L["one_at_a_time"]);
      print_system("static batches", L["static"]);
    }
    print_breakdown(L["engine"]["breakdown"]);
    if (L["engine"].contains("profile")) print_serve_profile(L["engine"]["profile"], j["profile_top"].get<int>());
    if (!L.contains("one_at_a_time")) continue;
    for (const char* b : {"one_at_a_time", "static"}) {
      const auto& r = L["ratios"][b];
      std::cout << fmt::format("  engine / {}: tokens/s {:.2f}x, TTFT p50 {:.2f}x, p90 {:.2f}x, ITL p50 {:.2f}x\n",
                               b == std::string("static") ? "static" : "one at a time", r["tokens_per_s"].get<double>(),
                               r["ttft_p50"].get<double>(), r["ttft_p90"].get<double>(), r["itl_p50"].get<double>());
    }
  }
  if (!j.contains("targets")) return;
  const auto& t = j["targets"];
  std::cout << fmt::format("targets at {} clients: tokens/s {:.2f}x one at a time (>= 3x): {}; TTFT p50 {:.3f} s against "
                           "the reference {:.3f} s: {}\n",
                           t["clients"].get<std::int64_t>(), t["tokens_per_s_vs_one_at_a_time"].get<double>(),
                           t["throughput_met"].get<bool>() ? "met" : "NOT met", t["ttft_p50_s"].get<double>(),
                           t["reference_s"].get<double>(), t["ttft_met"].get<bool>() ? "met" : "NOT met");
}

void check_model(const Session& s, const ServeBenchOptions& o) {
  const auto& cfg = s.config();
  if (s.info().diffusion())
    bad_input("--mode serve: {} is a {} model (masked diffusion); serve measures autoregressive decoding (tokens, TTFT, "
              "ITL): use a Qwen2 model", cfg.dir.string(), s.info().arch);
  const std::int64_t longest = std::max(o.prompt_max + o.gen_max, o.reference_prompt + 3);
  if (longest > cfg.max_position_embeddings)
    bad_input("--prompt-range {}, --gen-range {} and --reference-prompt {}: {} positions exceed max_position_embeddings {} of {}",
              o.prompt_range, o.gen_range, o.reference_prompt, longest, cfg.max_position_embeddings, cfg.dir.string());
}

// The 1-minute load average (0 without /proc): a shared host's other work, before and after.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double v = 0;
  in >> v;
  return v;
}

// The targets, at 16 clients (or the most clients run).
void add_targets(ordered_json& j) {
  const auto& levels = j["levels"];
  const auto at = std::find_if(levels.begin(), levels.end(), [](const auto& l) { return l["clients"] == 16; });
  const auto& top = at != levels.end() ? *at : levels.back();
  const double x = top["ratios"]["one_at_a_time"]["tokens_per_s"].get<double>();
  const double ttft = top["engine"]["ttft_s"]["p50"].get<double>();
  const double reference = top["reference_s"].get<double>();
  j["reference_s"] = reference;
  j["targets"] = {{"clients", top["clients"]}, {"tokens_per_s_vs_one_at_a_time", x}, {"throughput_met", x >= 3.0},
                  {"ttft_p50_s", ttft}, {"reference_s", reference}, {"ttft_met", ttft < reference}};
}

void progress(const ServeBenchOptions& o, const std::string& what, double seconds) {
  if (!o.json) std::cerr << fmt::format("bench serve: {} ({:.1f} s)\n", what, seconds);
}

}  // namespace

int bench_serve(Session& s, const ServeBenchOptions& o, const PromptIds& ids) {
  check_model(s, o);
  std::int64_t pool_size = 0;
  for (auto c : o.clients) pool_size = std::max(pool_size, requests_for(o, c));
  std::vector<Req> pool;  // every level sends the first requests of one pool
  for (std::int64_t j = 0; j < pool_size; ++j) {
    const auto u = static_cast<std::uint64_t>(j);
    pool.push_back({ids(uniform_int(o.prompt_min, o.prompt_max, uniform01(o.seed, 1, u)), u),
                    uniform_int(o.gen_min, o.gen_max, uniform01(o.seed, 2, u))});
  }
  const double load_before = load_average();
  auto t0 = Clock::now();
  generate(s, {ids(16, 7)}, 4);  // warm-up: page in the weights
  progress(o, "warm-up", since(t0));

  // Each client count measures its own solo runs and reference just before its engine run: a
  // shared host's speed drifts over minutes, and a baseline measured long before would carry it.
  ordered_json levels = ordered_json::array();
  for (const auto clients : o.clients) {
    const Level L = make_level(o, clients);
    const std::vector<Req> reqs(pool.begin(), pool.begin() + L.requests);
    t0 = Clock::now();
    const double reference = reference_seconds(s, ids, o.reference_prompt);
    const std::vector<Generation> alone = o.engine_only ? std::vector<Generation>() : run_alone(s, reqs);
    progress(o, fmt::format("{} clients: reference and {} requests alone", clients, alone.size()), since(t0));
    t0 = Clock::now();
    EngineStats st;
    ServeProfiles profiles;
    auto engine = summarize(run_engine(s, o, L, reqs, st, o.profile ? &profiles : nullptr), reqs, alone);
    engine["breakdown"] = breakdown(st, since(t0));
    if (o.profile) engine["profile"] = serve_profile_json(profiles, st);
    progress(o, fmt::format("{} clients: engine", clients), since(t0));
    if (o.engine_only) {
      levels.push_back({{"clients", clients}, {"requests", L.requests}, {"slots", L.slots}, {"batch", L.batch},
                        {"reference_s", reference}, {"engine", engine}});
      continue;
    }
    t0 = Clock::now();
    std::int64_t batches = 0, alone_runs = 0;
    auto stat = summarize(simulate(L, L.batch, static_batches(s, reqs), batches), reqs, alone);
    stat["batches"] = batches;
    progress(o, fmt::format("{} clients: static batches", clients), since(t0));
    const auto one = summarize(simulate(L, 1, one_at_a_time(alone), alone_runs), reqs, alone);
    levels.push_back({{"clients", clients}, {"requests", L.requests}, {"slots", L.slots}, {"batch", L.batch},
                      {"reference_s", reference}, {"engine", engine}, {"one_at_a_time", one}, {"static", stat},
                      {"ratios", {{"one_at_a_time", ratios(engine, one)}, {"static", ratios(engine, stat)}}}});
  }
  const auto info = s.backend().info();
  ordered_json j{{"mode", "serve"}, {"arch", s.info().arch}, {"backend", info.name}, {"threads", info.threads},
                 {"compute", s.compute()}, {"seed", o.seed}, {"think_s", o.think}, {"prompt_range", {o.prompt_min, o.prompt_max}},
                 {"gen_range", {o.gen_min, o.gen_max}}, {"prefill_chunk", o.prefill_chunk},
                 {"reference_prompt", o.reference_prompt}, {"profile_top", o.profile_top}, {"load_average", {load_before, load_average()}}, {"levels", levels}};
  if (!o.engine_only) add_targets(j);
  if (o.json) std::cout << j.dump() << "\n";
  else print_text(j);
  return 0;
}

}  // namespace sonde::cli
