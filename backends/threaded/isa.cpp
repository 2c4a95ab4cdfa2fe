#include "isa.h"

#include <sonde/error.h>
#include <sonde/host/cpu.h>

namespace sonde::threaded {

// The AVX-512 TUs are built with -mavx512f/bw/vl and -mfma, the AVX2 TU with -mavx2/-mfma/-mf16c:
// sonde::host::widest_isa() asks for exactly those.
std::vector<std::string> available_isas() {
  const std::string widest = host::widest_isa();
  if (widest == "avx512") return {"avx512", "avx2", "scalar"};
  if (widest == "avx2") return {"avx2", "scalar"};
  return {"scalar"};
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
