#pragma once
// ProcessGroup over an MPI communicator: the only place sonde calls MPI collectives.
#include <sonde/process_group.h>

#include <mpi.h>

#include <vector>

namespace sonde::sharded {

class MpiGroup final : public ProcessGroup {
 public:
  // `owned`: a communicator this group made (split) and frees; MPI_COMM_WORLD is not.
  MpiGroup(MPI_Comm comm, bool owned);
  ~MpiGroup() override;
  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_sum(std::span<float> data) override;
  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> mine) override;
  std::vector<std::size_t> allgather_into(std::span<const std::byte> mine, std::span<std::byte> all) override;
  void broadcast(std::span<std::byte> data, int root) override;
  void barrier() override;
  std::unique_ptr<ProcessGroup> split(int color, int key) override;
  [[noreturn]] void abort(int exit_code) override;

 private:
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;

  // Every rank's byte count (one small collective) as MPI_Allgatherv's counts and displacements.
  struct Layout {
    std::vector<int> counts, displs;
    std::size_t total = 0;
  };
  Layout layout_of(std::size_t mine);
};

}  // namespace sonde::sharded
