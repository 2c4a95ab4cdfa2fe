#include <sonde/host/cpu.h>

namespace sonde::host {

namespace {
CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  f.amx_tile = __builtin_cpu_supports("amx-tile");
  f.amx_bf16 = __builtin_cpu_supports("amx-bf16");
#endif
  return f;
}
}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string widest_isa() {
  const auto& f = cpu_features();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.fma) return "avx512";
  if (f.avx2 && f.fma && f.f16c) return "avx2";
  return "scalar";
}

}  // namespace sonde::host
