// The executor's per-node profile (exec_profile.h): which nodes it records, how often, and what
// was tapped, against the graph and the plan (not timing values, which a test cannot know).
#include <sonde/error.h>
#include <sonde/executor.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mock_backend.h"

#include <set>

namespace {

using ::testing::_;
using ::testing::Return;

using sonde::test::MockBackend;

// x -> h = rms_norm(x) -> q, k (sibling Linears of h: one run_siblings call) -> s = q + k ->
// r = reshape(s) -> t = silu_mul(r, r) -> "out"; u = k + k is built but read by nothing.
struct ProfileGraph {
  std::vector<float> w = std::vector<float>(4 * 4, 0.5f), norm{1, 1, 1, 1};
  sonde::Graph g;
  ProfileGraph() {
    sonde::GraphBuilder b([this](const std::string& n) -> sonde::TensorView {
      if (n == "norm") return sonde::TensorView(norm.data(), sonde::DType::f32, sonde::Shape{4});
      return sonde::TensorView(w.data(), sonde::DType::f32, sonde::Shape{4, 4});
    });
    auto x = b.input("x", sonde::DType::f32, sonde::Shape{3, 4});
    auto h = b.name(b.rms_norm(x, b.weight("norm"), 1e-6f), "h");
    auto q = b.name(b.linear(h, b.weight("wq")), "q");
    auto k = b.name(b.linear(h, b.weight("wk")), "k");
    auto s = b.name(b.add(q, k), "s");
    auto r = b.name(b.reshape(s, sonde::Shape{3, 2, 2}), "r");
    b.name(b.add(k, k), "u");
    b.output("out", b.name(b.silu_mul(r, r), "t"));
    g = b.finish();
  }
};

struct ExecProfileTest : ::testing::Test {
  ::testing::NiceMock<MockBackend> primary, reference;
  ProfileGraph pg;
  std::vector<float> x = std::vector<float>(12, 1.0f);
  std::map<std::string, sonde::TensorView> feeds{{"x", sonde::TensorView(x.data(), sonde::DType::f32, sonde::Shape{3, 4})}};
  void SetUp() override {
    ON_CALL(primary, info()).WillByDefault(Return(sonde::BackendInfo{"mock", "", 1}));
    ON_CALL(reference, info()).WillByDefault(Return(sonde::BackendInfo{"reference", "", 1}));
    ON_CALL(primary, supports(_, _)).WillByDefault(Return(true));
    ON_CALL(primary, weight(_)).WillByDefault([this](const std::string& n) {
      if (n == "norm") return sonde::TensorView(pg.norm.data(), sonde::DType::f32, sonde::Shape{4});
      return sonde::TensorView(pg.w.data(), sonde::DType::f32, sonde::Shape{4, 4});
    });
  }
};

TEST_F(ExecProfileTest, RecordsEachComputedNodeOncePerRunWithItsTaps) {
  sonde::Executor ex(primary, reference);
  const auto plan = ex.plan(pg.g, {"out"}, [](const std::string& h) { return h == "q" || h == "t"; });
  ASSERT_EQ(plan.siblings.size(), 1u);  // q and k run in one call
  sonde::ExecProfile profile;
  ex.run(plan, feeds, nullptr);  // not recorded: no profile yet
  ex.set_profile(&profile);
  int taps = 0;
  for (int r = 0; r < 3; ++r) ex.run(plan, feeds, [&](const std::string&, const sonde::TensorView&) { ++taps; });
  ex.set_profile(nullptr);
  ex.run(plan, feeds, nullptr);  // not recorded: detached
  EXPECT_EQ(taps, 6);
  EXPECT_EQ(profile.runs(), 3);

  // Every node the plan computes (Input and Weight aside), in plan order; u, read by nothing, is not one.
  std::vector<std::string> want;
  for (int i : plan.order) {
    const auto& n = pg.g.nodes[static_cast<std::size_t>(i)];
    if (n.op != sonde::OpKind::Input && n.op != sonde::OpKind::Weight) want.push_back(n.name());
  }
  EXPECT_EQ(want, (std::vector<std::string>{"h", "q", "k", "s", "r", "t"}));
  const auto nodes = profile.nodes();
  std::vector<std::string> got;
  for (const auto& n : nodes) got.push_back(n.name);
  EXPECT_EQ(got, want);
  for (const auto& n : nodes) {
    SCOPED_TRACE(n.name);
    EXPECT_EQ(n.runs, 3);
    EXPECT_GE(n.seconds, 0.0);
    const bool tapped = n.name == "q" || n.name == "t";
    EXPECT_EQ(n.taps, tapped ? 3 : 0);
    if (!tapped) {
      EXPECT_EQ(n.tap_seconds, 0.0);
    }
    EXPECT_EQ(n.sibling, n.name == "q" || n.name == "k");
    // A Linear's 2 x rows x K x N: [3, 4] x [4, 4] is 96 a run.
    EXPECT_EQ(n.flops, n.op == sonde::OpKind::Linear ? 3 * 96.0 : 0.0);
    const auto id = pg.g.find(n.name);
    ASSERT_TRUE(id);
    EXPECT_EQ(n.op, pg.g.nodes[static_cast<std::size_t>(*id)].op);
    EXPECT_EQ(n.shape, pg.g.nodes[static_cast<std::size_t>(*id)].shape);
  }
  // Per kind: node runs add up (Linear: q and k; Add: s, not u).
  std::map<std::string, std::int64_t> kinds;
  for (const auto& k : profile.by_kind()) kinds[k.op] = k.runs;
  EXPECT_EQ(kinds, (std::map<std::string, std::int64_t>{
                       {"Add", 3}, {"Linear", 6}, {"Reshape", 3}, {"RmsNorm", 3}, {"SiluMul", 3}}));
  profile.clear();
  EXPECT_TRUE(profile.nodes().empty());
  EXPECT_EQ(profile.runs(), 0);
}

}  // namespace

// The fastest single run of a node is kept beside the sum: bench's ratios against a
// micro-benchmark's best-of compare like with like (issue 31's SAE cost).
TEST(ExecProfileBest, KeepsTheFastestRunBesideTheSum) {
  ProfileGraph pg;
  sonde::ExecProfile profile;
  const sonde::Node* q = nullptr;
  for (const auto& n : pg.g.nodes)
    if (!n.names.empty() && n.name() == "q") q = &n;
  ASSERT_NE(q, nullptr);
  for (double s : {0.30, 0.10, 0.25}) profile.add(pg.g, *q, s, 0.0, 0, false);
  const auto nodes = profile.nodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].runs, 3);
  EXPECT_DOUBLE_EQ(nodes[0].seconds, 0.65);
  EXPECT_DOUBLE_EQ(nodes[0].best_seconds, 0.10);
}
