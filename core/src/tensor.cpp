#include <sonde/error.h>
#include <sonde/tensor.h>

#include <cstdlib>
#include <cstring>

namespace sonde {

Shape::Shape(std::initializer_list<std::int64_t> d) {
  if (d.size() > kMaxRank) runtime_error("shape of rank {} exceeds the maximum rank {}", d.size(), kMaxRank);
  rank = static_cast<int>(d.size());
  int i = 0;
  for (auto v : d) dims[static_cast<std::size_t>(i++)] = v;
}

Shape Shape::of(const std::int64_t* d, int r) {
  if (r > kMaxRank || r < 0) runtime_error("shape of rank {} exceeds the maximum rank {}", r, kMaxRank);
  Shape s;
  s.rank = r;
  for (int i = 0; i < r; ++i) s.dims[static_cast<std::size_t>(i)] = d[i];
  return s;
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[static_cast<std::size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[static_cast<std::size_t>(i)] != o.dims[static_cast<std::size_t>(i)]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[static_cast<std::size_t>(i)]);
  }
  return s + "]";
}

TensorView::TensorView(void* d, DType t, const Shape& s) : dtype(t), shape(s), data(d) {
  std::int64_t stride = 1;
  for (int i = s.rank - 1; i >= 0; --i) {
    strides[static_cast<std::size_t>(i)] = stride;
    stride *= s[i];
  }
}

bool TensorView::contiguous() const {
  std::int64_t stride = 1;
  for (int i = shape.rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[static_cast<std::size_t>(i)] != stride) return false;
    stride *= shape[i];
  }
  return true;
}

TensorView TensorView::slice0(std::int64_t i) const {
  if (shape.rank < 1 || i < 0 || i >= shape[0])
    runtime_error("slice {} out of range for shape {}", i, shape.str());
  TensorView v;
  v.dtype = dtype;
  v.shape.rank = shape.rank - 1;
  for (int k = 1; k < shape.rank; ++k) {
    v.shape[k - 1] = shape[k];
    v.strides[static_cast<std::size_t>(k - 1)] = strides[static_cast<std::size_t>(k)];
  }
  v.data = static_cast<std::byte*>(data) + static_cast<std::size_t>(i * strides[0]) * dtype_size(dtype);
  return v;
}

TensorView TensorView::reshaped(const Shape& s) const {
  if (!contiguous()) runtime_error("reshape of a non-contiguous tensor {}", shape.str());
  if (s.numel() != numel()) runtime_error("reshape {} -> {} changes the element count", shape.str(), s.str());
  return TensorView(data, dtype, s);
}

std::size_t Tensor::storage_bytes(DType dtype, const Shape& shape) {
  const std::size_t n = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  return ((n + 63) / 64) * 64 + 64;
}

Tensor::Tensor(DType dtype, const Shape& shape) {
  const std::size_t alloc = storage_bytes(dtype, shape);
  void* p = std::aligned_alloc(64, alloc);
  if (!p) runtime_error("out of memory allocating {} bytes for a tensor {}", alloc, shape.str());
  std::memset(p, 0, alloc);
  buf_ = std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
  view_ = TensorView(p, dtype, shape);
}

Tensor Tensor::adopt(std::shared_ptr<std::byte> buf, DType dtype, const Shape& shape) {
  Tensor t;
  t.view_ = TensorView(buf.get(), dtype, shape);
  t.buf_ = std::move(buf);
  return t;
}

Tensor Tensor::copy_of(const TensorView& v) {
  Tensor t(v.dtype, v.shape);
  if (v.contiguous()) {
    std::memcpy(t.view_.data, v.data, v.nbytes());
    return t;
  }
  // Strided copy: the innermost dimensions that are laid out densely form one block (a KV-cache
  // prefix view [B, P, nkv, d] of a [B, capacity, nkv, d] buffer copies B blocks of P*nkv*d);
  // the outer index space is walked block by block.
  const std::size_t es = dtype_size(v.dtype);
  int inner = v.shape.rank;  // dims [inner, rank) are dense
  std::int64_t block = 1;
  while (inner > 0 && (v.shape[inner - 1] == 1 || v.strides[static_cast<std::size_t>(inner - 1)] == block)) {
    block *= v.shape[inner - 1];
    --inner;
  }
  std::array<std::int64_t, kMaxRank> idx{};
  auto* dst = static_cast<std::byte*>(t.view_.data);
  const auto* src = static_cast<const std::byte*>(v.data);
  const std::int64_t blocks = block ? v.numel() / block : 0;
  for (std::int64_t n = 0; n < blocks; ++n) {
    std::int64_t off = 0;
    for (int k = 0; k < inner; ++k) off += idx[static_cast<std::size_t>(k)] * v.strides[static_cast<std::size_t>(k)];
    std::memcpy(dst + static_cast<std::size_t>(n * block) * es, src + static_cast<std::size_t>(off) * es,
                static_cast<std::size_t>(block) * es);
    for (int k = inner - 1; k >= 0; --k) {
      if (++idx[static_cast<std::size_t>(k)] < v.shape[k]) break;
      idx[static_cast<std::size_t>(k)] = 0;
    }
  }
  return t;
}

Tensor to_f32(const TensorView& v) {
  if (!is_float(v.dtype)) runtime_error("to_f32: {} is not a float type", dtype_name(v.dtype));
  Tensor src = v.contiguous() ? Tensor() : Tensor::copy_of(v);
  const TensorView& c = src.empty() ? v : src.view();
  Tensor out(DType::f32, v.shape);
  float* o = out.data<float>();
  const std::size_t n = static_cast<std::size_t>(v.numel());
  // One loop per dtype (no per-element switch): backends widen bf16 norm weights and biases on
  // every call, hundreds of times per decoded token.
  switch (c.dtype) {
    case DType::f32: std::memcpy(o, c.data, n * sizeof(float)); break;
    case DType::bf16: {
      const auto* h = static_cast<const std::uint16_t*>(c.data);
      for (std::size_t i = 0; i < n; ++i) o[i] = bf16_to_f32(h[i]);
      break;
    }
    case DType::f16: {
      const auto* h = static_cast<const std::uint16_t*>(c.data);
      for (std::size_t i = 0; i < n; ++i) o[i] = f16_to_f32(h[i]);
      break;
    }
    default:
      for (std::size_t i = 0; i < n; ++i) o[i] = static_cast<float>(load_as_double(c.data, c.dtype, i));
  }
  return out;
}

}  // namespace sonde
