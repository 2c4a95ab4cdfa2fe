// A generation prefill runs the final norm and the LM head at each row's last slot alone
// (ForwardInput::last_logits_only): its logits must be the full head's last row, and a tapped
// hook_logits must still see every slot. The full-head run is the independent side here.
#include <sonde/session.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "made_models.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

// Two rows, the second left-padded by 3 (model-spec §0.8), 7 slots.
ForwardInput prefill() {
  ForwardInput in;
  in.batch = 2;
  in.tokens = 7;
  in.ids = {1619, 1366, 882, 1837, 1886, 1546, 925, 0, 0, 0, 776, 1012, 1190, 44};
  in.positions = {0, 1, 2, 3, 4, 5, 6, 1, 1, 1, 0, 1, 2, 3};
  in.mask = {1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1};
  return in;
}

// Row r's last slot of `full` [B, T, V] against row r of `last` [B, 1, V]: bit for bit on a
// batch-invariant backend (the head's Linear sums a row alike for 1 or T rows), else within
// 1e-5 of the scale (cpu-blas: GEMV for one row, GEMM for T).
void expect_last_rows(const Tensor& full, const Tensor& last, bool exact) {
  const std::int64_t B = full.shape()[0], T = full.shape()[1], V = full.shape()[2];
  ASSERT_EQ(last.shape(), (Shape{B, 1, V}));
  for (std::int64_t r = 0; r < B; ++r) {
    const float* want = full.data<float>() + (r * T + T - 1) * V;
    const float* got = last.data<float>() + r * V;
    if (exact) {
      EXPECT_EQ(std::memcmp(want, got, static_cast<std::size_t>(V) * sizeof(float)), 0) << "row " << r;
      continue;
    }
    double err = 0, scale = 0;
    for (std::int64_t v = 0; v < V; ++v) {
      err = std::max(err, static_cast<double>(std::abs(want[v] - got[v])));
      scale = std::max(scale, static_cast<double>(std::abs(want[v])));
    }
    EXPECT_LE(err / scale, 1e-5) << "row " << r;
  }
}

TEST(LastSlotHead, LogitsAreTheFullHeadsLastRow) {
  const auto model = made_model("qwen2", "tiny", 21);
  for (const auto& backend : built_backends()) {
    SCOPED_TRACE(backend);
    auto session = Session::open(SessionOptions{model.string(), backend, 1, plugin_root().string()});
    const bool exact = backend != "cpu-blas";
    ForwardInput in = prefill();
    const Tensor full = session->forward(in, true, {}, {});
    ASSERT_EQ(full.shape(), (Shape{2, 7, session->config().vocab_size}));
    in.last_logits_only = true;
    expect_last_rows(full, session->forward(in, true, {}, {}), exact);
    // The KV-cached prefill (what generation runs) alike.
    KvCache cache = session->new_kv_cache(2, 8);
    expect_last_rows(full, session->forward_cached(in, cache, {}, {}), exact);
  }
}

TEST(LastSlotHead, TappedHeadHooksSeeEverySlot) {
  const auto model = made_model("qwen2", "tiny", 21);
  auto session = Session::open(SessionOptions{model.string(), "reference", 1, plugin_root().string()});
  ForwardInput in = prefill();
  const Tensor full = session->forward(in, true, {}, {});
  in.last_logits_only = true;
  for (const std::string hook : {"hook_logits", "ln_final.hook_out"}) {
    SCOPED_TRACE(hook);
    Shape seen;
    const Tensor logits = session->forward(in, true, {hook}, [&](const std::string& h, const TensorView& v) {
      if (h == hook) seen = v.shape;
    });
    EXPECT_EQ(seen[0], 2);
    EXPECT_EQ(seen[1], 7);
    ASSERT_EQ(logits.shape(), full.shape());
    EXPECT_EQ(std::memcmp(logits.data<float>(), full.data<float>(), full.view().nbytes()), 0);
  }
}

}  // namespace
}  // namespace sonde::test
