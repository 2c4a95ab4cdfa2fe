#pragma once
// What this CPU can run, asked once per process: the threaded backend picks its kernel table
// from it, `sonde bench` reports it, and the streaming read picks its widest loads.
#include <string>

namespace sonde::host {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false;
  bool avx512dq = false, avx512bf16 = false;  // the threaded backend's --compute kernels (lowp.h)
  bool amx_tile = false, amx_bf16 = false;     // CPUID; Linux must also grant the tile data (lowp_select.cpp)
};

// The features of the CPU this process runs on (all false off x86-64).
const CpuFeatures& cpu_features();

// The widest vector ISA a run-time dispatching kernel may use here: "avx512" (F, BW, VL and
// FMA; VNNI is reported but no kernel needs it since q8 is W8A16), "avx2" (with FMA and F16C),
// or "scalar".
std::string widest_isa();

}  // namespace sonde::host
