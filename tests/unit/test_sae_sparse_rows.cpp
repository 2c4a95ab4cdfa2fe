// sparse_row_entries (sae.h): the entries sparse storage keeps of a row, against a one-line
// brute force (every j with row[j] != 0, ascending; top_k: the k largest by value, ties to the
// lower index). The rows put non-zeros at every place the block scan treats apart: first and last
// lane of a block of 16 and of 64, the ragged tail, lone -0 (skipped), NaN and denormals (kept).
#include <sonde/sae.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace sonde::sae_sparse_rows_test {
namespace {

std::vector<std::int32_t> brute(const std::vector<float>& row, std::int64_t k) {
  std::vector<std::int32_t> idx;
  for (std::size_t j = 0; j < row.size(); ++j)
    if (row[j] != 0.0f) idx.push_back(static_cast<std::int32_t>(j));
  if (k > 0 && static_cast<std::int64_t>(idx.size()) > k) {
    std::stable_sort(idx.begin(), idx.end(), [&](std::int32_t a, std::int32_t b) { return row[static_cast<std::size_t>(a)] > row[static_cast<std::size_t>(b)]; });
    idx.resize(static_cast<std::size_t>(k));
    std::sort(idx.begin(), idx.end());
  }
  return idx;
}

std::vector<std::int32_t> cut(const std::vector<float>& row, std::int64_t k) {
  std::vector<std::int32_t> idx{7, 7, 7};  // stale entries: the call clears them
  sparse_row_entries(row.data(), static_cast<std::int64_t>(row.size()), k, idx);
  return idx;
}

TEST(SaeSparseRows, EveryBlockEdgeAndTailFoundInOrder) {
  for (const std::int64_t n : {1, 15, 16, 17, 63, 64, 65, 127, 128, 200, 16384, 16384 + 37}) {
    std::vector<float> row(static_cast<std::size_t>(n), 0.0f);
    for (std::int64_t j : {std::int64_t{0}, std::int64_t{15}, std::int64_t{16}, std::int64_t{63}, std::int64_t{64},
                           std::int64_t{100}, n - 1, n - 2, n - 17})
      if (j >= 0 && j < n) row[static_cast<std::size_t>(j)] = 0.5f + static_cast<float>(j);
    const auto got = cut(row, 0);
    EXPECT_EQ(got, brute(row, 0)) << "n " << n;
    EXPECT_FALSE(got.empty());
  }
}

TEST(SaeSparseRows, SignedZeroSkippedNanAndDenormalKept) {
  std::vector<float> row(300, 0.0f);
  row[5] = -0.0f;  // a whole block of 64 of zeros and one -0: skipped
  row[70] = std::numeric_limits<float>::quiet_NaN();
  row[140] = std::numeric_limits<float>::denorm_min();
  row[141] = -0.0f;
  row[299] = -std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(cut(row, 0), (std::vector<std::int32_t>{70, 140, 299}));
}

TEST(SaeSparseRows, RandomSparseRowsEqualTheBruteForceWithAndWithoutTopK) {
  std::mt19937 rng(31);
  std::normal_distribution<float> value(0.0f, 1.0f);
  for (int trial = 0; trial < 200; ++trial) {
    const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 5000);
    std::vector<float> row(static_cast<std::size_t>(n), 0.0f);
    const std::int64_t nnz = static_cast<std::int64_t>(rng() % 100);
    for (std::int64_t i = 0; i < nnz; ++i)  // values repeat (ties) one time in four
      row[rng() % static_cast<std::size_t>(n)] = rng() % 4 == 0 ? 1.25f : value(rng);
    for (const std::int64_t k : {0, 1, 5, 64}) ASSERT_EQ(cut(row, k), brute(row, k)) << "trial " << trial << " k " << k;
  }
}

}  // namespace
}  // namespace sonde::sae_sparse_rows_test
