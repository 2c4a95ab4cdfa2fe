#include "linear_dispatch.h"

namespace sonde::threaded {

namespace {
constexpr std::int64_t kGemvGroup = 3;  // x rows per pass of the GEMV kernel over W
}

double gemv_seconds(std::int64_t M, std::int64_t K, std::int64_t N, double w_bytes, const HostRates& r) {
  // A pass of a short last group costs about a full one: the kernel's time goes to W's loads.
  const double passes = static_cast<double>((M + kGemvGroup - 1) / kGemvGroup);
  const double kn = static_cast<double>(K) * static_cast<double>(N);
  return kn * w_bytes / r.read_bytes_per_s + passes * 2.0 * kGemvGroup * kn / r.gemv_flops_per_s;
}

double gemm_seconds(std::int64_t M, std::int64_t K, std::int64_t N, double w_bytes, const HostRates& r) {
  const double kn = static_cast<double>(K) * static_cast<double>(N);
  return kn * w_bytes / r.read_bytes_per_s + kn * r.gemm_fixed_s_per_weight +
         2.0 * static_cast<double>(M) * kn / r.gemm_flops_per_s;
}

LinearPath choose_linear(std::int64_t M, std::int64_t K, std::int64_t N, double w_bytes, const HostRates& r,
                         LinearMode mode) {
  if (mode == LinearMode::gemv) return LinearPath::gemv;
  if (mode == LinearMode::gemm) return LinearPath::gemm;
  if (!(r.read_bytes_per_s > 0) || !(r.gemm_flops_per_s > 0) || !(r.gemv_flops_per_s > 0) || M <= kGemvGroup) return LinearPath::gemv;
  return gemm_seconds(M, K, N, w_bytes, r) < gemv_seconds(M, K, N, w_bytes, r) ? LinearPath::gemm : LinearPath::gemv;
}

bool parse_linear_mode(std::string_view s, LinearMode& mode) {
  if (s.empty() || s == "auto") mode = LinearMode::automatic;
  else if (s == "model") mode = LinearMode::model;
  else if (s == "gemv") mode = LinearMode::gemv;
  else if (s == "gemm") mode = LinearMode::gemm;
  else return false;
  return true;
}

}  // namespace sonde::threaded
