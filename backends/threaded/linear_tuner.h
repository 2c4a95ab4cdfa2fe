#pragma once
// Which path a Linear takes, learned from its own calls. Both paths give the same bits
// (linear_dispatch.h), so the choice is one of time alone, and the cost model's prediction misses
// what its small probes cannot see: at K = 3584-18944 and 128+ rows (a 7B's prefill and
// denoising steps) the GEMV streams x (M * K * 4 bytes: megabytes) from L3 past every few-row W
// chunk, where the K = 1024 probe has it in L2, and the model kept the GEMV on shapes the GEMM
// runs 1.2x faster (bench/README.md, "The dispatch keeps the 7B on the GEMV"). So the first calls
// of each shape class alternate the two paths, the model's pick first, each timed; from then on
// the class takes the path with the shorter best time. Best, not mean: a call slowed by a page
// fault or another process only ever adds time. The cost is at most kTrials calls on the slower
// path per class and backend: a forward repeats each shape once per layer, but the LM head only once
// a forward, so its trials take four forwards. So a class settles after one trial of each path when
// the first path (the model's pick, timed first and so the coldest: its weights may still be faulting
// in) beat the other by kClear: a cold start can only make it look slower, never faster.
// Plain C++ (no sonde headers) so that the unit test can link it alone.
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "linear_dispatch.h"

namespace sonde::threaded {

class LinearTuner {
 public:
  static constexpr int kTrials = 2;  // timed calls per path before a class settles
  static constexpr double kClear = 1.2;  // the other path's first trial this much slower: settled

  struct Pick {
    LinearPath path;
    bool timed;  // the caller times the call and record()s it
  };

  // The path for an M x K x N Linear with `w_bytes` per weight; `predicted` is the cost model's.
  // At most 3 rows (one GEMV pass reads W once) it is always the GEMV, untimed.
  Pick pick(std::int64_t M, std::int64_t K, std::int64_t N, double w_bytes, LinearPath predicted) const;
  // A timed call's seconds. Returns true when this call settled its class (for a log line).
  bool record(std::int64_t M, std::int64_t K, std::int64_t N, double w_bytes, LinearPath path, double seconds);
  // The best seconds of each path in a class (0 before a trial): gemv, gemm.
  std::pair<double, double> best(std::int64_t M, std::int64_t K, std::int64_t N, double w_bytes) const;

  // Rows fall in half-octave classes, [2^e, 1.5 * 2^e) and [1.5 * 2^e, 2^(e+1)): the crossover
  // between the paths moves with M by more than that only over several classes, and a run whose
  // row counts vary (prompts of every length, a serving batch) meets a few dozen classes at most.
  static std::int64_t row_class(std::int64_t M);

 private:
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>;
  struct Times {
    double best[2] = {0, 0};  // by LinearPath; 0: no trial yet
    int trials[2] = {0, 0};
    int first = -1;  // the path of the first trial (the model's pick)
    bool settled() const;  // by kTrials of each, or early by kClear
  };
  static Key key(std::int64_t M, std::int64_t K, std::int64_t N, double w_bytes);
  mutable std::mutex mu_;
  std::map<Key, Times> times_;
};

}  // namespace sonde::threaded
