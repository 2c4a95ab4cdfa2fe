// GEMM / GEMV throughput: OpenBLAS cblas_sgemm (and cblas_sgemv for one row) against the Linear
// op of every backend the plugin registry finds, with f32 and bf16 weights, on Qwen2.5-0.5B's
// shapes; then the memory bandwidth (a streaming read with the same threads) and, for the decode
// GEMVs, the bandwidth bound (weight bytes / bandwidth) against the time achieved.
//
// Usage: gemm_bench [--threads N] [--repeat N] [--backends a,b] [--plugin-dir DIR]
//                   [--shapes MxKxN,...] [--weights f32,bf16] [--linear auto,gemv,gemm] [--no-sgemm]
//                   [--compute f32,bf16,int8] [--keep-packed]
//                   [--bandwidth-only] [--json]
// Shapes are M x K x N: x[M,K] times W[N,K]^T (nn.Linear layout), 2*M*K*N flops. One-row
// (decode) shapes run with cold caches, so their weights come from memory as in a real decode.
// --linear: the threaded backend once per SONDE_THREADED_LINEAR value, as rows "threaded:gemv"
// etc., taking turns on every shape (the dispatch's choice against both paths in one run, so a
// host's load shifts them alike). --no-sgemm: no OpenBLAS baseline (ratios are then 0).
// --compute: the threaded backend once per --compute mode, rows "threaded:bf16" etc. (int8 with
// its q8 weights), taking turns on every shape likewise; with --linear, once per mode and path
// (bf16: gemv is the tiles of lowp_tiles.h, gemm the packed GEMM of lowp_gemm_bf16.cpp).
// --keep-packed: each weight is hinted WeightHint::KeepPacked after its upload, as an SAE's
// encoder is (the threaded backend then packs it once instead of in every call).
#include <sonde/backend.h>
#include <sonde/dtype.h>
#include <sonde/error.h>
#include <sonde/graph.h>
#include <sonde/registry.h>
#include <sonde/tensor.h>

#include <sonde/host/stream_read.h>

#include <cblas.h>
#include <immintrin.h>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using sonde::DType;
using sonde::Shape;
using sonde::Tensor;
using sonde::TensorView;

struct GemmShape {
  std::int64_t m, k, n;
  std::string str() const { return fmt::format("{}x{}x{}", m, k, n); }
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n); }
};

struct Options {
  int threads = 2, repeat = 5;
  std::vector<std::string> backends;  // empty: every backend found
  std::string plugin_dir;
  bool bandwidth_only = false, json = false, sgemm = true, keep_packed = false;
  std::vector<std::string> linear;  // SONDE_THREADED_LINEAR values; empty: the environment's
  std::vector<std::string> compute;  // threaded --compute modes; empty: f32 only
  std::vector<DType> weights{DType::f32, DType::bf16};
  std::vector<GemmShape> shapes;  // empty: kShapes
};

const std::vector<GemmShape> kShapes = {
    {512, 896, 896}, {512, 896, 4864}, {512, 4864, 896}, {1, 896, 4864}, {1, 896, 151936}};

// Evicts the caches (L3 is 32 MB here) by writing 128 MB, so that a GEMV whose weights would fit in
// the cache reads them from memory, as it does in a decode step that goes through every layer.
void evict_caches() {
  static std::vector<std::uint8_t> junk(std::size_t{128} << 20);
  for (std::size_t i = 0; i < junk.size(); i += 64) junk[i] = static_cast<std::uint8_t>(junk[i] + 1);
}

// Best wall time of `repeat` calls after one warm-up call (one call when the warm-up took over 2 s:
// the reference backend's naive GEMM). `cold`: evict the caches before each timed call.
double best_seconds(int repeat, const std::function<void()>& fn, bool cold = false) {
  const auto t0 = Clock::now();
  fn();
  if (std::chrono::duration<double>(Clock::now() - t0).count() > 2.0) repeat = 1;
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    if (cold) evict_caches();
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

// Deterministic values in [-0.5, 0.5), stored as `dtype` (f32 or bf16).
Tensor random_tensor(DType dtype, const Shape& shape, std::uint32_t seed) {
  Tensor t(dtype, shape);
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::int64_t i = 0; i < shape.numel(); ++i) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;  // xorshift32
    const float v = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
    if (dtype == DType::bf16) t.data<std::uint16_t>()[i] = sonde::f32_to_bf16(v);
    else t.data<float>()[i] = v;
  }
  return t;
}

// Streaming read of a 1 GiB buffer split over `threads` threads, one and four streams per thread
// (as `sonde bench` reads): GB/s (1e9 bytes), best of 5 each.
double measure_bandwidth(int threads) {
  constexpr std::size_t kBytes = std::size_t{1} << 30, kWords = kBytes / sizeof(std::uint64_t);
  const std::unique_ptr<std::uint64_t[]> buf(new std::uint64_t[kWords]);  // not zeroed: written next
  for (std::size_t i = 0; i < kWords; ++i) buf[i] = i;  // touch every page
  const sonde::host::ByteRange all{buf.get(), kBytes};
  double best = 1e30;
  for (int r = 0; r < 10; ++r) {
    std::uint64_t check = 0;
    best = std::min(best, sonde::host::stream_read({&all, 1}, threads, &check, r % 2 ? 4 : 1));
    if (check != static_cast<std::uint64_t>(kWords) * (kWords - 1) / 2) sonde::runtime_error("bandwidth: wrong sum {}", check);
  }
  return static_cast<double>(kBytes) / best / 1e9;
}

// max |a - b| / max |b|: a sanity check that a backend computed the same product.
double rel_error(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < a.shape().numel(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
    den = std::max(den, std::fabs(static_cast<double>(b.data<float>()[i])));
  }
  return den > 0 ? num / den : num;
}

struct Row {
  std::string shape, impl, weights;
  double seconds = 0, gflops = 0, ratio = 0, weight_bytes = 0, error = 0;
  bool supported = true;
};

struct Baseline {
  Tensor y;
  double sgemm_s = 0, sgemv_s = 0;
};

Baseline run_openblas(const GemmShape& g, const Tensor& x, const Tensor& w, int repeat) {
  Baseline b;
  b.y = Tensor(DType::f32, Shape{g.m, g.n});
  const auto M = static_cast<int>(g.m), K = static_cast<int>(g.k), N = static_cast<int>(g.n);
  b.sgemm_s = best_seconds(repeat, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x.data<float>(), K, w.data<float>(), K, 0.0f,
                b.y.data<float>(), N);
  }, g.m == 1);
  if (g.m == 1) {
    Tensor y2(DType::f32, Shape{1, g.n});
    b.sgemv_s = best_seconds(repeat, [&] {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, w.data<float>(), K, x.data<float>(), 1, 0.0f,
                  y2.data<float>(), 1);
    }, true);
  }
  return b;
}

Row run_backend(sonde::Backend& be, const std::string& name, const GemmShape& g, DType wdt, const Tensor& x,
                const Tensor& w32, const Baseline& base, int repeat, bool keep_packed) {
  Row row{g.str(), name, std::string(sonde::dtype_name(wdt))};
  Tensor w = wdt == DType::f32 ? w32 : random_tensor(DType::bf16, Shape{g.n, g.k}, 7);
  sonde::Node node;
  node.op = sonde::OpKind::Linear;
  node.inputs = {0, 1};
  node.names = {"bench.linear"};
  node.dtype = DType::f32;
  node.shape = Shape{g.m, g.n};
  const std::string wname = fmt::format("bench.{}.{}", g.str(), row.weights);
  const TensorView wv = be.upload(wname, w.view(), sonde::Split::None);
  if (keep_packed) be.hint(wname, sonde::WeightHint::KeepPacked);
  // The executor asks with the dtype of the view upload() returned (cpu-blas widens bf16 to f32).
  const DType dtypes[] = {DType::f32, wv.dtype};
  if (!be.supports(node, dtypes)) {
    row.supported = false;
    return row;
  }
  row.weight_bytes = static_cast<double>(wv.nbytes());
  Tensor y(DType::f32, Shape{g.m, g.n});
  const TensorView ins[] = {x.view(), wv};
  row.seconds = best_seconds(repeat, [&] {
    be.run(node, ins, y.view());
    be.sync();
  }, g.m == 1);
  row.gflops = g.flops() / row.seconds / 1e9;
  row.ratio = base.sgemm_s / row.seconds;
  if (wdt == DType::f32 && !base.y.empty()) row.error = rel_error(y, base.y);
  return row;
}

std::vector<std::string> backend_names(const Options& o) {
  if (!o.backends.empty()) return o.backends;
  std::vector<std::string> names;
  for (const auto& e : sonde::PluginRegistry::instance().plugins())
    if (e.kind == "backend") names.push_back(e.name);
  return names;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string b; std::getline(ss, b, ',');)
    if (!b.empty()) out.push_back(b);
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) sonde::bad_input("{} needs a value", a);
      return argv[++i];
    };
    if (a == "--threads") o.threads = std::stoi(value());
    else if (a == "--repeat") o.repeat = std::stoi(value());
    else if (a == "--plugin-dir") o.plugin_dir = value();
    else if (a == "--bandwidth-only") o.bandwidth_only = true;
    else if (a == "--no-sgemm") o.sgemm = false;
    else if (a == "--keep-packed") o.keep_packed = true;
    else if (a == "--linear") o.linear = split(value());
    else if (a == "--compute") o.compute = split(value());
    else if (a == "--weights") {
      o.weights.clear();
      for (const auto& w : split(value())) {
        if (w != "f32" && w != "bf16") sonde::bad_input("--weights: '{}' is not f32 or bf16", w);
        o.weights.push_back(w == "f32" ? DType::f32 : DType::bf16);
      }
    } else if (a == "--shapes") {
      for (const auto& s : split(value())) {
        GemmShape g{};
        char x1 = 0, x2 = 0;
        std::istringstream in(s);
        if (!(in >> g.m >> x1 >> g.k >> x2 >> g.n) || x1 != 'x' || x2 != 'x' || g.m < 1 || g.k < 1 || g.n < 1 || !in.eof())
          sonde::bad_input("--shapes: '{}' is not MxKxN with positive sizes", s);
        o.shapes.push_back(g);
      }
    }
    else if (a == "--json") o.json = true;
    else if (a == "--backends") {
      std::stringstream ss(value());
      for (std::string b; std::getline(ss, b, ',');)
        if (!b.empty()) o.backends.push_back(b);
    } else sonde::bad_input("unknown option '{}' (see the comment at the top of bench/gemm_bench.cpp)", a);
  }
  if (o.threads < 1) sonde::bad_input("--threads must be at least 1, got {}", o.threads);
  if (o.repeat < 1) sonde::bad_input("--repeat must be at least 1, got {}", o.repeat);
  return o;
}

void print_row(const Row& r) {
  if (!r.supported) {
    fmt::print("{:<16} {:<10} {:<5} {:>10}\n", r.shape, r.impl, r.weights, "unsupported (the executor falls back)");
    return;
  }
  fmt::print("{:<16} {:<10} {:<5} {:>10.3f} {:>9.1f} {:>8.2f}x", r.shape, r.impl, r.weights, r.seconds * 1e3, r.gflops,
             r.ratio);
  if (r.weights == "f32") fmt::print("  err {:.1e}", r.error);
  fmt::print("\n");
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  openblas_set_num_threads(o.threads);
  const double bw = measure_bandwidth(o.threads);
  if (o.bandwidth_only) {
    if (o.json) std::cout << nlohmann::json{{"threads", o.threads}, {"bandwidth_gb_s", bw}}.dump() << "\n";
    else fmt::print("memory bandwidth (streaming read, {} threads): {:.1f} GB/s\n", o.threads, bw);
    return 0;
  }
  auto& reg = sonde::PluginRegistry::instance();
  reg.scan(sonde::PluginRegistry::search_path(o.plugin_dir));
  std::vector<std::pair<std::string, std::shared_ptr<sonde::Backend>>> backends;
  for (const auto& name : backend_names(o)) {
    if (name == "threaded" && !o.compute.empty()) {
      // With --linear too: each mode once per path (rows "threaded:bf16:gemv" etc.).
      const std::vector<std::string> paths = o.linear.empty() ? std::vector<std::string>{""} : o.linear;
      for (const auto& c : o.compute)
        for (const auto& mode : paths) {
          if (!mode.empty()) ::setenv("SONDE_THREADED_LINEAR", mode.c_str(), 1);  // read by init
          sonde::BackendOptions bo{o.threads};
          bo.compute = c;
          bo.weights = c == "int8" ? "q8" : "native";
          auto b = reg.backend(name);
          b->init(bo);
          backends.emplace_back(name + ":" + c + (mode.empty() ? "" : ":" + mode), b);
        }
      continue;
    }
    if (name == "threaded" && !o.linear.empty()) {
      for (const auto& mode : o.linear) {
        ::setenv("SONDE_THREADED_LINEAR", mode.c_str(), 1);  // read by init
        auto b = reg.backend(name);
        b->init(sonde::BackendOptions{o.threads});
        backends.emplace_back(name + ":" + mode, b);
      }
      continue;
    }
    auto b = reg.backend(name);
    b->init(sonde::BackendOptions{o.threads});
    backends.emplace_back(name, b);
  }

  fmt::print("threads {}, best of {} after a warm-up; ratio = OpenBLAS sgemm time / this time\n", o.threads, o.repeat);
  fmt::print("memory bandwidth (streaming read of 1 GiB, {} threads): {:.1f} GB/s\n\n", o.threads, bw);
  fmt::print("{:<16} {:<10} {:<5} {:>10} {:>9} {:>9}\n", "MxKxN", "impl", "W", "ms", "GFLOP/s", "vs sgemm");
  std::vector<Row> rows;
  for (const auto& g : o.shapes.empty() ? kShapes : o.shapes) {
    const Tensor x = random_tensor(DType::f32, Shape{g.m, g.k}, 3);
    const Tensor w = random_tensor(DType::f32, Shape{g.n, g.k}, 7);
    // The OpenBLAS pool size is global: a backend's init may have changed it.
    openblas_set_num_threads(o.threads);
    Baseline base;
    if (o.sgemm) {
      base = run_openblas(g, x, w, o.repeat);
      rows.push_back({g.str(), "sgemm", "f32", base.sgemm_s, g.flops() / base.sgemm_s / 1e9, 1.0, 4.0 * g.n * g.k});
      print_row(rows.back());
    }
    if (o.sgemm && g.m == 1) {
      rows.push_back({g.str(), "sgemv", "f32", base.sgemv_s, g.flops() / base.sgemv_s / 1e9, base.sgemm_s / base.sgemv_s,
                      4.0 * g.n * g.k});
      print_row(rows.back());
    }
    for (auto& [name, be] : backends)
      for (DType wdt : o.weights) {
        rows.push_back(run_backend(*be, name, g, wdt, x, w, base, o.repeat, o.keep_packed));
        print_row(rows.back());
      }
  }

  // Decode: a GEMV reads every weight once, so time >= weight bytes / bandwidth.
  fmt::print("\ndecode GEMV against the bandwidth bound ({:.1f} GB/s); bound = bytes the backend reads / bandwidth\n", bw);
  fmt::print("{:<16} {:<10} {:<5} {:>10} {:>10} {:>9} {:>8}\n", "MxKxN", "impl", "W", "MB read", "bound ms", "ms", "of bound");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    out.push_back({{"shape", r.shape}, {"impl", r.impl}, {"weights", r.weights}, {"seconds", r.seconds},
                   {"gflops", r.gflops}, {"ratio_to_sgemm", r.ratio}, {"supported", r.supported},
                   {"weight_bytes", r.weight_bytes}});
    if (!r.supported || r.shape.rfind("1x", 0) != 0) continue;
    const double bound = r.weight_bytes / (bw * 1e9);
    fmt::print("{:<16} {:<10} {:<5} {:>10.1f} {:>10.3f} {:>9.3f} {:>7.0f}%\n", r.shape, r.impl, r.weights,
               r.weight_bytes / 1e6, bound * 1e3, r.seconds * 1e3, 100.0 * bound / r.seconds);
  }
  if (o.json) std::cout << nlohmann::json{{"threads", o.threads}, {"bandwidth_gb_s", bw}, {"rows", out}}.dump() << "\n";
  return 0;
} catch (const sonde::Error& e) {
  std::cerr << "gemm_bench: error: " << e.what() << "\n";
  return e.exit_code();
} catch (const std::exception& e) {
  std::cerr << "gemm_bench: error: " << e.what() << "\n";
  return 1;
}
