#include "mpi_group.h"

#include <sonde/error.h>

#include <cstdlib>
#include <cstring>
#include <limits>

namespace sonde::sharded {
namespace {

int count_of(std::size_t bytes, const char* what) {
  if (bytes > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    runtime_error("sharded: {} of {} bytes is more than one MPI message carries", what, bytes);
  return static_cast<int>(bytes);
}

}  // namespace

MpiGroup::MpiGroup(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiGroup::~MpiGroup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized) MPI_Comm_free(&comm_);
}

// Every rank's values, then the sum in rank order on each rank: the same additions in the same
// order everywhere, whatever algorithm or transport MPI_Allreduce would have chosen.
void MpiGroup::allreduce_sum(std::span<float> data) {
  if (size_ == 1 || data.empty()) return;
  std::vector<float> all(data.size() * static_cast<std::size_t>(size_));
  const int n = count_of(data.size(), "allreduce");
  MPI_Allgather(data.data(), n, MPI_FLOAT, all.data(), n, MPI_FLOAT, comm_);
  for (std::size_t i = 0; i < data.size(); ++i) {
    float s = all[i];
    for (int r = 1; r < size_; ++r) s += all[static_cast<std::size_t>(r) * data.size() + i];
    data[i] = s;
  }
}

std::vector<std::vector<std::byte>> MpiGroup::allgather(std::span<const std::byte> mine) {
  const auto n = static_cast<long long>(mine.size());
  std::vector<long long> sizes(static_cast<std::size_t>(size_));
  MPI_Allgather(&n, 1, MPI_LONG_LONG, sizes.data(), 1, MPI_LONG_LONG, comm_);
  std::vector<int> counts(static_cast<std::size_t>(size_)), displs(static_cast<std::size_t>(size_));
  std::size_t total = 0;
  for (int r = 0; r < size_; ++r) {
    displs[static_cast<std::size_t>(r)] = count_of(total, "allgather");
    counts[static_cast<std::size_t>(r)] = count_of(static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)]), "allgather");
    total += static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)]);
  }
  std::vector<std::byte> all(total);
  MPI_Allgatherv(mine.data(), count_of(mine.size(), "allgather"), MPI_BYTE, all.data(), counts.data(), displs.data(),
                 MPI_BYTE, comm_);
  std::vector<std::vector<std::byte>> out;
  for (int r = 0; r < size_; ++r) {
    const auto at = all.begin() + displs[static_cast<std::size_t>(r)];
    out.emplace_back(at, at + counts[static_cast<std::size_t>(r)]);
  }
  return out;
}

void MpiGroup::broadcast(std::span<std::byte> data, int root) {
  if (size_ > 1) MPI_Bcast(data.data(), count_of(data.size(), "broadcast"), MPI_BYTE, root, comm_);
}

void MpiGroup::barrier() { MPI_Barrier(comm_); }

std::unique_ptr<ProcessGroup> MpiGroup::split(int color, int key) {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(comm_, color, key, &sub);
  return std::make_unique<MpiGroup>(sub, true);
}

void MpiGroup::abort(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; this is for the compiler and a broken MPI
}

}  // namespace sonde::sharded
