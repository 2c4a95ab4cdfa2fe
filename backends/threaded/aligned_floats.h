#pragma once
// Floats whose first element is 64-byte aligned: a vector load that straddles two cache lines
// costs two. new[] promises 16 bytes only, so 16 floats more are allocated and the data starts at
// the first 64-byte boundary inside them. Used for the GEMM's per-thread panels (ops_linear.cpp)
// and a hinted weight's panels kept for good (ops.h PackedW).
#include <cstddef>
#include <cstdint>
#include <memory>

namespace sonde::threaded {

class AlignedFloats {
 public:
  // At least n floats: a new buffer when n is more than the current one holds (the old contents
  // are dropped), else the same one. Never zero-filled: the caller writes what it reads.
  float* get(std::int64_t n) {
    if (static_cast<std::size_t>(n) > size()) {  // size(), not size_: a moved-from buffer holds none
      mem_.reset(new float[static_cast<std::size_t>(n) + 16]);
      size_ = static_cast<std::size_t>(n);
    }
    return data();
  }
  float* data() { return aligned(mem_.get()); }
  const float* data() const { return aligned(mem_.get()); }
  std::size_t size() const { return mem_ ? size_ : 0; }  // floats from data(); 0 until get() (or after a move)

 private:
  static float* aligned(float* p) { return p ? p + (16 - reinterpret_cast<std::uintptr_t>(p) / 4 % 16) % 16 : nullptr; }

  std::unique_ptr<float[]> mem_;
  std::size_t size_ = 0;
};

}  // namespace sonde::threaded
