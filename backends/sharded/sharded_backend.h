#pragma once
// The "sharded" backend: one rank of an MPI job (mpiexec), computing on a local backend
// (--shard-backend, threaded by default) and giving the run layer the job (process_group()).
// MPI is initialised by init(), never when the plugin is loaded, and finalised at exit.
//
// Data parallelism: each model copy is one rank (--tensor-parallel 1). Tensor parallelism: a
// copy of several consecutive ranks; the model builds each rank's shard of the graph (it reads
// info().tensor_rank) and uploads its slices of the weights; this backend runs the graph's
// collectives over the copy's ranks and attention over a shard's heads (collectives.h).
#include "collectives.h"
#include "mpi_group.h"

#include <sonde/backend.h>

#include <map>
#include <memory>

namespace sonde::sharded {

class ShardedBackend final : public Backend {
 public:
  void init(const BackendOptions& options) override;
  BackendInfo info() const override;
  bool supports(const Node& node, std::span<const DType> input_dtypes) const override;
  // A strided slice (a column split) is copied, and the source's pages it covered let go: a rank
  // keeps only its part resident.
  TensorView upload(const std::string& name, const TensorView& src, Split split) override;
  TensorView weight(const std::string& name) const override { return local_->weight(name); }
  void hint(const std::string& name, WeightHint hint) override { local_->hint(name, hint); }
  std::vector<std::span<const std::byte>> weight_storage(const std::string& name) const override {
    return local_->weight_storage(name);
  }
  void run(const Node& node, std::span<const TensorView> inputs, const TensorView& out) override;
  void run_siblings(std::span<const Node* const> nodes, std::span<const std::vector<TensorView>> inputs,
                    std::span<const TensorView> outs) override {
    local_->run_siblings(nodes, inputs, outs);
  }
  void sync() override { local_->sync(); }
  // The MPI job outlives any one backend: this stays valid until the process exits, so an error
  // caught after the session is gone (or met while opening it) can still end the job through it.
  ProcessGroup* process_group() override;

 private:
  std::shared_ptr<Backend> local_;
  MpiGroup* world_ = nullptr;
  std::unique_ptr<ProcessGroup> copy_;  // the ranks of this model copy (tensor parallel)
  GatherScratch gather_scratch_;
  std::map<std::string, Tensor> copies_;  // weights this backend made contiguous
  int tensor_parallel_ = 1;
};

}  // namespace sonde::sharded
