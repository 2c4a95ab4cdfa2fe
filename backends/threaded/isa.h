#pragma once
// Run-time choice of the kernel table: the best the CPU supports, or the one named by
// SONDE_THREADED_ISA (scalar, avx2, avx512) for tests; asking for one the CPU lacks is an error.
#include "kernels.h"

#include <string>
#include <vector>

namespace sonde::threaded {

// The ISAs this CPU can run, best first ("avx512", "avx2", "scalar").
std::vector<std::string> available_isas();
// `request` empty: the best available. Throws sonde::Error for an unknown or unsupported name.
const Kernels& select_kernels(const std::string& request);

}  // namespace sonde::threaded
