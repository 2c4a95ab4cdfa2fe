#pragma once
// The threaded CPU backend: its own thread pool (the process's only compute threads), kernels
// chosen at run time for the CPU (AVX-512, AVX2+FMA, scalar), Linear and Embedding reading
// f32/f16/bf16 weights in place from the mapped safetensors, and optional int8 weights (q8).
#include "isa.h"
#include "lowp_select.h"
#include "ops_lowp.h"
#include "ops.h"
#include "q8.h"
#include "thread_pool.h"

#include <sonde/backend.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

namespace sonde::threaded {

class ThreadedBackend final : public Backend {
 public:
  ThreadedBackend();
  ~ThreadedBackend() override;
  void init(const BackendOptions& options) override;
  BackendInfo info() const override;
  bool supports(const Node& node, std::span<const DType> input_dtypes) const override;
  TensorView upload(const std::string& name, const TensorView& src, Split split) override;
  TensorView weight(const std::string& name) const override;
  void hint(const std::string& name, WeightHint hint) override;
  std::vector<std::span<const std::byte>> weight_storage(const std::string& name) const override;
  void run(const Node& node, std::span<const TensorView> inputs, const TensorView& out) override;
  void run_siblings(std::span<const Node* const> nodes, std::span<const std::vector<TensorView>> inputs,
                    std::span<const TensorView> outs) override;
  void sync() override;

 private:
  struct Bytes {
    const unsigned char* data = nullptr;
    std::size_t size = 0;
  };
  void check_supported(const Node& node, std::span<const TensorView> inputs) const;
  const Q8Weight* q8_for(const TensorView& w) const;  // null unless --weights q8 made one for w
  const PackedW* packed_for(const TensorView& w) const;  // null unless a hint packed w (f32 compute only)
  Bytes streamed_bytes(const TensorView& w) const;
  void learn_linear(const TensorView& w);
  void prefetch_next(bool start, const TensorView& after);
  Ctx ctx() const { return Ctx{*pool_, *kernels_, linear_mode_, rates_, lowp_, tuner_.get()}; }
  // --compute bf16/int8: the weight as the mode's kernels read it (bf16 rows or the q8 copy).
  LowpWeight lowp_weight(const Node& node, const TensorView& w) const;

  std::unique_ptr<ThreadPool> pool_;
  const Kernels* kernels_ = nullptr;
  bool q8_ = false;
  Compute compute_ = Compute::f32;
  const LowpKernels* lowp_ = nullptr;  // the mode's kernels (lowp_select.h); f32: null
  LinearMode linear_mode_ = LinearMode::automatic;
  HostRates rates_{};  // for the automatic Linear dispatch
  std::unique_ptr<LinearTuner> tuner_;  // its timings: new with every init (pool size, ISA)
  // What weight() returns and Weight nodes resolve to: always the source view, never a copy.
  std::map<std::string, TensorView> weights_;
  // q8 mode: quantised 2-D weights, found by their source view's data pointer when a Linear runs.
  std::map<const void*, Q8Weight> quantised_;
  // bf16 mode: 2-D weights as the kernels read them, made once: f32/f16 rounded to bf16 (bf16
  // weights read in place), and packed for AMX's tiles when those kernels run.
  std::map<const void*, std::vector<std::uint16_t>> rounded_;
  // Weights hinted KeepPacked: their rows in the packed GEMM's layout, made once at the hint (so
  // concurrent forwards only read them), found by the source view's data pointer. Only for
  // hinted weights: a second copy of every weight would double a model's memory.
  std::map<const void*, PackedW> packed_;
  // Decode runs the same Linear weights in the same order every step, with serial work (norms,
  // attention, the executor) between them that leaves the memory bus idle. The weight that
  // followed each Linear last time is read ahead by an idle worker during that work (pool post),
  // from where it stopped, up to half the L3; a run() preempts it, sync() ends it.
  std::unordered_map<const void*, Bytes> next_linear_;  // by the weight view's data pointer
  const void* last_linear_ = nullptr;
  Bytes prefetch_;
  std::atomic<std::size_t> prefetched_{0};  // bytes of prefetch_ read so far
};

}  // namespace sonde::threaded
