// docs/examples/read_dump.py and export_saelens.py run with /usr/bin/python3 on a file made by
// sonde generate --hooks (h5py is a CI package: a missing h5py fails the test).
#include <gtest/gtest.h>

#include "h5_read.h"
#include "made_models.h"
#include "run_sonde.h"
#include "spawn.h"
#include "test_paths.h"

#include <cstdlib>

namespace sonde::test {
namespace {

const std::filesystem::path kExamples = std::filesystem::path(SONDE_TEST_DATA_DIR) / "../../docs/examples";

int sh(const std::string& cmd) { return std::system(cmd.c_str()); }

TEST(DocsExamples, ReadDumpAndExportRunOnAGenerateFile) {
  SONDE_REQUIRE_PACKAGE(sh("/usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null") == 0, "python3-h5py");
  const auto dir = temp_dir();
  const auto h5 = dir / "g.h5";
  const auto r = run_sonde({"generate", "--model", made_model("qwen2", "tiny", 31).string(),
                            "--ids", "776,1012,1190", "--ids", "5,6", "--max-new-tokens", "3", "--hooks",
                            "blocks.1.hook_resid_post", "--out", h5.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(sh("/usr/bin/python3 " + (kExamples / "read_dump.py").string() + " " + h5.string() +
               " blocks.1.hook_resid_post 1 > " + (dir / "read.txt").string()), 0);
  const std::string text = read_text(dir / "read.txt");
  EXPECT_NE(text.find("prompt 1: (5, 64)"), std::string::npos) << text;  // 2 prompt + 3 generated rows
  ASSERT_EQ(sh("/usr/bin/python3 " + (kExamples / "export_saelens.py").string() + " " + h5.string() +
               " blocks.1.hook_resid_post " + (dir / "flat.npz").string()), 0);
  ASSERT_EQ(sh("/usr/bin/python3 -c \"import numpy as np; d = np.load('" + (dir / "flat.npz").string() +
               "'); assert d['activations'].shape == (11, 64), d['activations'].shape; "
               "assert list(d['token_ids'][:3]) == [776, 1012, 1190]\""), 0);
}

}  // namespace
}  // namespace sonde::test
