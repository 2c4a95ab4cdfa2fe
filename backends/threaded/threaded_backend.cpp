#include "threaded_backend.h"

#include "ops.h"

#include <sonde/log.h>

#include <cstdlib>
#include <thread>
#include <vector>

namespace sonde::threaded {

namespace {
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}
}  // namespace

ThreadedBackend::ThreadedBackend() : pool_(std::make_unique<ThreadPool>(1)), kernels_(&select_kernels("")) {}

// threads 0: all hardware threads. SONDE_THREADED_ISA forces an ISA (tests compare every path).
void ThreadedBackend::init(const BackendOptions& options) {
  if (options.weights != "native" && options.weights != "q8")
    runtime_error("backend threaded: --weights '{}' is not one of native, q8", options.weights);
  if (options.threads < 0) runtime_error("backend threaded: {} threads requested", options.threads);
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options.threads > 0 ? options.threads : hw;
  kernels_ = &select_kernels(env("SONDE_THREADED_ISA"));
  if (threads != pool_->size()) pool_ = std::make_unique<ThreadPool>(threads);
  q8_ = options.weights == "q8";
  spdlog::debug("backend threaded: ISA {}, {} threads, weights {}", kernels_->name, threads, options.weights);
}

BackendInfo ThreadedBackend::info() const {
  return {"threaded",
          fmt::format("CPU, own thread pool, {} kernels, weights {} (bf16/f16 read in place)", kernels_->name,
                      q8_ ? "q8" : "native"),
          pool_->size()};
}

bool ThreadedBackend::supports(const Node& node, std::span<const DType> input_dtypes) const {
  return ops::supports_with(node, input_dtypes, &ops::is_float16_32);
}

// Keeps the view (zero copy). In q8 mode a 2-D float weight is also quantised (the Linear
// weights; the embedding table is read natively, and an unused view costs no memory).
TensorView ThreadedBackend::upload(const std::string& name, const TensorView& src, Split) {
  if (auto it = weights_.find(name); it != weights_.end()) quantised_.erase(it->second.data);
  quantised_.erase(src.data);
  weights_[name] = src;
  if (q8_ && src.shape.rank == 2 && ops::is_float16_32(src.dtype) && src.contiguous() && src.shape[1] > 0)
    quantised_[src.data] = quantize_weight(src, *kernels_, *pool_);
  return src;
}

TensorView ThreadedBackend::weight(const std::string& name) const {
  auto it = weights_.find(name);
  if (it == weights_.end()) runtime_error("backend threaded: no weight named '{}' was uploaded", name);
  return it->second;
}

const Q8Weight* ThreadedBackend::q8_for(const TensorView& w) const {
  auto it = quantised_.find(w.data);
  if (it == quantised_.end() || it->second.N != w.shape[0] || it->second.K != w.shape[1]) return nullptr;
  return &it->second;
}

void ThreadedBackend::run(const Node& node, std::span<const TensorView> inputs, const TensorView& out) {
  std::vector<DType> dtypes;
  for (const auto& v : inputs) dtypes.push_back(v.dtype);
  if (!supports(node, dtypes)) ops::fail(node, "threaded does not run this op with these input dtypes");
  const ops::DenseInputs dense(inputs);
  // Activations, norm weights and biases are widened to f32 (small); the Linear weight and the
  // embedding table are read in their own dtype; Reshape and Concat copy bytes.
  std::vector<TensorView> in(dense.views().begin(), dense.views().end());
  std::vector<Tensor> wide;
  const bool bytes_op = node.op == OpKind::Reshape || node.op == OpKind::Concat;
  for (std::size_t i = 0; i < in.size() && !bytes_op; ++i) {
    const bool native = (node.op == OpKind::Linear && i == 1) || (node.op == OpKind::Embedding && i == 0);
    if (!native && in[i].dtype != DType::f32 && is_float(in[i].dtype)) {
      wide.push_back(to_f32(in[i]));
      in[i] = wide.back().view();
    }
  }
  const Ctx c{*pool_, *kernels_};
  switch (node.op) {
    case OpKind::Embedding: return embedding(c, node, in, out);
    case OpKind::RmsNorm: return rms_norm(c, node, in, out);
    case OpKind::Linear: return linear(c, node, in, out, q8_ ? q8_for(in[1]) : nullptr);
    case OpKind::Reshape:
    case OpKind::Concat: return copy_op(node, in, out);
    case OpKind::Rope: return rope(c, node, in, out);
    case OpKind::Attention: return attention(c, node, in, out);
    case OpKind::Add: return add(c, node, in, out);
    case OpKind::SiluMul: return silu_mul(c, node, in, out);
    default: ops::fail(node, "threaded does not run this op");
  }
}

}  // namespace sonde::threaded

SONDE_PLUGIN(sonde::threaded::ThreadedBackend, "backend", "threaded", "0.1.0", "", 20)
