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

MpiGroup::Layout MpiGroup::layout_of(std::size_t mine) {
  const auto n = static_cast<long long>(mine);
  std::vector<long long> sizes(static_cast<std::size_t>(size_));
  MPI_Allgather(&n, 1, MPI_LONG_LONG, sizes.data(), 1, MPI_LONG_LONG, comm_);
  Layout l;
  for (const long long size : sizes) {
    l.displs.push_back(count_of(l.total, "allgather"));
    l.counts.push_back(count_of(static_cast<std::size_t>(size), "allgather"));
    l.total += static_cast<std::size_t>(size);
  }
  return l;
}

std::vector<std::vector<std::byte>> MpiGroup::allgather(std::span<const std::byte> mine) {
  const Layout l = layout_of(mine.size());
  std::vector<std::byte> all(l.total);
  MPI_Allgatherv(mine.data(), count_of(mine.size(), "allgather"), MPI_BYTE, all.data(), l.counts.data(),
                 l.displs.data(), MPI_BYTE, comm_);
  std::vector<std::vector<std::byte>> out;
  for (int r = 0; r < size_; ++r) {
    const auto at = all.begin() + l.displs[static_cast<std::size_t>(r)];
    out.emplace_back(at, at + l.counts[static_cast<std::size_t>(r)]);
  }
  return out;
}

// Received in place: a prefill's logits gather is tens of MB, and every staging copy of it cost
// as much as the gather itself.
std::vector<std::size_t> MpiGroup::allgather_into(std::span<const std::byte> mine, std::span<std::byte> all) {
  const Layout l = layout_of(mine.size());
  // Every rank sees the same sizes, so all ranks agree on this check and none is left waiting.
  if (l.total != all.size())
    runtime_error("sharded: the {} ranks gave {} bytes in all to a gather that expects {}", size_, l.total, all.size());
  MPI_Allgatherv(mine.data(), count_of(mine.size(), "allgather"), MPI_BYTE, all.data(), l.counts.data(),
                 l.displs.data(), MPI_BYTE, comm_);
  return {l.counts.begin(), l.counts.end()};
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
