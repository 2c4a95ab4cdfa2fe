#include "threaded_backend.h"

#include "ops.h"
#include <sonde/edit_f32.h>
#include <sonde/sae_f32.h>

#include <sonde/host/stream_read.h>
#include <sonde/log.h>

#include <map>
#include <mutex>

#include <cstdlib>
#include <unistd.h>
#include <thread>
#include <vector>

namespace sonde::threaded {

namespace {
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// How much of the next weight a worker reads ahead: half the last-level cache (16 MB here), so
// what it read is still there when the Linear comes. Measured on qwen2.5-0.5b decode, tokens
// with and without read-ahead alternating in one process: 1 MB saves 0.6 ms per token, 4 MB
// 0.8 ms, 16 MB 1.0 ms (of 27).
std::size_t prefetch_limit() {
  const long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? std::min<std::size_t>(static_cast<std::size_t>(l3) / 2, std::size_t{16} << 20) : std::size_t{4} << 20;
}
constexpr std::size_t kPrefetchStep = 4096;  // bytes between checks for a preempting run()
// Smaller weights stay in the caches from one step to the next: reading them ahead only costs.
constexpr std::size_t kMinReadAhead = std::size_t{256} << 10;

// Reads one word per cache line of p[from, to) (demand loads: unlike prefetch hints they are
// never dropped), stopping early when a run() starts; returns where it stopped.
std::size_t read_ahead(const unsigned char* p, std::size_t from, std::size_t to, const ThreadPool& pool) {
  std::uint64_t sink = 0;
  std::size_t off = from;
  for (; off < to && !pool.preempted(); off += kPrefetchStep)
    for (std::size_t l = off; l < std::min(to, off + kPrefetchStep); l += 64)
      sink += *reinterpret_cast<const volatile unsigned char*>(p + l);
  static std::atomic<std::uint64_t> keep{0};  // the loads must happen
  keep.fetch_add(sink, std::memory_order_relaxed);
  return std::min(off, to);
}

// A node's inputs as the kernels take them. Activations, norm weights and biases are widened to
// f32 (small); the Linear weight and the embedding table are read in their own dtype; Reshape and
// Concat copy bytes.
struct Prepared {
  Prepared(const Node& node, std::span<const TensorView> inputs) : dense(inputs) {
    in.assign(dense.views().begin(), dense.views().end());
    const bool bytes_op = node.op == OpKind::Reshape || node.op == OpKind::Concat || node.op == OpKind::SliceRows;
    for (std::size_t i = 0; i < in.size() && !bytes_op; ++i) {
      const bool native = (node.op == OpKind::Linear && i == 1) || (node.op == OpKind::Embedding && i == 0);
      if (!native && in[i].dtype != DType::f32 && is_float(in[i].dtype)) {
        wide.push_back(to_f32(in[i]));
        in[i] = wide.back().view();
      }
    }
  }
  ops::DenseInputs dense;
  std::vector<Tensor> wide;
  std::vector<TensorView> in;
};

using ops::rows_dense;

// An Attention whose keys and values the kernel reads where they are: f32, each batch row dense
// (a batch's KV cache rows, `capacity` slots apart), the queries and the mask dense.
bool attention_in_place(const Node& node, std::span<const TensorView> in) {
  if (node.op != OpKind::Attention || in.size() < 3) return false;
  for (std::size_t i = 0; i < in.size(); ++i)
    if ((i < 3 && in[i].dtype != DType::f32) || !(i == 1 || i == 2 ? rows_dense(in[i]) : in[i].contiguous())) return false;
  return true;
}

// A Linear on the GEMV path (few x rows: decode) streams its weight (or its q8 copy) from memory.
bool streams(const Ctx& c, const TensorView& linear_out, const TensorView& w, bool q8) {
  if (linear_out.shape.rank < 1 || w.shape.rank != 2) return false;
  const std::int64_t N = linear_out.shape[linear_out.shape.rank - 1];
  return linear_path(c, linear_out.numel() / std::max<std::int64_t>(1, N), w.shape[1], N, w.dtype, q8) == LinearPath::gemv;
}

// The host's rates for the Linear dispatch, measured once per process and pool size: a streaming
// read of 64 MB over the pool's threads (beyond the L2 of any core; the figure the decode GEMV
// reaches), and on one thread, scaled by the pool's size, the GEMM path on an in-cache problem
// and the GEMV kernel on L2-resident W chunks. About 30 ms. One thread, because a probe run
// lasts 0.1-0.6 ms and a worker woken for it may join late or not at all: on this VM 2 threads
// measured 1 thread's rates in some probes and 2 threads' in others of the same start-up, while a
// prefill runs 1.84x faster on 2 threads than on 1.
HostRates measure_rates(ThreadPool& pool, const Kernels& k) {
  static std::mutex mu;
  static std::map<std::pair<int, const Kernels*>, HostRates> cache;
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(pool.size(), &k);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  std::vector<unsigned char> buf(std::size_t{64} << 20, 1);
  const host::ByteRange range{buf.data(), buf.size()};
  HostRates r;
  r.read_bytes_per_s = static_cast<double>(buf.size()) / host::fastest_read({&range, 1}, pool.size());
  ThreadPool one(1);
  const double threads = pool.size();
  measure_gemm(Ctx{one, k, LinearMode::gemm, {}}, r);
  r.gemm_flops_per_s *= threads;
  r.gemm_fixed_s_per_weight /= threads;
  r.gemv_flops_per_s = threads * measure_gemv_flops(Ctx{one, k, LinearMode::gemv, {}}, false);
  r.gemv_q8_flops_per_s = threads * measure_gemv_flops(Ctx{one, k, LinearMode::gemv, {}}, true);
  spdlog::debug("backend threaded: {:.1f} GB/s read, {:.1f} GFLOP/s GEMM + {:.3f} ns per weight, {:.1f} / {:.1f} "
                "GFLOP/s GEMV in L2, bf16 / q8 ({} threads)",
                r.read_bytes_per_s / 1e9, r.gemm_flops_per_s / 1e9, r.gemm_fixed_s_per_weight * 1e9,
                r.gemv_flops_per_s / 1e9, r.gemv_q8_flops_per_s / 1e9, pool.size());
  return cache[key] = r;
}
}  // namespace

ThreadedBackend::ThreadedBackend() : pool_(std::make_unique<ThreadPool>(1)), kernels_(&select_kernels("")) {}

// A read-ahead job uses prefetch_ and prefetched_: it must be over before they go.
ThreadedBackend::~ThreadedBackend() { pool_->cancel_job(); }

void ThreadedBackend::sync() { pool_->cancel_job(); }

// threads 0: all hardware threads. SONDE_THREADED_ISA forces an ISA (tests compare every path).
void ThreadedBackend::init(const BackendOptions& options) {
  if (options.weights != "native" && options.weights != "q8")
    runtime_error("backend threaded: --weights '{}' is not one of native, q8", options.weights);
  if (options.threads < 0) runtime_error("backend threaded: {} threads requested", options.threads);
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options.threads > 0 ? options.threads : hw;
  kernels_ = &select_kernels(env("SONDE_THREADED_ISA"));
  if (threads != pool_->size()) {
    pool_->cancel_job();
    pool_ = std::make_unique<ThreadPool>(threads);
  }
  q8_ = options.weights == "q8";
  const auto compute = parse_compute(options.compute);
  if (!compute) runtime_error("backend threaded: compute '{}' is not one of f32, bf16, int8", options.compute);
  if (*compute == Compute::int8 && !q8_) runtime_error("backend threaded: compute int8 needs weights q8");
  if (*compute == Compute::bf16 && q8_) runtime_error("backend threaded: compute bf16 does not take weights q8");
  compute_ = *compute;
  const LowpKernels* before = lowp_;
  lowp_ = select_lowp(compute_, env("SONDE_THREADED_LOWP"));
  // Copies made for other kernels (another layout) must not be read by these: a weight uploaded
  // before is then rounded or packed per call until it is uploaded again.
  if (lowp_ != before) rounded_.clear();
  const std::string mode = env("SONDE_THREADED_LINEAR");
  if (!parse_linear_mode(mode, linear_mode_))
    runtime_error("backend threaded: SONDE_THREADED_LINEAR='{}' is not one of auto, model, gemv, gemm", mode);
  rates_ = linear_mode_ == LinearMode::automatic || linear_mode_ == LinearMode::model ? measure_rates(*pool_, *kernels_) : HostRates{};
  tuner_ = std::make_unique<LinearTuner>();
  spdlog::debug("backend threaded: ISA {}, {} threads, weights {}, compute {}{}", kernels_->name, threads, options.weights,
                options.compute, lowp_ ? fmt::format(" ({} kernels)", lowp_->name) : std::string());
}

BackendInfo ThreadedBackend::info() const {
  if (!kernels_ || !pool_)  // asked before init (`sonde plugins`)
    return {"threaded", "CPU, own thread pool, the host's widest vector kernels, weights native or q8; batch-invariant", 0};
  return {"threaded",
          fmt::format("CPU, own thread pool, {} kernels, weights {} (bf16/f16 read in place), compute {}{}; batch-invariant",
                      kernels_->name, q8_ ? "q8" : "native", compute_name(compute_),
                      lowp_ ? fmt::format(" ({} kernels)", lowp_->name) : std::string()),
          pool_->size()};
}

bool ThreadedBackend::supports(const Node& node, std::span<const DType> input_dtypes) const {
  return ops::supports_with(node, input_dtypes, &ops::is_float16_32);
}

namespace {
std::vector<std::uint16_t> rounded_to_bf16(const TensorView& w, ThreadPool& pool) {
  std::vector<std::uint16_t> r(static_cast<std::size_t>(w.numel()));
  for_chunks(pool, w.numel(), std::int64_t{1} << 16, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i)
      r[static_cast<std::size_t>(i)] = compute_bf16_bits(static_cast<float>(load_as_double(w.data, w.dtype, static_cast<std::size_t>(i))));
  });
  return r;
}

// --compute bf16: a 2-D weight as the mode's kernels read it: f32/f16 rounded to bf16, and packed
// when the kernels take their own layout (AMX; 32-row blocks, packed in parallel). Empty: a bf16
// weight the kernels read in place.
std::vector<std::uint16_t> bf16_for_kernels(const TensorView& w, ThreadPool& pool, const LowpKernels& k) {
  std::vector<std::uint16_t> r;
  if (w.dtype != DType::bf16) r = rounded_to_bf16(w, pool);
  if (!k.pack_bf16) return r;
  const auto* src = w.dtype == DType::bf16 ? static_cast<const std::uint16_t*>(w.data) : r.data();
  const std::int64_t N = w.shape[0], K = w.shape[1], per_block = k.bf16_packed_elems(32, K);
  std::vector<std::uint16_t> p(static_cast<std::size_t>(k.bf16_packed_elems(N, K)));
  for_chunks(pool, (N + 31) / 32, 16, [&](std::int64_t b0, std::int64_t b1) {
    k.pack_bf16(src + b0 * 32 * K, std::min(N, b1 * 32) - b0 * 32, K, p.data() + b0 * per_block);
  });
  return p;
}
}  // namespace

// Keeps the view (zero copy). In q8 mode a 2-D float weight is also quantised (the Linear
// weights; the embedding table is read natively, and an unused view costs no memory).
TensorView ThreadedBackend::upload(const std::string& name, const TensorView& src, Split) {
  if (auto it = weights_.find(name); it != weights_.end())
    quantised_.erase(it->second.data), rounded_.erase(it->second.data), packed_.erase(it->second.data);
  quantised_.erase(src.data);
  rounded_.erase(src.data);
  packed_.erase(src.data);
  pool_->cancel_job();
  next_linear_.clear();  // pointers may be reused by the new weight
  last_linear_ = nullptr;
  weights_[name] = src;
  if (q8_ && src.shape.rank == 2 && ops::is_float16_32(src.dtype) && src.contiguous() && src.shape[1] > 0)
    quantised_[src.data] = quantize_weight(src, *pool_);
  if (compute_ == Compute::bf16 && src.shape.rank == 2 && ops::is_float16_32(src.dtype) && src.contiguous() &&
      src.shape[1] > 0 && (src.dtype != DType::bf16 || lowp_->pack_bf16))
    rounded_[src.data] = bf16_for_kernels(src, *pool_, *lowp_);
  return src;
}

TensorView ThreadedBackend::weight(const std::string& name) const {
  auto it = weights_.find(name);
  if (it == weights_.end()) runtime_error("backend threaded: no weight named '{}' was uploaded", name);
  return it->second;
}

// KeepPacked: the rows packed for the f32 GEMM now, in parallel (for 16,384 x 896 f32 about
// 59 MB, tens of ms), so a forward never writes them. Ignored under q8 or --compute bf16/int8
// (those Linears read their own copies) and by kernels without a packed GEMM.
void ThreadedBackend::hint(const std::string& name, WeightHint hint) {
  const TensorView w = weight(name);
  if (hint != WeightHint::KeepPacked || q8_ || lowp_ || packed_.count(w.data)) return;
  PackedW p = pack_linear_weight(ctx(), w);
  if (!p.panels.data()) return;
  spdlog::debug("backend threaded: '{}' [{}, {}] packed once for the GEMM ({:.1f} MB)", name, p.N, p.K,
                static_cast<double>(p.panels.size()) * 4e-6);
  packed_[w.data] = std::move(p);
}

const PackedW* ThreadedBackend::packed_for(const TensorView& w) const {
  if (q8_ || lowp_) return nullptr;
  auto it = packed_.find(w.data);
  return it == packed_.end() ? nullptr : &it->second;
}

// Under q8 a Linear reads the q8 blocks (scales and int8 values), not the source view; under
// --compute bf16 an f32/f16 weight's Linear reads its bf16 copy.
std::vector<std::span<const std::byte>> ThreadedBackend::weight_storage(const std::string& name) const {
  const TensorView v = weight(name);
  const Q8Weight* q = q8_for(v);
  if (q) return {std::span<const std::byte>(reinterpret_cast<const std::byte*>(q->data.data()), q->bytes())};
  // --compute bf16 on f32/f16 weights (or packed for AMX): the Linear reads the bf16 copy.
  if (auto it = rounded_.find(v.data); it != rounded_.end())
    return {std::span<const std::byte>(reinterpret_cast<const std::byte*>(it->second.data()), it->second.size() * 2)};
  auto parts = Backend::weight_storage(name);
  if (const PackedW* p = packed_for(v))  // the GEMM path reads these, the GEMV path the view
    parts.emplace_back(reinterpret_cast<const std::byte*>(p->panels.data()), p->panels.size() * sizeof(float));
  return parts;
}

// The copies made at upload; a weight without one (not uploaded, e.g. an op test's activation
// as W) is rounded or quantised for this call alone.
LowpWeight ThreadedBackend::lowp_weight(const Node&, const TensorView& w) const {
  LowpWeight out;
  if (compute_ == Compute::int8) {
    out.q8 = q8_for(w);
    if (!out.q8) out.own_q8 = quantize_weight(w, *pool_);
  } else if (auto it = rounded_.find(w.data); it != rounded_.end()) {
    out.bf16 = it->second.data();
  } else if (w.dtype == DType::bf16 && !lowp_->pack_bf16) {
    out.bf16 = static_cast<const std::uint16_t*>(w.data);
  } else {
    out.own_bf16 = bf16_for_kernels(w, *pool_, *lowp_);
  }
  return out;
}

const Q8Weight* ThreadedBackend::q8_for(const TensorView& w) const {
  if (!q8_) return nullptr;
  auto it = quantised_.find(w.data);
  if (it == quantised_.end() || it->second.N != w.shape[0] || it->second.K != w.shape[1]) return nullptr;
  return &it->second;
}

void ThreadedBackend::check_supported(const Node& node, std::span<const TensorView> inputs) const {
  std::vector<DType> dtypes;
  for (const auto& v : inputs) dtypes.push_back(v.dtype);
  if (!supports(node, dtypes)) ops::fail(node, "threaded does not run this op with these input dtypes");
}

void ThreadedBackend::run(const Node& node, std::span<const TensorView> inputs, const TensorView& out) {
  check_supported(node, inputs);
  if (node.op == OpKind::Concat && inputs.size() == 2 && rows_dense(inputs[0]) && rows_dense(inputs[1])) {
    copy_op(node, inputs, out);  // a batch's KV past read in place, not densified first
    prefetch_next(false, TensorView());
    return;
  }
  if (attention_in_place(node, inputs)) {  // nor copied again for the attention that reads it
    attention(ctx(), node, inputs, out);
    prefetch_next(false, TensorView());
    return;
  }
  const Prepared p(node, inputs);
  const auto& in = p.in;
  const Ctx c = ctx();
  if (node.op == OpKind::Linear) learn_linear(in[1]);
  switch (node.op) {
    case OpKind::Embedding: embedding(c, node, in, out); break;
    case OpKind::RmsNorm: rms_norm(c, node, in, out); break;
    case OpKind::Linear:
      if (lowp_) linear_lowp(c, node, in, out, lowp_weight(node, in[1]));
      else linear(c, node, in, out, q8_for(in[1]), packed_for(in[1]));
      break;
    case OpKind::Reshape:
    case OpKind::Concat:
    case OpKind::SliceRows: copy_op(node, in, out); break;
    case OpKind::Rope: rope(c, node, in, out); break;
    case OpKind::Attention: attention(c, node, in, out); break;
    case OpKind::Add: add(c, node, in, out); break;
    case OpKind::SiluMul: silu_mul(c, node, in, out); break;
    case OpKind::EditAffine:
    case OpKind::EditReplace:
    case OpKind::EditProject: ops::run_edit_f32(node, in, out); break;
    case OpKind::SaeActivation: sae_activation(c, node, in, out); break;
    case OpKind::NormRescale: ops::run_norm_rescale_f32(node, in, out); break;
    case OpKind::Sub: ops::run_sub_f32(node, in, out); break;
    default: ops::fail(node, "threaded does not run this op");
  }
  // Only a Linear that streams its weight (few rows: decode) starts a read-ahead; the ops after
  // it continue the one in progress.
  prefetch_next(node.op == OpKind::Linear && streams(c, out, in[1], q8_for(in[1]) != nullptr),
                in.size() > 1 ? in[1] : TensorView());
}

// Streaming Linears (few x rows) go through one parallel region: as separate regions q/k/v wake
// and drain the pool three times per layer, and k and v (256 KB each on qwen2.5-0.5b) are too
// small to reach the streaming rate on their own. Anything else runs node by node.
void ThreadedBackend::run_siblings(std::span<const Node* const> nodes, std::span<const std::vector<TensorView>> inputs,
                                   std::span<const TensorView> outs) {
  bool together = lowp_ == nullptr;  // bf16/int8: node by node
  for (std::size_t i = 0; i < nodes.size() && together; ++i)
    together = nodes[i]->op == OpKind::Linear && inputs[i].size() >= 2 &&
               streams(ctx(), outs[i], inputs[i][1], q8_for(inputs[i][1]) != nullptr);
  if (!together) return Backend::run_siblings(nodes, inputs, outs);
  std::vector<Prepared> prepared;
  prepared.reserve(nodes.size());
  std::vector<ops::Inputs> in;
  std::vector<const Q8Weight*> q8;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    check_supported(*nodes[i], inputs[i]);
    prepared.emplace_back(*nodes[i], inputs[i]);
    in.push_back(prepared.back().in);
    q8.push_back(q8_for(prepared.back().in[1]));
    learn_linear(prepared.back().in[1]);
  }
  linear_siblings(ctx(), nodes, in, outs, q8);
  prefetch_next(true, prepared.back().in[1]);
}

// The bytes a Linear with this weight reads: its q8 copy when there is one, else the view.
ThreadedBackend::Bytes ThreadedBackend::streamed_bytes(const TensorView& w) const {
  if (const Q8Weight* q = q8_for(w))
    return {q->data.data(), q->bytes()};
  return {static_cast<const unsigned char*>(w.data), static_cast<std::size_t>(w.nbytes())};
}

void ThreadedBackend::learn_linear(const TensorView& w) {
  if (last_linear_ && last_linear_ != w.data) next_linear_[last_linear_] = streamed_bytes(w);
  last_linear_ = w.data;
}

void ThreadedBackend::prefetch_next(bool start, const TensorView& after) {
  if (start) {
    // The previous read-ahead's weight was just used; a job still running owns prefetched_.
    if (pool_->job_busy()) pool_->cancel_job();
    auto it = next_linear_.find(after.data);
    prefetch_ = it == next_linear_.end() || it->second.size < kMinReadAhead ? Bytes{} : it->second;
    prefetched_.store(0);
  }
  static const std::size_t limit = prefetch_limit();
  const std::size_t from = prefetched_.load(), to = std::min(prefetch_.size, limit);
  if (!prefetch_.data || from >= to || pool_->job_busy()) return;
  const Bytes target = prefetch_;
  pool_->post([this, target, from, to] { prefetched_.store(read_ahead(target.data, from, to, *pool_)); });
}

}  // namespace sonde::threaded

SONDE_PLUGIN(sonde::threaded::ThreadedBackend, "backend", "threaded", "0.1.0", "", 20)
