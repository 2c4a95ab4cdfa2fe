#pragma once
// The run layer's parts (run.h): prepared requests and micro-batches, the outputs (sinks and the
// results file) with their commit/resume protocol, and the run's metadata.
#include <sonde/output_lock.h>
#include <sonde/results_file.h>
#include <sonde/run.h>
#include <sonde/run_schema.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sonde::run_detail {

struct PreparedRequest {
  std::int64_t index = 0;          // in the request list
  const Request* request = nullptr;
  std::string id;                  // the request's id, else its index
  std::vector<std::int32_t> ids;   // the prompt's tokens
  std::string text;                // the text encoded (the rendered chat for messages; "" for ids)
  GenerationSettings settings;     // the run's defaults overridden by the request's own
  std::uint64_t seed = 0;
  std::string key;                 // requests with equal keys may share a micro-batch
  std::vector<std::int32_t> completion;  // RunKind::Score: the completion's tokens
};


// One request tokenized, its settings merged over o.defaults and checked (BadInput naming
// Request::where); its seed is its own or o.seed + index.
PreparedRequest prepare_one(const RunModel& s, const Request& r, std::int64_t index, const RunOptions& o);

// Tokenizes and checks every request (BadInput naming Request::where); with skip_bad a bad one
// is listed in `skipped` instead. BadInput if none is left.
std::vector<PreparedRequest> prepare(const RunModel& s, const std::vector<Request>& requests, const RunOptions& o,
                                     std::vector<std::string>& skipped);

// Consecutive requests with equal keys from `from`, at most `size` (0: no limit): a pure
// function of the start, so a resumed run forms the micro-batches of an uninterrupted one.
std::vector<const PreparedRequest*> next_batch(const std::vector<PreparedRequest>& all, std::size_t from,
                                               std::int64_t size);

// The run's edits resolved for the model (edit_spec.h): positions bounded by the longest prompt
// plus its new tokens, diffusion steps by the requests' steps. BadInput before any output.
std::vector<Edit> run_edits(const RunModel& s, const RunOptions& o, const std::vector<PreparedRequest>& prepared);

// What decides the outputs, recorded as run_config_json (a resume must match it exactly), and
// the root attributes of every sink's file (design §5).
nlohmann::json run_config(const RunModel& s, const RunOptions& o, const std::vector<PreparedRequest>& prepared);
// The config's edits are repeated as the root attribute edits_json (docs/interventions.md).
RunMetadata run_metadata(const RunModel& s, const nlohmann::json& run_config, const std::string& storage_dtype);

// The sinks and, for a committed run, the results file. Every output path is locked for the
// run's life. Opening resumes after the common mark. A one-shot sink writes "<path>.partial",
// renamed to its path by close(): a failed run leaves nothing at the path (nor replaces what
// was there).
class Outputs;

// The requests of `list` from the outputs' mark on, in micro-batches, into `out` (committed at
// checkpoints, closed at the end, abandoned when cancelled). `agree` turns this rank's cancel
// flag into its model copy's, so that the ranks of one copy stop at the same micro-batch.
void generate_all(RunModel& s, const std::vector<PreparedRequest>& list, const CaptureSpec& spec, const RunOptions& o,
                  Outputs& out, RunResult& res, const std::function<bool(bool)>& agree);

// run_score.cpp, run_lens.cpp: the Score and Lens kinds over prepared requests, into `out` (its
// sinks one-shot files) and, for Score, the results file written as "<results_path>.partial" and
// renamed when every line is scored.
void run_score(RunModel& s, const std::vector<PreparedRequest>& list, const CaptureSpec& spec, const RunOptions& o,
               Outputs& out, RunResult& res);
void run_lens(RunModel& s, const PreparedRequest& p, const RunOptions& o, Outputs& out, RunResult& res);

// run_parallel.cpp: the job's layout from the options (BadInput when tensor_parallel does not
// divide the job), and a data-parallel committed run (RunOptions::job).
JobLayout job_layout(const RunOptions& o);
void run_data_parallel(RunModel& s, const std::vector<PreparedRequest>& prepared, const CaptureSpec& spec,
                       const RunOptions& o, const JobLayout& job, bool diffusion, RunResult& res);

class Outputs {
 public:
  Outputs(const RunOptions& o, const CaptureSpec& spec, const RunMetadata& meta, bool diffusion);
  ~Outputs();
  Outputs(const Outputs&) = delete;
  Outputs& operator=(const Outputs&) = delete;
  const CommitMark& mark() const { return mark_; }
  // A rank that writes nothing (not the first of its model copy) runs from its copy's mark.
  void follow(const CommitMark& m) { mark_ = m; }
  bool committed() const { return results_ != nullptr; }
  // One prompt's capture to every sink (the hooks each wants), its result line to the results.
  void write(const CapturedPrompt& cap, const PromptRecord& rec, const nlohmann::json* line);
  std::vector<std::shared_ptr<Sink>>& sinks() { return sinks_; }
  // Commits everything written so far as `prompts` prompts and `rows` rows in total.
  void checkpoint(std::int64_t prompts, std::int64_t rows);
  void close();    // complete: every sink's file is marked complete (and renamed into place)
  void abandon();  // stopped: the sinks are dropped without completing (resumable at the mark)

 private:
  void open(const RunOptions& o, const CaptureSpec& spec, const RunMetadata& meta, bool diffusion);
  void drop() noexcept;  // sinks dropped unclosed, partial files removed
  struct Partial {
    std::string partial, path;
  };
  std::vector<std::unique_ptr<OutputLock>> locks_;
  std::vector<Partial> partials_;  // one-shot files not yet renamed into place
  std::vector<std::shared_ptr<Sink>> sinks_;
  std::vector<std::vector<HookPoint>> wanted_;  // per sink: the hooks it wants
  std::unique_ptr<ResultsFile> results_;
  CommitMark mark_;
};

}  // namespace sonde::run_detail
