#pragma once
// Where captured activations go. A run (run.h) asks each sink wants() for every captured hook
// once, when it opens the sink, and then hands it only those hooks; write() receives the rows of
// one hook for one prompt. Sinks are plugins of kind "sink" (hooks/).
#include <sonde/model.h>
#include <sonde/plugin.h>
#include <sonde/tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sonde {

// Row kinds of /rows/kind (design §5).
enum class RowKind : std::uint8_t { Prompt = 0, Generated = 1, Special = 2, Masked = 3, Committed = 4 };

struct RowRecord {
  std::int64_t prompt_idx = 0;
  std::int32_t pos = 0;
  std::int32_t token_id = 0;
  std::int32_t step = -1;
  RowKind kind = RowKind::Prompt;
  // 1: the values were computed by this row's step's forward; 0: a cached diffusion step did not
  // compute this slot and the values are those of step `computed_step` (whose K/V it attended to).
  std::uint8_t fresh = 1;
  std::int32_t computed_step = -1;  // the step whose forward computed the values; = step when fresh
};

struct PromptRecord {
  std::int64_t prompt_idx = 0;
  std::string id, text, completion, finish_reason;
  std::vector<std::int32_t> token_ids;
  std::uint64_t seed = 0;
};

// What is safely on disk: whole prompts and their rows, and how many bytes of the companion
// results file (results.jsonl) belong to them. Written to /progress at each checkpoint.
struct CommitMark {
  std::int64_t prompts = 0;
  std::int64_t rows = 0;
  std::uint64_t results_bytes = 0;
};

struct SinkOptions {
  std::string path;
  DType storage = DType::f32;  // f32, bf16 or f16
  bool overwrite = false;
  bool compress = false;       // shuffle + deflate
  // Crash-safe streaming (sonde batch): SWMR writing, checkpoints, resume. Off for one-shot
  // files (sonde forward), which may use write_array.
  bool streaming = false;
  bool resume = false;         // reopen PATH, check run_config_sha256, trim to the committed mark
  bool durable = false;        // fsync at every checkpoint
  // With resume: a file whose run completed is reopened as it is instead of refused (one part of
  // a data-parallel run that finished before the others were stopped).
  bool resume_complete = false;
  // With resume, for a sink that rewinds(): trim to this mark, which may be behind the file's own.
  // A run checkpoints its sinks one after another, so a kill between two leaves the ones written
  // first a checkpoint ahead; the run continues from the mark of the sink that cannot rewind.
  std::optional<CommitMark> resume_at;
  bool diffusion = false;      // create the /steps table
  // Hooks named *.hook_sae_acts_post (sae.h) stored sparse (CSR, docs/hdf5-layout.md): -1 no
  // (dense, under /acts); 0 every non-zero value of a row; K its K largest non-zero values.
  std::int64_t sparse_top_k = -1;
  std::size_t queue_bytes = std::size_t{256} << 20;  // bound on data waiting for the writer thread
};

// One entry of /steps (diffusion): the canvas after a denoising step.
struct StepRecord {
  std::int64_t prompt_idx = 0;
  std::int32_t step = 0;
  float t = 0;
  std::int32_t n_transfer = 0;
  std::vector<std::int32_t> canvas;
  std::int32_t block = 0;         // the block of the generation this step worked on (-1: prompt done)
  std::int32_t n_recomputed = 0;  // positions the step's forward computed (all of them without a cache)
};

// Root attributes (design §5): strings and integers.
struct RunMetadata {
  std::map<std::string, std::string> strings;
  std::map<std::string, std::int64_t> ints;
};

// One delivery: `rows` rows of hook `hook`, tensor [rows, *row_shape].
struct TapRecord {
  std::string hook;
  std::int64_t prompt_idx = 0;
};

class Sink : public Plugin {
 public:
  // Creates the file and every dataset of the selected hooks up front; with options.resume,
  // reopens it, checks meta's run_config_sha256 against the file's, trims every table to the
  // committed mark and returns it (a fresh file returns an empty mark).
  virtual CommitMark open(const SinkOptions& options, const RunMetadata& meta,
                          const std::vector<HookPoint>& hooks) = 0;
  virtual bool wants(const std::string& hook) const = 0;
  virtual void write(const TapRecord& rec, const TensorView& rows) = 0;
  virtual void add_rows(const std::vector<RowRecord>& rows) = 0;
  virtual void add_steps(const std::vector<StepRecord>& steps) = 0;
  virtual void end_prompt(const PromptRecord& prompt) = 0;
  // A whole top-level dataset (forward's /input_ids and /logits); not in streaming mode.
  virtual void write_array(const std::string& path, const TensorView& data) = 0;
  // Waits until everything handed over so far is on disk, then records `mark` in /progress.
  // The caller has already made its results file durable up to mark.results_bytes.
  virtual void checkpoint(const CommitMark& mark) = 0;
  virtual void flush() = 0;
  virtual void close() = 0;  // after close() the file is complete
  // A data-parallel run's parts (complete files, one per model copy, in copy order) joined at
  // `path` into one file that reads as if one process had written every prompt, without copying
  // the activations (HDF5: virtual datasets with relative paths). The default refuses.
  virtual void join(const std::vector<std::string>& parts, const std::string& path, const RunMetadata& meta);
  virtual bool joins() const { return false; }  // whether join() is implemented
  // Whether open() honours SinkOptions::resume_at (can drop committed prompts back to an earlier
  // mark). A run checkpoints these sinks before the others and opens them after.
  virtual bool rewinds() const { return false; }
};

// A sink that wants every hook it is opened with and keeps nothing: what the ranks of a
// tensor-parallel model copy other than its writer hold in place of the writer's sinks, so that
// they tap the same hooks and so make the same collectives (a split hook is gathered on every
// rank of the copy) while writing nothing.
std::shared_ptr<Sink> discard_sink();

}  // namespace sonde
