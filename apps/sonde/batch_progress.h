#pragma once
// Progress of sonde batch on stderr: a bar with rate and ETA redrawn in place on a terminal,
// plain lines every few seconds otherwise; and the closing summary.
#include <sonde/run.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace sonde::cli {

using BatchTotals = RunTotals;

class BatchProgress {
 public:
  // `start`: when the run began. The first report comes after the first micro-batch, so a clock
  // started there left that micro-batch out of the rate and the elapsed time (a job of one
  // micro-batch per rank showed 10^8 prompts/s and 0m00s).
  BatchProgress(std::int64_t total, std::int64_t already_done,
                std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now());
  void update(const BatchTotals& t);  // t counts this process's work
  void note(const std::string& line);  // a message that must not tear the bar
  void summary(const BatchTotals& t, std::uint64_t acts_bytes, const std::string& acts_path);

 private:
  std::string line(const BatchTotals& t) const;
  double seconds() const;
  std::int64_t total_, start_done_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_print_;
};

}  // namespace sonde::cli
