// Tensor::copy_of on strided views: dense inner blocks (a KV-cache prefix) and fully strided
// ones, against values indexed by hand.
#include <sonde/tensor.h>

#include <gtest/gtest.h>

#include <numeric>

namespace {

TEST(TensorCopy, PrefixOfTheSecondDimension) {
  // A [2, 5, 3] buffer holding 0..29; the view keeps rows 0..1 of dimension 1: [2, 2, 3].
  std::vector<float> buf(30);
  std::iota(buf.begin(), buf.end(), 0.0f);
  sonde::TensorView v(buf.data(), sonde::DType::f32, sonde::Shape{2, 2, 3});
  v.strides = {15, 3, 1, 0};
  ASSERT_FALSE(v.contiguous());
  const sonde::Tensor t = sonde::Tensor::copy_of(v);
  ASSERT_TRUE(t.view().contiguous());
  const float* c = t.data<float>();
  for (int b = 0; b < 2; ++b)
    for (int p = 0; p < 2; ++p)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(c[(b * 2 + p) * 3 + j], static_cast<float>(b * 15 + p * 3 + j));
}

TEST(TensorCopy, TransposedViewCopiesElementByElement) {
  // The transpose of a [3, 4] matrix: shape [4, 3], strides [1, 4].
  std::vector<float> buf(12);
  std::iota(buf.begin(), buf.end(), 0.0f);
  sonde::TensorView v(buf.data(), sonde::DType::f32, sonde::Shape{4, 3});
  v.strides = {1, 4, 0, 0};
  const sonde::Tensor t = sonde::Tensor::copy_of(v);
  const float* c = t.data<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(c[i * 3 + j], static_cast<float>(j * 4 + i));
}

}  // namespace
