#include "loaded.h"

#include <sonde/error.h>

#include <pybind11/pybind11.h>

#include <chrono>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace sonde::py {
namespace {

// The Session as the engine drives it, under the run() lock. The engine hands the model its
// requests' edits only when they change; a run() in between puts its own on the Session, so the
// engine's are set again before its next forward.
class SharedModel final : public EngineModel {
 public:
  explicit SharedModel(Loaded& l) : l_(l), inner_(session_engine_model(*l.session)) {}
  std::int64_t vocab_size() const override { return inner_->vocab_size(); }
  bool has_kv_cache() const override { return inner_->has_kv_cache(); }
  bool has_slot_cache() const override { return inner_->has_slot_cache(); }
  KvCache new_cache(std::int64_t batch, std::int64_t capacity) const override {
    std::lock_guard lock(l_.mu);
    return inner_->new_cache(batch, capacity);
  }
  Tensor forward(const EngineBatch& in) override {
    std::lock_guard lock(l_.mu);
    if (seen_ != l_.runs) {
      inner_->set_edits(edits_);
      seen_ = l_.runs;
    }
    return inner_->forward(in);
  }
  void set_edits(std::vector<Edit> edits) override {
    std::lock_guard lock(l_.mu);
    edits_ = edits;
    inner_->set_edits(std::move(edits));
    seen_ = l_.runs;
  }

 private:
  Loaded& l_;
  std::unique_ptr<EngineModel> inner_;
  std::vector<Edit> edits_;
  std::uint64_t seen_ = ~std::uint64_t{0};  // the first forward sets the (empty) edits
};

}  // namespace

Loaded::~Loaded() {
  std::optional<pybind11::gil_scoped_release> nogil;
  if (PyGILState_Check()) nogil.emplace();
  engine_.reset();
  engine_model_.reset();
}

Engine& Loaded::engine_locked() {
  if (!engine_) {
    EngineOptions o = options_;
    o.decoding = session->info().decoding;
    if (!engine_model_) engine_model_ = std::make_unique<SharedModel>(*this);
    engine_ = std::make_unique<Engine>(*engine_model_, o);
    engine_->start();
    ++generation_;
  }
  return *engine_;
}

std::shared_ptr<EngineHandle> Loaded::submit(EngineRequest request, std::uint64_t& generation) {
  std::lock_guard lock(engine_mu_);
  Engine& e = engine_locked();
  generation = generation_;
  return e.submit(std::move(request));
}

bool Loaded::cancel(std::uint64_t generation, std::int64_t id) {
  std::lock_guard lock(engine_mu_);
  return engine_ && generation == generation_ && engine_->cancel(id);
}

EngineStats Loaded::stats() {
  std::lock_guard lock(engine_mu_);
  return engine_ ? engine_->stats() : EngineStats{};
}

EngineOptions Loaded::options() {
  std::lock_guard lock(engine_mu_);
  return options_;
}

void Loaded::configure(EngineOptions o) {
  std::lock_guard lock(engine_mu_);
  if (engine_) {
    // A request that has just ended keeps its slot until the engine's next step retires it.
    EngineStats st = engine_->stats();
    for (int i = 0; i < 500 && st.running + st.waiting > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      st = engine_->stats();
    }
    if (st.running + st.waiting > 0)
      bad_input("engine: {} requests are running and {} waiting; configure it before the first submit or once they "
                "have ended",
                st.running, st.waiting);
  }
  engine_.reset();
  const EngineOptions before = options_;
  options_ = o;
  try {
    engine_locked();  // the engine's own checks of the options, and its KV cache, now
  } catch (...) {
    options_ = before;
    throw;
  }
}

}  // namespace sonde::py
