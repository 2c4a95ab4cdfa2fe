// docs/examples/read_dump.py and export_saelens.py run with /usr/bin/python3 on a file made by
// sonde batch and killed mid-run (read as SWMR, up to its last checkpoint), and on a file made by
// sonde generate --hooks (h5py is a CI package: a missing h5py fails the test).
#include <gtest/gtest.h>

#include "h5_read.h"
#include "made_models.h"
#include "run_sonde.h"
#include "spawn.h"
#include "test_paths.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <thread>

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

// A batch file killed by SIGKILL (no h5clear): its writer's open-for-write flag is still set, which
// stock h5py refuses unless it opens the file as an SWMR reader.
TEST(DocsExamples, ReadDumpAndExportOpenABatchFileKilledMidRun) {
  SONDE_REQUIRE_PACKAGE(sh("/usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null") == 0, "python3-h5py");
  const auto dir = temp_dir();
  {
    std::ofstream in(dir / "in.jsonl");
    for (int i = 0; i < 4000; ++i) in << "{\"id\": " << i << ", \"ids\": [" << i % 250 + 1 << ", 7, 9]}\n";
  }
  const Child c = spawn_sonde({"batch", "--model", made_model("qwen2", "tiny", 31).string(), "--input",
                               (dir / "in.jsonl").string(), "--output", (dir / "out.jsonl").string(), "--acts",
                               (dir / "a.h5").string(), "--hooks", "blocks.1.hook_resid_post", "--max-new-tokens", "3",
                               "--temperature", "0", "--checkpoint-every", "8"},
                              dir / "log.txt");
  std::optional<int> ended;
  while (!(ended = poll_child(c))) {
    const std::string out = read_text(dir / "out.jsonl");
    if (std::count(out.begin(), out.end(), '\n') >= 200) break;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  ASSERT_FALSE(ended) << "the run ended before it was killed";
  send_signal(c, SIGKILL);
  wait_child(c);
  const std::string lines = read_text(dir / "out.jsonl");
  const auto results = std::count(lines.begin(), lines.end(), '\n');
  ASSERT_EQ(sh("/usr/bin/python3 " + (kExamples / "read_dump.py").string() + " " + (dir / "a.h5").string() +
               " blocks.1.hook_resid_post 3 > " + (dir / "read.txt").string() + " 2>&1"), 0) << read_text(dir / "read.txt");
  EXPECT_NE(read_text(dir / "read.txt").find("prompt 3: (6, 64)"), std::string::npos) << read_text(dir / "read.txt");
  ASSERT_EQ(sh("/usr/bin/python3 " + (kExamples / "export_saelens.py").string() + " " + (dir / "a.h5").string() +
               " blocks.1.hook_resid_post " + (dir / "flat.npz").string() + " > " + (dir / "export.txt").string() + " 2>&1"), 0)
      << read_text(dir / "export.txt");
  // Every committed prompt has 3 prompt rows and 3 generated rows; the checkpoint is at most the
  // results written (the results file is cut back to it on resume).
  ASSERT_EQ(sh("/usr/bin/python3 -c \"import numpy as np; n = np.load('" + (dir / "flat.npz").string() +
               "')['activations'].shape[0]; assert n > 0 and n % 6 == 0 and n <= 6 * " + std::to_string(results) +
               ", n\""), 0);
}

}  // namespace
}  // namespace sonde::test
