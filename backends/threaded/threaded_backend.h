#pragma once
// The threaded CPU backend: its own thread pool (the process's only compute threads), kernels
// chosen at run time for the CPU (AVX-512 VNNI, AVX2+FMA, scalar), Linear and Embedding reading
// f32/f16/bf16 weights in place from the mapped safetensors, and optional int8 weights (q8).
#include "isa.h"
#include "q8.h"
#include "thread_pool.h"

#include <sonde/backend.h>

#include <map>
#include <memory>
#include <string>

namespace sonde::threaded {

class ThreadedBackend final : public Backend {
 public:
  ThreadedBackend();
  void init(const BackendOptions& options) override;
  BackendInfo info() const override;
  bool supports(const Node& node, std::span<const DType> input_dtypes) const override;
  TensorView upload(const std::string& name, const TensorView& src, Split split) override;
  TensorView weight(const std::string& name) const override;
  void run(const Node& node, std::span<const TensorView> inputs, const TensorView& out) override;

 private:
  const Q8Weight* q8_for(const TensorView& w) const;

  std::unique_ptr<ThreadPool> pool_;
  const Kernels* kernels_ = nullptr;
  bool q8_ = false;
  // What weight() returns and Weight nodes resolve to: always the source view, never a copy.
  std::map<std::string, TensorView> weights_;
  // q8 mode: quantised 2-D weights, found by their source view's data pointer when a Linear runs.
  std::map<const void*, Q8Weight> quantised_;
};

}  // namespace sonde::threaded
