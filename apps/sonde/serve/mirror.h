#pragma once
// sonde serve over a tensor-parallel job (mpiexec -n N sonde serve --backend sharded): every rank
// holds a share of the model and must run the same forwards in the same order, while only rank 0
// speaks HTTP. Each rank runs its own Engine, and the engines are kept in lockstep by feeding them
// the same calls: rank 0's engine loop, before each step, broadcasts what arrived since the last
// one (request bodies to submit, requests to cancel, whether to step, whether to stop), and every
// rank applies that list in order, then steps. A rank's engine is a deterministic function of
// that sequence (the decode loops, sampling included, depend on their request only), so the
// ranks' forwards match call for call. Requests are parsed and prepared from the same body on
// every rank (submit.cpp), so edits, captures and seeds are the same without a second format.
#include "protocol.h"
#include "service.h"

#include <sonde/process_group.h>

#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sonde::serve {

class Mirror {
 public:
  Mirror(Service& svc, ProcessGroup& group);
  ~Mirror();
  Mirror(const Mirror&) = delete;
  Mirror& operator=(const Mirror&) = delete;

  // Rank 0: the engine loop on a thread of its own (instead of Engine::start).
  void lead();
  // Rank 0, any thread: submits as submit_request does, on every rank, at the next step; returns
  // rank 0's jobs or throws its refusal. `body` is the request's JSON text, `req` its parse.
  Submitted submit(const std::string& body, const ParsedRequest& req);
  // Rank 0, any thread: cancels an engine request on every rank at the next step.
  void cancel(std::int64_t engine_id);
  // Rank 0: finishes what runs (cancel it first to hurry), tells every rank to stop, joins.
  void stop();
  // Other ranks: applies rank 0's lists until it says stop (the process then exits).
  void follow();

 private:
  struct Pending {
    std::string body;
    const ParsedRequest* req = nullptr;
    std::int64_t cancel = -1;              // >= 0: a cancel, not a submit
    std::promise<Submitted> done;
  };
  // One broadcast: the list as JSON text, rank 0's bytes on every rank.
  std::string exchange(const std::string& mine);
  bool busy() const;                        // the engine has requests running or waiting

  Service& svc_;
  ProcessGroup& group_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Pending>> queue_;
  bool stopping_ = false;
  std::thread loop_;
};

}  // namespace sonde::serve
