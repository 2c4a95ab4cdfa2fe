// The SAE on host rows (sae.h): sparse storage's row selection and encode/decode outside a graph.
// encode follows the graph insert_saes builds node for node (NormRescale, the encoder Linear with
// b_dec folded into its bias, SaeActivation), so its values are the hook points' to rounding.
#include <sonde/error.h>
#include <sonde/sae.h>
#include <sonde/sae_f32.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace sonde {

bool sae_acts_post_hook(const std::string& hook) {
  static constexpr std::string_view kSuffix = ".hook_sae_acts_post";
  return hook.size() > kSuffix.size() && std::string_view(hook).substr(hook.size() - kSuffix.size()) == kSuffix;
}

namespace {

// Whether any of p[0..16) is non-zero (!= 0.0f: not +0 or -0; NaNs count): its bits less the
// sign, OR-ed 4 lanes at a time (GCC's vector extension; the plain count loop was not vectorised).
bool any_nonzero(const float* p) {
  using v4 = std::uint32_t __attribute__((vector_size(16)));
  v4 bits = {0, 0, 0, 0};
  for (int q = 0; q < 16; q += 4) {
    v4 s;
    std::memcpy(&s, p + q, sizeof s);
    bits |= s << 1;
  }
  return (bits[0] | bits[1] | bits[2] | bits[3]) != 0;
}

}  // namespace

void sparse_row_entries(const float* row, std::int64_t n, std::int64_t k, std::vector<std::int32_t>& idx) {
  idx.clear();
  // A sparse row is mostly zeros: blocks of 16 without a non-zero are skipped after one
  // vectorised test.
  const auto keep = [&](std::int64_t j) {
    if (row[j] != 0.0f) idx.push_back(static_cast<std::int32_t>(j));
  };
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    if (any_nonzero(row + j))
      for (std::int64_t t = 0; t < 16; ++t) keep(j + t);
  for (; j < n; ++j) keep(j);
  if (k > 0 && static_cast<std::int64_t>(idx.size()) > k) {
    std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), [&](std::int32_t a, std::int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    idx.resize(static_cast<std::size_t>(k));
    std::sort(idx.begin(), idx.end());
  }
}

namespace {

// y[N] = W[N, K] x[K] + b[N], accumulated in double, rounded to f32 as the Linear node's output is.
void linear(const Tensor& w, const Tensor& b, const double* x, float* y) {
  const std::int64_t N = w.shape()[0], K = w.shape()[1];
  for (std::int64_t n = 0; n < N; ++n) {
    const float* wr = w.data<float>() + n * K;
    double acc = b.data<float>()[n];
    for (std::int64_t k = 0; k < K; ++k) acc += static_cast<double>(wr[k]) * x[k];
    y[n] = static_cast<float>(acc);
  }
}

}  // namespace

std::vector<float> sae_encode(const Sae& sae, const float* x, std::int64_t rows) {
  const SaeConfig& c = sae.config();
  const SaeWeights& w = sae.weights();
  const auto D = static_cast<std::size_t>(c.d_in), F = static_cast<std::size_t>(c.d_sae);
  std::vector<float> out(static_cast<std::size_t>(rows) * F);
  std::vector<double> xs(D);
  std::vector<float> pre(F), gate(F);
  std::vector<std::int64_t> idx;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<std::size_t>(r) * D;
    double scale = 1;  // constant_norm_rescale: x' = sqrt(d_in) / |x| * x, as NormRescale rounds it
    if (c.norm == SaeNorm::ConstantNormRescale) {
      double ss = 0;
      for (std::size_t i = 0; i < D; ++i) ss += static_cast<double>(xr[i]) * xr[i];
      scale = 1.0 / (std::sqrt(ss) / std::sqrt(static_cast<double>(D)));
    }
    for (std::size_t i = 0; i < D; ++i) xs[i] = static_cast<float>(xr[i] * scale);
    float* y = out.data() + static_cast<std::size_t>(r) * F;
    if (c.arch == SaeArch::Gated) {
      linear(w.enc, w.enc_bias, xs.data(), gate.data());
      linear(w.mag, w.mag_bias, xs.data(), pre.data());
      for (std::size_t j = 0; j < F; ++j) y[j] = gate[j] > 0.0f && pre[j] > 0.0f ? pre[j] : 0.0f;
      continue;
    }
    linear(w.enc, w.enc_bias, xs.data(), pre.data());
    switch (c.arch) {
      case SaeArch::JumpRelu:
        for (std::size_t j = 0; j < F; ++j) y[j] = pre[j] > w.threshold.data<float>()[j] && pre[j] > 0.0f ? pre[j] : 0.0f;
        break;
      case SaeArch::TopK:
        std::fill(y, y + F, 0.0f);
        ops::top_k_indices(pre.data(), c.d_sae, c.k, idx);
        for (const auto j : idx) y[j] = pre[static_cast<std::size_t>(j)] > 0.0f ? pre[static_cast<std::size_t>(j)] : 0.0f;
        break;
      default:
        for (std::size_t j = 0; j < F; ++j) y[j] = pre[j] > 0.0f ? pre[j] : 0.0f;
    }
  }
  return out;
}

std::vector<float> sae_decode(const Sae& sae, const float* f, std::int64_t rows) {
  const SaeConfig& c = sae.config();
  const auto F = static_cast<std::size_t>(c.d_sae), O = static_cast<std::size_t>(c.d_out);
  std::vector<float> out(static_cast<std::size_t>(rows) * O);
  std::vector<double> fr(F);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::copy(f + static_cast<std::size_t>(r) * F, f + static_cast<std::size_t>(r + 1) * F, fr.begin());
    linear(sae.weights().dec, sae.weights().b_dec, fr.data(), out.data() + static_cast<std::size_t>(r) * O);
  }
  return out;
}

}  // namespace sonde
