// A session keeps the graph and plan of a forward call and reuses them for calls alike but for the
// past length (decode steps), re-inferring the shapes: the reshaped graph must equal one built for
// that past, and the reused plans must compute what a forward over the whole sequence does.
#include <sonde/model.h>
#include <sonde/registry.h>
#include <sonde/session.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

std::filesystem::path tiny_model(const std::string& arch, const std::filesystem::path& dir) {
  const auto out = dir / arch;
  const auto r = run_sonde({"make-model", "--arch", arch, "--preset", "tiny", "--seed", "11", "--out", out.string()});
  if (r.exit_code != 0) throw std::runtime_error("make-model failed: " + r.output);
  return out;
}

Graph build(Session& s, const BatchShape& shape) {
  auto model = PluginRegistry::instance().model_for(s.config().model_type);
  model->configure(s.config());
  GraphBuilder b([&](const std::string& name) { return s.backend().weight(name); });
  model->build(shape, b);
  return b.finish();
}

class PlanReuse : public ::testing::TestWithParam<std::string> {};

TEST_P(PlanReuse, ReshapedGraphEqualsOneBuiltForThatPast) {
  const auto dir = temp_dir();
  auto s = Session::open(SessionOptions{tiny_model(GetParam(), dir).string(), "reference", 1, plugin_root().string()});
  const std::int64_t nkv = s->config().num_key_value_heads;
  const auto& c = s->config();
  const std::int64_t d = c.head_dim ? c.head_dim : c.hidden_size / c.num_attention_heads;
  for (const bool mask : {false, true}) {
    SCOPED_TRACE(mask ? "with a mask" : "no mask");
    Graph g = build(*s, BatchShape{2, 1, mask, true, 3});
    for (const std::int64_t past : {4, 9, 1}) {
      g.reshape_inputs([&](const std::string& ref, Shape& shape) {
        if (ref.starts_with("past_")) shape = Shape{2, past, nkv, d};
        if (ref == "mask") shape = Shape{2, past + 1};
      });
      const Graph fresh = build(*s, BatchShape{2, 1, mask, true, past});
      ASSERT_EQ(g.nodes.size(), fresh.nodes.size());
      int grown = 0;
      for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        SCOPED_TRACE(fresh.nodes[i].name());
        EXPECT_EQ(g.nodes[i].op, fresh.nodes[i].op);
        EXPECT_EQ(g.nodes[i].shape, fresh.nodes[i].shape) << "past " << past;
        EXPECT_EQ(g.nodes[i].dtype, fresh.nodes[i].dtype);
        grown += g.nodes[i].op == OpKind::Concat && g.nodes[i].shape[1] == past + 1;
      }
      EXPECT_EQ(grown, 2 * s->config().num_hidden_layers) << "every layer's keys and values follow the past";
    }
  }
}

TEST_P(PlanReuse, BadPastShapeNamesTheOp) {
  const auto dir = temp_dir();
  auto s = Session::open(SessionOptions{tiny_model(GetParam(), dir).string(), "reference", 1, plugin_root().string()});
  Graph g = build(*s, BatchShape{1, 1, false, true, 3});
  try {
    g.reshape_inputs([](const std::string& ref, Shape& shape) {
      if (ref == "past_k.0") shape = Shape{2, 5, shape[2], shape[3]};  // batch 2 against the new keys' 1
    });
    FAIL() << "a past of another batch size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Concat"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 5"), std::string::npos) << e.what();
  }
}

// A diffusion run calls forward with one shape at every step: one graph, and the reused plan gives
// the bits a fresh session gives.
TEST_P(PlanReuse, ForwardOfOneShapeBuildsOneGraphAndKeepsItsBits) {
  const auto dir = temp_dir();
  const auto model = tiny_model(GetParam(), dir).string();
  auto s = Session::open(SessionOptions{model, "reference", 1, plugin_root().string()});
  const auto before = s->graphs_built();
  const ForwardInput a{1, 4, {9, 8, 7, 6}, {}, {}}, b{1, 4, {1, 2, 3, 4}, {}, {}};
  s->forward(a, true, {}, {});
  const Tensor reused = s->forward(b, true, {}, {});
  EXPECT_EQ(s->graphs_built(), before + 1);
  auto fresh = Session::open(SessionOptions{model, "reference", 1, plugin_root().string()});
  const Tensor own = fresh->forward(b, true, {}, {});
  ASSERT_EQ(reused.shape(), own.shape());
  const auto n = static_cast<std::size_t>(own.shape().numel());
  EXPECT_TRUE(std::equal(own.data<float>(), own.data<float>() + n, reused.data<float>()));
  EXPECT_NE(reused.data<float>()[0], s->forward(a, true, {}, {}).data<float>()[0]) << "another input, other logits";
}

// Greedy decode, every step through forward_cached (reused plans) against a forward over the
// whole sequence so far (a graph of its own each time): one row (whose keys and values are
// written straight into the cache) and a batch of two, the first left-padded (a copy each
// step). Qwen2 only: Dream's attention is bidirectional, so its cached keys are not what a full
// forward computes.
class PlanReuseQwen2 : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(PlanReuseQwen2, DecodeBuildsTwoGraphsAndMatchesFullForwards) {
  const auto& [backend, rows] = GetParam();
  const auto dir = temp_dir();
  auto s = Session::open(SessionOptions{tiny_model("qwen2", dir).string(), backend, 1, plugin_root().string()});
  const std::int64_t B = rows, P0 = 5, steps = 6, V = s->config().vocab_size;
  std::vector<std::vector<std::int32_t>> seq{{0, 0, 7, 81, 12}, {3, 44, 9, 250, 61}};  // row 0 left-padded
  std::vector<std::vector<std::uint8_t>> mask{{0, 0, 1, 1, 1}, {1, 1, 1, 1, 1}};
  if (B == 1) seq = {seq[1]}, mask = {mask[1]};
  const bool masked = B > 1;  // one row runs without a mask, as a single prompt does
  auto cache = s->new_kv_cache(B, P0 + steps + 2);
  const auto built_before = s->graphs_built();
  std::int64_t T = P0;
  for (std::int64_t step = 0; step <= steps; ++step) {
    ForwardInput in{B, T, {}, {}, {}};
    ForwardInput full{B, cache.filled + T, {}, {}, {}};
    for (std::int64_t b = 0; b < B; ++b) {
      const auto& row = seq[static_cast<std::size_t>(b)];
      const auto& m = mask[static_cast<std::size_t>(b)];
      const auto pads = std::count(m.begin(), m.end(), 0);
      for (std::int64_t t = cache.filled; t < cache.filled + T; ++t) {
        in.ids.push_back(row[static_cast<std::size_t>(t)]);
        in.positions.push_back(static_cast<std::int32_t>(std::max<std::int64_t>(0, t - pads)));
      }
      for (std::int64_t t = 0; t < cache.filled + T; ++t) {
        full.ids.push_back(row[static_cast<std::size_t>(t)]);
        full.positions.push_back(static_cast<std::int32_t>(std::max<std::int64_t>(0, t - pads)));
      }
      if (masked) in.mask.insert(in.mask.end(), m.begin(), m.end());
      if (masked) full.mask.insert(full.mask.end(), m.begin(), m.end());
    }
    const Tensor cached = s->forward_cached(in, cache);
    const Tensor whole = s->forward(full, true, {}, {});
    for (std::int64_t b = 0; b < B; ++b) {
      const float* c = cached.data<float>() + ((b + 1) * T - 1) * V;
      const float* w = whole.data<float>() + ((b + 1) * full.tokens - 1) * V;
      double err = 0, scale = 0;
      for (std::int64_t v = 0; v < V; ++v) {
        err = std::max(err, std::abs(static_cast<double>(c[v]) - w[v]));
        scale = std::max(scale, std::abs(static_cast<double>(w[v])));
      }
      EXPECT_LE(err / scale, 1e-5) << "step " << step << " row " << b;
      const auto next = static_cast<std::int32_t>(std::max_element(c, c + V) - c);
      seq[static_cast<std::size_t>(b)].push_back(next);
      mask[static_cast<std::size_t>(b)].push_back(1);
    }
    T = 1;
  }
  // The cached prefill and all the steps; the full forwards: one per length, all distinct.
  EXPECT_EQ(s->graphs_built() - built_before, 2 + (steps + 1));

  // Another selection of taps is another plan; going back reuses the first.
  const auto before = s->graphs_built();
  int delivered = 0;
  const auto step_input = [&] {  // the mask rows already cover the token the last step chose
    ForwardInput in{B, 1, {5, 6}, {7, 8}, {}};
    in.ids.resize(static_cast<std::size_t>(B));
    in.positions.resize(static_cast<std::size_t>(B));
    for (auto& row : mask) {
      if (masked) in.mask.insert(in.mask.end(), row.begin(), row.end());
      row.push_back(1);
    }
    return in;
  };
  s->forward_cached(step_input(), cache, {"blocks.0.hook_resid_post"}, [&](const std::string& hook, const TensorView& v) {
    EXPECT_EQ(hook, "blocks.0.hook_resid_post");
    EXPECT_EQ(v.shape, (Shape{B, 1, s->config().hidden_size}));
    ++delivered;
  });
  EXPECT_EQ(delivered, 1);
  EXPECT_EQ(s->graphs_built(), before + 1);
  s->forward_cached(step_input(), cache);
  EXPECT_EQ(s->graphs_built(), before + 1);
  EXPECT_EQ(cache.filled, cache.capacity);
}

INSTANTIATE_TEST_SUITE_P(Models, PlanReuse, ::testing::Values("qwen2", "dream"));
INSTANTIATE_TEST_SUITE_P(BackendsAndRows, PlanReuseQwen2, ::testing::Combine(::testing::ValuesIn(built_backends()), ::testing::Values(1, 2)),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_rows" + std::to_string(std::get<1>(info.param));
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace sonde::test
