#pragma once
// The --compute bf16/int8 kernel table (lowp.h) for this CPU, chosen once at init: the best one
// built whose instructions the CPU has (CPUID), or the one SONDE_THREADED_LOWP names (tests force
// each in turn; naming one the CPU lacks is an error that lists them).
#include "lowp.h"

#include <sonde/compute.h>

#include <string>
#include <vector>

namespace sonde::threaded {

// The tables of a mode this CPU runs, best first (e.g. "avx512bf16", "avx512", "scalar").
std::vector<std::string> available_lowp(Compute mode);
// Null for f32 (the exact kernels of kernels.h); `request` empty: the best available.
const LowpKernels* select_lowp(Compute mode, const std::string& request);

}  // namespace sonde::threaded
