#pragma once
// Which path a Linear on f32/f16/bf16 or q8 weights takes, from the work alone. Both paths
// sum every output in the same order (the GEMV kernel's; the GEMM path's packed kernel adds the
// same pairs, gemm_avx512.cpp), so the choice changes the speed, never a bit of the result: a
// prompt's numbers do not depend on how many rows share its micro-batch.
//  - gemv: W is read from memory in its own dtype and widened in the kernel; with more than 3
//    x rows the kernel takes W in chunks of about 256 KB that stay in L2 while every group of
//    3 x rows passes over them: one read of W from memory plus ceil(M / 3) passes at the
//    kernel's in-cache rate.
//  - gemm: W is read once, packed as f32 panels that stay in L2 while all x rows pass over them:
//    one read of W, the packing (a cost per weight whatever the rows), and the arithmetic at
//    the host's GEMM rate. Without the widening's share a few rows looked cheaper on the GEMM
//    whenever its rate came out above 2/3 of the GEMV's, and 4-row decode steps ran 2.8x slower.
// Plain C++ (no sonde headers) so that the unit test can link it alone.
#include <cstdint>
#include <string_view>

namespace sonde::threaded {

enum class LinearPath { gemv, gemm };
// SONDE_THREADED_LINEAR=auto|model|gemv|gemm: auto is the model's prediction corrected by timing the
// calls (linear_tuner.h), model the prediction alone (to compare the two in one build).
enum class LinearMode { automatic, model, gemv, gemm };

// Measured once per process and pool size, all over the whole pool: a streaming read's bytes/s,
// the GEMM path's flop/s and its time per weight (the slope and intercept of two runs at
// different row counts), and the GEMV kernel's flop/s on W chunks in L2 (groups of 3 x rows),
// for bf16 W and for q8 W (whose widening costs one more operation per vector: about 0.8x
// the bf16 rate on the AVX-512 host of bench/README.md, so q8 turns to the GEMM path sooner).
struct HostRates {
  double read_bytes_per_s = 0;
  double gemm_flops_per_s = 0;
  double gemv_flops_per_s = 0;
  double gemm_fixed_s_per_weight = 0;  // the GEMM path's time per weight element whatever M
  double gemv_q8_flops_per_s = 0;
};

// Seconds each path is predicted to take on an M x K x N Linear whose W elements are
// `w_bytes` each (2 for bf16/f16, 4 for f32, 1.125 for q8: 32 int8 and an f32 scale per block).
double gemv_seconds(std::int64_t M, std::int64_t K, std::int64_t N, double w_bytes, const HostRates& r);
double gemm_seconds(std::int64_t M, std::int64_t K, std::int64_t N, double w_bytes, const HostRates& r);

// The cheaper of the two (gemv on a tie, at most 3 rows, or when a rate is unknown), unless `mode` forces one.
LinearPath choose_linear(std::int64_t M, std::int64_t K, std::int64_t N, double w_bytes, const HostRates& r,
                         LinearMode mode);

// "", "auto", "model", "gemv", "gemm"; anything else gives false.
bool parse_linear_mode(std::string_view s, LinearMode& mode);

}  // namespace sonde::threaded
