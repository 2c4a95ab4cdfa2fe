#include "sharded_backend.h"

#include <sonde/error.h>
#include <sonde/registry.h>

#include <cstdlib>
#include <dlfcn.h>

namespace sonde::sharded {
namespace {

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// The registry loads plugins with RTLD_LOCAL, so libmpi came in local to this plugin; Open MPI's
// own components (dlopened by MPI_Init) resolve their symbols against it and need it global.
void make_mpi_global() {
  for (const char* lib : {"libmpi.so.40", "libmpi.so"})
    if (::dlopen(lib, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD)) return;
}

}  // namespace

void ShardedBackend::init(const BackendOptions& options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    make_mpi_global();
    int provided = 0;
    // FUNNELED: only the thread that called init makes MPI calls (the local backend's threads
    // and the HDF5 writer thread never do).
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      runtime_error("backend sharded: MPI_Init_thread failed");
    std::atexit(finalize_at_exit);
  }
  static MpiGroup* const job = new MpiGroup(MPI_COMM_WORLD, false);  // never destroyed (see the header)
  world_ = job;
  const int world = world_->size();
  tensor_parallel_ = options.tensor_parallel == 0 ? world : options.tensor_parallel;
  if (tensor_parallel_ < 1 || world % tensor_parallel_ != 0)
    bad_input("--tensor-parallel: {} ranks per model copy do not divide the job's {} ranks", tensor_parallel_, world);
  if (tensor_parallel_ > 1)
    bad_input("--tensor-parallel: {} ranks per model copy: tensor parallelism is not built yet in backend sharded; "
              "run data parallel (sonde batch --tensor-parallel 1) or on one rank",
              tensor_parallel_);
  if (options.shard_backend == "sharded") bad_input("--shard-backend: sharded cannot wrap itself");
  local_ = PluginRegistry::instance().backend(options.shard_backend);
  BackendOptions local = options;
  local.tensor_parallel = 1;
  local_->init(local);
}

BackendInfo ShardedBackend::info() const {
  const BackendInfo l = local_->info();
  return BackendInfo{"sharded",
                     "MPI rank " + std::to_string(world_->rank()) + " of " + std::to_string(world_->size()) + " on " + l.name,
                     l.threads, tensor_parallel_};
}

}  // namespace sonde::sharded

SONDE_PLUGIN(sonde::sharded::ShardedBackend, "backend", "sharded", "0.1.0", "", -10)
