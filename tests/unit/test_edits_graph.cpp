// insert_edits and edit_feeds (edits.h) on a small graph: where the node goes, who reads it,
// which names it carries, that two edits of one hook chain, and which slots a call selects.
#include <sonde/edits.h>
#include <sonde/error.h>

#include <gtest/gtest.h>

namespace {

using sonde::OpKind;

// x [1,3,2] -> a = x + x ("h") -> b = silu_mul(a, a) ("k") -> output "out"
sonde::Graph edit_chain() {
  sonde::GraphBuilder b([](const std::string& n) -> sonde::TensorView { sonde::runtime_error("no weight {}", n); });
  auto x = b.input("x", sonde::DType::f32, sonde::Shape{1, 3, 2});
  auto a = b.name(b.add(x, x), "h");
  auto c = b.name(b.silu_mul(a, a), "k");
  b.output("out", c);
  return b.finish();
}

sonde::Edit scale_of(const std::string& hook, float f) {
  sonde::Edit e;
  e.hook = hook;
  e.op = sonde::EditOp::Scale;
  e.scale = f;
  return e;
}

TEST(InsertEdits, NoEditsLeaveTheGraphAsBuilt) {
  auto g = edit_chain();
  const auto before = g.nodes.size();
  sonde::insert_edits(g, {});
  EXPECT_EQ(g.nodes.size(), before);
  for (const auto& n : g.nodes) EXPECT_NE(n.op, OpKind::EditAffine);
}

TEST(InsertEdits, TheEditFollowsItsHookAndEveryReaderReadsIt) {
  auto g = edit_chain();
  sonde::insert_edits(g, {scale_of("h", 2)});
  const int hooked = *g.find("h.pre_edit"), edit = *g.find("h"), sel = *g.find("input.edit.0.sel");
  EXPECT_EQ(g.nodes[static_cast<std::size_t>(hooked)].op, OpKind::Add);
  EXPECT_EQ(g.nodes[static_cast<std::size_t>(edit)].op, OpKind::EditAffine);
  EXPECT_EQ(g.nodes[static_cast<std::size_t>(edit)].params.edit_a, 2.0f);
  EXPECT_EQ(g.nodes[static_cast<std::size_t>(edit)].inputs, (std::vector<int>{hooked, sel}));
  EXPECT_EQ(g.nodes[static_cast<std::size_t>(sel)].shape, (sonde::Shape{1, 3, 1}));
  const auto& k = g.nodes[static_cast<std::size_t>(*g.find("k"))];
  EXPECT_EQ(k.inputs, (std::vector<int>{edit, edit}));
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (int in : g.nodes[i].inputs) EXPECT_LT(in, static_cast<int>(i)) << "inputs precede their readers";
}

TEST(InsertEdits, TwoEditsOfOneHookChainAndTheOutputFollows) {
  auto g = edit_chain();
  sonde::insert_edits(g, {scale_of("k", 2), scale_of("k", 3)});
  const int last = *g.find("k");
  EXPECT_EQ(g.nodes[static_cast<std::size_t>(last)].params.edit_a, 3.0f);
  const int first = g.nodes[static_cast<std::size_t>(last)].inputs[0];
  EXPECT_EQ(g.nodes[static_cast<std::size_t>(first)].params.edit_a, 2.0f);
  EXPECT_TRUE(g.nodes[static_cast<std::size_t>(first)].names.empty());
  EXPECT_EQ(g.nodes[static_cast<std::size_t>(*g.find("k.pre_edit"))].op, OpKind::SiluMul);
  EXPECT_EQ(*g.output("out"), last);
}

TEST(InsertEdits, AnUnknownHookIsAnError) {
  auto g = edit_chain();
  EXPECT_THROW(sonde::insert_edits(g, {scale_of("nope", 1)}), sonde::Error);
}

// Two rows, left padding in row 1: positions count from each row's first real token; `generated`
// takes positions at or after the row's prompt length; steps outside the range select nothing.
TEST(EditFeeds, SelectsRealSlotsByPositionAndStep) {
  sonde::Edit e = scale_of("h", 0);
  e.positions.kind = sonde::EditPositions::Kind::Generated;
  e.steps = sonde::EditSteps{sonde::EditSteps::Kind::Range, 1, 2, 1};
  const std::vector<std::int32_t> pos{0, 1, 2, 1, 0, 1};     // row 1: slot 0 is padding
  const std::vector<std::uint8_t> mask{1, 1, 1, 0, 1, 1};
  const auto sel = [&](std::int64_t step) {
    std::vector<sonde::Tensor> storage;
    std::map<std::string, sonde::TensorView> feeds;
    sonde::edit_feeds({e}, sonde::EditCall{{2, 1}, {"a", "b"}, step, {}, {}}, 2, 3, 0, pos, mask, storage, feeds);
    const auto& v = feeds.at("edit.0.sel");
    return std::vector<int>(v.as<const std::uint8_t>(), v.as<const std::uint8_t>() + 6);
  };
  EXPECT_EQ(sel(1), (std::vector<int>{0, 0, 1, 0, 0, 1}));
  EXPECT_EQ(sel(0), (std::vector<int>(6, 0)));
  EXPECT_EQ(sel(3), (std::vector<int>(6, 0)));
}

}  // namespace
