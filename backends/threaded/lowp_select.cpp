#include "lowp_select.h"

#include <sonde/error.h>
#include <sonde/host/cpu.h>

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace sonde::threaded {

namespace {
// Linux hands out the AMX tile data only on request (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA,
// once per process); without it the first tile instruction faults.
bool amx_permitted() {
#if defined(__linux__) && defined(__x86_64__)
  static const bool ok = [] {
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return ::syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
#else
  return false;
#endif
}

struct Candidate {
  const LowpKernels& k;
  bool available;
};

// Best first; the AVX-512 tables need F/BW/VL/DQ and FMA (lowp_*.cpp's flags), AMX its tiles
// and the kernel's permission.
std::vector<Candidate> candidates(Compute mode) {
  const auto& f = host::cpu_features();
  const bool avx512 = f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma;
  std::vector<Candidate> c;
  if (mode == Compute::bf16) c.push_back({lowp_amx(), f.amx_tile && f.amx_bf16 && amx_permitted()});
  if (mode == Compute::bf16) c.push_back({lowp_avx512bf16(), avx512 && f.avx512bf16});
  if (mode == Compute::int8) c.push_back({lowp_vnni(), avx512 && f.avx512vnni});
  c.push_back({lowp_avx512(), avx512});
  c.push_back({lowp_scalar(), true});
  return c;
}
}  // namespace

std::vector<std::string> available_lowp(Compute mode) {
  std::vector<std::string> out;
  for (const Candidate& c : candidates(mode))
    if (c.available) out.emplace_back(c.k.name);
  return out;
}

const LowpKernels* select_lowp(Compute mode, const std::string& request) {
  if (mode == Compute::f32) return nullptr;
  std::string names;
  for (const Candidate& c : candidates(mode)) {
    if (c.available && (request.empty() || request == c.k.name)) return &c.k;
    names += (names.empty() ? "" : ", ") + std::string(c.k.name) + (c.available ? "" : " (not on this CPU)");
  }
  runtime_error("backend threaded: --compute {} kernels '{}' (SONDE_THREADED_LOWP) are not available here; the {} kernels: {}",
                compute_name(mode), request, compute_name(mode), names);
}

}  // namespace sonde::threaded
