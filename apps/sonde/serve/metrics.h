#pragma once
// sonde serve's Prometheus metrics (GET /metrics, text format 0.0.4): requests by endpoint and
// status, prompt and generated tokens, the engine's queue, and histograms of time to first token,
// time per output token and request duration, as llama-server and vLLM export them.
#include <sonde/engine.h>

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace sonde::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double v);
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // counts_[i]: values <= bounds_[i] and > bounds_[i-1]; last: above all
  double sum_ = 0;
  std::uint64_t n_ = 0;
};

class Metrics {
 public:
  Metrics();
  void request(const std::string& endpoint, int status);
  void tokens(std::int64_t prompt, std::int64_t generated);
  void cancelled();
  void first_token(double seconds);
  void per_token(double seconds);
  void duration(double seconds);
  std::string render(const EngineStats& engine, std::int64_t live_jobs) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  std::uint64_t prompt_tokens_ = 0, generated_tokens_ = 0, cancelled_ = 0;
  Histogram ttft_, tpot_, duration_;
};

}  // namespace sonde::serve
