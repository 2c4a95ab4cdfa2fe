#pragma once
// NumPy arrays that own their memory: the buffer the engine filled is moved into a capsule that
// the array keeps as its base, so there is no copy and the array outlives the model.
#include <sonde/tensor.h>

#include <pybind11/numpy.h>

#include <utility>
#include <vector>

namespace sonde::py {
namespace pb = pybind11;

template <typename T>
pb::array owned_array(std::vector<T>&& values, std::vector<pb::ssize_t> shape, pb::dtype dt = pb::dtype::of<T>()) {
  auto* held = new std::vector<T>(std::move(values));
  pb::capsule base(held, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return pb::array(dt, std::move(shape), {}, held->data(), base);
}

// A contiguous f32 tensor (the logits), its buffer kept by the array.
inline pb::array owned_array(Tensor&& t, std::vector<pb::ssize_t> shape) {
  auto* held = new Tensor(std::move(t));
  pb::capsule base(held, [](void* p) { delete static_cast<Tensor*>(p); });
  return pb::array(pb::dtype::of<float>(), std::move(shape), {}, held->data<float>(), base);
}

}  // namespace sonde::py
