// The --compute bf16/int8 kernels alone (backends/threaded/lowp_*.cpp), for A/B runs of two
// copies of their sources: this file includes the ISA TUs themselves, so build it once per copy,
// from a directory holding no copy of them (a quoted include looks beside this file first):
//   g++ -std=c++20 -O3 -march=native -I DIR -o lowp_ab bench/lowp_ab.cpp -lpthread
// (DIR: backends/threaded, or a copy of it). Not built by CMake: it needs AVX512_BF16 and VNNI.
//   lowp_ab bf16|int8 THREADS REPEAT MxKxN...
// W cycles through 256 MB (COPIES=n: n copies; COPIES=1 keeps a small W in cache), so each call
// reads it from memory as a decode step does; the first 1000 W rows' outputs are checked bit for
// bit against the scalar kernel. Prints the best thread CPU time (all threads' sum) and wall time.
// Tasks of W rows as ops_lowp.cpp's for_w_rows cuts them, taken by THREADS std::threads.
#include "lowp_avx512bf16.cpp"
#include "lowp_vnni.cpp"
#include "lowp_scalar.cpp"
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>
#include <random>
using namespace sonde::threaded;
static double cpu_now(){timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t); return t.tv_sec+1e-9*t.tv_nsec;}
static double wall_now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
int main(int argc, char** argv) {
  // usage: lowp_ab mode(bf16|int8) threads reps MxKxN...
  const bool i8 = std::strcmp(argv[1], "int8") == 0;
  const int threads = std::atoi(argv[2]), reps = std::atoi(argv[3]);
  const LowpKernels& kk = i8 ? lowp_vnni() : lowp_avx512bf16();
  std::mt19937 rng(1);
  for (int a = 4; a < argc; ++a) {
    long M, K, N;
    std::sscanf(argv[a], "%ldx%ldx%ld", &M, &K, &N);
    const long ldx = (K + 31) / 32 * 32;
    const long blocks = (K + 31) / 32, lds = (blocks + 1) / 2 * 2, ldq = lds * 32;
    const long rowb = i8 ? q8_row_bytes(K) : 2 * K;
    const long wbytes = rowb * N;
    const long copies = getenv("COPIES") ? atol(getenv("COPIES")) : std::max<long>(1, (256l << 20) / wbytes);
    std::vector<unsigned char> W(copies * wbytes);
    for (long c = 0; c < copies; ++c)
      for (long i = 0; i < wbytes; ++i) W[c * wbytes + i] = (c == 0) ? rng() : W[i];
    if (i8)  // sane scales
      for (long c = 0; c < copies; ++c) for (long n = 0; n < N; ++n) for (long b = 0; b < blocks; ++b) { float s = 0.01f; std::memcpy(&W[c*wbytes + n*rowb + b*36], &s, 4); }
    else
      for (long i = 0; i < (long)W.size() / 2; ++i) { uint16_t* p = (uint16_t*)W.data() + i; *p = (*p & 0x80ff) | 0x3c00; }
    std::vector<uint16_t> x(M * ldx, 0);
    std::vector<int8_t> xq(M * ldq, 0); std::vector<float> xs(M * lds, 0.f);
    for (long m = 0; m < M; ++m) { for (long k = 0; k < K; ++k) { x[m*ldx+k] = 0x3c00 | (rng() & 0x80ff); xq[m*ldq+k] = (int8_t)(rng() % 255 - 127); }
      for (long b = 0; b < blocks; ++b) xs[m*lds+b] = 0.02f; }
    std::vector<float> y(M * N), yr(M * N);
    auto run = [&](const LowpKernels& k, const unsigned char* w, long n0, long n1, float* yy) {
      if (i8) k.gemm_i8(xq.data(), xs.data(), M, ldq, lds, w, K, n0, n1, yy, N);
      else k.gemm_bf16(x.data(), M, ldx, (const uint16_t*)w, K, n0, n1, yy, N);
    };
    // bits vs scalar on copy 0 (a sample of rows for big N)
    { long nn = std::min<long>(N, 1000); run(kk, W.data(), 0, nn, y.data()); run(lowp_scalar(), W.data(), 0, nn, yr.data());
      long bad = 0; for (long m = 0; m < M; ++m) for (long n = 0; n < nn; ++n) bad += std::memcmp(&y[m*N+n], &yr[m*N+n], 4) != 0;
      if (bad) std::printf("MISMATCH %ld\n", bad); }
    const long want = 4 * threads, rows = std::max<long>(32, ((N + want - 1) / want + 15) / 16 * 16);
    double best_cpu = 1e9, best_wall = 1e9;
    for (int r = 0; r < reps; ++r) {
      const unsigned char* w = W.data() + (r % copies) * wbytes;
      std::atomic<long> next{0};
      std::vector<double> cpu(threads);
      double w0 = wall_now();
      auto work = [&](int t) { double c0 = cpu_now(); for (long n0; (n0 = next.fetch_add(rows)) < N;) run(kk, w, n0, std::min(N, n0 + rows), y.data()); cpu[t] = cpu_now() - c0; };
      if (threads == 1) work(0); else { std::vector<std::thread> th; for (int t = 0; t < threads; ++t) th.emplace_back(work, t); for (auto& t : th) t.join(); }
      double wall = wall_now() - w0, c = 0; for (double v : cpu) c += v;
      best_cpu = std::min(best_cpu, c); best_wall = std::min(best_wall, wall);
    }
    std::printf("%s %-16s cpu %.3f ms (%.0f GFLOP/s/thread)  wall %.3f ms (%.0f GFLOP/s, %.1f GB/s)\n", i8 ? "int8" : "bf16", argv[a],
                best_cpu * 1e3, 2.0*M*K*N/best_cpu/1e9, best_wall * 1e3, 2.0*M*K*N/best_wall/1e9, wbytes / best_wall / 1e9);
  }
}
