#pragma once
// What the HTTP handlers of sonde serve share: the loaded model, the engine that runs every
// request, the server's limits and its metrics. One per process, made by cmd_serve.
#include "job.h"
#include "metrics.h"
#include "protocol.h"

#include <sonde/engine.h>
#include <sonde/run.h>
#include <sonde/session.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sonde::serve {

class Mirror;

struct ServeConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;              // empty: no key asked
  std::string files_dir;            // empty: no file names in requests
  std::string model_name;           // /v1/models' id (default: the model directory's name)
  std::int64_t slots = 8, max_waiting = 64, max_tokens_cap = 4096, max_context = 2048;
  std::int64_t max_body = 8 << 20;  // bytes (413 beyond)
  int http_threads = 0;             // 0: slots + max_waiting + 16 (every admitted request has a thread)
};

class Service {
 public:
  Service(Session& session, Engine& engine, const ServeConfig& config);
  ~Service();
  Session& session;
  Engine& engine;
  const ServeConfig config;
  ModelTraits traits;
  std::string model_id;
  Metrics metrics;
  std::unique_ptr<RunModel> view;       // the Session as the run layer reads it (no forwards)
  std::filesystem::path scratch;        // the server's own files (inline vectors), removed at exit
  std::atomic<std::uint64_t> counter{0};   // response ids
  // Request ids and inline vectors' files, counted in submission order: under a tensor-parallel
  // job every rank prepares the same requests in the same order and so names them alike.
  std::atomic<std::uint64_t> prepared{0};
  Mirror* mirror = nullptr;                 // a tensor-parallel job's lockstep (rank 0), or none

  // Cancels an engine request (through the mirror when there is one); false when it had ended.
  bool cancel(const EngineHandle& handle);

  // Every submitted job, for a shutdown that cancels what runs.
  void track(const std::vector<std::shared_ptr<Job>>& jobs);
  void cancel_everything();
  std::int64_t live_jobs();  // jobs some handler, stream or engine loop still holds

 private:
  std::mutex live_mu_;
  std::vector<std::weak_ptr<Job>> live_;
};

// One request's prompts submitted to the engine, one job each (in prompt order).
struct Submitted {
  std::vector<std::shared_ptr<Job>> jobs;
  std::vector<std::vector<std::int32_t>> prompt_ids;
  std::vector<std::string> prompt_texts;  // as encoded ("" for ids)
  std::vector<std::string> stops;
  CaptureSpec capture;                    // the hooks captured (row shapes)
  double submitted_at = 0;                // steady seconds
};

// Prepares every prompt (tokenized, checked, edits resolved: 400 naming the field) and submits
// them (429 when the engine's queue is full); a refusal submits none.
Submitted submit_request(Service& svc, const ParsedRequest& req);
// Cancels every job of `s` that has not ended.
void cancel_all(Service& svc, const Submitted& s);
// Whether every job has ended (its loop, or the engine for one cancelled while waiting).
bool all_ended(const Submitted& s);
// Waits up to `seconds` for every job to end; returns all_ended().
bool wait_all(const Submitted& s, double seconds);

}  // namespace sonde::serve
