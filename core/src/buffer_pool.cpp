#include <sonde/buffer_pool.h>
#include <sonde/error.h>

#include <cstdlib>
#include <cstring>

namespace sonde {

BufferPool::BufferPool(std::size_t capacity) : shelf_(std::make_shared<Shelf>()) { shelf_->capacity = capacity; }

BufferPool::Shelf::~Shelf() {
  for (auto& [size, k] : free) std::free(k.p);
}

// A block that would take the shelf over its capacity goes back to the system, not the blocks
// already kept: those are the ones the next round will ask for again.
void BufferPool::Shelf::give_back(void* p, std::size_t size) {
  std::lock_guard<std::mutex> lock(mu);
  if (bytes + size > capacity) {
    std::free(p);
    return;
  }
  free.emplace(size, Kept{p, round});
  bytes += size;
}

void BufferPool::next_round() {
  std::lock_guard<std::mutex> lock(shelf_->mu);
  for (auto it = shelf_->free.begin(); it != shelf_->free.end();) {
    if (it->second.round < shelf_->round) {
      std::free(it->second.p);
      shelf_->bytes -= it->first;
      it = shelf_->free.erase(it);
    } else {
      ++it;
    }
  }
  ++shelf_->round;
}

// A kept block serves a request of up to twice its need.
Tensor BufferPool::take(DType dtype, const Shape& shape) {
  const std::size_t need = Tensor::storage_bytes(dtype, shape);
  void* p = nullptr;
  std::size_t size = need;
  {
    std::lock_guard<std::mutex> lock(shelf_->mu);
    auto it = shelf_->free.lower_bound(need);
    if (it != shelf_->free.end() && it->first <= 2 * need) {
      size = it->first;
      p = it->second.p;
      shelf_->bytes -= size;
      shelf_->free.erase(it);
    }
  }
  if (!p) p = std::aligned_alloc(64, size);
  if (!p) runtime_error("out of memory allocating {} bytes for a tensor {}", size, shape.str());
  const std::size_t data = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  std::memset(static_cast<std::byte*>(p) + data, 0, need - data);
  std::shared_ptr<Shelf> shelf = shelf_;
  std::shared_ptr<std::byte> buf(static_cast<std::byte*>(p), [shelf, size](std::byte* q) { shelf->give_back(q, size); });
  return Tensor::adopt(std::move(buf), dtype, shape);
}

std::size_t BufferPool::free_bytes() const {
  std::lock_guard<std::mutex> lock(shelf_->mu);
  return shelf_->bytes;
}

}  // namespace sonde
