#pragma once
// The run layer: one path from a list of requests to sinks, for a forward pass, generation
// (autoregressive or masked diffusion, chosen by the model's info) and whole datasets. The CLI,
// the Python package and MPI ranks call run(); they parse options and render progress, run()
// does the rest: prepares requests with the session's tokenizer, forms micro-batches, captures
// hooks, hands rows to every sink, and for a committed run (a results file) checkpoints the
// results and the sinks in step and resumes after their last common mark.
#include <sonde/capture.h>
#include <sonde/edit_spec.h>
#include <sonde/engine.h>
#include <sonde/lens.h>
#include <sonde/process_group.h>
#include <sonde/request.h>
#include <sonde/session.h>
#include <sonde/sink.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace sonde {

// Which hooks are captured and how rows are chosen and stored (capture.h, design §5).
struct CaptureSettings {
  std::string hooks;                         // a hook selection (hooks.h); "" captures none
  std::string positions = "all";             // all, prompt, generated, last
  std::string diffusion_capture = "commit";  // commit, final, all, every:K
  std::string storage = "f32";               // f32, bf16, f16
  bool compress = false;                     // shuffle + deflate
  // SAE feature activations (hooks *.hook_sae_acts_post, sae.h) stored sparse: "" dense,
  // "nonzero" every non-zero value of a row, "top:K" its K largest (docs/sae.md).
  std::string sae_sparse;
  std::int64_t sparse_top_k() const;         // -1 (dense), 0 (nonzero) or K; BadInput naming the value
  // BadInput naming the setting and value; checks everything that needs no model.
  void check() const;
  DType storage_dtype() const;
  nlohmann::json to_json() const;            // recorded in run_config_json
};

// What a run reads of a loaded model. A Session provides it (run(Session&, ...)); unit tests give
// a fake, so the run layer is tested without a checkpoint.
class RunModel {
 public:
  virtual ~RunModel() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const ModelInfo& info() const = 0;
  virtual std::vector<HookPoint> hook_points() const = 0;
  virtual const Tokenizer* tokenizer() const = 0;  // null: requests must give token ids
  virtual std::string backend_name() const = 0;
  // The Linear ops' compute precision (--compute, <sonde/compute.h>): every output records it.
  virtual std::string compute() const { return "f32"; }
  virtual std::filesystem::path model_dir() const = 0;
  // The decode loops' forward (decode.h), kept for the run.
  virtual DecodeForward& decoder() = 0;
  // One forward pass over one sequence (RunKind::Forward): logits [1, T, V], or without
  // need_logits an empty tensor and no LM head; hooks to `tap` as [1, T, *row_shape].
  virtual Tensor forward(const std::vector<std::int32_t>& ids, const std::set<std::string>& taps, const HookTap& tap,
                         bool need_logits) = 0;
  // Edits inserted into every later forward (edits.h); empty: none. A model that cannot edit
  // refuses a non-empty list (BadInput).
  virtual void set_edits(std::vector<Edit> edits);
  // The sequences of the next generation or forward: prompt lengths and ids, for the edits' rows.
  virtual void begin_rows(const std::vector<std::int64_t>& /*prompt_len*/, const std::vector<std::string>& /*ids*/) {}
  // The model as the step-level engine drives it (engine.h), kept for the run; null: the run
  // layer's own micro-batches over decoder() instead (fakes of unit tests).
  virtual EngineModel* engine_model() { return nullptr; }
  // SAEs attached to the model (sae.h): recorded in run_config_json (key saes).
  virtual std::vector<AttachedSae> saes() const { return {}; }
  // The loaded session behind the model, for the run kinds that drive it directly (Score, Lens);
  // null for a fake (those kinds then refuse to run).
  virtual Session* session() { return nullptr; }
};

// The capture spec of `settings` for a model: hooks resolved (closest names suggested for
// unknown ones), policies parsed, special tokens from the config and tokenizer.
// `per_sequence_ok`: hooks with a row per key (attention patterns) are allowed (a forward pass).
CaptureSpec make_capture_spec(const RunModel& m, const CaptureSettings& settings, bool per_sequence_ok = false);
CaptureSpec make_capture_spec(Session& s, const CaptureSettings& settings, bool per_sequence_ok = false);

// A sink the run opens: by its registry name (plugins of kind "sink"), or one given.
struct SinkSpec {
  std::string name = "hdf5";
  std::string path;
  bool overwrite = false;
  std::shared_ptr<Sink> sink;  // given: used instead of a new one from the registry
};

enum class RunKind {
  Forward,   // one forward pass over one request's tokens: logits, every position's hooks
  Generate,  // the model's decoding (ModelInfo::decoding), in micro-batches
  Score,     // each request's completion scored given its prompt (score.h); results_path: one line each
  Lens,      // the logit lens of one request (lens.h), into the sinks as /lens/* arrays
};

// RunKind::Score: the diffusion estimator's settings (score.h); line i's masks use RunOptions::seed + i.
struct ScoreSettings {
  std::int64_t samples = 32;
  bool coupled = false;
  bool record_masks = false;  // each sample's t, weight, masked indices and loss in its line
};

// RunKind::Lens: tokens kept per layer and position; `diffusion`: a masked-diffusion generation of
// the request with the lens at every denoising step (its settings: the request's over defaults).
struct LensSettings {
  std::int64_t top_k = 5;
  bool diffusion = false;
};

struct RunTotals {
  std::int64_t prompts = 0, prompt_tokens = 0, completion_tokens = 0, rows = 0;
};

struct RunProgress {
  std::int64_t total = 0;      // requests in the run
  std::int64_t committed = 0;  // requests done by earlier runs (resume)
  RunTotals totals;            // this call's work so far
};

struct RunOptions {
  RunKind kind = RunKind::Generate;
  std::string command = "run";       // recorded in run_config_json ("forward", "generate", "batch")
  GenerationSettings defaults;       // under every request's own settings
  std::uint64_t seed = 0;            // a request without a seed uses seed + its index
  std::int64_t batch_size = 0;       // requests per micro-batch (equal settings only); 0: all at once
  bool use_kv_cache = true;          // autoregressive: false recomputes the prefix every step
  // Forward: every position's logits computed and written as /logits. false: the hooks only; the
  // LM head (a quarter of Qwen2.5-0.5B's weights) and every layer past the last tapped hook are
  // skipped, and the outputs' root attribute `logits` says "none" (else "all").
  bool forward_logits = true;
  bool skip_bad = false;             // a request that fails preparation is skipped, not fatal
  CaptureSettings capture;           // nothing is captured without a sink
  std::vector<EditSpec> edits;       // interventions (edit_spec.h), recorded in run_config_json
  std::vector<SinkSpec> sinks;       // each receives the hooks it wants()
  // A committed run: results (one JSON line per request) written at checkpoints in step with the
  // sinks, which then stream and can resume. Empty: the sinks are one-shot files.
  std::string results_path;
  std::string dataset_path;          // recorded (its sha256) so that a resume checks the input
  bool resume = false, durable = false;
  bool overwrite = false;            // results_path: replace an existing file (check_outputs)
  bool resume_complete = false;      // resume: outputs already complete are kept, not refused
  std::int64_t checkpoint_every = 64;
  double checkpoint_seconds = 60;
  ScoreSettings score;               // RunKind::Score
  LensSettings lens;                 // RunKind::Lens
  bool record_history = false;       // diffusion: every step's canvas into RequestResult::history
  bool keep_results = true;          // false: RunResult::results stays empty (a dataset's results
                                     // go to the results file; memory stays flat)

  // Several processes (design §5): the job's ranks, grouped into model copies of
  // `tensor_parallel` ranks. With more than one copy a committed run is data parallel: copy r
  // runs the requests whose index i has i % copies == r, its first rank writes results to
  // "<results_path>.parts/rank-<r>.jsonl" and each sink to "<sink path>/rank-<r>.h5"; at the end
  // rank 0 joins them into results_path (input order) and "<sink path>/run.h5". on_progress gets
  // the whole job's progress on rank 0 (each copy's as of its last micro-batch), its own copy's on
  // another copy's first rank, and is not called on the other ranks.
  // run(Session&) takes both from the session's backend when `job` is null.
  ProcessGroup* job = nullptr;
  int tensor_parallel = 1;

  const std::atomic<bool>* cancel = nullptr;  // checked between micro-batches
  std::function<void(const RunProgress&)> on_progress;  // after each micro-batch
  std::function<void(const std::string&)> on_note;      // "resuming after ...", "skipped ..."
  // Autoregressive: each token as it is chosen, by request index (streaming to a terminal).
  std::function<void(std::int64_t request, std::int32_t token)> on_token;
  // Diffusion: each request's canvas (without its left padding) after each denoising step, as
  // RequestResult::history records it (a Python generator yields them as they come).
  std::function<void(std::int64_t request, std::int64_t step, const std::vector<std::int32_t>& canvas)> on_step;
};

struct RequestResult {
  std::int64_t index = 0;                    // in the request list
  std::string id, text;                      // text: as encoded (the rendered chat for messages)
  std::vector<std::int32_t> prompt_ids, completion;
  std::optional<std::string> completion_text;  // nullopt without a tokenizer
  std::string finish_reason;                 // eos, stop, length; forward for a forward pass
  std::uint64_t seed = 0;
  std::vector<std::vector<std::int32_t>> history;  // record_history: the canvas after each step
};

struct RunResult {
  std::vector<RequestResult> results;  // the requests this call ran, in order (keep_results)
  std::vector<HookPoint> hooks;        // captured (row shapes as stored)
  Tensor logits;                       // Forward: [T, vocab] f32 (empty without forward_logits)
  std::int64_t committed_before = 0;   // requests an earlier run had committed (resume)
  std::vector<std::string> skipped;    // skip_bad: "line N: why"
  RunTotals totals;
  bool cancelled = false;              // stopped by `cancel`; a committed run is resumable
  std::vector<nlohmann::json> scores;  // Score: each request's result line, as results_path holds it
  std::optional<LensResult> lens;      // Lens
  std::optional<DiffusionLens> lens_steps;  // Lens with LensSettings::diffusion
};

// One request made ready for the engine (engine.h) as run() would run it: tokenized (a chat
// rendered), checked, its settings over o.defaults resolved into the model's decode options, its
// seed its own or o.seed + index. BadInput naming the request (Request::where). The front ends
// that submit requests one at a time (Python's Model.submit, the server) start here.
EngineRequest engine_request(const RunModel& m, const Request& r, const RunOptions& o, std::int64_t index = 0);
EngineRequest engine_request(Session& s, const Request& r, const RunOptions& o, std::int64_t index = 0);

// Runs `requests`. BadInput (nothing written) for a request that cannot run: no tokens, ids
// outside the vocabulary, too long for the model, bad settings; with skip_bad such requests
// are skipped and listed. Opens every sink only after all requests are prepared.
RunResult run(Session& session, const std::vector<Request>& requests, const RunOptions& options);
RunResult run(RunModel& model, const std::vector<Request>& requests, const RunOptions& options);

// The outputs' overwrite policy, one for every front end: an existing results file or sink file
// is refused (BadInput; setting "output" for the results file, the sink's name for a sink's file)
// unless the run resumes it or overwrite (RunOptions::overwrite, SinkSpec::overwrite) replaces it;
// resume and overwrite exclude each other. run() checks it in a one-process run; front ends call it
// before they load a model, on every rank of a job (no rank has written anything yet then).
void check_outputs(const RunOptions& options);

}  // namespace sonde
