#pragma once
// Plans a graph once (which nodes are needed, which backend runs each, when buffers die, which
// nodes are tapped, which weight each Weight node reads), then runs it, as often as wanted: a
// plan stays valid when the graph's shapes change (Graph::reshape_inputs), since backends choose
// by op and dtypes only. Nodes nobody needs are not computed: with no logits wanted,
// layers after the last tapped hook are skipped.
#include <sonde/backend.h>
#include <sonde/buffer_pool.h>
#include <sonde/exec_profile.h>
#include <sonde/graph.h>

#include <functional>
#include <map>
#include <span>
#include <utility>
#include <string>
#include <vector>

namespace sonde {

struct Plan {
  const Graph* graph = nullptr;
  std::vector<int> order;                          // nodes to compute, in order
  std::vector<Backend*> backend;                   // per node (null when not computed)
  std::vector<int> last_use;                       // per node: last position in `order` reading it
  std::vector<std::vector<std::string>> taps;      // per node: hook names delivered
  std::vector<std::string> outputs;
  std::vector<std::string> fallbacks;              // "Attention -> reference" notes
  std::vector<TensorView> weights;                 // per Weight node: the backend's view, fetched by name here
  // Linears of one backend reading the same activation and otherwise only weights (q/k/v,
  // gate/up): all run through Backend::run_siblings at the first one's step.
  std::vector<std::vector<int>> siblings;          // node ids, in order
  std::vector<int> sibling_group;                  // per node: index into `siblings`, or -1
};

class Executor {
 public:
  using Wants = std::function<bool(const std::string& hook)>;
  using Tap = std::function<void(const std::string& hook, const TensorView& value)>;

  Executor(Backend& primary, Backend& reference);
  // `outputs`: graph outputs to return; `wants`: asked once per named node, here only.
  Plan plan(const Graph& g, const std::vector<std::string>& outputs, const Wants& wants) const;
  // `feeds`: the Input nodes by ref name. Returns the requested outputs. `placed`: nodes whose
  // output is to be written into the caller's memory (node id, view), as the KV cache's keys
  // and values are; a view that is not of the node's shape and dtype, or not contiguous (for a
  // Concat: not dense within each outer index, op_checks.h), is ignored and the node gets its own
  // buffer, as do all others.
  std::map<std::string, Tensor> run(const Plan& plan, const std::map<std::string, TensorView>& feeds,
                                    const Tap& tap, std::span<const std::pair<int, TensorView>> placed = {}) const;
  // Later runs add each node's wall time to `profile` (null: none, the default). Set it between
  // runs; the profile must outlive them.
  void set_profile(ExecProfile* profile) { profile_ = profile; }

 private:
  Backend& primary_;
  Backend& reference_;
  ExecProfile* profile_ = nullptr;
  mutable BufferPool buffers_;  // every node's output (written in full by its op); run() is const, the pool locks
};

}  // namespace sonde
