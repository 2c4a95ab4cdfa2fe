#pragma once
// The processes of a job, as core sees them: rank, size and the few collectives that tensor- and
// data-parallel runs need. The sharded backend implements it over MPI (the only place MPI is
// linked); tests implement it over threads. Every call is collective: each rank of the group
// makes the same calls in the same order.
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

namespace sonde {

class ProcessGroup {
 public:
  virtual ~ProcessGroup();
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Element-wise sum over the group, added in rank order (0 + 1 + ... + size-1) whatever the
  // transport, so every rank holds the same bits and a value never depends on who computed it.
  virtual void allreduce_sum(std::span<float> data) = 0;
  // Every rank's bytes (lengths may differ), indexed by rank, on every rank.
  virtual std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> mine) = 0;
  // The same bytes concatenated in rank order into `all`, whose length must be their sum (the
  // caller knows it); returns each rank's byte count. No buffer per rank, for the large gathers
  // of tensor parallelism (a prefill's logits). This default goes through allgather(); an
  // implementation may receive in place.
  virtual std::vector<std::size_t> allgather_into(std::span<const std::byte> mine, std::span<std::byte> all);
  // `data` (the same length on every rank) takes root's bytes.
  virtual void broadcast(std::span<std::byte> data, int root) = 0;
  virtual void barrier() = 0;
  // Ranks that pass the same color form a new group, ordered by key (ties by rank).
  virtual std::unique_ptr<ProcessGroup> split(int color, int key) = 0;
  // Ends every process of the job at once with this exit code (a rank failed: the others must
  // not wait for it forever).
  [[noreturn]] virtual void abort(int exit_code) = 0;
};

// One rank's place in a job of `world` ranks split into model replicas of `tensor_parallel`
// consecutive ranks each: replica r = rank / tensor_parallel runs its own share of the prompts
// (data parallel), and its first rank writes its files.
struct JobLayout {
  int rank = 0, world = 1, tensor_parallel = 1;
  int replica() const { return rank / tensor_parallel; }
  int replicas() const { return world / tensor_parallel; }
  bool writes() const { return rank % tensor_parallel == 0; }
};

}  // namespace sonde
