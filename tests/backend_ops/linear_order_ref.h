#pragma once
// The exact f32 Linear's documented summation order as a scalar emulation, written from the
// header comment of backends/threaded/gemv_avx512.cpp (not from any kernel's code): for one
// output, 32 lane chains of fused multiply-adds from +0 over the elements k = 32 s + j (s
// ascending; elements past K count as 0 * 0), the halves added (j, j + 16), then the 16 lanes
// reduced as a tree: (j, j + 8), (j, j + 4), (j, j + 2), (j, j + 1). Shared by the tests that pin
// the GEMV/GEMM paths (linear_order_test.cpp) and the packed GEMM (gemm_packed_order_test.cpp).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

namespace sonde::test {

inline float linear_documented_dot(const float* x, const float* w, std::int64_t K) {
  float a[32] = {};
  for (std::int64_t s = 0; s * 32 < K; ++s)
    for (int j = 0; j < 32; ++j) {
      const std::int64_t k = s * 32 + j;
      a[j] = std::fmaf(k < K ? w[k] : 0.0f, k < K ? x[k] : 0.0f, a[j]);
    }
  float c[16];
  for (int j = 0; j < 16; ++j) c[j] = a[j] + a[j + 16];
  for (int half = 8; half >= 1; half /= 2)
    for (int j = 0; j < half; ++j) c[j] = c[j] + c[j + half];
  return c[0];
}

// An environment variable set for a scope (the threaded backend reads SONDE_THREADED_LINEAR when made).
struct LinearEnvScope {
  std::string name;
  LinearEnvScope(std::string n, const std::string& v) : name(std::move(n)) { setenv(name.c_str(), v.c_str(), 1); }
  ~LinearEnvScope() { unsetenv(name.c_str()); }
};

}  // namespace sonde::test
