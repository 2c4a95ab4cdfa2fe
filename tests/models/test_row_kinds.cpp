// /rows/kind marks special tokens (kind 2): the config's bos/eos/pad ids and the tokenizer's
// special added tokens, so chat scaffolding can be filtered out of a dump.
#include <gtest/gtest.h>

#include "h5_read.h"
#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

TEST(RowKinds, ChatScaffoldingIsSpecialAndTextIsPrompt) {
  const auto dir = temp_dir();
  auto r = run_sonde({"make-model", "--arch", "qwen2", "--preset", "tiny", "--out", (dir / "m").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto out = dir / "k.h5";
  r = run_sonde({"forward", "--model", (dir / "m").string(), "--text", "<|im_start|>user\nhi<|im_end|><|endoftext|>",
                 "--out", out.string(), "--hooks", "hook_embed"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Array ids = read_dataset(out, "rows/token_id"), kind = read_dataset(out, "rows/kind");
  ASSERT_GE(ids.values.size(), 4u);
  // make-model puts <|endoftext|>, <|im_start|>, <|im_end|> at the top three ids of the vocabulary.
  const double eot = 2045, im_start = 2046, im_end = 2047;
  EXPECT_EQ(ids.values.front(), im_start);
  EXPECT_EQ(ids.values.back(), eot);
  for (std::size_t i = 0; i < ids.values.size(); ++i) {
    const double id = ids.values[i];
    const bool special = id == eot || id == im_start || id == im_end;
    EXPECT_EQ(kind.values[i], special ? 2.0 : 0.0) << "row " << i << " token " << id;
  }
}

}  // namespace
}  // namespace sonde::test
