#pragma once
// TensorView: a typed, strided window on memory it does not own. Tensor: an owning, 64-byte
// aligned host buffer. Shapes are row-major; strides count elements, not bytes.
#include <sonde/dtype.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

namespace sonde {

constexpr int kMaxRank = 4;

struct Shape {
  int rank = 0;
  std::array<std::int64_t, kMaxRank> dims{};

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> d);
  static Shape of(const std::int64_t* d, int rank);
  std::int64_t operator[](int i) const { return dims[static_cast<std::size_t>(i)]; }
  std::int64_t& operator[](int i) { return dims[static_cast<std::size_t>(i)]; }
  std::int64_t numel() const;
  std::int64_t last() const { return rank ? dims[static_cast<std::size_t>(rank - 1)] : 1; }
  std::int64_t rows() const { return rank ? numel() / last() : 1; }  // product of all but the last dim
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "[2, 5, 64]"
};

struct TensorView {
  DType dtype = DType::f32;
  Shape shape;
  std::array<std::int64_t, kMaxRank> strides{};
  void* data = nullptr;

  TensorView() = default;
  TensorView(void* data, DType dtype, const Shape& shape);  // contiguous row-major
  std::int64_t numel() const { return shape.numel(); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  bool contiguous() const;
  template <typename T> T* as() const { return static_cast<T*>(data); }
  // The sub-tensor at index i of dimension 0 (rank drops by one).
  TensorView slice0(std::int64_t i) const;
  // A view of the same contiguous bytes with another shape of equal numel.
  TensorView reshaped(const Shape& s) const;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, const Shape& shape);  // zero-filled
  const TensorView& view() const { return view_; }
  TensorView& view() { return view_; }
  DType dtype() const { return view_.dtype; }
  const Shape& shape() const { return view_.shape; }
  template <typename T> T* data() { return view_.as<T>(); }
  template <typename T> const T* data() const { return view_.as<const T>(); }
  bool empty() const { return !buf_; }
  static Tensor copy_of(const TensorView& v);  // contiguous copy
  // A tensor over `buf` (64-byte aligned, at least shape.numel() elements), as BufferPool hands out.
  static Tensor adopt(std::shared_ptr<std::byte> buf, DType dtype, const Shape& shape);
  // The bytes a buffer for this dtype and shape takes: the data rounded up to 64 bytes, plus 64
  // that vector kernels may read past the end. Tensor(dtype, shape) and BufferPool allocate it.
  static std::size_t storage_bytes(DType dtype, const Shape& shape);

 private:
  std::shared_ptr<std::byte> buf_;
  TensorView view_;
};

// Widens any float view (f32/f16/bf16/f64) to a contiguous f32 tensor.
Tensor to_f32(const TensorView& v);

}  // namespace sonde
