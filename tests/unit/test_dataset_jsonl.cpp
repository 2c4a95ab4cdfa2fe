// The JSONL request reader on lines nlohmann rejects with other exceptions than parse_error (found
// by fuzz_dataset): a number too large for a double is a bad line, not a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "sonde/dataset.h"
#include "sonde/error.h"
#include "test_paths.h"

namespace sonde {
namespace {

TEST(DatasetJsonl, ANumberOutOfRangeIsABadLineNamingFileAndLine) {
  const auto file = test::temp_dir() / "in.jsonl";
  std::ofstream(file) << "{\"id\": \"a\", \"ids\": [1]}\n{\"id\": \"b\", \"ids\": [2], \"temperature\": 31e308}\n";
  try {
    read_dataset(file, false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_THAT(e.what(), testing::HasSubstr(file.string() + " line 2: not valid JSON"));
  }
  const Dataset d = read_dataset(file, true);
  ASSERT_EQ(d.requests.size(), 1u);
  EXPECT_EQ(d.requests[0].id, "a");
  ASSERT_EQ(d.skipped.size(), 1u);
  EXPECT_THAT(d.skipped[0], testing::HasSubstr("line 2"));
}

}  // namespace
}  // namespace sonde
