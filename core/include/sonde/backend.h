#pragma once
// A compute backend runs one node at a time on host-visible buffers. It declares what it
// supports; the executor sends everything else to `reference` and says so once per plan.
#include <sonde/graph.h>
#include <sonde/plugin.h>
#include <sonde/process_group.h>
#include <sonde/tensor.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace sonde {

struct BackendInfo {
  std::string name;
  std::string description;
  int threads = 1;
  int tensor_parallel = 1;  // ranks that hold one copy of the model between them (sharded backend)
  int tensor_rank = 0;      // this rank's place among them: the model builds its shard's graph
};

struct BackendOptions {
  int threads = 0;  // 0: the backend's default (all cores)
  std::string weights = "native";  // "native" or "q8" (int8 Linear weights; backends without it ignore it)
  // The sharded backend's: the local backend each rank runs its share on, and the ranks per model
  // copy (0: every rank of the job). Other backends ignore them.
  std::string shard_backend = "threaded";
  int tensor_parallel = 0;
  // The Linear ops' compute precision (<sonde/compute.h>): "f32", "bf16" or "int8" (int8 with
  // weights "q8"). A backend whose Linear does not implement the mode declines Linear nodes
  // (supports() false) and the executor runs them on the reference backend, which implements all.
  std::string compute = "f32";
};

// How a weight may be split across ranks (used by the sharded backend; others ignore it).
enum class Split { None, Rows, Cols };

// What a caller knows of a weight's use that its view does not say (Backend::hint).
enum class WeightHint {
  // Many Linear calls of many rows read it (an SAE's encoder, in every prefill and denoising
  // step): worth a copy in the backend's own layout, made once, instead of rearranging it in
  // every call. The copy is more memory, so this is given for an SAE's weights, never for a
  // model's (a 7B f32 checkpoint would double).
  KeepPacked,
};

class Backend : public Plugin {
 public:
  virtual void init(const BackendOptions& options) = 0;
  // Answers before init() too (`sonde plugins` shows the description, which says whether the
  // backend is batch-invariant); threads is 0 until init().
  virtual BackendInfo info() const = 0;
  // Whether run() handles this node with these input dtypes. Decided by op and dtypes, not by
  // shapes: a plan is reused when a graph's shapes change.
  virtual bool supports(const Node& node, std::span<const DType> input_dtypes) const = 0;
  // Takes a weight; the backend may keep the view (zero copy) or convert it. The returned view
  // stays valid while the backend lives and is what Weight nodes resolve to.
  virtual TensorView upload(const std::string& name, const TensorView& src, Split split) = 0;
  virtual TensorView weight(const std::string& name) const = 0;  // throws when unknown
  // After upload(name): how the weight will be used. A backend may keep more for it (its
  // weight_storage then names that too) or ignore it, the default; the results are the same bits
  // either way. A later upload of the name drops what a hint made. Throws when name is unknown
  // to a backend that acts on the hint.
  virtual void hint(const std::string& name, WeightHint hint) {
    (void)name;
    (void)hint;
  }
  // The memory a node reading this weight streams, as the backend holds it: the view by
  // default; a backend that reads its own copy instead (int8 blocks and scales under q8) names
  // that, and one that keeps a copy beside the view (a hinted weight's packed panels) names both.
  // `sonde bench` counts and reads these bytes for the decode bound. Throws when unknown.
  virtual std::vector<std::span<const std::byte>> weight_storage(const std::string& name) const {
    const TensorView v = weight(name);
    return {{static_cast<const std::byte*>(v.data), static_cast<std::size_t>(v.nbytes())}};
  }
  // Output buffers are allocated by the executor (host memory, contiguous, holding whatever the
  // buffer's previous user left: run() writes every element of `out`), or are the caller's
  // memory: a Concat's output may start at its first input (a KV cache holding the past), and
  // that block must then be left as it is.
  virtual void run(const Node& node, std::span<const TensorView> inputs, const TensorView& out) = 0;
  // Linear nodes that read the same activation and otherwise only weights (a layer's q, k and v
  // projections; gate and up), handed over together so a backend can stream all their weights
  // in one parallel region. Each output must be exactly what run() makes of its node; by
  // default they are run one by one.
  virtual void run_siblings(std::span<const Node* const> nodes, std::span<const std::vector<TensorView>> inputs,
                            std::span<const TensorView> outs) {
    for (std::size_t i = 0; i < nodes.size(); ++i) run(*nodes[i], inputs[i], outs[i]);
  }
  virtual void sync() {}
  // The whole job (every rank), for a backend that runs as several processes; null otherwise.
  // info().tensor_parallel says how the job's ranks are grouped into model copies.
  virtual ProcessGroup* process_group() { return nullptr; }
};

}  // namespace sonde
