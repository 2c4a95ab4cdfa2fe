#pragma once
// sonde bench --mode serve: simulated clients against the step-level engine (engine.h), and the
// same requests one at a time and in static batches, in one run (bench/README.md, "Serving").
#include <sonde/session.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace sonde::cli {

struct ServeBenchOptions {
  // As typed; prepare_serve_options parses them into the fields below.
  std::string clients_text = "1,4,16", prompt_range = "16:512", gen_range = "16:256";
  std::vector<std::int64_t> clients;
  std::int64_t prompt_min = 0, prompt_max = 0, gen_min = 0, gen_max = 0;
  std::int64_t requests = 0;        // per client count; 0: max(8, 2 x clients)
  double think = 0.5;               // mean seconds between a client's response and its next request
  std::uint64_t seed = 1;
  std::int64_t slots = 0;           // engine slots; 0: the client count
  std::int64_t batch = 0;           // static batches of up to this many; 0: the client count
  std::int64_t prefill_chunk = 256; // engine: prompt tokens prefilled per step
  std::int64_t reference_prompt = 256;  // the TTFT target: one prefill this long + 2 decode steps
  bool profile = false;             // the engine run's graph nodes, decode and prompt forwards apart
  int profile_top = 15;
  bool engine_only = false;         // skip the baselines (their solo runs take most of the time)
  bool json = false;
};

// Parses and checks the options (BadInput naming the option and its value); before the model opens.
void prepare_serve_options(ServeBenchOptions& o);

// Deterministic prompt ids: n tokens for request `row` (cmd_bench.cpp's bench_ids).
using PromptIds = std::function<std::vector<std::int32_t>(std::int64_t n, std::uint64_t row)>;

// For each client count: closed-loop clients (each sends a request, streams its tokens, waits an
// exponential think time, sends the next), against the engine on its own thread, then the same
// requests one at a time and in static batches on a simulated clock. Prints tokens/s, TTFT and
// ITL percentiles and the engine's ratios to both, and the targets at 16 clients.
int bench_serve(Session& s, const ServeBenchOptions& o, const PromptIds& ids);

}  // namespace sonde::cli
