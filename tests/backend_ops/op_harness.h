#pragma once
// Helpers for single-op tests: random and literal tensors, a Node built by hand, running a node
// on a backend the way the executor would (weights through upload()), and error metrics.
#include <sonde/backend.h>
#include <sonde/graph.h>
#include <sonde/registry.h>
#include <sonde/tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace sonde::test {

// One input of a node. Weights go through Backend::upload() first, as model weights do.
struct Arg {
  Tensor t;
  bool weight = false;
};

// Uniform values in [lo, hi) from a fixed seed, drawn in float and rounded to `dtype`.
Tensor random_tensor(DType dtype, const Shape& shape, unsigned seed, float lo = -1.0f, float hi = 1.0f);
Tensor random_ids(const Shape& shape, unsigned seed, int lo, int hi);  // i32 in [lo, hi)
Tensor floats(DType dtype, const Shape& shape, const std::vector<float>& v);  // rounded to dtype
Tensor ints(const Shape& shape, const std::vector<int>& v);                   // i32
Tensor bytes(const Shape& shape, const std::vector<int>& v);                  // u8

Node make_node(OpKind op, const Shape& out_shape, const std::string& name = "test.op", DType dtype = DType::f32);

// Runs `node` on `backend` with a fresh output buffer of node.shape / node.dtype, filled with NaN
// bits first (Backend::run writes every element of its output).
Tensor run_on(Backend& backend, const Node& node, const std::vector<Arg>& args);
// The input dtypes the backend will see (weights after upload).
std::vector<TensorView> prepared_inputs(Backend& backend, const std::vector<Arg>& args);

double normalised_error(const Tensor& got, const Tensor& ref);  // max|a-b| / max|ref|
bool all_finite(const Tensor& t);
std::vector<float> values(const Tensor& t);  // any float dtype, as f32

// The registry scanned over the build tree's plugin root, kept for the whole process so that
// plugin libraries stay loaded.
PluginRegistry& registry();
std::vector<std::string> backend_names();
std::shared_ptr<Backend> make_backend(const std::string& name);
// The same with the threads, weights mode (native, q8) and compute mode (f32, bf16, int8) set.
std::shared_ptr<Backend> make_backend(const std::string& name, int threads, const std::string& weights,
                                      const std::string& compute);
// The same, or null with the error in `why` when init declines (kernels this CPU lacks, forced by
// SONDE_THREADED_ISA or SONDE_THREADED_LOWP): for tests that skip there. A backend that is not
// found still throws: that is a failure, not a skip.
std::shared_ptr<Backend> try_make_backend(const std::string& name, int threads, const std::string& weights,
                                          const std::string& compute, std::string& why);

// Fails unless `lowp` (a bf16 or int8 compute mode's outputs of `node` on `args`) is off the exact
// f32 Linear of the same inputs (reference backend) by more than f32 rounding and by less than
// 5e-2 of the scale: two builders of one mode agreeing bit for bit prove nothing about the mode
// if both ignored it.
void expect_lowp_took_effect(const Node& node, const std::vector<Arg>& args, const std::vector<float>& lowp,
                             const std::string& what);

}  // namespace sonde::test
