// The executor in isolation: backends are GoogleMock doubles, so these tests see exactly which
// nodes are run where. (The real backends are tested in backend_ops and the model tests.)
#include <sonde/error.h>
#include <sonde/executor.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mock_backend.h"

namespace {

using ::testing::_;
using ::testing::HasSubstr;
using ::testing::NiceMock;
using ::testing::Return;

using sonde::test::MockBackend;

// x -> a = x + x -> b = silu_mul(a, a) -> output "out"
sonde::Graph chain() {
  sonde::GraphBuilder b([](const std::string& n) -> sonde::TensorView { sonde::runtime_error("no weight {}", n); });
  auto x = b.input("x", sonde::DType::f32, sonde::Shape{1, 3});
  auto a = b.name(b.add(x, x), "a");
  auto c = b.name(b.silu_mul(a, a), "b");
  b.output("out", c);
  return b.finish();
}

bool is(const sonde::Node& n, sonde::OpKind k) { return n.op == k; }

struct Fixture : ::testing::Test {
  NiceMock<MockBackend> primary, reference;
  std::vector<float> x{1, 2, 3};
  std::map<std::string, sonde::TensorView> feeds{{"x", sonde::TensorView(x.data(), sonde::DType::f32, sonde::Shape{1, 3})}};
  void SetUp() override {
    ON_CALL(primary, info()).WillByDefault(Return(sonde::BackendInfo{"mock", "", 1}));
    ON_CALL(reference, info()).WillByDefault(Return(sonde::BackendInfo{"reference", "", 1}));
    ON_CALL(reference, supports(_, _)).WillByDefault(Return(true));
  }
};

TEST_F(Fixture, RunsOnlyWhatTapsNeedWhenNoOutputIsWanted) {
  ON_CALL(primary, supports(_, _)).WillByDefault(Return(true));
  const auto g = chain();
  sonde::Executor ex(primary, reference);
  const auto plan = ex.plan(g, {}, [](const std::string& h) { return h == "a"; });
  EXPECT_CALL(primary, run(::testing::Truly([](const sonde::Node& n) { return is(n, sonde::OpKind::Add); }), _, _)).Times(1);
  EXPECT_CALL(primary, run(::testing::Truly([](const sonde::Node& n) { return is(n, sonde::OpKind::SiluMul); }), _, _)).Times(0);
  int taps = 0;
  ex.run(plan, feeds, [&](const std::string& h, const sonde::TensorView&) {
    EXPECT_EQ(h, "a");
    ++taps;
  });
  EXPECT_EQ(taps, 1);
}

TEST_F(Fixture, UnsupportedOpsFallBackToReferenceAndAreNoted) {
  ON_CALL(primary, supports(_, _)).WillByDefault([](const sonde::Node& n, std::span<const sonde::DType>) {
    return n.op == sonde::OpKind::Add;
  });
  const auto g = chain();
  sonde::Executor ex(primary, reference);
  const auto plan = ex.plan(g, {"out"}, nullptr);
  ASSERT_EQ(plan.fallbacks.size(), 1u);
  EXPECT_EQ(plan.fallbacks[0], "SiluMul -> reference");
  EXPECT_CALL(primary, run(_, _, _)).Times(1);
  // The reference double writes a known value so we can see it arrive in the output.
  EXPECT_CALL(reference, run(_, _, _)).WillOnce([](const sonde::Node&, std::span<const sonde::TensorView>, const sonde::TensorView& out) {
    for (int i = 0; i < 3; ++i) out.as<float>()[i] = 40.0f + static_cast<float>(i);
  });
  const auto out = ex.run(plan, feeds, nullptr);
  const float* v = out.at("out").data<float>();
  EXPECT_EQ(v[0], 40.0f);
  EXPECT_EQ(v[2], 42.0f);
}

TEST_F(Fixture, TapsSeeTheValueTheBackendWrote) {
  ON_CALL(primary, supports(_, _)).WillByDefault(Return(true));
  ON_CALL(primary, run(_, _, _)).WillByDefault([](const sonde::Node& n, std::span<const sonde::TensorView> in, const sonde::TensorView& out) {
    for (int i = 0; i < 3; ++i) out.as<float>()[i] = in[0].as<float>()[i] * 10.0f + (n.op == sonde::OpKind::Add ? 0.5f : 0.25f);
  });
  const auto g = chain();
  sonde::Executor ex(primary, reference);
  const auto plan = ex.plan(g, {"out"}, [](const std::string& h) { return h == "a" || h == "b"; });
  std::map<std::string, std::vector<float>> seen;
  ex.run(plan, feeds, [&](const std::string& h, const sonde::TensorView& v) { seen[h].assign(v.as<float>(), v.as<float>() + 3); });
  EXPECT_EQ(seen["a"], (std::vector<float>{10.5f, 20.5f, 30.5f}));
  EXPECT_EQ(seen["b"], (std::vector<float>{105.25f, 205.25f, 305.25f}));
}

// A run's output, let go by the caller, is the next run's output buffer: a prefill's logits are
// not mapped and faulted in again on every forward. The backend sees it as the last run left it
// (no zero-fill: every op writes its whole output).
TEST_F(Fixture, TheNextRunReusesTheOutputBufferAsItWasLeft) {
  ON_CALL(primary, supports(_, _)).WillByDefault(Return(true));
  std::vector<float> seen_before_write;
  ON_CALL(primary, run(_, _, _)).WillByDefault([&](const sonde::Node& n, std::span<const sonde::TensorView> in, const sonde::TensorView& out) {
    if (n.op == sonde::OpKind::SiluMul) seen_before_write.assign(out.as<float>(), out.as<float>() + 3);
    for (int i = 0; i < 3; ++i) out.as<float>()[i] = in[0].as<float>()[i] + 1.0f;
  });
  const auto g = chain();
  sonde::Executor ex(primary, reference);
  const auto plan = ex.plan(g, {"out"}, {});
  const void* first = nullptr;
  {
    auto out = ex.run(plan, feeds, {});
    first = out.at("out").view().data;
    EXPECT_EQ(std::vector<float>(out.at("out").data<float>(), out.at("out").data<float>() + 3), (std::vector<float>{3, 4, 5}));
  }
  for (int r = 0; r < 3; ++r) {
    auto again = ex.run(plan, feeds, {});
    EXPECT_EQ(again.at("out").view().data, first) << "run " << r;
    EXPECT_EQ(seen_before_write, (std::vector<float>{3, 4, 5})) << "run " << r << ": the buffer was refilled";
  }
}

// A plan is reused after the graph's inputs change shape: the backends see the new shapes, the
// outputs come back in them, and an input fed in the old shape is refused.
TEST_F(Fixture, APlanRunsTheGraphAfterItsInputsChangeShape) {
  ON_CALL(primary, supports(_, _)).WillByDefault(Return(true));
  std::vector<sonde::Shape> seen;
  ON_CALL(primary, run(_, _, _)).WillByDefault([&](const sonde::Node&, std::span<const sonde::TensorView> in, const sonde::TensorView& out) {
    seen.push_back(out.shape);
    for (std::int64_t i = 0; i < out.numel(); ++i) out.as<float>()[i] = in[0].as<float>()[i] + 1.0f;
  });
  auto g = chain();
  sonde::Executor ex(primary, reference);
  const auto plan = ex.plan(g, {"out"}, nullptr);
  g.reshape_inputs([](const std::string& ref, sonde::Shape& s) {
    if (ref == "x") s = sonde::Shape{2, 3};
  });
  EXPECT_EQ(g.nodes[static_cast<std::size_t>(*g.output("out"))].shape, (sonde::Shape{2, 3}));
  EXPECT_THROW(ex.run(plan, feeds, nullptr), sonde::Error);  // x is [1, 3]: the old shape
  std::vector<float> x2{1, 2, 3, 4, 5, 6};
  const auto out = ex.run(plan, {{"x", sonde::TensorView(x2.data(), sonde::DType::f32, sonde::Shape{2, 3})}}, nullptr);
  EXPECT_EQ(seen, (std::vector<sonde::Shape>{{2, 3}, {2, 3}}));
  EXPECT_EQ(out.at("out").shape(), (sonde::Shape{2, 3}));
  EXPECT_EQ(out.at("out").data<float>()[5], 8.0f);  // 6 + 1 + 1
}

// A node placed in the caller's memory is written there (and its readers read it there); a view
// that does not fit (wrong shape, strided) is ignored and the node gets a buffer of its own.
TEST_F(Fixture, PlacedOutputsAreWrittenInTheCallersMemory) {
  ON_CALL(primary, supports(_, _)).WillByDefault(Return(true));
  std::map<sonde::OpKind, const void*> wrote;
  ON_CALL(primary, run(_, _, _)).WillByDefault([&](const sonde::Node& n, std::span<const sonde::TensorView> in, const sonde::TensorView& out) {
    wrote[n.op] = out.data;
    for (std::int64_t i = 0; i < 3; ++i) out.as<float>()[i] = in[0].as<float>()[i] * 2.0f;
  });
  const auto g = chain();
  const int add = *g.find("a");
  sonde::Executor ex(primary, reference);
  const auto plan = ex.plan(g, {"out"}, nullptr);
  std::vector<float> mine(6, -1.0f);
  const sonde::TensorView fits(mine.data(), sonde::DType::f32, sonde::Shape{1, 3});
  const std::pair<int, sonde::TensorView> placed[] = {{add, fits}};
  const auto out = ex.run(plan, feeds, nullptr, placed);
  EXPECT_EQ(wrote[sonde::OpKind::Add], mine.data());
  EXPECT_EQ(mine, (std::vector<float>{2, 4, 6, -1, -1, -1}));
  EXPECT_EQ(out.at("out").data<float>()[2], 12.0f) << "SiluMul read the placed values";

  sonde::TensorView strided = fits;
  strided.strides[1] = 2;
  for (const auto& bad : {sonde::TensorView(mine.data(), sonde::DType::f32, sonde::Shape{3}), strided}) {
    const std::pair<int, sonde::TensorView> ignored[] = {{add, bad}};
    ex.run(plan, feeds, nullptr, ignored);
    EXPECT_NE(wrote[sonde::OpKind::Add], mine.data()) << bad.shape.str();
  }
}

// x feeds four Linears. "a" and "b" read nothing computed besides x and run together, at a's
// step; "c" (its bias is computed) and "d" (on the reference backend) run on their own. Hooks
// still arrive in graph order, each with its own node's value.
TEST_F(Fixture, LinearsSharingTheirInputRunAsSiblingsAtTheFirstOnesStep) {
  std::map<std::string, std::vector<float>> w{{"wa", std::vector<float>(6)}, {"wb", std::vector<float>(12)},
                                             {"wc", std::vector<float>(6)}, {"wd", std::vector<float>(6)},
                                             {"bias", std::vector<float>(2)}};
  const auto view = [&](const std::string& n) {
    const std::int64_t rows = static_cast<std::int64_t>(w.at(n).size()) / 3;
    return n == "bias" ? sonde::TensorView(w.at(n).data(), sonde::DType::f32, sonde::Shape{2})
                       : sonde::TensorView(w.at(n).data(), sonde::DType::f32, sonde::Shape{rows, 3});
  };
  sonde::GraphBuilder b(view);
  auto x = b.input("x", sonde::DType::f32, sonde::Shape{1, 3});
  auto a = b.name(b.linear(x, b.weight("wa")), "a");
  auto s = b.name(b.add(a, a), "s");
  auto bias2 = b.name(b.add(b.weight("bias"), b.weight("bias")), "bias2");
  auto c = b.name(b.linear(x, b.weight("wc"), bias2), "c");
  auto bl = b.name(b.linear(x, b.weight("wb")), "b");
  auto d = b.name(b.linear(x, b.weight("wd")), "d");
  b.output("s", s);
  b.output("c", c);
  b.output("b", bl);
  b.output("d", d);
  const auto g = b.finish();

  ON_CALL(primary, supports(_, _)).WillByDefault([](const sonde::Node& n, std::span<const sonde::DType>) { return n.name() != "d"; });
  ON_CALL(primary, weight(_)).WillByDefault(view);
  std::vector<std::string> calls;
  const auto fill = [&](const sonde::Node& n, const sonde::TensorView& out) {
    calls.push_back(n.name());
    for (std::int64_t i = 0; i < out.numel(); ++i) out.as<float>()[i] = static_cast<float>(n.name()[0]) + static_cast<float>(i);
  };
  ON_CALL(primary, run(_, _, _)).WillByDefault([&](const sonde::Node& n, std::span<const sonde::TensorView>, const sonde::TensorView& out) { fill(n, out); });
  ON_CALL(reference, run(_, _, _)).WillByDefault([&](const sonde::Node& n, std::span<const sonde::TensorView>, const sonde::TensorView& out) { fill(n, out); });
  EXPECT_CALL(primary, run_siblings(_, _, _))
      .WillOnce([&](std::span<const sonde::Node* const> nodes, std::span<const std::vector<sonde::TensorView>> ins,
                    std::span<const sonde::TensorView> outs) {
        ASSERT_EQ(nodes.size(), 2u);
        calls.push_back("siblings");
        for (std::size_t i = 0; i < nodes.size(); ++i) {
          ASSERT_EQ(ins[i].size(), 2u);
          EXPECT_EQ(ins[i][0].data, feeds.at("x").data) << "x";
          EXPECT_EQ(ins[i][1].data, view(i == 0 ? "wa" : "wb").data) << "the weight, resolved ahead of its own step";
          fill(*nodes[i], outs[i]);
        }
      });

  sonde::Executor ex(primary, reference);
  const auto plan = ex.plan(g, {"s", "c", "b", "d"}, [](const std::string& h) { return h == "a" || h == "s" || h == "b"; });
  ASSERT_EQ(plan.siblings.size(), 1u);
  EXPECT_EQ(plan.siblings[0], (std::vector<int>{a.id, bl.id}));
  std::vector<std::pair<std::string, float>> tapped;
  const auto out = ex.run(plan, feeds, [&](const std::string& h, const sonde::TensorView& v) { tapped.emplace_back(h, v.as<float>()[1]); });
  EXPECT_EQ(calls, (std::vector<std::string>{"siblings", "a", "b", "s", "bias2", "c", "d"}));
  const std::vector<std::pair<std::string, float>> want{{"a", 'a' + 1.0f}, {"s", 's' + 1.0f}, {"b", 'b' + 1.0f}};
  EXPECT_EQ(tapped, want);
  EXPECT_EQ(out.at("b").data<float>()[3], 'b' + 3.0f);
  EXPECT_EQ(out.at("d").data<float>()[0], 'd' + 0.0f);
}

TEST_F(Fixture, MissingOrMisshapenFeedIsAnError) {
  ON_CALL(primary, supports(_, _)).WillByDefault(Return(true));
  const auto g = chain();
  sonde::Executor ex(primary, reference);
  const auto plan = ex.plan(g, {"out"}, nullptr);
  EXPECT_THROW(ex.run(plan, {}, nullptr), sonde::Error);
  std::vector<float> y{1, 2};
  try {
    ex.run(plan, {{"x", sonde::TensorView(y.data(), sonde::DType::f32, sonde::Shape{1, 2})}}, nullptr);
    FAIL() << "expected an error";
  } catch (const sonde::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("fed f32 [1, 2], expected f32 [1, 3]"));
  }
}

TEST_F(Fixture, NoBackendForANodeIsAnError) {
  ON_CALL(primary, supports(_, _)).WillByDefault(Return(false));
  ON_CALL(reference, supports(_, _)).WillByDefault(Return(false));
  const auto g = chain();
  sonde::Executor ex(primary, reference);
  EXPECT_THROW(ex.plan(g, {"out"}, nullptr), sonde::Error);
}

TEST(GraphBuilder, InfersShapesAndRejectsMismatches) {
  std::vector<float> w(12 * 4), bias(12);
  sonde::GraphBuilder b([&](const std::string& n) {
    if (n == "w") return sonde::TensorView(w.data(), sonde::DType::f32, sonde::Shape{12, 4});
    return sonde::TensorView(bias.data(), sonde::DType::f32, sonde::Shape{12});
  });
  auto x = b.input("x", sonde::DType::f32, sonde::Shape{2, 5, 4});
  auto y = b.linear(x, b.weight("w"), b.weight("bias"));
  EXPECT_EQ(b.shape(y), (sonde::Shape{2, 5, 12}));
  auto heads = b.reshape(y, sonde::Shape{2, 5, 3, 4});
  EXPECT_EQ(b.shape(heads), (sonde::Shape{2, 5, 3, 4}));
  EXPECT_THROW(b.linear(y, b.weight("w")), sonde::Error);            // K = 12 vs weight's 4
  EXPECT_THROW(b.reshape(y, sonde::Shape{2, 5, 5}), sonde::Error);   // 120 vs 50 elements
  b.name(y, "proj");
  EXPECT_THROW(b.name(x, "proj"), sonde::Error);                     // names are unique
  auto g = b.finish();
  EXPECT_EQ(g.find("proj"), std::optional<int>(y.id));
  // The same rules hold when the input changes shape later.
  g.reshape_inputs([](const std::string&, sonde::Shape& s) { s = sonde::Shape{1, 10, 4}; });  // heads: still 120
  EXPECT_EQ(g.nodes[static_cast<std::size_t>(y.id)].shape, (sonde::Shape{1, 10, 12}));
  try {
    g.reshape_inputs([](const std::string&, sonde::Shape& s) { s = sonde::Shape{7, 5}; });
    FAIL() << "a K of 5 against the weight's 4 was accepted";
  } catch (const sonde::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Linear"));
    EXPECT_THAT(e.what(), HasSubstr("[7, 5]"));
  }
}

}  // namespace
