#pragma once
// Wall time per graph node, summed over the runs of an Executor while one is attached
// (Executor::set_profile): what `sonde bench --profile` prints. Off, the executor pays one
// branch per node. Nodes are keyed by name and op, so the runs of one plan (or of plans of one
// model at several lengths) add up; Input and Weight nodes cost nothing and are not recorded.
#include <sonde/graph.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace sonde {

struct NodeTime {
  std::string name;  // the node's primary name (Node::name)
  OpKind op = OpKind::Input;
  Shape shape;                // as of its last run
  std::int64_t runs = 0;      // times the node was computed
  double seconds = 0;         // its op's wall time, summed
  double best_seconds = 0;    // its fastest single run (against a micro-benchmark's best-of: the sum's
                              // mean carries the host's noise, which biases such a ratio upwards)
  std::int64_t taps = 0;      // hook values handed to the tap callback
  double tap_seconds = 0;     // the tap callback's wall time on them (a sink's own work), summed
  double flops = 0;           // a Linear's 2 x rows x K x N, summed over its runs; 0 for other ops
  bool sibling = false;       // ran in one call with its sibling Linears (Plan::siblings): `seconds`
                              // is its share of the call, by output elements (equal rows and K)
  std::int64_t placed = 0;    // runs that wrote into the caller's memory (Executor::run's placed
                              // outputs: a KV concat into the cache, its past not copied)
};

class ExecProfile {
 public:
  // One run of node `node` of `g`: op time and tap time (0 and tapped = 0 when it was not tapped).
  void add(const Graph& g, const Node& node, double seconds, double tap_seconds, int tapped, bool sibling,
           bool placed = false);
  void count_run();
  void clear();
  std::int64_t runs() const;  // Executor::run calls recorded
  // In the order first seen (a forward's order).
  std::vector<NodeTime> nodes() const;
  // Per op kind: (op name, seconds, nodes run), most expensive first.
  struct KindTime {
    std::string op;
    double seconds = 0;
    std::int64_t runs = 0;
  };
  std::vector<KindTime> by_kind() const;

 private:
  mutable std::mutex mutex_;  // the engine may run forwards on several threads
  std::map<std::pair<std::string, int>, std::size_t> index_;
  std::vector<NodeTime> nodes_;
  std::int64_t runs_ = 0;
};

}  // namespace sonde
