// ShardPlan (plugins/common/shard.h): which heads, kv heads, MLP columns and vocabulary rows each
// tensor-parallel rank holds. Expected values worked out by hand.
#include <shard.h>
#include <decoder.h>

#include <sonde/error.h>

#include <gtest/gtest.h>

namespace sonde::common {
namespace {

DecoderSpec spec(std::int64_t heads, std::int64_t kv, std::int64_t inter, std::int64_t vocab) {
  DecoderSpec s;
  s.heads = heads;
  s.kv_heads = kv;
  s.intermediate = inter;
  s.vocab = vocab;
  return s;
}

struct Want { std::int64_t q0, q1, kv0, kv1, own0, own1; };

void expect(const ShardPlan& p, const Want& w) {
  EXPECT_EQ(p.q.begin, w.q0);
  EXPECT_EQ(p.q.end, w.q1);
  EXPECT_EQ(p.kv.begin, w.kv0);
  EXPECT_EQ(p.kv.end, w.kv1);
  EXPECT_EQ(p.kv_own.begin, w.own0);
  EXPECT_EQ(p.kv_own.end, w.own1);
}

// Qwen2.5-7B / Dream-7B: 28 query heads in 4 groups of 7, 18944 MLP columns, 152064 rows.
TEST(ShardPlan, SevenBOnThreeRanks) {
  const auto s = spec(28, 4, 18944, 152064);
  const auto p0 = ShardPlan::make(s, 0, 3), p1 = ShardPlan::make(s, 1, 3), p2 = ShardPlan::make(s, 2, 3);
  expect(p0, {0, 9, 0, 2, 0, 2});     // heads 7, 8 read kv head 1
  expect(p1, {9, 18, 1, 3, 2, 3});    // kv head 1 is given by rank 0 (its head 7)
  expect(p2, {18, 28, 2, 4, 3, 4});   // kv head 2 starts at head 14 (rank 1)
  EXPECT_EQ(p0.kv_group, 7);
  EXPECT_EQ(p0.mlp.end, 6314);  // 18944 / 3 = 6314.67
  EXPECT_EQ(p1.mlp.begin, 6314);
  EXPECT_EQ(p1.mlp.end, 12629);
  EXPECT_EQ(p2.mlp.end, 18944);
  EXPECT_EQ(p1.vocab.begin, 50688);
  EXPECT_EQ(p2.vocab.end, 152064);
}

TEST(ShardPlan, EightRanksOfSevenBAndOneRank) {
  const auto s = spec(28, 4, 18944, 152064);
  expect(ShardPlan::make(s, 5, 8), {17, 21, 2, 3, 3, 3});  // 28*5/8 = 17.5: heads 17..20, all kv head 2
  expect(ShardPlan::make(s, 0, 1), {0, 28, 0, 4, 0, 4});
  EXPECT_FALSE(ShardPlan::make(s, 0, 1).active());
}

TEST(ShardPlan, MoreRanksThanHeadsIsBadInput) {
  try {
    ShardPlan::make(spec(4, 2, 128, 2048), 0, 5);
    FAIL() << "5 ranks over 4 heads did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("5 ranks per model copy but the model has 4 query heads"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sonde::common
