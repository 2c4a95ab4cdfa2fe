#pragma once
// A loaded model on a backend: config, weights, model plugin, executor. One forward pass over a
// batch of token ids returns the logits and hands tapped hooks to a callback.
#include <sonde/config.h>
#include <sonde/edits.h>
#include <sonde/executor.h>
#include <sonde/model.h>
#include <sonde/safetensors.h>
#include <sonde/sae.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <set>
#include <string>
#include <vector>

namespace sonde {

class PlanCache;
class Tokenizer;
struct PlannedGraph;

struct SessionOptions {
  std::string model;       // a directory or org/name in the local Hugging Face cache
  std::string backend;     // "" = the fastest available
  int threads = 0;
  std::string plugin_dir;
  std::string weights = "native";  // BackendOptions::weights: "native" or "q8"
  std::string shard_backend = "threaded";  // BackendOptions::shard_backend (sharded backend only)
  int tensor_parallel = 0;                 // BackendOptions::tensor_parallel (sharded backend only)
  std::string compute = "f32";             // BackendOptions::compute: f32, bf16 or int8 (<sonde/compute.h>)
};

struct ForwardInput {
  std::int64_t batch = 1, tokens = 0;
  std::vector<std::int32_t> ids;        // [B*T]
  std::vector<std::int32_t> positions;  // [B*T]; empty: 0..T-1 per row
  std::vector<std::uint8_t> mask;       // [B*T]; empty: all ones
  const EditCall* edit = nullptr;       // the session's edits' rows this call; null: all prompt, step 0
  // The caller reads each row's last slot's logits only: an autoregressive model then runs the
  // LM head there alone and returns [B, 1, V] (BatchShape::logits_from, logits_to).
  bool last_logits_only = false;
  // The caller reads the logits of slots [logits_from, logits_to) only (a denoising step: its
  // masked slots'): the head may run there alone and return [B, logits_to - logits_from, V].
  // Either request is honoured only when nothing at the head (ln_final.*, hook_logits) is tapped,
  // edited or read by an SAE, whose rows must stay every slot's; else the logits are [B, T, V].
  std::int64_t logits_from = 0, logits_to = 0;
};

// The autoregressive KV cache (model-spec §1.3): post-RoPE K and V of every layer, each
// [B, capacity, nkv, d] f32, allocated once per sequence batch. Slots [0, filled) are valid.
struct KvCache {
  std::int64_t batch = 0, capacity = 0, filled = 0;
  std::vector<Tensor> k, v;  // per layer
};

class Session {
 public:
  static std::unique_ptr<Session> open(const SessionOptions& options);
  ~Session();

  const ModelConfig& config() const { return config_; }
  const ModelInfo& info() const { return info_; }
  // The model's hook points, after each attached SAE's output hook its hook_sae_* points, and for
  // a diffusion model the denoising loop's own state (capture.h's diffusion_state_hooks: the loop,
  // in core, fills them, so no model plugin lists them).
  std::vector<HookPoint> hook_points() const;
  Backend& backend() { return *backend_; }
  std::string backend_name() const { return backend_->info().name; }
  // The Linear ops' compute precision (--compute): "f32", "bf16" or "int8"; every output file
  // records it as the attribute `compute`.
  const std::string& compute() const { return compute_; }
  const WeightSource& weights() const { return *weights_; }
  const std::filesystem::path& model_dir() const { return dir_; }
  // The model's tokenizer, loaded on first use and then kept (one load per session); null when
  // the model directory has none.
  const Tokenizer* tokenizer() const;

  // BadInput naming the first id outside [0, vocab_size) and its position.
  void check_ids(const std::vector<std::int32_t>& ids) const;

  // Runs one forward pass. Hooks named in `taps` are delivered to `tap` as [B, T, *row_shape].
  // Returns logits [B, T, V] f32 (or [B, 1, V]: ForwardInput::last_logits_only) when need_logits,
  // else an empty tensor.
  Tensor forward(const ForwardInput& in, bool need_logits, const std::set<std::string>& taps,
                 const Executor::Tap& tap);

  KvCache new_kv_cache(std::int64_t batch, std::int64_t capacity) const;
  // A forward over in.tokens new slots per row that follow the cache's `filled` slots: keys of
  // earlier slots are read from the cache (no recomputation), and this call's K and V are
  // appended. in.mask, when given, covers every key: [B, filled + T]. Returns logits [B, T, V].
  // A cache of more rows than in.batch serves its first in.batch rows.
  Tensor forward_cached(const ForwardInput& in, KvCache& cache);
  // The same, also delivering the hooks named in `taps` to `tap` as [B, T, *row_shape]; without
  // need_logits the LM head is skipped and an empty tensor returned.
  Tensor forward_cached(const ForwardInput& in, KvCache& cache, const std::set<std::string>& taps,
                        const Executor::Tap& tap, bool need_logits = true);
  // Diffusion caching (decode.h, StepInput::slots): a forward over slots [first, first + T) of a
  // sequence whose every slot's K/V the cache holds (cache.filled slots). Queries are these
  // rows; every other slot's keys and values are read from the cache, and these rows' are
  // computed and written back over theirs. in.mask covers the whole sequence in slot order
  // ([B, filled]) or is empty. `scratch` is working space kept by the caller between calls.
  Tensor forward_range(const ForwardInput& in, KvCache& cache, std::int64_t first, KvCache& scratch,
                       const std::set<std::string>& taps, const Executor::Tap& tap, bool need_logits = true);

  // Plans and runs a graph built over this session's weights (GraphBuilder with backend().weight)
  // on its backend, with reference fallback; for small computations beside the model (the logit
  // lens). Not cached: planned on every call.
  std::map<std::string, Tensor> run_graph(const Graph& g, const std::vector<std::string>& outputs,
                                          const std::map<std::string, TensorView>& feeds);

  // Edits inserted into every graph from now on (edits.h); replaces the previous set and drops
  // the planned graphs. Empty: none, at no cost.
  void set_edits(std::vector<Edit> edits);
  const std::vector<Edit>& edits() const { return edits_; }

  // Attaches an SAE or transcoder (sae.h) to every later forward: its hooks resolved against the
  // model (BadInput for a hook it lacks or a width that does not fit), its weights uploaded, its
  // hook_sae_* points added; with `splice` the output hook's consumers read the SAE's output
  // (plus the error with `error_term`). Drops the planned graphs. Returns the attachment.
  const AttachedSae& attach_sae(std::shared_ptr<const Sae> sae, bool splice, bool error_term);
  const std::vector<AttachedSae>& saes() const { return saes_; }

  // Later forwards add each graph node's wall time to `profile` (Executor::set_profile; null:
  // none, the default). Set it between forwards; the profile must outlive them.
  void set_profile(ExecProfile* profile) { executor_->set_profile(profile); }

  // Graphs built and planned so far. Calls alike but for the past length (decode steps, diffusion
  // steps) reuse the graph and plan of the first one: a decode run builds one for its prefill and
  // one for all its steps.
  std::int64_t graphs_built() const;

 private:
  void check_ids(const ForwardInput& in) const;
  bool is_past_input(const std::string& ref) const;
  // The slots [from, to) this call's LM head runs on (ForwardInput::last_logits_only, logits_from,
  // logits_to); {0, 0}: every slot.
  std::pair<std::int64_t, std::int64_t> head_rows(const ForwardInput& in, bool need_logits,
                                                  const std::set<std::string>& taps) const;
  void reshape_past(PlannedGraph& pg, const ForwardInput& in, std::int64_t past) const;
  // The model's graph for `shape`, built and planned (the cache's entries are made here).
  std::unique_ptr<PlannedGraph> build_planned(const BatchShape& shape, const Executor::Wants& tapped) const;
  Session() = default;
  std::filesystem::path dir_;
  ModelConfig config_;
  std::unique_ptr<WeightSource> weights_;
  std::string compute_ = "f32";
  std::shared_ptr<ModelPlugin> model_;
  std::shared_ptr<Backend> backend_;
  std::shared_ptr<Backend> reference_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<PlanCache> plans_;
  ModelInfo info_;
  mutable std::once_flag tokenizer_once_;
  mutable std::unique_ptr<Tokenizer> tokenizer_;
  std::map<std::string, std::pair<std::size_t, bool>> kv_hooks_;  // hook -> (layer, is V)
  std::vector<Edit> edits_;
  std::vector<AttachedSae> saes_;
};

}  // namespace sonde
