// The SAE ops (graph.h SaeActivation / NormRescale / Sub): every backend against `reference` on
// random inputs and odd shapes, and the reference against values worked out by hand from the
// formulas in docs/sae.md.
#include "op_harness.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>

namespace sonde::test {
namespace {

Node act(const Shape& s, SaeAct a, std::int64_t k = 0) {
  Node n = make_node(OpKind::SaeActivation, s);
  n.params.sae_act = a;
  n.params.sae_k = k;
  return n;
}

Node rescale(const Shape& s, int power) {
  Node n = make_node(OpKind::NormRescale, s);
  n.params.norm_power = power;
  return n;
}

class SaeOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backend_ = make_backend(GetParam());
    reference_ = make_backend("reference");
  }
  void compare(const Node& node, const std::vector<Arg>& args) {
    std::vector<DType> dtypes;
    for (const auto& v : prepared_inputs(*backend_, args)) dtypes.push_back(v.dtype);
    ASSERT_TRUE(backend_->supports(node, dtypes)) << GetParam() << " must run " << op_name(node.op);
    const Tensor ref = run_on(*reference_, node, args);
    const Tensor got = run_on(*backend_, node, args);
    EXPECT_TRUE(all_finite(got));
    EXPECT_LE(normalised_error(got, ref), 1e-6);
  }
  std::shared_ptr<Backend> backend_, reference_;
};

const Shape kShapes[] = {Shape{2, 7, 13}, Shape{1, 1, 96}, Shape{3, 5, 1}, Shape{2, 3, 257}};

TEST_P(SaeOps, Activations) {
  for (const auto& s : kShapes) {
    SCOPED_TRACE(s.str());
    const std::int64_t N = s.last();
    const auto pre = random_tensor(DType::f32, s, 11, -2, 2);
    compare(act(s, SaeAct::Relu), {{pre}});
    compare(act(s, SaeAct::JumpRelu), {{pre}, {random_tensor(DType::f32, Shape{N}, 12, -0.5f, 0.5f), true}});
    compare(act(s, SaeAct::Gated), {{pre}, {random_tensor(DType::f32, s, 13, -1, 1)}});
    for (std::int64_t k : {std::int64_t{1}, (N + 1) / 2, N}) compare(act(s, SaeAct::TopK, k), {{pre}});
  }
}

// An SAE's width (16,384 features and a ragged tail) with few distinct values, so the k-th
// largest is tied many times over and the lower-index rule decides which of the ties are kept;
// k at the heap's edges, the 16-value blocks' edges and the whole row.
TEST_P(SaeOps, TopKWideRowsWithTies) {
  const Shape s{2, 3, 16384 + 7};
  std::vector<float> v = values(random_tensor(DType::f32, s, 31, 0, 9));
  for (auto& x : v) x = std::floor(x) / 4 - 1;  // -1, -0.75, ..., 1: about 1,800 of each a row
  const auto pre = floats(DType::f32, s, v);
  for (std::int64_t k : {std::int64_t{1}, std::int64_t{15}, std::int64_t{16}, std::int64_t{64}, std::int64_t{3000},
                         s.last() - 1, s.last()})
    compare(act(s, SaeAct::TopK, k), {{pre}});
}

// Rows long enough that the TopK starts from the bar of its 256 group maxima (an SAE's
// pre-activations: distinct Gaussian values), and rows where that bar sits on a tie or at the
// bottom of the order: all values negative, and +-0 everywhere but a few positives (fewer than k).
TEST_P(SaeOps, TopKSeededBarOnWideRows) {
  const Shape s{1, 4, 16384};
  std::vector<float> v = values(random_tensor(DType::f32, s, 41, -3, 3));
  const std::int64_t N = s.last();
  for (std::int64_t j = 0; j < N; ++j) {
    v[static_cast<std::size_t>(N + j)] = -std::fabs(v[static_cast<std::size_t>(N + j)]) - 0.5f;
    float& z = v[static_cast<std::size_t>(2 * N + j)];
    z = j % 997 == 5 ? 1.0f + static_cast<float>(j) / N : (j % 2 ? -0.0f : 0.0f);
  }
  const auto pre = floats(DType::f32, s, v);
  for (std::int64_t k : {std::int64_t{1}, std::int64_t{33}, std::int64_t{64}}) compare(act(s, SaeAct::TopK, k), {{pre}});
}

TEST_P(SaeOps, NormRescaleAndSub) {
  for (const auto& s : kShapes) {
    SCOPED_TRACE(s.str());
    const auto x = random_tensor(DType::f32, s, 21, -3, 3);
    Shape other = s;
    other[2] = s[2] + 5;  // another width, the same rows (a transcoder's in and out)
    const auto ref = random_tensor(DType::f32, other, 22, -3, 3);
    compare(rescale(s, -1), {{x}, {x}});
    compare(rescale(s, 1), {{x}, {ref}});
    compare(make_node(OpKind::Sub, s), {{x}, {random_tensor(DType::f32, s, 23)}});
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, SaeOps, ::testing::ValuesIn(backend_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

class SaeFormula : public ::testing::Test {
 protected:
  void SetUp() override { ref_ = make_backend("reference"); }
  std::vector<float> run(const Node& n, std::vector<Arg> args) { return values(run_on(*ref_, n, args)); }
  // One row of five pre-activations.
  Tensor pre() { return floats(DType::f32, Shape{1, 1, 5}, {0.5f, -1, 2, 0.2f, 2}); }
  std::shared_ptr<Backend> ref_;
};

TEST_F(SaeFormula, ReluJumpReluGated) {
  const Shape s{1, 1, 5};
  EXPECT_EQ(run(act(s, SaeAct::Relu), {{pre()}}), (std::vector<float>{0.5f, 0, 2, 0.2f, 2}));
  // pre > threshold keeps relu(pre): 0.5 > 0.6 no; 0.2 > 0.1 yes; -1 > -2 yes but relu(-1) = 0.
  EXPECT_EQ(run(act(s, SaeAct::JumpRelu), {{pre()}, {floats(DType::f32, Shape{5}, {0.6f, -2, 1, 0.1f, 2})}}),
            (std::vector<float>{0, 0, 2, 0.2f, 0}));
  EXPECT_EQ(run(act(s, SaeAct::Gated), {{pre()}, {floats(DType::f32, Shape{1, 1, 5}, {1, 1, -1, 0, 3})}}),
            (std::vector<float>{0.5f, 0, 0, 0, 2}));
}

// The two 2s tie for first: k = 2 keeps both; k = 1 keeps the lower index; k = 4 reaches -1,
// which relu turns into 0.
TEST_F(SaeFormula, TopK) {
  const Shape s{1, 1, 5};
  EXPECT_EQ(run(act(s, SaeAct::TopK, 1), {{pre()}}), (std::vector<float>{0, 0, 2, 0, 0}));
  EXPECT_EQ(run(act(s, SaeAct::TopK, 2), {{pre()}}), (std::vector<float>{0, 0, 2, 0, 2}));
  EXPECT_EQ(run(act(s, SaeAct::TopK, 3), {{pre()}}), (std::vector<float>{0.5f, 0, 2, 0, 2}));
  EXPECT_EQ(run(act(s, SaeAct::TopK, 5), {{pre()}}), (std::vector<float>{0.5f, 0, 2, 0.2f, 2}));
}

// ref (3, 4): |ref| = 5, sqrt(F) = sqrt(2): power +1 multiplies by 5 / sqrt(2), -1 by sqrt(2) / 5.
TEST_F(SaeFormula, NormRescale) {
  const auto x = floats(DType::f32, Shape{1, 1, 3}, {1, 2, -2});
  const auto r = floats(DType::f32, Shape{1, 1, 2}, {3, 4});
  const auto up = run(rescale(Shape{1, 1, 3}, 1), {{x}, {r}});
  const auto down = run(rescale(Shape{1, 1, 3}, -1), {{x}, {r}});
  const double c = 5 / std::sqrt(2.0);
  for (int j = 0; j < 3; ++j) {
    EXPECT_NEAR(up[j], values(x)[j] * c, 1e-6);
    EXPECT_NEAR(down[j], values(x)[j] / c, 1e-6);
  }
  EXPECT_EQ(run(make_node(OpKind::Sub, Shape{1, 1, 2}), {{r}, {floats(DType::f32, Shape{1, 1, 2}, {1, 5})}}),
            (std::vector<float>{2, -1}));
}

}  // namespace
}  // namespace sonde::test
