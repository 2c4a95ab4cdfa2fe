#pragma once
// The "sharded" backend: one rank of an MPI job (mpiexec), computing on a local backend
// (--shard-backend, threaded by default) and giving the run layer the job (process_group()).
// MPI is initialised by init(), never when the plugin is loaded, and finalised at exit.
//
// Built so far: data parallelism (each model copy is one rank: --tensor-parallel 1). Tensor
// parallelism (a copy of several ranks splitting every layer) is refused with a clear error.
#include "mpi_group.h"

#include <sonde/backend.h>

#include <memory>

namespace sonde::sharded {

class ShardedBackend final : public Backend {
 public:
  void init(const BackendOptions& options) override;
  BackendInfo info() const override;
  bool supports(const Node& node, std::span<const DType> input_dtypes) const override {
    return local_->supports(node, input_dtypes);
  }
  TensorView upload(const std::string& name, const TensorView& src, Split split) override {
    return local_->upload(name, src, split);
  }
  TensorView weight(const std::string& name) const override { return local_->weight(name); }
  std::vector<std::span<const std::byte>> weight_storage(const std::string& name) const override {
    return local_->weight_storage(name);
  }
  void run(const Node& node, std::span<const TensorView> inputs, const TensorView& out) override {
    local_->run(node, inputs, out);
  }
  void run_siblings(std::span<const Node* const> nodes, std::span<const std::vector<TensorView>> inputs,
                    std::span<const TensorView> outs) override {
    local_->run_siblings(nodes, inputs, outs);
  }
  void sync() override { local_->sync(); }
  // The MPI job outlives any one backend: this stays valid until the process exits, so an error
  // caught after the session is gone can still end the job through it.
  ProcessGroup* process_group() override { return world_; }

 private:
  std::shared_ptr<Backend> local_;
  MpiGroup* world_ = nullptr;
  int tensor_parallel_ = 1;
};

}  // namespace sonde::sharded
