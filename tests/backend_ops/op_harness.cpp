#include "op_harness.h"

#include "test_paths.h"

#include <gtest/gtest.h>

#include <sonde/error.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace sonde::test {

namespace {
void store(const Tensor& t, std::size_t i, float x) {
  switch (t.dtype()) {
    case DType::f32: t.view().as<float>()[i] = x; return;
    case DType::bf16: t.view().as<std::uint16_t>()[i] = f32_to_bf16(x); return;
    case DType::f16: t.view().as<std::uint16_t>()[i] = f32_to_f16(x); return;
    default: runtime_error("test harness: cannot store floats as {}", dtype_name(t.dtype()));
  }
}
}  // namespace

Tensor random_tensor(DType dtype, const Shape& shape, unsigned seed, float lo, float hi) {
  Tensor t(dtype, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (std::int64_t i = 0; i < t.view().numel(); ++i) store(t, static_cast<std::size_t>(i), dist(rng));
  return t;
}

Tensor random_ids(const Shape& shape, unsigned seed, int lo, int hi) {
  Tensor t(DType::i32, shape);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi - 1);
  for (std::int64_t i = 0; i < t.view().numel(); ++i) t.data<std::int32_t>()[i] = dist(rng);
  return t;
}

Tensor floats(DType dtype, const Shape& shape, const std::vector<float>& v) {
  Tensor t(dtype, shape);
  if (static_cast<std::int64_t>(v.size()) != shape.numel()) runtime_error("test harness: {} values for {}", v.size(), shape.str());
  for (std::size_t i = 0; i < v.size(); ++i) store(t, i, v[i]);
  return t;
}

Tensor ints(const Shape& shape, const std::vector<int>& v) {
  Tensor t(DType::i32, shape);
  if (static_cast<std::int64_t>(v.size()) != shape.numel()) runtime_error("test harness: {} values for {}", v.size(), shape.str());
  for (std::size_t i = 0; i < v.size(); ++i) t.data<std::int32_t>()[i] = v[i];
  return t;
}

Tensor bytes(const Shape& shape, const std::vector<int>& v) {
  Tensor t(DType::u8, shape);
  if (static_cast<std::int64_t>(v.size()) != shape.numel()) runtime_error("test harness: {} values for {}", v.size(), shape.str());
  for (std::size_t i = 0; i < v.size(); ++i) t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v[i]);
  return t;
}

Node make_node(OpKind op, const Shape& out_shape, const std::string& name, DType dtype) {
  Node n;
  n.op = op;
  n.shape = out_shape;
  n.dtype = dtype;
  n.names = {name};
  return n;
}

std::vector<TensorView> prepared_inputs(Backend& backend, const std::vector<Arg>& args) {
  std::vector<TensorView> in;
  for (std::size_t i = 0; i < args.size(); ++i)
    in.push_back(args[i].weight ? backend.upload("test.w" + std::to_string(i), args[i].t.view(), Split::None)
                                : args[i].t.view());
  return in;
}

Tensor run_on(Backend& backend, const Node& node, const std::vector<Arg>& args) {
  const auto in = prepared_inputs(backend, args);
  // Filled with NaN bits (0xFF bytes: a NaN in every float dtype), as a reused executor buffer may
  // hold anything: an op that leaves an element unwritten shows it in every comparison.
  Tensor out(node.dtype, node.shape);
  std::memset(out.view().data, 0xFF, out.view().nbytes());
  backend.run(node, in, out.view());
  backend.sync();
  return out;
}

std::vector<float> values(const Tensor& t) {
  const Tensor f = to_f32(t.view());
  return {f.data<float>(), f.data<float>() + f.view().numel()};
}

double normalised_error(const Tensor& got, const Tensor& ref) {
  const auto a = values(got), b = values(ref);
  if (a.size() != b.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

bool all_finite(const Tensor& t) {
  for (float x : values(t))
    if (!std::isfinite(x)) return false;
  return true;
}

PluginRegistry& registry() {
  // The process's registry: a backend that wraps another (sharded) finds it there.
  static PluginRegistry* r = [] {
    auto* reg = &PluginRegistry::instance();
    reg->scan({plugin_root()});
    return reg;
  }();
  return *r;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const auto& e : registry().plugins())
    if (e.kind == "backend") names.push_back(e.name);
  return names;
}

std::shared_ptr<Backend> make_backend(const std::string& name) {
  auto b = registry().backend(name);
  b->init(BackendOptions{});
  return b;
}

namespace {
BackendOptions backend_options(int threads, const std::string& weights, const std::string& compute) {
  BackendOptions o;
  o.threads = threads;
  o.weights = weights;
  o.compute = compute;
  return o;
}
}  // namespace

std::shared_ptr<Backend> make_backend(const std::string& name, int threads, const std::string& weights,
                                      const std::string& compute) {
  auto b = registry().backend(name);
  b->init(backend_options(threads, weights, compute));
  return b;
}

void expect_lowp_took_effect(const Node& node, const std::vector<Arg>& args, const std::vector<float>& lowp,
                             const std::string& what) {
  const auto exact = values(run_on(*make_backend("reference", 1, "native", "f32"), node, args));
  ASSERT_EQ(exact.size(), lowp.size()) << what;
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    err = std::max(err, static_cast<double>(std::abs(lowp[i] - exact[i])));
    scale = std::max(scale, static_cast<double>(std::abs(exact[i])));
  }
  // f32 paths agree to ~1e-7 of the scale whatever their order; bf16's rounded x (8 bits of
  // mantissa) and int8's quantised x and W are ~1e-3 off, and no worse than 5e-2.
  EXPECT_GT(err / scale, 1e-5) << what << ": within f32 rounding of the exact Linear, so the low-precision mode did not take effect";
  EXPECT_LT(err / scale, 5e-2) << what;
}

std::shared_ptr<Backend> try_make_backend(const std::string& name, int threads, const std::string& weights,
                                          const std::string& compute, std::string& why) {
  auto b = registry().backend(name);
  try {
    b->init(backend_options(threads, weights, compute));
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
  return b;
}

}  // namespace sonde::test
