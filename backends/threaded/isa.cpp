#include "isa.h"

#include <sonde/error.h>

namespace sonde::threaded {

namespace {
// The AVX-512 TU is built with -mavx512f/bw/vl/vnni and -mfma; the AVX2 TU with -mavx2/-mfma/-mf16c.
bool has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma");
}
bool has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
}  // namespace

std::vector<std::string> available_isas() {
  std::vector<std::string> out;
  if (has_avx512()) out.push_back("avx512");
  if (has_avx2()) out.push_back("avx2");
  out.push_back("scalar");
  return out;
}

const Kernels& select_kernels(const std::string& request) {
  const auto isas = available_isas();
  const std::string pick = request.empty() ? isas.front() : request;
  bool ok = false;
  for (const auto& i : isas) ok = ok || i == pick;
  if (!ok) {
    std::string list;
    for (const auto& i : isas) list += (list.empty() ? "" : ", ") + i;
    runtime_error("backend threaded: ISA '{}' (SONDE_THREADED_ISA) is not available on this CPU; available: {}", pick, list);
  }
  if (pick == "avx512") return kernels_avx512();
  if (pick == "avx2") return kernels_avx2();
  return kernels_scalar();
}

}  // namespace sonde::threaded
