// Register-only issue rates of vfmadd231ps, vdpbf16ps and vpdpbusd (zmm) on one thread: 24
// independent accumulators (distinct starting values, so the compiler cannot merge the chains),
// no memory operands, thread CPU time. The ideal of a Linear kernel in each --compute mode is
// its instruction count at these rates (bench/README.md, "Batched decode"). Not built by CMake
// (it needs AVX512_BF16 and VNNI to run): g++ -O3 -march=native -o isa_peak bench/isa_peak.cpp
#include <immintrin.h>
#include <chrono>
#include <ctime>
static double cpu_now(){timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t); return t.tv_sec+1e-9*t.tv_nsec;}
#include <cstdio>
// Register-only loops: 24 independent accumulators, one instruction kind each.
template <class F> double rate(F f, long iters) {
  double t0 = cpu_now();
  f(iters);
  double t1 = cpu_now();
  return iters * 24.0 / (t1 - t0);
}
#define ACCS(T, init) T a0=init(0),a1=init(1),a2=init(2),a3=init(3),a4=init(4),a5=init(5),a6=init(6),a7=init(7),a8=init(8),a9=init(9),a10=init(10),a11=init(11),a12=init(12),a13=init(13),a14=init(14),a15=init(15),a16=init(16),a17=init(17),a18=init(18),a19=init(19),a20=init(20),a21=init(21),a22=init(22),a23=init(23);
#define SINK(op) volatile float s; s = 0; { auto t=op(a0,a1); t=op(t,a2);t=op(t,a3);t=op(t,a4);t=op(t,a5);t=op(t,a6);t=op(t,a7);t=op(t,a8);t=op(t,a9);t=op(t,a10);t=op(t,a11);t=op(t,a12);t=op(t,a13);t=op(t,a14);t=op(t,a15);t=op(t,a16);t=op(t,a17);t=op(t,a18);t=op(t,a19);t=op(t,a20);t=op(t,a21);t=op(t,a22);t=op(t,a23); s = ((float*)&t)[0]; (void)s; }
#define DO24(X) X(a0);X(a1);X(a2);X(a3);X(a4);X(a5);X(a6);X(a7);X(a8);X(a9);X(a10);X(a11);X(a12);X(a13);X(a14);X(a15);X(a16);X(a17);X(a18);X(a19);X(a20);X(a21);X(a22);X(a23);
__attribute__((noinline)) void fma_loop(long n) {
  ACCS(__m512, _mm512_set1_ps) __m512 x = _mm512_set1_ps(1.0001f), y = _mm512_set1_ps(0.999f);
  for (long i = 0; i < n; ++i) { asm volatile("" : "+v"(x), "+v"(y));
#define F(a) a = _mm512_fmadd_ps(x, y, a)
    DO24(F) }
  SINK(_mm512_add_ps)
}
__attribute__((noinline)) void dp_loop(long n) {
  ACCS(__m512, _mm512_set1_ps) __m512i x = _mm512_set1_epi16(0x3f80), y = _mm512_set1_epi16(0x3f80);
  for (long i = 0; i < n; ++i) { asm volatile("" : "+v"(x), "+v"(y));
#define D(a) a = _mm512_dpbf16_ps(a, (__m512bh)x, (__m512bh)y)
    DO24(D) }
  SINK(_mm512_add_ps)
}
__attribute__((noinline)) void vnni_loop(long n) {
  ACCS(__m512i, _mm512_set1_epi32) __m512i x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(1);
  for (long i = 0; i < n; ++i) { asm volatile("" : "+v"(x), "+v"(y));
#define V(a) a = _mm512_dpbusd_epi32(a, x, y)
    DO24(V) }
  SINK(_mm512_add_epi32)
}
int main() {
  const long n = 20000000;
  for (int r = 0; r < 2; ++r) {
    double f = rate(fma_loop, n), d = rate(dp_loop, n), v = rate(vnni_loop, n);
    std::printf("per second, one thread: vfmadd231ps zmm %.3g (%.0f GFLOP/s)  vdpbf16ps zmm %.3g (%.0f GFLOP/s)  vpdpbusd zmm %.3g (%.0f GOP/s)\n",
                f, f * 32 / 1e9, d, d * 64 / 1e9, v, v * 128 / 1e9);
  }
}
