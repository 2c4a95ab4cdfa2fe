// The edit ops (graph.h EditAffine / EditReplace / EditProject): every backend against
// `reference` on random inputs and selections, and the reference against values worked out by
// hand from the formulas in docs/interventions.md.
#include "op_harness.h"

#include <gtest/gtest.h>

#include <cctype>
#include <iostream>

namespace sonde::test {
namespace {

Node edit(OpKind op, const Shape& x, std::int64_t groups, float a = 1, float b = 0) {
  Node n = make_node(op, x);
  n.params.edit_groups = groups;
  n.params.edit_a = a;
  n.params.edit_b = b;
  return n;
}

// About half the groups selected, by a fixed pattern.
Tensor selection(std::int64_t B, std::int64_t T, std::int64_t G) {
  std::vector<int> s(static_cast<std::size_t>(B * T * G));
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = (i * 7 + 3) % 5 < 3;
  return bytes(Shape{B, T, G}, s);
}

class EditOps : public ::testing::TestWithParam<std::string> {
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

struct Case {
  Shape x;
  std::int64_t G;
};
const Case kCases[] = {{Shape{2, 7, 13}, 1}, {Shape{2, 5, 4, 6}, 4}, {Shape{1, 1, 3, 16}, 1}, {Shape{3, 2, 96}, 1}};

TEST_P(EditOps, Affine) {
  for (const auto& c : kCases) {
    const std::int64_t B = c.x[0], T = c.x[1], R = c.x.numel() / (B * T);
    SCOPED_TRACE(c.x.str() + " G=" + std::to_string(c.G));
    const auto x = random_tensor(DType::f32, c.x, 1, -4, 4);
    const auto v = random_tensor(DType::f32, Shape{c.G, R / c.G}, 2);
    compare(edit(OpKind::EditAffine, c.x, c.G, 1, 3.5f), {{x}, {selection(B, T, c.G)}, {v}});    // add
    compare(edit(OpKind::EditAffine, c.x, c.G, -0.5f, 0), {{x}, {selection(B, T, c.G)}});        // scale
    compare(edit(OpKind::EditAffine, c.x, c.G, 0, 0), {{x}, {selection(B, T, c.G)}});            // zero
  }
}

TEST_P(EditOps, Replace) {
  for (const auto& c : kCases) {
    const std::int64_t B = c.x[0], T = c.x[1], R = c.x.numel() / (B * T);
    SCOPED_TRACE(c.x.str());
    const auto x = random_tensor(DType::f32, c.x, 3);
    compare(edit(OpKind::EditReplace, c.x, c.G), {{x}, {selection(B, T, c.G)}, {random_tensor(DType::f32, Shape{c.G, R / c.G}, 4)}});
    compare(edit(OpKind::EditReplace, c.x, c.G),
            {{x}, {selection(B, T, c.G)}, {random_tensor(DType::f32, Shape{B, T, c.G, R / c.G}, 5)}});  // patch rows
  }
}

TEST_P(EditOps, Project) {
  for (const auto& c : kCases) {
    const std::int64_t B = c.x[0], T = c.x[1], R = c.x.numel() / (B * T);
    SCOPED_TRACE(c.x.str());
    const auto x = random_tensor(DType::f32, c.x, 6, -3, 3);
    const auto d = random_tensor(DType::f32, Shape{c.G, R / c.G}, 7);
    compare(edit(OpKind::EditProject, c.x, c.G, 1, 0), {{x}, {selection(B, T, c.G)}, {d}});
    compare(edit(OpKind::EditProject, c.x, c.G, 1, -1.25f), {{x}, {selection(B, T, c.G)}, {d}});
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, EditOps, ::testing::ValuesIn(backend_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// By hand: x rows (3, 4) and (1, 2), the first selected only.
class EditFormula : public ::testing::Test {
 protected:
  void SetUp() override { ref_ = make_backend("reference"); }
  std::vector<float> run(const Node& n, std::vector<Arg> args) { return values(run_on(*ref_, n, args)); }
  Tensor x() { return floats(DType::f32, Shape{1, 2, 2}, {3, 4, 1, 2}); }
  Tensor sel() { return bytes(Shape{1, 2, 1}, {1, 0}); }
  std::shared_ptr<Backend> ref_;
};

TEST_F(EditFormula, AddScaleZero) {
  const Shape s{1, 2, 2};
  EXPECT_EQ(run(edit(OpKind::EditAffine, s, 1, 1, 2), {{x()}, {sel()}, {floats(DType::f32, Shape{1, 2}, {10, -1})}}),
            (std::vector<float>{23, 2, 1, 2}));
  EXPECT_EQ(run(edit(OpKind::EditAffine, s, 1, 0.5f, 0), {{x()}, {sel()}}), (std::vector<float>{1.5f, 2, 1, 2}));
  EXPECT_EQ(run(edit(OpKind::EditAffine, s, 1, 0, 0), {{x()}, {sel()}}), (std::vector<float>{0, 0, 1, 2}));
}

// u = (0.6, 0.8): x . u = 5, so project_out gives x - 5u = (0, 0); clamp to 2 gives 2u = (1.2, 1.6).
TEST_F(EditFormula, ProjectOutAndClamp) {
  const Shape s{1, 2, 2};
  const auto u = floats(DType::f32, Shape{1, 2}, {0.6f, 0.8f});
  const auto out = run(edit(OpKind::EditProject, s, 1, 1, 0), {{x()}, {sel()}, {u}});
  EXPECT_NEAR(out[0], 0, 1e-6);
  EXPECT_NEAR(out[1], 0, 1e-6);
  EXPECT_EQ(out[2], 1);
  const auto c = run(edit(OpKind::EditProject, s, 1, 1, 2), {{x()}, {sel()}, {u}});
  EXPECT_NEAR(c[0], 1.2, 1e-6);
  EXPECT_NEAR(c[1], 1.6, 1e-6);
}

// Two heads of one value each: only head 1 of slot 0 is selected.
TEST_F(EditFormula, ReplaceOneHead) {
  const Shape s{1, 2, 2};
  const auto y = run(edit(OpKind::EditReplace, s, 2), {{x()}, {bytes(Shape{1, 2, 2}, {0, 1, 0, 0})},
                                                        {floats(DType::f32, Shape{2, 1}, {-7, -9})}});
  EXPECT_EQ(y, (std::vector<float>{3, -9, 1, 2}));
}

}  // namespace
}  // namespace sonde::test
