// to_f32 widens every float dtype exactly (f64 rounds to nearest), dense or strided. The bit
// patterns are written out by hand from the IEEE / bfloat16 layouts, not produced by sonde.
#include <sonde/error.h>
#include <sonde/tensor.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace {

using sonde::DType;
using sonde::Shape;
using sonde::TensorView;

std::vector<float> widened(const TensorView& v) {
  const sonde::Tensor t = sonde::to_f32(v);
  EXPECT_EQ(t.dtype(), DType::f32);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.shape().numel());
}

TEST(ToF32, Bf16IsTheTopHalfOfAnF32) {
  // 1.0 = 0x3F80, -2.5 = 0xC020, 3.140625 = 0x4049, the smallest normal 2^-126 = 0x0080,
  // a subnormal 2^-133 = 0x0001, and +inf = 0x7F80.
  std::vector<std::uint16_t> h{0x3F80, 0xC020, 0x4049, 0x0080, 0x0001, 0x7F80};
  const auto f = widened(TensorView(h.data(), DType::bf16, Shape{2, 3}));
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.5f);
  EXPECT_EQ(f[2], 3.140625f);
  EXPECT_EQ(f[3], 0x1p-126f);
  EXPECT_EQ(f[4], 0x1p-133f);
  EXPECT_EQ(f[5], std::numeric_limits<float>::infinity());
}

TEST(ToF32, F16NormalsSubnormalsAndInfinity) {
  // 1.0 = 0x3C00, -0.5 = 0xB800, 65504 (largest) = 0x7BFF, 2^-24 (smallest subnormal) = 0x0001,
  // 2^-14 (smallest normal) = 0x0400, -inf = 0xFC00.
  std::vector<std::uint16_t> h{0x3C00, 0xB800, 0x7BFF, 0x0001, 0x0400, 0xFC00};
  const auto f = widened(TensorView(h.data(), DType::f16, Shape{6}));
  EXPECT_EQ(f, (std::vector<float>{1.0f, -0.5f, 65504.0f, 0x1p-24f, 0x1p-14f, -std::numeric_limits<float>::infinity()}));
}

TEST(ToF32, F32IsCopiedAndF64Rounded) {
  std::vector<float> a{1.5f, -0.0f, 1e-40f};
  EXPECT_EQ(widened(TensorView(a.data(), DType::f32, Shape{3})), a);
  // 1 + 2^-30 rounds to 1 in f32; 1 + 2^-23 is exact.
  std::vector<double> d{1.0 + 0x1p-30, 1.0 + 0x1p-23, -3.0};
  EXPECT_EQ(widened(TensorView(d.data(), DType::f64, Shape{3})), (std::vector<float>{1.0f, 1.0f + 0x1p-23f, -3.0f}));
}

TEST(ToF32, StridedBf16ViewTakesOnlyItsElements) {
  // A [2, 4] bf16 buffer viewed as its first two columns: [2, 2] with strides [4, 1].
  std::vector<std::uint16_t> h{0x3F80, 0x4000, 0x7F80, 0x7F80, 0x4040, 0x4080, 0x7F80, 0x7F80};
  TensorView v(h.data(), DType::bf16, Shape{2, 2});
  v.strides = {4, 1, 0, 0};
  EXPECT_EQ(widened(v), (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));
}

TEST(ToF32, IntegerInputIsAnErrorNamingTheType) {
  std::vector<std::int32_t> i{1, 2};
  try {
    sonde::to_f32(TensorView(i.data(), DType::i32, Shape{2}));
    FAIL() << "expected an error";
  } catch (const sonde::Error& e) {
    EXPECT_NE(std::string(e.what()).find("i32"), std::string::npos) << e.what();
  }
}

}  // namespace
