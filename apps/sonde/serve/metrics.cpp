// Prometheus text for sonde serve (metrics.h).
#include "metrics.h"

#include <fmt/format.h>

#include <utility>

namespace sonde::serve {

void Histogram::observe(double v) {
  std::size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++n_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  std::uint64_t below = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    below += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], below);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, n_, name, sum_, name, n_);
}

Metrics::Metrics()
    : ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      tpot_({0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      duration_({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}) {}

void Metrics::request(const std::string& endpoint, int status) {
  std::lock_guard lk(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::tokens(std::int64_t prompt, std::int64_t generated) {
  std::lock_guard lk(mu_);
  prompt_tokens_ += static_cast<std::uint64_t>(prompt);
  generated_tokens_ += static_cast<std::uint64_t>(generated);
}

void Metrics::cancelled() {
  std::lock_guard lk(mu_);
  ++cancelled_;
}

void Metrics::first_token(double s) {
  std::lock_guard lk(mu_);
  ttft_.observe(s);
}

void Metrics::per_token(double s) {
  std::lock_guard lk(mu_);
  tpot_.observe(s);
}

void Metrics::duration(double s) {
  std::lock_guard lk(mu_);
  duration_.observe(s);
}

std::string Metrics::render(const EngineStats& e, std::int64_t live_jobs) const {
  std::lock_guard lk(mu_);
  std::string out = "# HELP sonde_requests_total HTTP requests by endpoint and status.\n# TYPE sonde_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    out += fmt::format("sonde_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
  out += fmt::format(
      "# HELP sonde_prompt_tokens_total Prompt tokens processed.\n# TYPE sonde_prompt_tokens_total counter\n"
      "sonde_prompt_tokens_total {}\n"
      "# HELP sonde_generation_tokens_total Tokens generated (diffusion: completion slots).\n"
      "# TYPE sonde_generation_tokens_total counter\nsonde_generation_tokens_total {}\n"
      "# HELP sonde_requests_cancelled_total Prompts cancelled (client gone, or server stopping).\n"
      "# TYPE sonde_requests_cancelled_total counter\nsonde_requests_cancelled_total {}\n"
      "# HELP sonde_requests_running Sequences in the engine's running batch.\n# TYPE sonde_requests_running gauge\n"
      "sonde_requests_running {}\n"
      "# HELP sonde_requests_waiting Sequences waiting for a slot.\n# TYPE sonde_requests_waiting gauge\n"
      "sonde_requests_waiting {}\n"
      "# HELP sonde_engine_steps_total Engine steps.\n# TYPE sonde_engine_steps_total counter\nsonde_engine_steps_total {}\n"
      "# HELP sonde_engine_forwards_total Model forwards the engine ran.\n# TYPE sonde_engine_forwards_total counter\n"
      "sonde_engine_forwards_total {}\n"
      "# HELP sonde_engine_threads Request threads alive in the engine.\n# TYPE sonde_engine_threads gauge\n"
      "sonde_engine_threads {}\n"
      "# HELP sonde_jobs_live Prompts a handler, a stream or the engine still holds.\n# TYPE sonde_jobs_live gauge\n"
      "sonde_jobs_live {}\n",
      prompt_tokens_, generated_tokens_, cancelled_, e.running, e.waiting, e.steps, e.forwards, e.threads, live_jobs);
  // Where the engine's step loop spends its wall time (EngineStats): what bounds throughput.
  out += fmt::format(
      "# HELP sonde_engine_prefill_tokens_total Prompt tokens the engine's prefill forwards computed.\n"
      "# TYPE sonde_engine_prefill_tokens_total counter\nsonde_engine_prefill_tokens_total {}\n"
      "# HELP sonde_engine_decode_rows_total Rows of the engine's decode forwards (a running sequence a step).\n"
      "# TYPE sonde_engine_decode_rows_total counter\nsonde_engine_decode_rows_total {}\n"
      "# HELP sonde_engine_seconds_total Wall time of the engine's step loop by phase.\n"
      "# TYPE sonde_engine_seconds_total counter\n",
      e.prefill_tokens, e.decode_rows);
  const std::pair<const char*, double> phases[] = {{"prefill", e.prefill_s}, {"decode", e.decode_s},
                                                   {"other_forward", e.other_forward_s}, {"copy", e.copy_s},
                                                   {"wait", e.wait_s}, {"idle", e.idle_s}};
  for (const auto& [phase, seconds] : phases)
    out += fmt::format("sonde_engine_seconds_total{{phase=\"{}\"}} {}\n", phase, seconds);
  ttft_.render(out, "sonde_time_to_first_token_seconds", "Time from submission to the first token or denoising step.");
  tpot_.render(out, "sonde_time_per_output_token_seconds", "Mean time between a request's generated tokens.");
  duration_.render(out, "sonde_request_duration_seconds", "Time from submission to the end of a prompt.");
  return out;
}

}  // namespace sonde::serve
