#include "sharded_backend.h"

#include <sonde/error.h>
#include <sonde/registry.h>

#include <boost/dll/runtime_symbol_info.hpp>

#include "collectives.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

namespace sonde::sharded {
namespace {

// The job, once MPI is up: every instance answers process_group() with it, even one whose init
// failed or that never ran init, so the app can end the whole job on an error met while opening.
MpiGroup* g_world = nullptr;

// A process not started by a launcher (one rank, MPI "singleton") gets its own Open MPI session
// folder: singletons share /tmp/ompi.<host>.<uid> by default, and one finalizing removes that
// folder while another is creating its own in it ("No such file or directory" from MPI_Init,
// seen when the test suite ran several at once). Removed at exit; a user's setting wins.
std::string g_private_session_dir;

bool started_by_a_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

void use_a_private_session_dir() {
  if (started_by_a_launcher() || std::getenv("OMPI_MCA_orte_tmpdir_base") != nullptr) return;
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
  dir.append("/sonde-mpi-XXXXXX");
  if (::mkdtemp(dir.data()) == nullptr) return;  // Open MPI's default folder then
  g_private_session_dir = dir;
  ::setenv("OMPI_MCA_orte_tmpdir_base", dir.c_str(), 0);
}

// Every rank on this node (a singleton, or a launcher that says so): Open MPI's default PML
// selection still probes the interconnect libraries (the cm PML's psm, psm2 and ofi MTLs), which
// took 0.2 s of MPI_Init's 0.24-0.26 s here (0.035-0.06 s with ob1), on every start of a job. ob1
// carries shared memory (vader), and TCP when asked for. Across nodes the choice stays Open
// MPI's; a user's setting wins.
void skip_interconnect_probe_on_one_node() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const bool one_node = !started_by_a_launcher() || (size != nullptr && local != nullptr && std::string(size) == local);
  if (one_node) ::setenv("OMPI_MCA_pml", "ob1", 0);
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
  if (!g_private_session_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(g_private_session_dir, ec);
  }
}

// The registry loads plugins with RTLD_LOCAL, so libmpi came in local to this plugin; Open MPI's
// own components (dlopened by MPI_Init) resolve their symbols against it and need it global.
void make_mpi_global() {
  for (const char* lib : {"libmpi.so.40", "libmpi.so"})
    if (::dlopen(lib, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD)) return;
}

// The local backend from the process's registry; a program that keeps its own registry (the op
// tests) has not scanned that one, so it is scanned then at this plugin's own root
// (lib/sonde/backend/sharded.so -> lib/sonde).
std::shared_ptr<Backend> local_backend(const std::string& name) {
  auto& registry = PluginRegistry::instance();
  if (registry.plugins().empty())
    registry.scan({std::filesystem::path(boost::dll::this_line_location()).parent_path().parent_path()});
  return registry.backend(name);
}

}  // namespace

void ShardedBackend::init(const BackendOptions& options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    make_mpi_global();
    // A rank waiting in a collective yields its core instead of spinning on it: the ranks of a
    // copy must all run for a collective to finish, and on a loaded (or shared) node a spinning
    // rank took the core its peer needed (prefill 4x slower here). Free on an idle node; a
    // user's setting wins.
    ::setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    use_a_private_session_dir();
    skip_interconnect_probe_on_one_node();
    int provided = 0;
    // FUNNELED: only the thread that called init makes MPI calls (the local backend's threads
    // and the HDF5 writer thread never do).
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      runtime_error("backend sharded: MPI_Init_thread failed");
    std::atexit(finalize_at_exit);
  }
  if (!g_world) g_world = new MpiGroup(MPI_COMM_WORLD, false);  // never destroyed (see the header)
  world_ = g_world;
  const int world = world_->size();
  tensor_parallel_ = options.tensor_parallel == 0 ? world : options.tensor_parallel;
  if (tensor_parallel_ < 1 || world % tensor_parallel_ != 0)
    bad_input("--tensor-parallel: {} ranks per model copy do not divide the job's {} ranks", tensor_parallel_, world);
  if (options.shard_backend == "sharded") bad_input("--shard-backend: sharded cannot wrap itself");
  local_ = local_backend(options.shard_backend);
  BackendOptions local = options;
  local.tensor_parallel = 1;
  local_->init(local);
  // Collective: every rank of the job splits, in the same order, before any graph runs.
  copy_ = world_->split(world_->rank() / tensor_parallel_, world_->rank());
}

bool ShardedBackend::supports(const Node& node, std::span<const DType> input_dtypes) const {
  if (!local_) return false;  // asked before init(): nothing is runnable yet
  if (node.op == OpKind::AllReduceSum || node.op == OpKind::AllGather)
    return input_dtypes.size() == 1 && input_dtypes[0] == DType::f32;
  if ((node.op == OpKind::Attention || node.op == OpKind::AttentionPattern) && node.params.kv_group > 0) {
    Node usual = node;
    usual.params.kv_group = 0;
    return local_->supports(usual, input_dtypes);
  }
  return local_->supports(node, input_dtypes);
}

void ShardedBackend::run(const Node& node, std::span<const TensorView> inputs, const TensorView& out) {
  switch (node.op) {
    case OpKind::AllReduceSum: return all_reduce_sum(*copy_, node, inputs, out);
    case OpKind::AllGather: return all_gather(*copy_, node, inputs, out, gather_scratch_);
    case OpKind::Attention:
    case OpKind::AttentionPattern:
      if (node.params.kv_group > 0) return sharded_attention(*local_, node, inputs, out);
      [[fallthrough]];
    default: local_->run(node, inputs, out);
  }
}

TensorView ShardedBackend::upload(const std::string& name, const TensorView& src, Split split) {
  if (src.contiguous()) return local_->upload(name, src, split);
  Tensor& c = copies_[name] = Tensor::copy_of(src);
  // The bytes the slice spanned, whole pages inside them only (a neighbour's pages stay); they are
  // file-backed and unmodified, so a later read faults them in again.
  std::int64_t last = 0;
  for (int i = 0; i < src.shape.rank; ++i) last += (src.shape[i] - 1) * src.strides[static_cast<std::size_t>(i)];
  const auto begin = reinterpret_cast<std::uintptr_t>(src.data);
  const auto end = begin + static_cast<std::uintptr_t>(last + 1) * dtype_size(src.dtype);
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t from = (begin + page - 1) / page * page, to = end / page * page;
  if (to > from) ::madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
  return local_->upload(name, c.view(), split);
}

ProcessGroup* ShardedBackend::process_group() { return g_world; }

BackendInfo ShardedBackend::info() const {
  if (!local_)  // asked before init (`sonde plugins`)
    return {"sharded", "Open MPI ranks over a local backend: tensor- and data-parallel", 0};
  const BackendInfo l = local_->info();
  return BackendInfo{"sharded",
                     "MPI rank " + std::to_string(world_->rank()) + " of " + std::to_string(world_->size()) + " on " + l.name,
                     l.threads, tensor_parallel_, copy_ ? copy_->rank() : 0};
}

}  // namespace sonde::sharded

SONDE_PLUGIN(sonde::sharded::ShardedBackend, "backend", "sharded", "0.1.0", "", -10)
