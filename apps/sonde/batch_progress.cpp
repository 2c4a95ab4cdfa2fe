#include "batch_progress.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <unistd.h>

namespace sonde::cli {
namespace {

std::string duration(double s) {
  if (s < 0 || s > 1e7) return "?";
  const auto t = static_cast<long long>(s + 0.5);
  return t >= 3600 ? fmt::format("{}h{:02}m", t / 3600, t / 60 % 60) : fmt::format("{}m{:02}s", t / 60, t % 60);
}

}  // namespace

BatchProgress::BatchProgress(std::int64_t total, std::int64_t already_done, std::chrono::steady_clock::time_point start)
    : total_(total), start_done_(already_done), tty_(::isatty(STDERR_FILENO) != 0), start_(start), last_print_(start_) {}

double BatchProgress::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string BatchProgress::line(const BatchTotals& t) const {
  const std::int64_t done = start_done_ + t.prompts;
  const double s = seconds(), rate = s > 0 ? static_cast<double>(t.prompts) / s : 0;
  const double tok_rate = s > 0 ? static_cast<double>(t.completion_tokens) / s : 0;
  const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : -1;
  constexpr int kWidth = 24;
  // Clamped: a count above the total (a miscount elsewhere) must not take the run down.
  const int filled = total_ > 0 ? static_cast<int>(std::clamp<std::int64_t>(kWidth * done / total_, 0, kWidth)) : kWidth;
  return fmt::format("[{}{}] {}/{} prompts  {:.1f} prompts/s  {:.0f} tok/s  ETA {}", std::string(filled, '#'),
                     std::string(kWidth - filled, '.'), done, total_, rate, tok_rate, duration(eta));
}

void BatchProgress::update(const BatchTotals& t) {
  const auto now = std::chrono::steady_clock::now();
  const bool finished = start_done_ + t.prompts >= total_;
  if (tty_) {
    std::fprintf(stderr, "\r%s\x1b[K", line(t).c_str());
  } else if (finished || now - last_print_ >= std::chrono::seconds(5)) {
    std::fprintf(stderr, "progress: %s\n", line(t).c_str());
    last_print_ = now;
  }
  std::fflush(stderr);
}

void BatchProgress::note(const std::string& msg) {
  std::fprintf(stderr, tty_ ? "\r\x1b[K%s\n" : "%s\n", msg.c_str());
}

void BatchProgress::summary(const BatchTotals& t, std::uint64_t acts_bytes, const std::string& acts_path) {
  if (tty_) std::fprintf(stderr, "\n");
  std::fprintf(stderr, "done: %lld prompts (%lld before this run), %lld prompt + %lld completion tokens, %lld rows",
               static_cast<long long>(t.prompts), static_cast<long long>(start_done_),
               static_cast<long long>(t.prompt_tokens), static_cast<long long>(t.completion_tokens),
               static_cast<long long>(t.rows));
  if (!acts_path.empty()) std::fprintf(stderr, ", %s %.1f MB", acts_path.c_str(), static_cast<double>(acts_bytes) / 1e6);
  std::fprintf(stderr, ", %s\n", duration(seconds()).c_str());
}

}  // namespace sonde::cli
