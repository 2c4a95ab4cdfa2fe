// The reference backend against values worked out by hand from the formulas in model-spec §1.3;
// no backend output is used as an expected value here.
#include "op_harness.h"

#include <sonde/error.h>

#include <gtest/gtest.h>

#include <cmath>

namespace sonde::test {
namespace {

class ReferenceFormula : public ::testing::Test {
 protected:
  void SetUp() override { ref_ = make_backend("reference"); }
  std::vector<float> run(const Node& n, const std::vector<Arg>& args) { return values(run_on(*ref_, n, args)); }

  Node attention(std::int64_t T, std::int64_t nh, std::int64_t d, bool causal) {
    Node n = make_node(OpKind::Attention, Shape{1, T, nh, d});
    n.params.causal = causal;
    return n;
  }
  std::shared_ptr<Backend> ref_;
};

// [3, 4]: mean(x^2) = 12.5, so y = w * x / sqrt(12.5).
TEST_F(ReferenceFormula, RmsNormOfThreeFour) {
  Node n = make_node(OpKind::RmsNorm, Shape{1, 2});
  const auto y = run(n, {{floats(DType::f32, Shape{1, 2}, {3, 4})}, {floats(DType::f32, Shape{2}, {1, 1}), true}});
  EXPECT_NEAR(y[0], 3 / std::sqrt(12.5), 1e-7);
  EXPECT_NEAR(y[1], 4 / std::sqrt(12.5), 1e-7);
  const auto yw = run(n, {{floats(DType::f32, Shape{1, 2}, {3, 4})}, {floats(DType::bf16, Shape{2}, {2, -0.5f}), true}});
  EXPECT_NEAR(yw[0], 6 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(yw[1], -2 / std::sqrt(12.5), 1e-6);
}

TEST_F(ReferenceFormula, RmsNormOfZerosIsZeroWithEps) {
  Node n = make_node(OpKind::RmsNorm, Shape{1, 3});
  n.params.eps = 1e-6f;
  const auto y = run(n, {{floats(DType::f32, Shape{1, 3}, {0, 0, 0})}, {floats(DType::f16, Shape{3}, {1, 2, 3}), true}});
  EXPECT_EQ(y, (std::vector<float>{0, 0, 0}));
}

TEST_F(ReferenceFormula, RopeAtPositionZeroIsIdentity) {
  Node n = make_node(OpKind::Rope, Shape{1, 1, 2, 6});
  n.params.theta = 1e6;
  const Tensor x = random_tensor(DType::f32, n.shape, 1);
  EXPECT_EQ(run(n, {{Tensor::copy_of(x.view())}, {ints(Shape{1, 1}, {0})}}), values(x));
}

// d = 4, theta = 1e4: inv_freq = [1, 1e4^(-1/2)] = [1, 0.01]; dimension i pairs with i + 2.
TEST_F(ReferenceFormula, RopeRotatesHalvesByPositionTimesFrequency) {
  Node n = make_node(OpKind::Rope, Shape{1, 1, 1, 4});
  n.params.theta = 1e4;
  const auto y = run(n, {{floats(DType::f32, n.shape, {1, 2, 3, 4})}, {ints(Shape{1, 1}, {3})}});
  const double a0 = 3.0, a1 = 0.03;
  EXPECT_NEAR(y[0], 1 * std::cos(a0) - 3 * std::sin(a0), 1e-6);
  EXPECT_NEAR(y[2], 3 * std::cos(a0) + 1 * std::sin(a0), 1e-6);
  EXPECT_NEAR(y[1], 2 * std::cos(a1) - 4 * std::sin(a1), 1e-6);
  EXPECT_NEAR(y[3], 4 * std::cos(a1) + 2 * std::sin(a1), 1e-6);
}

TEST_F(ReferenceFormula, AttentionWithOneKeyReturnsItsValue) {
  const Tensor v = random_tensor(DType::f32, Shape{1, 1, 1, 6}, 3);
  const auto y = run(attention(1, 1, 6, true), {{random_tensor(DType::f32, Shape{1, 1, 1, 6}, 1)},
                                                {random_tensor(DType::f32, Shape{1, 1, 1, 6}, 2)},
                                                {Tensor::copy_of(v.view())}});
  EXPECT_EQ(y, values(v));
}

// Query 0 of a causal prefill sees only key 0, whatever the scores.
TEST_F(ReferenceFormula, CausalFirstRowAttendsOnlyToItself) {
  const Tensor v = random_tensor(DType::f32, Shape{1, 3, 1, 4}, 6);
  const auto y = run(attention(3, 1, 4, true), {{random_tensor(DType::f32, Shape{1, 3, 1, 4}, 4, -5, 5)},
                                                {random_tensor(DType::f32, Shape{1, 3, 1, 4}, 5, -5, 5)},
                                                {Tensor::copy_of(v.view())}});
  const auto vv = values(v);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(y[j], vv[j]);
}

// q = 0 makes every score 0: softmax is uniform, so each row is the mean of the values it sees.
// Causal with T = 2, S = 4: query t sits at key slot t + 2 and sees keys 0..t+2.
TEST_F(ReferenceFormula, EqualScoresAverageTheVisibleValues) {
  const Tensor v = floats(DType::f32, Shape{1, 4, 1, 1}, {1, 2, 4, 8});
  const std::vector<Arg> args{{floats(DType::f32, Shape{1, 2, 1, 1}, {0, 0})},
                              {random_tensor(DType::f32, Shape{1, 4, 1, 1}, 7)},
                              {Tensor::copy_of(v.view())}};
  const auto causal = run(attention(2, 1, 1, true), args);
  EXPECT_NEAR(causal[0], (1 + 2 + 4) / 3.0, 1e-6);
  EXPECT_NEAR(causal[1], (1 + 2 + 4 + 8) / 4.0, 1e-6);
  const auto bidir = run(attention(2, 1, 1, false), args);
  EXPECT_NEAR(bidir[0], 15 / 4.0, 1e-6);
  EXPECT_NEAR(bidir[1], 15 / 4.0, 1e-6);
}

// Scores s = q.k * d^-0.5 = [2 * 0.5, 0] = [1, 0]: p0 = e / (e + 1).
TEST_F(ReferenceFormula, TwoKeySoftmaxWeights) {
  const auto y = run(attention(1, 1, 4, false), {{floats(DType::f32, Shape{1, 1, 1, 4}, {2, 0, 0, 0})},
                                                 {floats(DType::f32, Shape{1, 2, 1, 4}, {1, 0, 0, 0, 0, 0, 0, 0})},
                                                 {floats(DType::f32, Shape{1, 2, 1, 4}, {10, 0, 0, 0, 0, 10, 0, 0})}});
  const double p0 = std::exp(1.0) / (std::exp(1.0) + 1.0);
  EXPECT_NEAR(y[0], 10 * p0, 1e-5);
  EXPECT_NEAR(y[1], 10 * (1 - p0), 1e-5);
  EXPECT_EQ(y[2], 0.0f);
}

// Pairwise mask m[q] & m[k]: the padded query row sees nothing (output 0), the others skip the
// padded key.
TEST_F(ReferenceFormula, MaskSkipsPaddedKeysAndZeroesPaddedQueries) {
  const auto y = run(attention(4, 1, 1, false), {{floats(DType::f32, Shape{1, 4, 1, 1}, {0, 0, 0, 0})},
                                                 {random_tensor(DType::f32, Shape{1, 4, 1, 1}, 8)},
                                                 {floats(DType::f32, Shape{1, 4, 1, 1}, {100, 1, 2, 6})},
                                                 {bytes(Shape{1, 4}, {0, 1, 1, 1})}});
  EXPECT_EQ(y[0], 0.0f);
  for (int t = 1; t < 4; ++t) EXPECT_NEAR(y[t], 3.0, 1e-6) << "row " << t;
}

// nh = 4, nkv = 2: heads 0,1 read kv head 0 and heads 2,3 read kv head 1 (h / (nh/nkv)), not
// h % nkv. Value of kv head g is g + 1 everywhere.
TEST_F(ReferenceFormula, GqaHeadsReadContiguousKvGroups) {
  const auto y = run(attention(1, 4, 2, false), {{random_tensor(DType::f32, Shape{1, 1, 4, 2}, 9)},
                                                 {random_tensor(DType::f32, Shape{1, 3, 2, 2}, 10)},
                                                 {floats(DType::f32, Shape{1, 3, 2, 2}, {1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2})}});
  const float want[] = {1, 1, 2, 2};
  for (int h = 0; h < 4; ++h) EXPECT_NEAR(y[static_cast<std::size_t>(h * 2)], want[h], 1e-6) << "head " << h;
}

// [1, 2] . W^T with W = [[1, 0], [0, 1], [1, 1]] plus b = [0.5, 0, -1].
TEST_F(ReferenceFormula, LinearSmallCase) {
  const auto y = run(make_node(OpKind::Linear, Shape{1, 3}), {{floats(DType::f32, Shape{1, 2}, {1, 2})},
                                                              {floats(DType::bf16, Shape{3, 2}, {1, 0, 0, 1, 1, 1}), true},
                                                              {floats(DType::f16, Shape{3}, {0.5f, 0, -1}), true}});
  EXPECT_EQ(y, (std::vector<float>{1.5f, 2, 2}));
}

TEST_F(ReferenceFormula, SiluMulAndAdd) {
  const auto s = run(make_node(OpKind::SiluMul, Shape{3}),
                     {{floats(DType::f32, Shape{3}, {0, 1, -2})}, {floats(DType::f32, Shape{3}, {5, 2, 3})}});
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_NEAR(s[1], 2 / (1 + std::exp(-1.0)), 1e-7);
  EXPECT_NEAR(s[2], 3 * -2 / (1 + std::exp(2.0)), 1e-7);
  const auto a = run(make_node(OpKind::Add, Shape{2}),
                     {{floats(DType::f32, Shape{2}, {1, 2})}, {floats(DType::f32, Shape{2}, {0.5f, -4})}});
  EXPECT_EQ(a, (std::vector<float>{1.5f, -2}));
}

// [2,1,2] ++ [2,2,2] along dim 1: per batch row, a's rows then b's rows.
TEST_F(ReferenceFormula, ConcatAlongDimOne) {
  const auto y = run(make_node(OpKind::Concat, Shape{2, 3, 2}),
                     {{floats(DType::f32, Shape{2, 1, 2}, {1, 2, 3, 4})},
                      {floats(DType::f32, Shape{2, 2, 2}, {10, 11, 12, 13, 20, 21, 22, 23})}});
  EXPECT_EQ(y, (std::vector<float>{1, 2, 10, 11, 12, 13, 3, 4, 20, 21, 22, 23}));
}

// Rows 1..3 of [2,3,2] along dim 1: per batch row, its last two rows.
TEST_F(ReferenceFormula, SliceRowsKeepsRowsOfDimOne) {
  Node n = make_node(OpKind::SliceRows, Shape{2, 2, 2});
  n.params.row_begin = 1;
  n.params.row_end = 3;
  const auto y = run(n, {{floats(DType::f32, Shape{2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})}});
  EXPECT_EQ(y, (std::vector<float>{3, 4, 5, 6, 9, 10, 11, 12}));
  n.params.row_end = 4;  // past the end: an error naming the rows
  EXPECT_THROW(run(n, {{floats(DType::f32, Shape{2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})}}), Error);
}

TEST_F(ReferenceFormula, EmbeddingPicksRowsAndRejectsBadIds) {
  const Node n = make_node(OpKind::Embedding, Shape{1, 2, 2}, "embed");
  const Tensor table = floats(DType::bf16, Shape{3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(run(n, {{Tensor::copy_of(table.view()), true}, {ints(Shape{1, 2}, {2, 0})}}), (std::vector<float>{5, 6, 1, 2}));
  try {
    run(n, {{Tensor::copy_of(table.view()), true}, {ints(Shape{1, 2}, {1, 3})}});
    FAIL() << "id 3 of a 3-row table did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("embed"), std::string::npos) << e.what();
  }
}

TEST_F(ReferenceFormula, ReshapeKeepsDtypeAndElements) {
  Node n = make_node(OpKind::Reshape, Shape{3, 2}, "r", DType::i32);
  n.params.shape = n.shape;
  const Tensor out = run_on(*ref_, n, {{ints(Shape{2, 3}, {1, 2, 3, 4, 5, 6})}});
  ASSERT_EQ(out.dtype(), DType::i32);
  EXPECT_EQ(std::vector<int>(out.data<std::int32_t>(), out.data<std::int32_t>() + 6), (std::vector<int>{1, 2, 3, 4, 5, 6}));
}

// A group of one: the sum over the ranks is the value; the gather is this rank's kept part.
TEST_F(ReferenceFormula, CollectivesOnOneRank) {
  const Tensor x = floats(DType::f32, Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(run(make_node(OpKind::AllReduceSum, Shape{2, 3}), {{Tensor::copy_of(x.view())}}),
            (std::vector<float>{1, 2, 3, 4, 5, 6}));
  Node whole = make_node(OpKind::AllGather, Shape{2, 3});
  whole.params.axis = 1;
  whole.params.gathered = 3;
  EXPECT_EQ(run(whole, {{Tensor::copy_of(x.view())}}), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  Node part = make_node(OpKind::AllGather, Shape{2, 2});  // a replicated column given once: 1..2
  part.params.axis = 1;
  part.params.gathered = 2;
  part.params.keep_begin = 1;
  EXPECT_EQ(run(part, {{Tensor::copy_of(x.view())}}), (std::vector<float>{2, 3, 5, 6}));
  part.params.gathered = 3;  // one rank cannot make 3 of its 2 kept columns
  EXPECT_THROW(run(part, {{Tensor::copy_of(x.view())}}), Error);
}

// A shard holding query heads 2..4 of a model with 3 query heads per kv head, and kv heads 0..1:
// local heads 0 (global 2) reads local kv head 0; local 1, 2 (global 3, 4) read kv head 1. Value
// of local kv head g is g + 1 everywhere.
TEST_F(ReferenceFormula, ShardedHeadsReadTheirGlobalKvGroup) {
  Node n = attention(1, 3, 2, false);
  n.params.q_head0 = 2;
  n.params.kv_head0 = 0;
  n.params.kv_group = 3;
  const auto y = run(n, {{random_tensor(DType::f32, Shape{1, 1, 3, 2}, 9)},
                         {random_tensor(DType::f32, Shape{1, 3, 2, 2}, 10)},
                         {floats(DType::f32, Shape{1, 3, 2, 2}, {1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2})}});
  const float want[] = {1, 2, 2};
  for (int h = 0; h < 3; ++h) EXPECT_NEAR(y[static_cast<std::size_t>(h * 2)], want[h], 1e-6) << "head " << h;
  n.params.q_head0 = 4;  // heads 4..6 need kv heads 1..2: only 0..1 are given
  EXPECT_THROW(run(n, {{random_tensor(DType::f32, Shape{1, 1, 3, 2}, 9)}, {random_tensor(DType::f32, Shape{1, 3, 2, 2}, 10)},
                       {random_tensor(DType::f32, Shape{1, 3, 2, 2}, 11)}}),
               Error);
}

TEST_F(ReferenceFormula, SupportsEveryComputeOpAndNotInputs) {
  const DType f = DType::f32, h = DType::bf16, i = DType::i32, m = DType::u8;
  EXPECT_TRUE(ref_->supports(make_node(OpKind::Embedding, Shape{}), std::vector<DType>{h, i}));
  EXPECT_TRUE(ref_->supports(make_node(OpKind::RmsNorm, Shape{}), std::vector<DType>{f, DType::f16}));
  EXPECT_TRUE(ref_->supports(make_node(OpKind::Linear, Shape{}), std::vector<DType>{f, h, h}));
  EXPECT_TRUE(ref_->supports(make_node(OpKind::Reshape, Shape{}, "r", i), std::vector<DType>{i}));
  EXPECT_TRUE(ref_->supports(make_node(OpKind::Rope, Shape{}), std::vector<DType>{f, i}));
  EXPECT_TRUE(ref_->supports(make_node(OpKind::Attention, Shape{}), std::vector<DType>{f, f, f, m}));
  EXPECT_TRUE(ref_->supports(make_node(OpKind::Add, Shape{}), std::vector<DType>{f, f}));
  EXPECT_TRUE(ref_->supports(make_node(OpKind::SiluMul, Shape{}), std::vector<DType>{f, f}));
  EXPECT_TRUE(ref_->supports(make_node(OpKind::AllReduceSum, Shape{}), std::vector<DType>{f}));
  EXPECT_TRUE(ref_->supports(make_node(OpKind::AllGather, Shape{}), std::vector<DType>{f}));
  EXPECT_FALSE(ref_->supports(make_node(OpKind::Input, Shape{}), std::vector<DType>{}));
  EXPECT_FALSE(ref_->supports(make_node(OpKind::Rope, Shape{}), std::vector<DType>{f, f}));  // positions must be i32
}

}  // namespace
}  // namespace sonde::test
