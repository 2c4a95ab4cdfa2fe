// Sparse storage of SAE feature activations (--sae-sparse, docs/hdf5-layout.md): the CSR arrays
// under /sparse/<hook> hold exactly the non-zero values of the dense capture of the same run
// (nonzero), or each row's K largest of them (top:K), in ascending feature order; for a forward
// (one-shot file) and a batch (streaming file) of both families, on the default backend.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "h5_read.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

namespace fs = std::filesystem;
const std::string kHook = "blocks.1.hook_resid_post.hook_sae_acts_post";  // tests/data/sae/topk_flat reads blocks.1's

fs::path made_model(const std::string& arch, const fs::path& dir) {
  const auto model = dir / arch;
  const auto r = run_sonde({"make-model", "--arch", arch, "--preset", "tiny", "--vocab", "512", "--seed", "5", "--out", model.string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return model;
}

// Checks the CSR of `sparse` against the dense rows of `dense`: each row keeps its non-zero
// values (k = 0) or its k largest, ascending indices, values bit-equal.
void expect_csr_of(const fs::path& sparse, const fs::path& dense, std::int64_t k) {
  const Array d = read_dataset(dense, "acts/" + kHook);
  const auto ptr = as_ints(read_dataset(sparse, "sparse/" + kHook + "/indptr"));
  const auto idx = as_ints(read_dataset(sparse, "sparse/" + kHook + "/indices"));
  const Array val = read_dataset(sparse, "sparse/" + kHook + "/values");
  const std::int64_t N = d.shape.at(0), C = d.shape.at(1);
  ASSERT_EQ(static_cast<std::int64_t>(ptr.size()), N + 1);
  EXPECT_EQ(ptr.front(), 0);
  ASSERT_EQ(static_cast<std::int64_t>(idx.size()), ptr.back());
  ASSERT_EQ(static_cast<std::int64_t>(val.values.size()), ptr.back());
  EXPECT_FALSE(has_object(sparse, "acts/" + kHook)) << "stored dense too";
  std::int64_t kept = 0;
  for (std::int64_t r = 0; r < N; ++r) {
    std::vector<std::pair<double, std::int64_t>> nz;  // (-value, index): the largest first, ties by index
    for (std::int64_t j = 0; j < C; ++j)
      if (d.values[static_cast<std::size_t>(r * C + j)] != 0) nz.push_back({-d.values[static_cast<std::size_t>(r * C + j)], j});
    std::sort(nz.begin(), nz.end());
    if (k > 0 && static_cast<std::int64_t>(nz.size()) > k) nz.resize(static_cast<std::size_t>(k));
    std::vector<std::int64_t> want;
    for (const auto& [v, j] : nz) want.push_back(j);
    std::sort(want.begin(), want.end());
    const std::vector<std::int64_t> got(idx.begin() + ptr[static_cast<std::size_t>(r)], idx.begin() + ptr[static_cast<std::size_t>(r) + 1]);
    ASSERT_EQ(got, want) << "row " << r;
    for (std::int64_t e = ptr[static_cast<std::size_t>(r)]; e < ptr[static_cast<std::size_t>(r) + 1]; ++e)
      EXPECT_EQ(val.values[static_cast<std::size_t>(e)], d.values[static_cast<std::size_t>(r * C + idx[static_cast<std::size_t>(e)])]);
    kept += static_cast<std::int64_t>(want.size());
  }
  EXPECT_GT(kept, 0);
}

class SaeSparse : public ::testing::TestWithParam<std::string> {};

TEST_P(SaeSparse, ForwardNonzeroAndTopKEqualTheDenseCapture) {
  const auto dir = temp_dir();
  const auto model = made_model(GetParam(), dir);
  const std::vector<std::string> base{"forward", "--model", model.string(), "--ids", "3,1,4,1,5,9,2,6", "--sae",
                                      (data_dir() / "sae" / "topk_flat").string(), "--hooks", kHook};
  auto run = [&](const std::string& name, std::vector<std::string> extra) {
    auto a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    a.insert(a.end(), {"--out", (dir / name).string()});
    const auto r = run_sonde(a);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return dir / name;
  };
  const auto dense = run("dense.h5", {});
  expect_csr_of(run("nonzero.h5", {"--sae-sparse", "nonzero"}), dense, 0);
  expect_csr_of(run("top3.h5", {"--sae-sparse", "top:3", "--storage-dtype", "f32"}), dense, 3);
}

TEST_P(SaeSparse, BatchStreamingFileEqualsTheDenseCapture) {
  const auto dir = temp_dir();
  const auto model = made_model(GetParam(), dir);
  std::ofstream(dir / "in.jsonl") << "{\"id\": \"a\", \"ids\": [1, 2, 3]}\n{\"id\": \"b\", \"ids\": [7, 8, 9, 10, 11]}\n"
                                  << "{\"id\": \"c\", \"ids\": [4]}\n";
  auto run = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> a{"batch", "--model", model.string(), "--input", (dir / "in.jsonl").string(), "--output",
                               (dir / (name + ".jsonl")).string(), "--max-new-tokens", "3", "--sae",
                               (data_dir() / "sae" / "topk_flat").string(), "--hooks", kHook, "--acts", (dir / name).string(),
                               "--batch-size", "2"};
    a.insert(a.end(), extra.begin(), extra.end());
    const auto r = run_sonde(a);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return dir / name;
  };
  const auto dense = run("dense.h5", {});
  expect_csr_of(run("sparse.h5", {"--sae-sparse", "nonzero"}), dense, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, SaeSparse, ::testing::Values("qwen2", "dream"));

}  // namespace
}  // namespace sonde::test
