#include <sonde/buffer_pool.h>
#include <sonde/error.h>

#include <cstdlib>
#include <cstring>

namespace sonde {

BufferPool::BufferPool(std::size_t capacity) : shelf_(std::make_shared<Shelf>()) { shelf_->capacity = capacity; }

BufferPool::Shelf::~Shelf() {
  for (auto& [size, p] : free) std::free(p);
}

// Over capacity, everything kept is let go: the shapes have changed (another prompt length),
// and the new ones will fill the shelf again.
void BufferPool::Shelf::give_back(void* p, std::size_t size) {
  std::lock_guard<std::mutex> lock(mu);
  if (size > capacity / 4) {
    std::free(p);
    return;
  }
  if (bytes + size > capacity) {
    for (auto& [s, q] : free) std::free(q);
    free.clear();
    bytes = 0;
  }
  free.emplace(size, p);
  bytes += size;
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
      p = it->second;
      shelf_->bytes -= size;
      shelf_->free.erase(it);
    }
  }
  if (!p) p = std::aligned_alloc(64, size);
  if (!p) runtime_error("out of memory allocating {} bytes for a tensor {}", size, shape.str());
  std::memset(p, 0, need);
  std::shared_ptr<Shelf> shelf = shelf_;
  std::shared_ptr<std::byte> buf(static_cast<std::byte*>(p), [shelf, size](std::byte* q) { shelf->give_back(q, size); });
  return Tensor::adopt(std::move(buf), dtype, shape);
}

std::size_t BufferPool::free_bytes() const {
  std::lock_guard<std::mutex> lock(shelf_->mu);
  return shelf_->bytes;
}

}  // namespace sonde
