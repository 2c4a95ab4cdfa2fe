#pragma once
// Output buffers of one executor, reused across nodes and forward passes. A decode step
// allocates the same few hundred buffers as the step before; from the C allocator that cost
// 0.45 ms of a 19 ms token on qwen2.5-0.5b (its metadata cold after a gigabyte of weights has
// streamed through the caches, and the logits buffer mapped and unmapped every step). A prefill
// asks for the same large ones every time (the 512 x 151,936 logits of qwen2.5-0.5b are 311 MB):
// fresh from the system, each page of them faults and is zeroed by the kernel on first touch.
#include <sonde/tensor.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace sonde {

class BufferPool {
 public:
  // Keeps at most `capacity` bytes of free buffers.
  explicit BufferPool(std::size_t capacity);
  // A tensor whose elements hold whatever an earlier user left there (the executor's outputs are
  // written in full by the op that makes them: Backend::run's contract, so zero-filling them was
  // a second pass over every byte); the padding past them (Tensor::storage_bytes) is zero, as
  // Tensor(dtype, shape) has it. Its buffer returns to the pool when the last Tensor sharing it
  // goes, on any thread, even after the pool's owner is gone.
  Tensor take(DType dtype, const Shape& shape);
  // Starts a round (the executor: one per run). Buffers that came back before the previous round
  // began and were not taken since are let go: what consecutive forwards of one shape reuse
  // stays, and a long prefill's buffers do not outlive the decode steps after it by more than one.
  void next_round();
  std::size_t free_bytes() const;

 private:
  struct Kept {
    void* p;
    std::uint64_t round;  // when it came back
  };
  struct Shelf {
    std::mutex mu;
    std::multimap<std::size_t, Kept> free;  // by block size
    std::size_t bytes = 0, capacity = 0;
    std::uint64_t round = 0;
    ~Shelf();
    void give_back(void* p, std::size_t size);
  };
  std::shared_ptr<Shelf> shelf_;
};

}  // namespace sonde
